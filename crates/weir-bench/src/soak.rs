//! `weir bench --report-every SECS` (with `--spawn`): a soak. Clients churn for
//! `--duration` while the bench samples every node each interval, and at the end says, for
//! each series, how much it grew from the first quarter of the run to the last.
//!
//! The churn: each of `--clients` clients opens a session (TTL [`SESSION_TTL`]), runs
//! [`OPS_PER_SESSION`] operations in it, alternately an acquire-release of one of `--limits`
//! limits and a take of one token of the keyed rate limit [`KEYED`] from a key of that
//! session's own (so keys are created, then left to refill, which drops them from the live
//! set a second later), and then closes the session, or every [`ABANDON_EVERY`]th session
//! drops it without closing, leaving it to expire on the nodes. Beside them one more loop
//! makes keyed limits appear and disappear: every [`DEFINITION_EVERY`] it defines a keyed
//! limit of its own, takes from [`DEFINITION_KEYS`] keys of it, and removes it with those
//! keys still live (names cycle through [`DEFINITION_NAMES`]). Meanwhile the leader is
//! killed (SIGKILL, restarted once grants resume) every `--kill-every` seconds and stopped
//! (SIGSTOP for 4 s, then SIGCONT) every `--stall-every` seconds, as `--failover` and
//! `--stall` do (`load.rs`).
//!
//! Each interval prints one line (one JSON object with `--json`): operations, errors, the p99
//! of the operations of that interval, sessions opened and abandoned, incidents so far, and
//! per node its resident memory, open files and threads (`/proc/PID`), and the bytes of its
//! log and of its snapshot on disk (`snapshot.bin` in its data directory, the rest is the
//! log). The last line is the verdict: for each node's series and for the p99, the median of
//! the first quarter of the intervals against the median of the last quarter (for the log,
//! a sawtooth, the peaks: [`Stat`]); a series is flagged when it grew by more than
//! `--drift-threshold` percent and by more than its floor ([`METRICS`]: below it a change is
//! noise, not a leak). Medians, so the one interval that holds a kill or a restart does not
//! decide. A node restarted by a kill starts its series
//! afresh; its sample says `restarted`. `--chart FILE` draws every series over time
//! (`svg.rs`).
//!
//! The run fails (exit 1) if a series is flagged or an incident did not recover.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::args::BenchArgs;
use super::load::{
    self, Incident, SESSION_TTL, define_limits, define_rate, disrupt_the_leader, keyed_take_of,
    limit_name,
};
use super::report::{Recorder, histogram, ms};
use super::spawn;
use super::svg::{Series, grid, time_chart};
use crate::output::{EXIT_ERROR, EXIT_OK, Exit, Output};
use weir_client::{AcquireOptions, Client, Session};
use weir_core::machine::Command;
use weir_launcher::LocalCluster;
use weir_proto::tls::ClientSecurity;
use weir_server::raft::snapshot_file::SNAPSHOT_FILE;

/// The keyed rate limit of the churn: one token a second per key from a burst no take
/// empties, so a key taken from once is live for a second.
const KEYED: &str = "soak-keyed";
/// Live keys allowed at once: far above what the churn keeps live.
const KEYED_KEYS_MAX: u32 = 50_000;
/// Operations in one session before it ends.
const OPS_PER_SESSION: u64 = 200;
/// Keys of its own one session takes from, cycling.
const KEYS_PER_SESSION: u64 = 20;
/// Every this many sessions, one is dropped without closing (left to expire).
const ABANDON_EVERY: u64 = 4;
/// How often a keyed limit appears and disappears.
const DEFINITION_EVERY: Duration = Duration::from_secs(1);
/// Keys taken from in a keyed limit between its definition and its removal.
const DEFINITION_KEYS: u64 = 20;
/// The appearing limits' names cycle through this many.
const DEFINITION_NAMES: u64 = 16;

/// What stands for a quarter of a series.
#[derive(Clone, Copy)]
enum Stat {
    /// Its median: one interval with a kill or a restart in it does not decide.
    Median,
    /// Its peak: for a sawtooth, as the log is (it grows by segments of 64 MiB and drops
    /// when a snapshot lets the oldest go), whose median depends on where the samples fall
    /// in the teeth, while a log that is never purged raises its peak.
    Max,
}

/// A series of a node: its name, its unit, the growth below which it is noise, what stands
/// for a quarter, and how it is read from a sample.
type Metric = (
    &'static str,
    &'static str,
    f64,
    Stat,
    fn(&NodeSample) -> Option<f64>,
);

/// The growth of a node's RSS below which it is noise, not a leak (MiB).
pub const RSS_FLOOR_MIB: f64 = 4.0;

/// The node series, with their floors: 4 MiB of memory or of log, 8 open files, 4 threads,
/// 1 MiB of snapshot.
const METRICS: [Metric; 5] = [
    ("rss", "MiB", RSS_FLOOR_MIB, Stat::Median, |s| s.rss_mib),
    ("fds", "open files", 8.0, Stat::Median, |s| {
        s.fds.map(|v| v as f64)
    }),
    ("threads", "threads", 4.0, Stat::Median, |s| {
        s.threads.map(|v| v as f64)
    }),
    ("log", "MiB on disk", 4.0, Stat::Max, |s| Some(s.log_mib)),
    ("snapshot", "MiB on disk", 1.0, Stat::Median, |s| {
        Some(s.snapshot_mib)
    }),
];
/// The floor of the p99: 2 ms.
const P99_FLOOR_MS: f64 = 2.0;

/// One node at the end of an interval; the process figures are absent if it was not
/// running (killed and not yet restarted).
#[derive(Clone, Serialize)]
pub struct NodeSample {
    pub id: u64,
    pub pid: Option<u32>,
    /// Its process is not the one of the previous interval.
    pub restarted: bool,
    pub rss_mib: Option<f64>,
    pub fds: Option<u64>,
    pub threads: Option<u64>,
    pub log_mib: f64,
    pub snapshot_mib: f64,
}

/// One interval's line.
#[derive(Clone, Serialize)]
pub struct Interval {
    /// Seconds since the measured run began, at the end of the interval.
    pub t_s: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub errors: u64,
    /// The p99 of the operations of this interval alone.
    pub p99_ms: f64,
    pub sessions_opened: u64,
    pub sessions_abandoned: u64,
    /// Keyed limits defined, taken from and removed.
    pub limits_cycled: u64,
    /// Incidents since the run began.
    pub kills: u32,
    pub stalls: u32,
    pub nodes: Vec<NodeSample>,
}

/// The drift of one series.
#[derive(Clone, Debug, Serialize)]
pub struct Drift {
    /// `n<id> <metric>`, or `p99`.
    pub series: String,
    pub unit: &'static str,
    /// Medians of the first and of the last quarter of the intervals.
    pub first: f64,
    pub last: f64,
    pub growth_pct: f64,
    pub flagged: bool,
}

/// The end of the soak.
#[derive(Serialize)]
struct Verdict {
    intervals: usize,
    kills: u32,
    stalls: u32,
    incidents_failed: u32,
    threshold_pct: f64,
    flagged: usize,
    drift: Vec<Drift>,
}

/// What the clients share besides the [`Recorder`] (whose kill markers `load.rs` reads).
struct Churn {
    recorder: Recorder,
    /// The operations of the current interval.
    interval: Mutex<Histogram<u64>>,
    sessions_opened: AtomicU64,
    sessions_abandoned: AtomicU64,
    limits_cycled: AtomicU64,
}

impl Churn {
    fn record<T, E: std::fmt::Display>(&self, sent_ns: u64, outcome: &Result<T, E>) {
        let mut hist = self.interval.lock().unwrap_or_else(|p| p.into_inner());
        self.recorder.record_result(&mut hist, sent_ns, outcome);
    }
}

/// Runs the soak on the spawned `cluster` and prints its lines and verdict.
pub async fn run(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    cluster: &mut LocalCluster,
    out: &Output,
) -> Result<Exit, String> {
    let admin = Client::with_security(servers.to_vec(), security.clone());
    define_limits(&admin, args).await?;
    define_rate(&admin, KEYED, Some(KEYED_KEYS_MAX)).await?;
    let churn = Arc::new(Churn {
        recorder: Recorder::new(),
        interval: Mutex::new(histogram()),
        sessions_opened: AtomicU64::new(0),
        sessions_abandoned: AtomicU64::new(0),
        limits_cycled: AtomicU64::new(0),
    });
    let mut clients = start_clients(args, servers, security, &churn);
    clients.push(tokio::spawn(definitions_loop(admin, churn.clone())));
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    churn.recorder.measuring.store(true, Ordering::Relaxed);
    let (intervals, incidents) = soak(args, servers, security, cluster, &churn, out).await;
    churn.recorder.stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    let drift = verdict(&intervals, args.drift_threshold);
    let verdict = Verdict {
        intervals: intervals.len(),
        kills: incidents.kills,
        stalls: incidents.stalls,
        incidents_failed: incidents.failed,
        threshold_pct: args.drift_threshold,
        flagged: drift.iter().filter(|d| d.flagged).count(),
        drift,
    };
    if let Some(file) = &args.chart {
        write_chart(file, &intervals)?;
    }
    let value = serde_json::json!({ "verdict": &verdict });
    out.print(value, || verdict_text(&verdict));
    Ok(
        match verdict.flagged == 0 && verdict.incidents_failed == 0 {
            true => EXIT_OK,
            false => EXIT_ERROR,
        },
    )
}

/// Starts `--clients` churn loops, `--clients-per-connection` of them to a connection.
fn start_clients(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    churn: &Arc<Churn>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut client = Client::with_security(servers.to_vec(), security.clone());
    (0..args.clients)
        .map(|n| {
            if n % args.clients_per_connection == 0 {
                client = Client::with_security(servers.to_vec(), security.clone());
            }
            tokio::spawn(churn_loop(
                client.clone(),
                n as u64,
                args.limits,
                churn.clone(),
            ))
        })
        .collect()
}

/// Client `n`: sessions one after another until told to stop.
async fn churn_loop(client: Client, n: u64, limits: u32, churn: Arc<Churn>) {
    let mut s: u64 = 0;
    while !churn.recorder.stop.load(Ordering::Relaxed) {
        s += 1;
        let sent = churn.recorder.ns();
        let session = match Session::open(&client, SESSION_TTL).await {
            Ok(session) => session,
            Err(e) => {
                churn.record(sent, &Err::<(), _>(e));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        churn.sessions_opened.fetch_add(1, Ordering::Relaxed);
        let mut i = 0;
        while i < OPS_PER_SESSION && !churn.recorder.stop.load(Ordering::Relaxed) {
            i += 1;
            let sent = churn.recorder.ns();
            if i.is_multiple_of(2) {
                let limit = limit_name((n * 7919 + i) % u64::from(limits));
                match session
                    .acquire(AcquireOptions::new(load::TENANT, &limit))
                    .await
                {
                    Ok(permit) => {
                        churn.record(sent, &Ok::<(), String>(()));
                        let sent = churn.recorder.ns();
                        churn.record(sent, &permit.release().await);
                    }
                    Err(e) => churn.record(sent, &Err::<(), _>(e)),
                }
            } else {
                let key = format!("c{n}-s{s}-k{}", i % KEYS_PER_SESSION);
                churn.record(sent, &session.acquire(keyed_take_of(KEYED, &key)).await);
            }
        }
        if s.is_multiple_of(ABANDON_EVERY) {
            churn.sessions_abandoned.fetch_add(1, Ordering::Relaxed);
            drop(session);
        } else {
            let _ = session.close().await;
        }
    }
}

/// Keyed limits appearing and disappearing until told to stop: define one, take a token
/// from each of its keys in a session, close the session, remove the limit.
async fn definitions_loop(admin: Client, churn: Arc<Churn>) {
    let mut n: u64 = 0;
    while !churn.recorder.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(DEFINITION_EVERY).await;
        let name = format!("soak-def-{}", n % DEFINITION_NAMES);
        n += 1;
        let sent = churn.recorder.ns();
        let defined = define_rate(&admin, &name, Some(DEFINITION_KEYS as u32)).await;
        churn.record(sent, &defined);
        if defined.is_err() {
            continue;
        }
        if let Ok(session) = Session::open(&admin, SESSION_TTL).await {
            for k in 0..DEFINITION_KEYS {
                let sent = churn.recorder.ns();
                let key = format!("k{k}");
                churn.record(sent, &session.acquire(keyed_take_of(&name, &key)).await);
            }
            let _ = session.close().await;
        }
        let sent = churn.recorder.ns();
        let removed = admin
            .write(Command::RemoveLimit {
                tenant: load::TENANT.into(),
                name,
            })
            .await;
        if removed.is_ok() {
            churn.limits_cycled.fetch_add(1, Ordering::Relaxed);
        }
        churn.record(sent, &removed);
    }
}

/// The incidents of the run so far.
#[derive(Default)]
struct Incidents {
    kills: u32,
    stalls: u32,
    failed: u32,
}

/// When each kind of incident is next due (`None`: never).
struct Schedule {
    kill: Option<(Duration, Instant)>,
    stall: Option<(Duration, Instant)>,
}

impl Schedule {
    fn new(args: &BenchArgs, start: Instant) -> Schedule {
        let every = |secs: f64| {
            (secs > 0.0).then(|| {
                let d = Duration::from_secs_f64(secs);
                (d, start + d)
            })
        };
        Schedule {
            kill: every(args.kill_every),
            stall: every(args.stall_every),
        }
    }

    /// The incident due now, if any (a kill first), scheduled again.
    fn due(&mut self) -> Option<Incident> {
        let now = Instant::now();
        for (slot, incident) in [
            (&mut self.kill, Incident::Kill),
            (&mut self.stall, Incident::Stall),
        ] {
            if let Some((every, next)) = slot
                && now >= *next
            {
                *next = now + *every;
                return Some(incident);
            }
        }
        None
    }
}

/// The measured run: incidents when due, a sample and its line each interval.
async fn soak(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    cluster: &mut LocalCluster,
    churn: &Churn,
    out: &Output,
) -> (Vec<Interval>, Incidents) {
    let start = Instant::now();
    let every = Duration::from_secs_f64(args.report_every.unwrap_or(60.0));
    let end = start + Duration::from_secs_f64(args.duration);
    let mut schedule = Schedule::new(args, start);
    let mut incidents = Incidents::default();
    let mut intervals: Vec<Interval> = vec![];
    let mut next_report = start + every;
    let mut last = (start, 0u64, 0u64, 0u64, 0u64, 0u64);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(incident) = schedule.due() {
            incident_now(incident, cluster, servers, security, churn, &mut incidents).await;
        }
        if Instant::now() < next_report {
            continue;
        }
        next_report += every;
        let previous = intervals.last().map(|i| i.nodes.as_slice()).unwrap_or(&[]);
        let nodes = sample_nodes(cluster, previous);
        let hist = std::mem::replace(
            &mut *churn.interval.lock().unwrap_or_else(|p| p.into_inner()),
            histogram(),
        );
        let now = (
            Instant::now(),
            churn.recorder.ops.load(Ordering::Relaxed),
            churn.recorder.errors.load(Ordering::Relaxed),
            churn.sessions_opened.load(Ordering::Relaxed),
            churn.sessions_abandoned.load(Ordering::Relaxed),
            churn.limits_cycled.load(Ordering::Relaxed),
        );
        let interval = Interval {
            t_s: (now.0 - start).as_secs_f64(),
            ops: now.1 - last.1,
            ops_per_s: ((now.1 - last.1) as f64 / (now.0 - last.0).as_secs_f64()).round(),
            errors: now.2 - last.2,
            p99_ms: ms(hist.value_at_quantile(0.99)),
            sessions_opened: now.3 - last.3,
            sessions_abandoned: now.4 - last.4,
            limits_cycled: now.5 - last.5,
            kills: incidents.kills,
            stalls: incidents.stalls,
            nodes,
        };
        last = now;
        let value = serde_json::to_value(&interval).expect("an interval serializes");
        out.print(value, || interval_text(&interval));
        intervals.push(interval);
    }
    (intervals, incidents)
}

/// Kills or stops the leader (`load.rs`); on a failure, every node is made to run again.
async fn incident_now(
    incident: Incident,
    cluster: &mut LocalCluster,
    servers: &[String],
    security: &ClientSecurity,
    churn: &Churn,
    incidents: &mut Incidents,
) {
    match disrupt_the_leader(incident, cluster, servers, security, &churn.recorder).await {
        Ok(_) if incident == Incident::Kill => incidents.kills += 1,
        Ok(_) => incidents.stalls += 1,
        Err(e) => {
            eprintln!("[soak] {e}");
            incidents.failed += 1;
            let ids: Vec<u64> = cluster.nodes().iter().map(|n| n.id).collect();
            for id in ids {
                if cluster.is_paused(id) {
                    cluster.resume(id);
                }
                if !cluster.is_running(id)
                    && let Err(e) = spawn::restart(cluster, id).await
                {
                    eprintln!("[soak] restart of node {id}: {e}");
                }
            }
        }
    }
}

/// Every node's sample; `previous` is the last interval's, to tell a restart.
pub fn sample_nodes(cluster: &LocalCluster, previous: &[NodeSample]) -> Vec<NodeSample> {
    cluster
        .nodes()
        .iter()
        .map(|n| {
            let pid = cluster.pid(n.id);
            let before = previous.iter().find(|p| p.id == n.id).and_then(|p| p.pid);
            let proc = pid.and_then(proc_figures);
            let (log, snapshot) = disk_bytes(&cluster.data_dir(n.id));
            NodeSample {
                id: n.id,
                pid,
                restarted: before.is_some() && before != pid,
                rss_mib: proc.map(|p| p.0 as f64 / 1024.0),
                fds: proc.map(|p| p.1),
                threads: proc.map(|p| p.2),
                log_mib: mib(log),
                snapshot_mib: mib(snapshot),
            }
        })
        .collect()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Resident KiB, open files and threads of `pid`, from `/proc` (Linux; `None` elsewhere or
/// if the process is gone).
fn proc_figures(pid: u32) -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((field("VmRSS:")?, fds, field("Threads:")?))
}

/// Bytes under a node's data directory: the log (everything but the snapshot), and the
/// snapshot file.
fn disk_bytes(dir: &Path) -> (u64, u64) {
    let mut log = 0;
    let mut snapshot = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
            } else if d == dir && e.file_name() == SNAPSHOT_FILE {
                snapshot += meta.len();
            } else {
                log += meta.len();
            }
        }
    }
    (log, snapshot)
}

/// The median or the peak of the finite `values` present; 0 if there are none.
fn summary(stat: Stat, values: &[Option<f64>]) -> f64 {
    let mut values: Vec<f64> = values.iter().flatten().copied().collect();
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    let at = match stat {
        Stat::Median => values.len() / 2,
        Stat::Max => values.len().saturating_sub(1),
    };
    values.get(at).copied().unwrap_or(0.0)
}

/// The drift of one series given per interval (absent where not measured); `metric` is its
/// unit, floor and statistic.
fn drift(
    series: String,
    metric: (&'static str, f64, Stat),
    values: &[Option<f64>],
    pct: f64,
) -> Drift {
    let (unit, floor, stat) = metric;
    let quarter = (values.len() / 4).max(1);
    let first = summary(stat, &values[..quarter]);
    let last = summary(stat, &values[values.len().saturating_sub(quarter)..]);
    let growth_pct = match first > 0.0 {
        true => (last - first) / first * 100.0,
        false if last > 0.0 => f64::INFINITY,
        false => 0.0,
    };
    Drift {
        series,
        unit,
        first,
        last,
        growth_pct,
        flagged: growth_pct > pct && last - first > floor,
    }
}

/// Every node id sampled in `intervals`, ascending, once each.
fn node_ids(intervals: &[Interval]) -> Vec<u64> {
    let mut ids: Vec<u64> = intervals
        .iter()
        .flat_map(|i| i.nodes.iter().map(|n| n.id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The drift of every node's series and of the p99 over `intervals`.
pub fn verdict(intervals: &[Interval], threshold_pct: f64) -> Vec<Drift> {
    let ids = node_ids(intervals);
    let mut all = vec![];
    for id in ids {
        for (name, unit, floor, stat, read) in METRICS {
            let values: Vec<Option<f64>> = intervals
                .iter()
                .map(|i| i.nodes.iter().find(|n| n.id == id).and_then(read))
                .collect();
            let metric = (unit, floor, stat);
            all.push(drift(
                format!("n{id} {name}"),
                metric,
                &values,
                threshold_pct,
            ));
        }
    }
    let p99: Vec<Option<f64>> = intervals.iter().map(|i| Some(i.p99_ms)).collect();
    let metric = ("ms", P99_FLOOR_MS, Stat::Median);
    all.push(drift("p99".into(), metric, &p99, threshold_pct));
    all
}

fn interval_text(i: &Interval) -> String {
    let mut text = format!(
        "[soak] {:>6.0}s  {:>7.0} ops/s  {} errors  p99 {:.2} ms  sessions +{} ({} abandoned)  limits +{}  kills {} stalls {}",
        i.t_s,
        i.ops_per_s,
        i.errors,
        i.p99_ms,
        i.sessions_opened,
        i.sessions_abandoned,
        i.limits_cycled,
        i.kills,
        i.stalls
    );
    for n in &i.nodes {
        let opt = |v: Option<f64>, digits: usize| match v {
            Some(v) => format!("{v:.digits$}"),
            None => "-".into(),
        };
        text.push_str(&format!(
            " | n{} rss {} MiB fds {} threads {} log {:.1} MiB snapshot {:.2} MiB{}",
            n.id,
            opt(n.rss_mib, 1),
            opt(n.fds.map(|v| v as f64), 0),
            opt(n.threads.map(|v| v as f64), 0),
            n.log_mib,
            n.snapshot_mib,
            if n.restarted { " (restarted)" } else { "" }
        ));
    }
    text
}

fn verdict_text(v: &Verdict) -> String {
    let mut text = format!(
        "soak: {} intervals, {} kills, {} stalls, {} incidents failed; growth from the first quarter to the last (flagged above {}% and the series' floor):",
        v.intervals, v.kills, v.stalls, v.incidents_failed, v.threshold_pct
    );
    for d in &v.drift {
        text.push_str(&format!(
            "\n  {:<14} {:>10.2} -> {:>10.2} {:<12} {:>+8.1}%{}",
            d.series,
            d.first,
            d.last,
            d.unit,
            d.growth_pct,
            if d.flagged { "  FLAGGED" } else { "" }
        ));
    }
    text.push_str(&match v.flagged {
        0 => "\nverdict: no series grew beyond its threshold".to_string(),
        n => format!("\nverdict: {n} series grew beyond the threshold"),
    });
    text
}

/// Writes one chart per series kind (each node a line), and the p99, in one SVG.
fn write_chart(file: &Path, intervals: &[Interval]) -> Result<(), String> {
    let ids = node_ids(intervals);
    let mut charts: Vec<String> = METRICS
        .iter()
        .map(|(name, unit, _, _, read)| {
            let series: Vec<Series> = ids
                .iter()
                .map(|id| Series {
                    name: format!("node {id}"),
                    points: intervals
                        .iter()
                        .filter_map(|i| {
                            let n = i.nodes.iter().find(|n| n.id == *id)?;
                            read(n).map(|v| (i.t_s, v))
                        })
                        .collect(),
                })
                .collect();
            time_chart(&format!("{name} per node"), "seconds", unit, &series)
        })
        .collect();
    let p99 = Series {
        name: "p99 of the interval".into(),
        points: intervals.iter().map(|i| (i.t_s, i.p99_ms)).collect(),
    };
    charts.push(time_chart("latency", "seconds", "ms", &[p99]));
    std::fs::write(file, grid(&charts, 2))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(t: f64, rss: f64, log: f64, p99: f64) -> Interval {
        Interval {
            t_s: t,
            ops: 1,
            ops_per_s: 1.0,
            errors: 0,
            p99_ms: p99,
            sessions_opened: 0,
            sessions_abandoned: 0,
            limits_cycled: 0,
            kills: 0,
            stalls: 0,
            nodes: vec![NodeSample {
                id: 1,
                pid: Some(1),
                restarted: false,
                rss_mib: Some(rss),
                fds: Some(30),
                threads: Some(10),
                log_mib: log,
                snapshot_mib: 0.5,
            }],
        }
    }

    fn flagged(drift: &[Drift]) -> Vec<&str> {
        drift
            .iter()
            .filter(|d| d.flagged)
            .map(|d| d.series.as_str())
            .collect()
    }

    #[test]
    fn a_steady_climb_is_flagged_and_a_sawtooth_or_a_spike_is_not() {
        // rss climbs 40 -> 79 MiB; the log is a sawtooth (a snapshot purges it) whose
        // quarters' medians differ by the phase of the samples (60 against 90 MiB) and whose
        // peaks do not; the p99 has one spike (a kill) in the last quarter.
        let intervals: Vec<Interval> = (0..40)
            .map(|k| {
                let p99 = if k == 38 { 900.0 } else { 3.0 };
                interval(k as f64 * 60.0, 40.0 + k as f64, (k % 7) as f64 * 10.0, p99)
            })
            .collect();
        let drift = verdict(&intervals, 20.0);
        assert_eq!(flagged(&drift), vec!["n1 rss"], "{drift:?}");
        let rss = &drift[0];
        assert_eq!(
            (rss.first, rss.last),
            (45.0, 75.0),
            "medians of 10 intervals"
        );
        assert!((rss.growth_pct - 200.0 / 3.0).abs() < 1e-9, "{rss:?}");
    }

    #[test]
    fn growth_under_the_floor_or_the_threshold_is_not_flagged() {
        // +3 MiB on 10 MiB is 30% but under the 4 MiB floor; +10 MiB on 100 is under 20%.
        let small: Vec<Interval> = (0..8)
            .map(|k| interval(k as f64, if k < 4 { 10.0 } else { 13.0 }, 0.0, 1.0))
            .collect();
        assert!(flagged(&verdict(&small, 20.0)).is_empty());
        let big: Vec<Interval> = (0..8)
            .map(|k| interval(k as f64, if k < 4 { 100.0 } else { 110.0 }, 0.0, 1.0))
            .collect();
        assert!(flagged(&verdict(&big, 20.0)).is_empty());
        assert_eq!(flagged(&verdict(&big, 5.0)), vec!["n1 rss"]);
    }
}
