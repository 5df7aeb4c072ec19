//! What a load run measures and prints: the [`Recorder`] every client shares, and the
//! [`LoadReport`] made from it at the end.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::args::BenchArgs;
use super::cpu::CpuReport;
use crate::output::Output;

/// The measured window of a load whose clients already run past their warm-up: counts
/// outcomes for `--duration`, prints a progress line a second on stderr (after `name`),
/// then tells the clients to stop; returns how long it measured.
pub async fn measured_window(args: &BenchArgs, recorder: &Recorder, name: &str) -> Duration {
    recorder.measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    let duration = Duration::from_secs_f64(args.duration);
    let mut last_ops = 0;
    while start.elapsed() < duration {
        let left = duration.saturating_sub(start.elapsed());
        tokio::time::sleep(Duration::from_secs(1).min(left)).await;
        let ops = recorder.ops.load(Ordering::Relaxed);
        eprintln!(
            "[bench] {name} {:>5.1}s  {:>9} ops  errors {}",
            start.elapsed().as_secs_f64(),
            ops - last_ops,
            recorder.errors.load(Ordering::Relaxed)
        );
        last_ops = ops;
    }
    let elapsed = start.elapsed();
    recorder.measuring.store(false, Ordering::Relaxed);
    recorder.stop.store(true, Ordering::Relaxed);
    elapsed
}

/// `a / b`, 0 when `b` is not positive (a system that did nothing).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Reports side by side under one header, a row each: throughput, latencies, errors.
pub fn table(rows: &[(&str, &LoadReport)]) -> String {
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    let mut text = format!(
        "{:<width$} {:>10} {:>9} {:>9} {:>9} {:>7}",
        "", "ops/s", "p50 ms", "p99 ms", "p99.9 ms", "errors"
    );
    for (name, r) in rows {
        text.push_str(&format!(
            "\n{name:<width$} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>7}",
            r.ops_per_s, r.p50_ms, r.p99_ms, r.p999_ms, r.errors
        ));
    }
    text
}

/// Microseconds as milliseconds.
pub fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The system's load average over 1, 5 and 15 minutes (zeros where `/proc` does not say):
/// printed with comparisons and curves, since figures mean little on a busy machine.
pub fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text.split_whitespace().map(|v| v.parse().unwrap_or(0.0));
    [(); 3].map(|_| it.next().unwrap_or(0.0))
}

/// A latency histogram in µs: 1 µs to 60 s (longer than any bounded wait of the client), 3
/// significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// What all clients of one load run share: the phase flags, the counts, the merged
/// histogram, and the markers of a kill in progress.
///
/// Times are ns since `started`; 0 in `kill_ns` or `recovered_ns` means "none".
pub struct Recorder {
    started: Instant,
    /// Past the warm-up: outcomes count.
    pub measuring: AtomicBool,
    /// The clients finish their current operation and leave.
    pub stop: AtomicBool,
    pub ops: AtomicU64,
    pub errors: AtomicU64,
    /// Each client's histogram, merged in when it leaves.
    pub histogram: Mutex<Histogram<u64>>,
    /// A kill in progress, and the first success of an operation sent after it.
    pub kill_ns: AtomicU64,
    pub recovered_ns: AtomicU64,
    /// Settles acknowledged as new, and settles whose outcome is unknown.
    pub settled: AtomicU64,
    pub settle_unknown: AtomicU64,
    /// Sessions that ran, and those of them that saw one of their permits lost.
    pub sessions: AtomicU64,
    pub sessions_lost_permit: AtomicU64,
    /// The first failed operation's error, printed after the run: an error count alone
    /// does not say what went wrong.
    first_error: Mutex<Option<String>>,
    /// `leased-take`: tokens spent locally in each ms since the start, one series per
    /// limit or key checked (set before the clients start); the takes
    /// decided locally and by the cluster, the takes asked of the cluster (granted or not),
    /// and the lease requests.
    pub spends: std::sync::OnceLock<Vec<Vec<AtomicU64>>>,
    /// `leased-take`: each take the cluster decided, by series: (series, ms its request was
    /// sent in, ms its answer arrived in), the span it was spent in (`spend_check`).
    pub cluster_spends: Mutex<Vec<(u16, u32, u32)>>,
    pub local_takes: AtomicU64,
    pub cluster_takes: AtomicU64,
    pub cluster_asks: AtomicU64,
    pub lease_requests: AtomicU64,
    /// Of the takes a lease asked of the cluster, those refused for lack of room; and the
    /// takes a lease refused locally in its quiet window after such a refusal.
    pub cluster_refused: AtomicU64,
    pub quiet_refusals: AtomicU64,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            started: Instant::now(),
            measuring: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            histogram: Mutex::new(histogram()),
            kill_ns: AtomicU64::new(0),
            recovered_ns: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            settle_unknown: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            sessions_lost_permit: AtomicU64::new(0),
            first_error: Mutex::new(None),
            spends: std::sync::OnceLock::new(),
            cluster_spends: Mutex::new(Vec::new()),
            local_takes: AtomicU64::new(0),
            cluster_takes: AtomicU64::new(0),
            cluster_asks: AtomicU64::new(0),
            lease_requests: AtomicU64::new(0),
            cluster_refused: AtomicU64::new(0),
            quiet_refusals: AtomicU64::new(0),
        }
    }

    /// Records `outcome` as [`Recorder::record`] does, keeping its error if it is the first.
    pub fn record_result<T, E: std::fmt::Display>(
        &self,
        hist: &mut Histogram<u64>,
        sent_ns: u64,
        outcome: &Result<T, E>,
    ) {
        if let Err(e) = outcome {
            self.note_error(e);
        }
        self.record(hist, sent_ns, outcome.is_ok());
    }

    /// Keeps `why` if it is the first error of the measured window.
    fn note_error(&self, why: &dyn std::fmt::Display) {
        if !self.measuring.load(Ordering::Relaxed) {
            return;
        }
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(why.to_string());
        }
    }

    /// The first error of the measured window, if any.
    pub fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Now, in ns since the run started.
    pub fn ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Records the outcome of an operation sent at `sent_ns` into the client's own `hist`
    /// (once measuring), and marks the recovery from a kill by the first success sent after
    /// it.
    pub fn record(&self, hist: &mut Histogram<u64>, sent_ns: u64, ok: bool) {
        let done = self.ns();
        if ok {
            let kill = self.kill_ns.load(Ordering::Acquire);
            if kill != 0 && sent_ns > kill {
                let _ = self.recovered_ns.compare_exchange(
                    0,
                    done,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
        }
        if !self.measuring.load(Ordering::Relaxed) {
            return;
        }
        if ok {
            self.ops.fetch_add(1, Ordering::Relaxed);
            let _ = hist.record(((done - sent_ns) / 1_000).max(1));
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Merges a leaving client's histogram.
    pub fn merge(&self, hist: &Histogram<u64>) {
        self.histogram
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(hist)
            .expect("same bounds");
    }

    fn merged(&self) -> Histogram<u64> {
        self.histogram
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The failover figures: kills, and the time from each to the first success after it.
#[derive(Serialize)]
pub struct FailoverReport {
    pub kills: usize,
    pub p50_ms: f64,
    pub max_ms: f64,
}

/// The stall figures: leader stops, the time from each to the first success after it, and
/// the sessions that lost a permit.
#[derive(Serialize)]
pub struct StallReport {
    pub stalls: usize,
    pub p50_ms: f64,
    pub max_ms: f64,
    pub sessions: u64,
    pub sessions_lost_permit: u64,
}

/// The results of a load run; `--json` prints it as one object (the keys README documents first).
#[derive(Serialize)]
pub struct LoadReport {
    pub workload: &'static str,
    pub clients: usize,
    pub ops: u64,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    /// The first error of the measured window, when there were errors.
    pub first_error: Option<String>,
    pub duration_s: f64,
    pub failover: Option<FailoverReport>,
    pub stall: Option<StallReport>,
    /// Nothing acknowledged was lost.
    pub verified: bool,
    /// CPU of the bench and the spawned nodes over the measured window (`--spawn`, no
    /// failover or stall, Linux).
    pub cpu: Option<CpuReport>,
    /// `--workload rls --rls-keys N`: the keys asked and what the keyed rule held.
    pub keys: Option<KeysReport>,
    /// `--workload leased-take`: where the takes were decided, the commands they cost, and
    /// the check in spend time.
    pub lease: Option<LeaseReport>,
}

/// A run of `leased-take` (over the whole run, warm-up included).
#[derive(Serialize)]
pub struct LeaseReport {
    /// The limit's rate (per key with `keys`), tokens a second, and its burst.
    pub rate_per_s: f64,
    pub burst: u64,
    /// `--lease-keys`: the keys drawn (0: one limit), and how many of the hottest the
    /// spend-time check covers.
    pub keys: u32,
    pub keys_checked: usize,
    /// Takes granted from a lease's local bucket, and by the cluster.
    pub local_takes: u64,
    pub cluster_takes: u64,
    /// Takes sent to the cluster, granted or refused (one command each), and lease
    /// requests (opening, renewing, ending).
    pub cluster_asks: u64,
    pub lease_requests: u64,
    /// Of the takes leases asked of the cluster, those refused for lack of room; and the
    /// takes leases then refused locally, in their quiet window, without a command.
    pub cluster_refused: u64,
    pub quiet_refusals: u64,
    /// Commands the takes cost per 1,000 takes granted: `(cluster_asks + lease_requests)
    /// × 1000 / (local_takes + cluster_takes)` (keep-alives, a few a session each TTL,
    /// are not counted).
    pub commands_per_1k_takes: f64,
    /// The worst window over every series checked: tokens spent less its bound
    /// (`burst + rate × window`); above 0 is an over-grant and fails the run.
    pub worst_window_over_bound: f64,
}

/// A run of `--rls-keys`: distinct keys on one keyed rule, and its live keys.
#[derive(Serialize)]
pub struct KeysReport {
    /// Distinct keys asked, in turn.
    pub keys: u32,
    /// The rule's bound on live keys.
    pub keys_max: u32,
    /// Distinct keys asked per minute of the measured window (at most `keys`: every key
    /// once a minute or more often when the run asks faster than that).
    pub distinct_per_minute: u64,
    /// Times each key was asked over the measured window, on average.
    pub rounds: f64,
    /// The most live keys the rule held when sampled (every 250 ms of the measured
    /// window, on the leader's state).
    pub live_max: u64,
    /// Answers that found no room for their key (also counted in `errors`).
    pub keys_full: u64,
}

impl LoadReport {
    /// The report of a run that measured for `elapsed`, with the recovery times of its
    /// kills in µs.
    pub fn new(
        args: &BenchArgs,
        recorder: &Recorder,
        elapsed: Duration,
        mut recoveries_us: Vec<u64>,
        mut stalls_us: Vec<u64>,
        verified: bool,
    ) -> LoadReport {
        let hist = recorder.merged();
        let ops = recorder.ops.load(Ordering::Relaxed);
        recoveries_us.sort();
        let failover = recoveries_us.last().map(|max| FailoverReport {
            kills: recoveries_us.len(),
            p50_ms: ms(recoveries_us[recoveries_us.len() / 2]),
            max_ms: ms(*max),
        });
        stalls_us.sort();
        let stall = stalls_us.last().map(|max| StallReport {
            stalls: stalls_us.len(),
            p50_ms: ms(stalls_us[stalls_us.len() / 2]),
            max_ms: ms(*max),
            sessions: recorder.sessions.load(Ordering::Relaxed),
            sessions_lost_permit: recorder.sessions_lost_permit.load(Ordering::Relaxed),
        });
        LoadReport {
            workload: args.workload.name(),
            clients: args.clients,
            ops,
            ops_per_s: (ops as f64 / elapsed.as_secs_f64()).round(),
            p50_ms: ms(hist.value_at_quantile(0.5)),
            p99_ms: ms(hist.value_at_quantile(0.99)),
            p999_ms: ms(hist.value_at_quantile(0.999)),
            max_ms: ms(hist.max()),
            errors: recorder.errors.load(Ordering::Relaxed),
            first_error: recorder.first_error(),
            duration_s: elapsed.as_secs_f64(),
            failover,
            stall,
            verified,
            cpu: None,
            keys: None,
            lease: None,
        }
    }

    pub fn print(&self, out: &Output) {
        let value = serde_json::to_value(self).expect("a report serializes");
        out.print(value, || self.text());
    }

    fn text(&self) -> String {
        let mut text = format!(
            "{} with {} clients: {} ops in {:.1} s = {:.0} ops/s, {} errors\n\
             latency ms: p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
            self.workload,
            self.clients,
            self.ops,
            self.duration_s,
            self.ops_per_s,
            self.errors,
            self.p50_ms,
            self.p99_ms,
            self.p999_ms,
            self.max_ms,
        );
        if let Some(why) = &self.first_error {
            text.push_str(&format!("\nfirst error: {why}"));
        }
        if let Some(f) = &self.failover {
            text.push_str(&format!(
                "\nfailover: {} kills, grants resumed after p50 {:.1} ms, max {:.1} ms",
                f.kills, f.p50_ms, f.max_ms
            ));
        }
        if let Some(s) = &self.stall {
            text.push_str(&format!(
                "\nstall: {} stops, grants resumed after p50 {:.1} ms, max {:.1} ms; \
                 {} of {} sessions lost a permit",
                s.stalls, s.p50_ms, s.max_ms, s.sessions_lost_permit, s.sessions
            ));
        }
        if let Some(k) = &self.keys {
            text.push_str(&format!(
                "\nkeys: {} distinct on one rule (keys_max {}), {} a minute, each asked {:.1} \
                 times; live keys at most {}; {} answers without room for their key",
                k.keys, k.keys_max, k.distinct_per_minute, k.rounds, k.live_max, k.keys_full
            ));
        }
        if let Some(l) = &self.lease {
            text.push_str(&format!(
                "\nleases: {} takes decided locally, {} by the cluster ({} asked, {} refused; {} \
                 refused quietly), {} lease requests: {:.2} commands per 1,000 takes; worst \
                 window {:.0} tokens {} its bound",
                l.local_takes,
                l.cluster_takes,
                l.cluster_asks,
                l.cluster_refused,
                l.quiet_refusals,
                l.lease_requests,
                l.commands_per_1k_takes,
                l.worst_window_over_bound.abs(),
                if l.worst_window_over_bound > 0.0 {
                    "over"
                } else {
                    "under"
                }
            ));
        }
        if let Some(c) = &self.cpu {
            text.push_str(&format!(
                "\ncpu: {:.1} ms per 1,000 ops ({:.1} on the nodes); bench {:.2} s, nodes {} s",
                c.ms_per_1k_ops,
                c.nodes_ms_per_1k_ops,
                c.bench_s,
                c.nodes_s
                    .iter()
                    .map(|s| format!("{s:.2}"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            ));
        }
        text.push_str(if self.verified {
            "\nverified: nothing acknowledged was lost"
        } else {
            "\nVIOLATION found (see above)"
        });
        text
    }
}
