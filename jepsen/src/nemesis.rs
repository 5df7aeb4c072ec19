//! The nemesis: a seeded schedule of faults, and their injection.
//!
//! The schedule is a pure function of the seed, the requested kinds and the duration: the
//! same seed replays the same schedule. Each step waits a quiet gap, injects one fault,
//! holds it, and heals everything. Targets named at run time (the leader) are resolved when
//! the fault fires, and the history records which node that was.
//!
//! Kinds: `partition` (isolate a node, isolate the leader, a bridge, a one-way cut), `kill`
//! (kill -9 one node, the leader, or all three, then restart), `pause` (SIGSTOP the leader
//! past the election timeout and the session TTL, then SIGCONT), `delay` (every link delayed
//! with jitter, through the proxy), `clock` (a rolling restart giving each node a monotonic
//! offset in a time namespace of its own and a proposer clock rate skewed within the
//! documented drift bound, ±5%; healed by a rolling restart on true clocks), `membership`
//! (remove a node from the cluster, add it back at the heal).

use std::time::Duration;

use serde_json::json;

use crate::cluster::Cluster;
use crate::history::{Kind, NEMESIS, Recorder};
use crate::proxy::Link;

/// The kinds this harness can inject.
pub const IMPLEMENTED: [&str; 6] = ["partition", "kill", "pause", "clock", "membership", "delay"];
/// Every kind the issue names.
pub const ALL: [&str; 6] = ["partition", "kill", "pause", "clock", "membership", "delay"];

/// One fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    IsolateNode(u64),
    IsolateLeader,
    /// `middle` keeps both links; the other two cannot reach each other.
    Bridge {
        middle: u64,
    },
    /// Connections from `from` to `to` are cut; the reverse direction works.
    OneWay {
        from: u64,
        to: u64,
    },
    Kill(u64),
    KillLeader,
    KillAll,
    PauseLeader {
        ms: u64,
    },
    Delay {
        ms: u64,
        jitter_ms: u64,
    },
    /// Per node (1, 2, 3): monotonic offset (s) and clock rate in thousandths (1000: true).
    Clocks([(u64, u64); 3]),
    RemoveNode(u64),
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::IsolateNode(_)
            | Fault::IsolateLeader
            | Fault::Bridge { .. }
            | Fault::OneWay { .. } => "partition",
            Fault::Kill(_) | Fault::KillLeader | Fault::KillAll => "kill",
            Fault::PauseLeader { .. } => "pause",
            Fault::Delay { .. } => "delay",
            Fault::Clocks(_) => "clock",
            Fault::RemoveNode(_) => "membership",
        }
    }
}

/// A step of the schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub quiet_ms: u64,
    pub fault: Fault,
    pub hold_ms: u64,
}

/// SplitMix64: a small, well-mixed, seedable generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

fn fault_of(kind: &str, rng: &mut Rng) -> Option<Fault> {
    let node = rng.range(1, 3);
    let other = (node % 3) + 1;
    Some(match kind {
        "partition" => match rng.range(0, 3) {
            0 => Fault::IsolateNode(node),
            1 => Fault::IsolateLeader,
            2 => Fault::Bridge { middle: node },
            _ => Fault::OneWay {
                from: node,
                to: other,
            },
        },
        "kill" => match rng.range(0, 2) {
            0 => Fault::Kill(node),
            1 => Fault::KillLeader,
            _ => Fault::KillAll,
        },
        // Past the election timeout (450 ms) and the harness's session TTL (2 s).
        "pause" => Fault::PauseLeader {
            ms: rng.range(2_500, 4_000),
        },
        "delay" => Fault::Delay {
            ms: rng.range(5, 40),
            jitter_ms: rng.range(0, 30),
        },
        // Rates within ±5%: the client's margin (a tenth of the TTL) covers drift to ~11%.
        "clock" => {
            let mut one = || (rng.range(0, 1_000_000), rng.range(950, 1_050));
            Fault::Clocks([one(), one(), one()])
        }
        "membership" => Fault::RemoveNode(node),
        _ => return None,
    })
}

/// The schedule for `kinds` over `duration_ms`, from `seed`. Kinds take turns, so every
/// requested kind fires when the run is long enough for one step each.
pub fn schedule(seed: u64, kinds: &[String], duration_ms: u64) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let implemented: Vec<&String> = kinds
        .iter()
        .filter(|k| IMPLEMENTED.contains(&k.as_str()))
        .collect();
    let mut steps = vec![];
    let mut at = 0;
    // Leave the last seconds for the heal and the liveness probes.
    let budget = duration_ms.saturating_sub(4_000);
    let mut i = rng.range(0, 7) as usize;
    while !implemented.is_empty() {
        let quiet_ms = rng.range(1_500, 3_000);
        let hold_ms = rng.range(3_000, 6_000);
        if at + quiet_ms + hold_ms > budget {
            break;
        }
        let kind = implemented[i % implemented.len()];
        i += 1;
        let fault = fault_of(kind, &mut rng).expect("implemented kinds have faults");
        let hold_ms = match fault {
            Fault::PauseLeader { ms } => ms,
            _ => hold_ms,
        };
        steps.push(Step {
            quiet_ms,
            fault,
            hold_ms,
        });
        at += quiet_ms + hold_ms;
    }
    steps
}

/// Cuts `node` off from the other two, both ways.
fn isolate(cluster: &Cluster, node: u64) {
    for other in (1..=3).filter(|o| *o != node) {
        cluster.links.set(node, other, Link::Drop);
        cluster.links.set(other, node, Link::Drop);
    }
}

/// Injects `fault`; returns what was done (recorded in the history).
pub async fn inject(cluster: &mut Cluster, fault: &Fault) -> Result<serde_json::Value, String> {
    let leader = || async { cluster.leader(Duration::from_secs(5)).await };
    Ok(match *fault {
        Fault::IsolateNode(n) => {
            isolate(cluster, n);
            json!({"fault": "isolate", "node": n})
        }
        Fault::IsolateLeader => {
            let Some(l) = leader().await else {
                return Err("no leader to isolate".into());
            };
            isolate(cluster, l);
            json!({"fault": "isolate-leader", "node": l})
        }
        Fault::Bridge { middle } => {
            let (a, b) = match middle {
                1 => (2, 3),
                2 => (1, 3),
                _ => (1, 2),
            };
            cluster.links.set(a, b, Link::Drop);
            cluster.links.set(b, a, Link::Drop);
            json!({"fault": "bridge", "middle": middle})
        }
        Fault::OneWay { from, to } => {
            cluster.links.set(from, to, Link::Drop);
            json!({"fault": "one-way", "from": from, "to": to})
        }
        Fault::Kill(n) => {
            cluster.kill(n);
            json!({"fault": "kill", "node": n})
        }
        Fault::KillLeader => {
            let Some(l) = leader().await else {
                return Err("no leader to kill".into());
            };
            cluster.kill(l);
            json!({"fault": "kill-leader", "node": l})
        }
        Fault::KillAll => {
            for n in 1..=3 {
                cluster.kill(n);
            }
            json!({"fault": "kill-all"})
        }
        Fault::PauseLeader { ms } => {
            let Some(l) = leader().await else {
                return Err("no leader to pause".into());
            };
            cluster.pause(l);
            json!({"fault": "pause-leader", "node": l, "ms": ms})
        }
        Fault::Delay { ms, jitter_ms } => {
            for a in 1..=3 {
                for b in (1..=3).filter(|b| *b != a) {
                    cluster.links.set(a, b, Link::Delay { ms, jitter_ms });
                }
            }
            json!({"fault": "delay", "ms": ms, "jitter_ms": jitter_ms})
        }
        Fault::Clocks(clocks) => {
            for (i, (offset_s, rate)) in clocks.iter().enumerate() {
                let clock = crate::cluster::Clock {
                    offset_s: *offset_s,
                    rate: *rate as f64 / 1_000.0,
                };
                cluster
                    .restart_with_clock(i as u64 + 1, Some(clock))
                    .await?;
            }
            json!({"fault": "clocks", "nodes": clocks.iter().map(|(o, r)| json!({"offset_s": o, "rate": *r as f64 / 1_000.0})).collect::<Vec<_>>()})
        }
        Fault::RemoveNode(n) => {
            cluster.remove(n).await?;
            json!({"fault": "remove-node", "node": n})
        }
    })
}

/// Runs `steps`, recording each fault and heal. Returns the kinds that fired.
pub async fn run(cluster: &mut Cluster, steps: &[Step], history: &Recorder) -> Vec<&'static str> {
    let mut fired = vec![];
    for step in steps {
        tokio::time::sleep(Duration::from_millis(step.quiet_ms)).await;
        history.record(
            NEMESIS,
            Kind::Invoke,
            step.fault.kind(),
            json!({"fault": format!("{:?}", step.fault)}),
        );
        match inject(cluster, &step.fault).await {
            Ok(done) => {
                history.record(NEMESIS, Kind::Info, step.fault.kind(), done);
                fired.push(step.fault.kind());
            }
            Err(e) => {
                history.record(NEMESIS, Kind::Fail, step.fault.kind(), json!({"error": e}));
            }
        }
        tokio::time::sleep(Duration::from_millis(step.hold_ms)).await;
        let healed = cluster.heal().await;
        history.record(
            NEMESIS,
            Kind::Info,
            "heal",
            json!({"ok": healed.is_ok(), "error": healed.err()}),
        );
    }
    fired
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_replays_the_same_schedule_and_every_kind_takes_a_turn() {
        let kinds: Vec<String> = ["partition", "kill", "pause"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let a = schedule(7, &kinds, 120_000);
        assert_eq!(a, schedule(7, &kinds, 120_000));
        assert_ne!(a, schedule(8, &kinds, 120_000));
        for k in &kinds {
            assert!(a.iter().any(|s| s.fault.kind() == k), "{k} is scheduled");
        }
        let total: u64 = a.iter().map(|s| s.quiet_ms + s.hold_ms).sum();
        assert!(total <= 116_000);
    }

    #[test]
    fn unknown_kinds_schedule_nothing_and_clock_rates_stay_within_the_drift_bound() {
        assert!(schedule(1, &["tsunami".to_string()], 60_000).is_empty());
        for step in schedule(5, &["clock".to_string()], 120_000) {
            let Fault::Clocks(clocks) = step.fault else {
                panic!("a clock fault")
            };
            assert!(clocks.iter().all(|(_, r)| (950..=1_050).contains(r)));
        }
    }
}
