//! The status monitor: asks every node for its status every [`POLL`] through the whole run
//! and records what the checkers need from the cluster's own reports:
//!
//! - `leader` facts: the first sighting of each (term, leader) pair, with the node and the
//!   time, so the rate checker can tell which nodes could have led during a window (and
//!   with which clock rate), and the coverage counts can count takeovers;
//! - digests compared at equal applied index (G4): two nodes reporting the same `applied`
//!   must report the same `digest`; every comparison is counted, every mismatch recorded
//!   as a `digest-mismatch` fact at once.
//!
//! - `leadership` facts at the end: per term and incarnation of its leader (a restarted
//!   leader may resume its own term), the real time and the log time (`log_ms`)
//!   that passed between the first and the last status its leader gave, so a clock-rate
//!   fault is seen to have made a leader's log clock run fast or slow.
//!
//! - `log-clock` samples: a node's `log_ms` and the harness time its reply arrived, each
//!   time a reply sets a new maximum of log time less real time (the samples the log-clock
//!   checker, `checker/clock.rs`, needs: any other would break its bound only if a
//!   recorded one did).
//!
//! It only reads: a status request changes nothing on a node. A node that does not answer
//! within [`ASK_TIMEOUT`] (killed, paused, cut off) is skipped for that round.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use weir_client::Client;
use weir_proto::protocol::{NodeStatus, Request, Response};

use crate::history::{Kind, NEMESIS, Recorder};

/// How often each node is asked. Short enough to see most leaderships (an election takes
/// at least 150 ms here) and to catch replicas at equal applied indexes under load.
pub const POLL: Duration = Duration::from_millis(100);

/// How long one status request may take before the node counts as silent this round.
pub const ASK_TIMEOUT: Duration = Duration::from_millis(300);

/// At most this many applied indexes are remembered for digest comparison; older ones are
/// forgotten first (a node that lags further than this is compared at the heal instead).
const REMEMBERED_MAX: usize = 20_000;

/// Each node's start count, shared with the cluster.
pub type Starts = Arc<Vec<std::sync::atomic::AtomicU64>>;

/// A leader's status as seen: (harness ns, its log_ms).
type Stamp = (u64, u64);

/// What the monitor has seen.
#[derive(Default)]
struct Seen {
    /// (term, leader) pairs already recorded.
    leaders: BTreeMap<u64, u64>,
    /// applied index -> (node that reported it first, its digest).
    digests: BTreeMap<u64, (u64, String)>,
    compared: u64,
    mismatches: u64,
    /// Per (term, leader, its start count): (first seen ns, log_ms), (last seen ns, log_ms).
    spans: BTreeMap<(u64, u64, u64), (Stamp, Stamp)>,
    clock: LogClockSamples,
}

/// Which log-time readings become `log-clock` facts: only those that set a new maximum of
/// log time less real time (any other would break the log-clock checker's bound only if a
/// recorded one did, for a bound rate of at least 1). The harness's monitor feeds it the
/// nodes' status replies; the simulator (`crate::sim`) feeds it the simulated nodes' own
/// log clocks.
#[derive(Default)]
pub struct LogClockSamples {
    /// The largest log time less real time seen yet (ns), of any node.
    excess_max_ns: Option<i128>,
}

impl LogClockSamples {
    /// Node `node` was at log time `log_ms` at some instant up to now: recorded, at the
    /// history's time now, when it sets a new maximum of log time less real time.
    pub fn observe(&mut self, history: &Recorder, node: u64, log_ms: u64) {
        let real_ns = history.now_ns();
        let excess_ns = i128::from(log_ms) * 1_000_000 - i128::from(real_ns);
        if self.excess_max_ns.is_none_or(|max| excess_ns > max) {
            self.excess_max_ns = Some(excess_ns);
            history.record(
                NEMESIS,
                Kind::Info,
                "log-clock",
                json!({"node": node, "log_ms": log_ms, "real_ns": real_ns}),
            );
        }
    }
}

/// A running monitor.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    history: Recorder,
}

impl Monitor {
    /// Starts one polling task per node.
    /// `starts`: each node's start count ([`crate::cluster::Cluster::starts`]).
    pub fn start(servers: &[String], history: &Recorder, starts: Starts) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let tasks = servers
            .iter()
            .map(|addr| {
                let (addr, stop, seen, history, starts) = (
                    addr.clone(),
                    stop.clone(),
                    seen.clone(),
                    history.clone(),
                    starts.clone(),
                );
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(status) = ask(&addr).await {
                            let start = starts
                                .get((status.id as usize).wrapping_sub(1))
                                .map_or(0, |s| s.load(Ordering::SeqCst));
                            observe(&seen, &history, &status, start);
                        }
                        tokio::time::sleep(POLL).await;
                    }
                })
            })
            .collect();
        Monitor {
            stop,
            seen,
            tasks,
            history: history.clone(),
        }
    }

    /// Stops polling and records the totals as a `monitor` fact.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for ((term, node, start), (first, last)) in &seen.spans {
            self.history.record(
                NEMESIS,
                Kind::Info,
                "leadership",
                json!({"term": term, "node": node, "start": start, "real_ms": (last.0 - first.0) / 1_000_000, "log_ms": last.1.saturating_sub(first.1)}),
            );
        }
        self.history.record(
            NEMESIS,
            Kind::Info,
            "monitor",
            json!({"compared": seen.compared, "mismatches": seen.mismatches, "leaderships": seen.leaders.len()}),
        );
    }
}

/// One node's status, if it answers in time.
pub async fn ask(addr: &str) -> Option<NodeStatus> {
    match tokio::time::timeout(
        ASK_TIMEOUT,
        Client::ask_node_in(
            addr,
            &Request::Status,
            // Status needs the admin role.
            &crate::secure::security(crate::secure::Access::Admin),
            // The group the run's tenants live in: its applied index, digest and log clock.
            crate::secure::run_group(),
        ),
    )
    .await
    {
        Ok(Ok(Response::Status(s))) => Some(s),
        _ => None,
    }
}

fn observe(seen: &Mutex<Seen>, history: &Recorder, status: &NodeStatus, start: u64) {
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    // Observed after the reply arrived: the log time it reports was reached before this.
    seen.clock.observe(history, status.id, status.log_ms);
    if status.state == "Leader" {
        let now = (history.now_ns(), status.log_ms);
        seen.spans
            .entry((status.term, status.id, start))
            .and_modify(|s| s.1 = now)
            .or_insert((now, now));
    }
    if status.state == "Leader" && seen.leaders.get(&status.term) != Some(&status.id) {
        seen.leaders.insert(status.term, status.id);
        history.record(
            NEMESIS,
            Kind::Info,
            "leader",
            json!({"node": status.id, "term": status.term, "applied": status.applied}),
        );
    }
    // A digest is of `digest_applied`, which may trail `applied` (the node caches it).
    match seen.digests.get(&status.digest_applied).cloned() {
        Some((node, digest)) if node != status.id => {
            seen.compared += 1;
            if *digest != status.digest {
                seen.mismatches += 1;
                history.record(
                    NEMESIS,
                    Kind::Info,
                    "digest-mismatch",
                    json!({"applied": status.digest_applied, "node": status.id, "digest": status.digest, "other": node, "other_digest": digest}),
                );
            }
        }
        Some(_) => {}
        None => {
            seen.digests
                .insert(status.digest_applied, (status.id, status.digest.clone()));
            while seen.digests.len() > REMEMBERED_MAX {
                seen.digests.pop_first();
            }
        }
    }
}
