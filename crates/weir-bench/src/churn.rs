//! `weir bench --workload keyed-churn --report-every SECS` (with `--spawn`): a gateway's key
//! churn. New keys arrive at `--keys-per-minute` N, each taken from once and live for a
//! minute after, for `--duration`; the bench samples every node's RSS and the limit's live
//! keys each interval and says at the end whether memory held flat and the live keys held
//! near N.
//!
//! The limit: one keyed rate limit of burst 1 refilling one token in 60 s ([`KEY_LIFE`]),
//! so a key taken from once is empty, full again a minute later, and then dropped as a
//! fresh key; its `keys_max` is twice N, so at the plateau no key is refused for room.
//! Take number k (from 0) is due at `k / (N / 60)` seconds into the run, from key
//! `churn-<k, ten digits>` (names are never reused: every take is of a fresh key), by
//! client `k mod --clients`, each client over a session of its own with one take in
//! flight; a client behind its schedule takes at once. A take does not wait: a refusal is
//! answered at once and counted, and so is an error; either fails the run.
//!
//! Each interval prints one line (one JSON object with `--json`): takes asked, granted,
//! refused and failed in the interval; the limit's live keys (its status) beside the keys
//! the bench expects live, the takes granted within the last key life; and per node the
//! soak's sample (`soak::sample_nodes`: RSS, open files, threads, log and snapshot bytes).
//! `--chart FILE` draws each node's RSS and the live keys over time (`svg.rs`).
//!
//! The verdict (the last line), all of which must hold for exit status 0:
//! - no take refused and none failed;
//! - every interval's live keys, and those read after the last take, within
//!   [`LIVE_SLACK_PCT`] percent of the expected ones plus [`LIVE_SLACK_S`] seconds of takes
//!   (the keys dropped on the log clock, the status read while takes are in flight);
//! - in a run of at least two key lives, the median live keys of its last half within
//!   [`PLATEAU_PCT`] percent of N (the bench kept its pace and the set plateaued);
//! - no node's RSS trends over the last half of the run: the Theil–Sen slope of its samples
//!   there (the median of the slopes between every two samples, so one spike does not
//!   decide) times the half's span is the growth the trend makes over it, flagged above
//!   `--drift-threshold` percent of the half's median RSS and above the soak's floor
//!   (`soak::RSS_FLOOR_MIB`). The first half is the warm-up: the live set climbs for a key
//!   life, and the allocator settles.
//!
//! `--warmup` does not apply: the run starts from an empty limit and its first key life is
//! its warm-up. No leader is killed or stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::args::BenchArgs;
use super::load::{SESSION_TTL, TENANT, keyed_take_of};
use super::soak::{NodeSample, RSS_FLOOR_MIB, sample_nodes};
use super::svg::{Series, grid, time_chart};
use crate::output::{EXIT_ERROR, EXIT_OK, Exit, Output};
use weir_client::{AcquireError, Client, Session};
use weir_core::bounds::KEYS_LIVE_MAX;
use weir_core::machine::{Definition, Reply};
use weir_launcher::LocalCluster;
use weir_proto::tls::ClientSecurity;

/// The churned limit.
const LIMIT: &str = "churn-keys";
/// How long a key lives after its one take: the limit refills its one token in this long.
const KEY_LIFE: Duration = Duration::from_secs(60);
/// Live keys may stray from the expected ones by this percent…
const LIVE_SLACK_PCT: f64 = 5.0;
/// …plus this many seconds of takes.
const LIVE_SLACK_S: f64 = 1.0;
/// The plateau's median live keys within this percent of the keys a minute.
const PLATEAU_PCT: f64 = 10.0;
/// Refusals and errors printed to stderr, the first ones only.
const PRINTED_FAILURES: u64 = 5;
/// Width of the buckets counting grants by time, for the expected live keys.
const GRANT_BUCKET: Duration = Duration::from_millis(100);

/// The key of take number `k`: fixed width, never reused.
fn key_name(k: u64) -> String {
    format!("churn-{k:010}")
}

/// The takes so far, and grants counted by [`GRANT_BUCKET`] since the start.
struct Counts {
    asked: AtomicU64,
    granted: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    granted_at: Vec<AtomicU64>,
    start: Instant,
}

impl Counts {
    fn bucket(&self, at: Instant) -> usize {
        let i = (at.saturating_duration_since(self.start).as_millis() / GRANT_BUCKET.as_millis())
            as usize;
        i.min(self.granted_at.len() - 1)
    }

    /// Takes granted within the key life before `at`: the keys expected live then.
    fn expected_live(&self, at: Instant) -> u64 {
        let last = self.bucket(at);
        let window = (KEY_LIFE.as_millis() / GRANT_BUCKET.as_millis()) as usize;
        self.granted_at[last.saturating_sub(window - 1)..=last]
            .iter()
            .map(|g| g.load(Ordering::Relaxed))
            .sum()
    }

    fn totals(&self) -> [u64; 4] {
        [&self.asked, &self.granted, &self.refused, &self.errors].map(|c| c.load(Ordering::Relaxed))
    }
}

/// One interval's line.
#[derive(Clone, Serialize)]
pub struct ChurnInterval {
    /// Seconds since the run began, at the end of the interval.
    pub t_s: f64,
    pub takes: u64,
    pub granted: u64,
    pub refusals: u64,
    pub errors: u64,
    /// The limit's live keys (`None`: its status did not answer).
    pub live_keys: Option<u64>,
    /// Takes granted within the last key life.
    pub expected_live_keys: u64,
    pub nodes: Vec<NodeSample>,
}

/// The trend of one node's RSS over the last half of the run.
#[derive(Clone, Debug, Serialize)]
pub struct Trend {
    pub node: u64,
    pub median_mib: f64,
    /// Theil–Sen slope, MiB a minute.
    pub slope_mib_per_min: f64,
    /// The slope times the half's span.
    pub growth_mib: f64,
    pub growth_pct: f64,
    pub flagged: bool,
}

/// The end of the run.
#[derive(Serialize)]
struct Verdict {
    intervals: usize,
    keys_per_minute: u64,
    takes: u64,
    granted: u64,
    refusals: u64,
    errors: u64,
    /// Live keys read after the last take, and those expected then.
    live_keys_end: Option<u64>,
    expected_live_keys_end: u64,
    /// Samples (the intervals' and the end's) whose live keys strayed from the expected.
    live_keys_off: usize,
    /// The last half's median live keys, in a run of two key lives or more.
    plateau_live_keys: Option<u64>,
    plateau_ok: bool,
    threshold_pct: f64,
    rss: Vec<Trend>,
    passed: bool,
}

/// Runs the churn on the spawned `cluster` and prints its lines and verdict.
pub async fn run(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    cluster: &mut LocalCluster,
    out: &Output,
) -> Result<Exit, String> {
    let per_minute = args.keys_per_minute;
    let admin = Client::with_security(servers.to_vec(), security.clone());
    define(&admin, per_minute).await?;
    let mut sessions = vec![];
    let mut client = Client::with_security(servers.to_vec(), security.clone());
    for n in 0..args.clients {
        if n % args.clients_per_connection == 0 {
            client = Client::with_security(servers.to_vec(), security.clone());
        }
        let session = Session::open(&client, SESSION_TTL)
            .await
            .map_err(|e| format!("open session: {e}"))?;
        sessions.push(session);
    }
    let duration = Duration::from_secs_f64(args.duration);
    let start = Instant::now();
    let buckets = (duration.as_millis() / GRANT_BUCKET.as_millis()) as usize + 2;
    let counts = Arc::new(Counts {
        asked: AtomicU64::new(0),
        granted: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        granted_at: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
        start,
    });
    let per_s = per_minute as f64 / 60.0;
    let clients = sessions.len() as u64;
    let takers: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(c, session)| {
            let counts = counts.clone();
            tokio::spawn(taker(
                session,
                c as u64,
                clients,
                per_s,
                start + duration,
                counts,
            ))
        })
        .collect();
    let intervals = sample(args, &admin, cluster, &counts, out).await;
    for t in takers {
        t.await.map_err(|e| e.to_string())?;
    }
    let end = Instant::now();
    let live_end = live_keys(&admin).await;
    let verdict = verdict(
        args,
        &intervals,
        &counts.totals(),
        (live_end, counts.expected_live(end)),
    );
    if let Some(file) = &args.chart {
        write_chart(file, &intervals)?;
    }
    out.print(serde_json::json!({ "verdict": &verdict }), || {
        verdict_text(&verdict)
    });
    Ok(if verdict.passed { EXIT_OK } else { EXIT_ERROR })
}

/// Defines the churned limit: burst 1, one token in [`KEY_LIFE`], room for twice the keys
/// of a minute.
async fn define(admin: &Client, per_minute: u64) -> Result<(), String> {
    let keys_max = (2 * per_minute).min(KEYS_LIVE_MAX as u64);
    let definition = Definition {
        tenant: TENANT.into(),
        name: LIMIT.into(),
        concurrent: 0,
        per_second: 1.0 / KEY_LIFE.as_secs_f64(),
        burst: Some(1),
        keyed: true,
        keys_max: Some(u32::try_from(keys_max).map_err(|_| "too many keys".to_string())?),
        shadow: false,
    };
    match admin.define(definition).await {
        Ok(Reply::Done) => Ok(()),
        other => Err(format!("define {TENANT}/{LIMIT}: {other:?}")),
    }
}

/// Client `c` of `clients`: takes `c`, `c + clients`, … each when due (`per_s` takes a
/// second in all), until the run's `end`; then closes its session.
async fn taker(
    session: Session,
    c: u64,
    clients: u64,
    per_s: f64,
    end: Instant,
    counts: Arc<Counts>,
) {
    let mut k = c;
    loop {
        let due = counts.start + Duration::from_secs_f64(k as f64 / per_s);
        if due >= end {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        let mut take = keyed_take_of(LIMIT, &key_name(k));
        take.wait = false;
        counts.asked.fetch_add(1, Ordering::Relaxed);
        let (counter, failure) = match session.acquire(take).await {
            Ok(permit) => {
                permit.consume();
                counts.granted_at[counts.bucket(Instant::now())].fetch_add(1, Ordering::Relaxed);
                (&counts.granted, None)
            }
            Err(AcquireError::Refused(r)) => (&counts.refused, Some(format!("refused: {r}"))),
            Err(e) => (&counts.errors, Some(e.to_string())),
        };
        let before = counter.fetch_add(1, Ordering::Relaxed);
        if let Some(why) = failure
            && before < PRINTED_FAILURES
        {
            eprintln!("[churn] take from {}: {why}", key_name(k));
        }
        k += clients;
    }
    let _ = session.close().await;
}

/// The limit's live keys now, if its status answers.
async fn live_keys(admin: &Client) -> Option<u64> {
    match admin.limit_status(TENANT, LIMIT).await {
        Ok(Some(status)) => Some(status.live_keys),
        _ => None,
    }
}

/// One sample each `--report-every` until `--duration`, each printed as it is taken.
async fn sample(
    args: &BenchArgs,
    admin: &Client,
    cluster: &LocalCluster,
    counts: &Counts,
    out: &Output,
) -> Vec<ChurnInterval> {
    let every = args.report_every.unwrap_or(60.0);
    let n = (args.duration / every + 1e-9).floor() as u64;
    let mut intervals: Vec<ChurnInterval> = vec![];
    let mut last = [0u64; 4];
    for i in 1..=n {
        let at = counts.start + Duration::from_secs_f64(every * i as f64);
        tokio::time::sleep_until(at.into()).await;
        let now = counts.totals();
        let live = live_keys(admin).await;
        let expected = counts.expected_live(Instant::now());
        let previous = intervals.last().map(|i| i.nodes.as_slice()).unwrap_or(&[]);
        let interval = ChurnInterval {
            t_s: counts.start.elapsed().as_secs_f64(),
            takes: now[0] - last[0],
            granted: now[1] - last[1],
            refusals: now[2] - last[2],
            errors: now[3] - last[3],
            live_keys: live,
            expected_live_keys: expected,
            nodes: sample_nodes(cluster, previous),
        };
        last = now;
        let value = serde_json::to_value(&interval).expect("an interval serializes");
        out.print(value, || interval_text(&interval));
        intervals.push(interval);
    }
    intervals
}

/// Whether `live` keys are near the `expected` ones, `per_s` takes a second.
fn live_near(live: Option<u64>, expected: u64, per_s: f64) -> bool {
    let slack = expected as f64 * LIVE_SLACK_PCT / 100.0 + per_s * LIVE_SLACK_S;
    live.is_some_and(|l| (l as f64 - expected as f64).abs() <= slack)
}

/// The median of `values`; 0 if there are none.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The Theil–Sen slope of `points` (x, y): the median of the slopes between every two
/// points of distinct x; 0 with fewer than two.
fn theil_sen(points: &[(f64, f64)]) -> f64 {
    let mut slopes = vec![];
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            if b.0 != a.0 {
                slopes.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
    }
    median(&mut slopes)
}

/// The RSS trend of each node over the last half of `intervals`.
fn rss_trends(intervals: &[ChurnInterval], threshold_pct: f64) -> Vec<Trend> {
    let half = &intervals[intervals.len() / 2..];
    let mut ids: Vec<u64> = half
        .iter()
        .flat_map(|i| i.nodes.iter().map(|n| n.id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let points: Vec<(f64, f64)> = half
                .iter()
                .filter_map(|i| {
                    let rss = i.nodes.iter().find(|n| n.id == id)?.rss_mib?;
                    Some((i.t_s, rss))
                })
                .collect();
            let span_s = match (points.first(), points.last()) {
                (Some(a), Some(b)) => b.0 - a.0,
                _ => 0.0,
            };
            let slope = theil_sen(&points);
            let median_mib = median(&mut points.iter().map(|p| p.1).collect::<Vec<_>>());
            let growth_mib = slope * span_s;
            let growth_pct = match median_mib > 0.0 {
                true => growth_mib / median_mib * 100.0,
                false => 0.0,
            };
            Trend {
                node: id,
                median_mib,
                slope_mib_per_min: slope * 60.0,
                growth_mib,
                growth_pct,
                flagged: growth_mib > RSS_FLOOR_MIB && growth_pct > threshold_pct,
            }
        })
        .collect()
}

/// The verdict over `intervals`, the run's totals (asked, granted, refused, failed) and
/// the live keys read after the last take with those expected then.
fn verdict(
    args: &BenchArgs,
    intervals: &[ChurnInterval],
    totals: &[u64; 4],
    end: (Option<u64>, u64),
) -> Verdict {
    let per_minute = args.keys_per_minute;
    let per_s = per_minute as f64 / 60.0;
    let live_keys_off = intervals
        .iter()
        .map(|i| (i.live_keys, i.expected_live_keys))
        .chain([end])
        .filter(|&(live, expected)| !live_near(live, expected, per_s))
        .count();
    let plateau_live_keys = (args.duration >= 2.0 * KEY_LIFE.as_secs_f64()).then(|| {
        let mut live: Vec<f64> = intervals[intervals.len() / 2..]
            .iter()
            .map(|i| i.live_keys.unwrap_or(0) as f64)
            .collect();
        median(&mut live) as u64
    });
    let plateau_ok = plateau_live_keys.is_none_or(|live| {
        (live as f64 - per_minute as f64).abs() <= per_minute as f64 * PLATEAU_PCT / 100.0
    });
    let rss = rss_trends(intervals, args.drift_threshold);
    let [takes, granted, refusals, errors] = *totals;
    let passed = refusals == 0
        && errors == 0
        && live_keys_off == 0
        && plateau_ok
        && !rss.iter().any(|t| t.flagged);
    Verdict {
        intervals: intervals.len(),
        keys_per_minute: per_minute,
        takes,
        granted,
        refusals,
        errors,
        live_keys_end: end.0,
        expected_live_keys_end: end.1,
        live_keys_off,
        plateau_live_keys,
        plateau_ok,
        threshold_pct: args.drift_threshold,
        rss,
        passed,
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn interval_text(i: &ChurnInterval) -> String {
    let mut text = format!(
        "[churn] {:>6.0}s  takes {}  granted {}  refused {}  errors {}  live keys {} (expected {})",
        i.t_s,
        i.takes,
        i.granted,
        i.refusals,
        i.errors,
        opt(i.live_keys),
        i.expected_live_keys
    );
    for n in &i.nodes {
        let rss = n.rss_mib.map_or_else(|| "-".into(), |r| format!("{r:.1}"));
        text.push_str(&format!(" | n{} rss {rss} MiB", n.id));
    }
    text
}

fn verdict_text(v: &Verdict) -> String {
    let mut text = format!(
        "keyed churn: {} new keys a minute, {} intervals; {} takes, {} granted, {} refused, {} failed\n\
         live keys after the last take {} (expected {}); samples off the expected live keys: {}",
        v.keys_per_minute,
        v.intervals,
        v.takes,
        v.granted,
        v.refusals,
        v.errors,
        opt(v.live_keys_end),
        v.expected_live_keys_end,
        v.live_keys_off
    );
    text.push_str(&match v.plateau_live_keys {
        Some(live) => format!(
            "\nplateau: median live keys over the last half {live}, against {} ({})",
            v.keys_per_minute,
            if v.plateau_ok { "within 10%" } else { "OFF" }
        ),
        None => "\nplateau: not judged (the run is shorter than two key lives)".into(),
    });
    text.push_str(&format!(
        "\nRSS over the last half (Theil-Sen trend; flagged above {}% and {RSS_FLOOR_MIB} MiB):",
        v.threshold_pct
    ));
    for t in &v.rss {
        text.push_str(&format!(
            "\n  n{} median {:.1} MiB, trend {:+.3} MiB/min, {:+.1} MiB ({:+.1}%) over the half{}",
            t.node,
            t.median_mib,
            t.slope_mib_per_min,
            t.growth_mib,
            t.growth_pct,
            if t.flagged { "  FLAGGED" } else { "" }
        ));
    }
    text.push_str(match v.passed {
        true => "\nverdict: every take granted, live keys as expected, RSS flat",
        false => "\nverdict: FAILED",
    });
    text
}

/// Each node's RSS, and the live keys beside the expected ones, over time, in one SVG.
fn write_chart(file: &std::path::Path, intervals: &[ChurnInterval]) -> Result<(), String> {
    let mut ids: Vec<u64> = intervals
        .iter()
        .flat_map(|i| i.nodes.iter().map(|n| n.id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let rss: Vec<Series> = ids
        .iter()
        .map(|id| Series {
            name: format!("node {id}"),
            points: intervals
                .iter()
                .filter_map(|i| Some((i.t_s, i.nodes.iter().find(|n| n.id == *id)?.rss_mib?)))
                .collect(),
        })
        .collect();
    let keys = [
        Series {
            name: "live keys".into(),
            points: intervals
                .iter()
                .filter_map(|i| Some((i.t_s, i.live_keys? as f64)))
                .collect(),
        },
        Series {
            name: "granted in the last minute".into(),
            points: intervals
                .iter()
                .map(|i| (i.t_s, i.expected_live_keys as f64))
                .collect(),
        },
    ];
    let charts = [
        time_chart("rss per node", "seconds", "MiB", &rss),
        time_chart("live keys", "seconds", "keys", &keys),
    ];
    std::fs::write(file, grid(&charts, 2))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn args(duration: &str) -> BenchArgs {
        #[rustfmt::skip]
        let argv = ["bench", "--spawn", "3", "--workload", "keyed-churn", "--duration", duration,
                    "--report-every", "30", "--keys-per-minute", "6000"];
        Cli::try_parse_from(argv).expect("the options parse").bench
    }

    /// An interval at `t_s` with `live` keys (all expected) and node 1 at `rss` MiB.
    fn interval(t_s: f64, live: u64, rss: f64) -> ChurnInterval {
        ChurnInterval {
            t_s,
            takes: 3_000,
            granted: 3_000,
            refusals: 0,
            errors: 0,
            live_keys: Some(live),
            expected_live_keys: live,
            nodes: vec![NodeSample {
                id: 1,
                pid: Some(1),
                restarted: false,
                rss_mib: Some(rss),
                fds: Some(20),
                threads: Some(4),
                log_mib: 1.0,
                snapshot_mib: 0.1,
            }],
        }
    }

    /// Ten minutes at 6,000 keys a minute, sampled every 30 s: the live keys climb for a
    /// minute then hold, RSS climbs with them then follows `rss_after(k)`.
    fn run(rss_after: impl Fn(usize) -> f64) -> Vec<ChurnInterval> {
        (1..=20)
            .map(|k| {
                let live = (k as u64 * 3_000).min(6_000);
                let rss = if k <= 2 {
                    30.0 + 10.0 * k as f64
                } else {
                    rss_after(k)
                };
                interval(k as f64 * 30.0, live, rss)
            })
            .collect()
    }

    #[test]
    fn a_flat_run_passes_and_a_refusal_a_lost_key_or_a_climb_fails_it() {
        let a = args("600");
        let totals = [60_000, 60_000, 0, 0];
        // Flat after the warm-up, with one spike (a snapshot built) in the last half.
        let flat = run(|k| if k == 17 { 90.0 } else { 50.0 + (k % 3) as f64 });
        let v = verdict(&a, &flat, &totals, (Some(6_000), 6_000));
        assert!(v.passed, "{:?}", v.rss);
        assert_eq!((v.plateau_live_keys, v.live_keys_off), (Some(6_000), 0));
        assert!(
            !v.rss[0].flagged && v.rss[0].slope_mib_per_min.abs() < 0.5,
            "{:?}",
            v.rss
        );
        // One refusal fails it; so does one error.
        assert!(!verdict(&a, &flat, &[60_000, 59_999, 1, 0], (Some(6_000), 6_000)).passed);
        assert!(!verdict(&a, &flat, &[60_000, 59_999, 0, 1], (Some(6_000), 6_000)).passed);
        // Keys that are never dropped: the live set leaves the expected one.
        let kept: Vec<ChurnInterval> = flat
            .iter()
            .map(|i| ChurnInterval {
                live_keys: Some(i.t_s as u64 * 100),
                ..i.clone()
            })
            .collect();
        let v = verdict(&a, &kept, &totals, (Some(60_000), 6_000));
        assert!(!v.passed && v.live_keys_off > 10 && !v.plateau_ok);
        // RSS climbing 2 MiB a minute over the last half: 10 MiB on 60, flagged at 5%.
        let climb = run(|k| 40.0 + k as f64);
        let mut tight = args("600");
        tight.drift_threshold = 5.0;
        let v = verdict(&tight, &climb, &totals, (Some(6_000), 6_000));
        assert!(!v.passed && v.rss[0].flagged, "{:?}", v.rss);
        assert!(
            (v.rss[0].slope_mib_per_min - 2.0).abs() < 1e-9,
            "{:?}",
            v.rss
        );
        assert!((v.rss[0].growth_mib - 9.0).abs() < 1e-9, "{:?}", v.rss);
        // Under the 20% default it is not.
        assert!(verdict(&a, &climb, &totals, (Some(6_000), 6_000)).passed);
    }

    #[test]
    fn a_run_shorter_than_two_key_lives_is_not_judged_for_a_plateau() {
        let short: Vec<ChurnInterval> = (1..=4)
            .map(|k| interval(k as f64 * 30.0, (k * 3_000).min(6_000), 40.0))
            .collect();
        let v = verdict(
            &args("120"),
            &short,
            &[12_000, 12_000, 0, 0],
            (Some(6_000), 6_000),
        );
        assert_eq!(v.plateau_live_keys, Some(6_000));
        let v = verdict(
            &args("119"),
            &short,
            &[12_000, 12_000, 0, 0],
            (Some(6_000), 6_000),
        );
        assert_eq!(
            (v.plateau_live_keys, v.plateau_ok, v.passed),
            (None, true, true)
        );
    }

    #[test]
    fn names_are_fixed_width_and_the_trend_ignores_one_spike() {
        assert_eq!(key_name(7), "churn-0000000007");
        assert_eq!(key_name(9_999_999_999).len(), key_name(0).len());
        let points: Vec<(f64, f64)> = (0..9)
            .map(|x| (x as f64, if x == 8 { 500.0 } else { 10.0 }))
            .collect();
        assert_eq!(theil_sen(&points), 0.0);
        assert_eq!(theil_sen(&[(0.0, 1.0), (2.0, 5.0)]), 2.0);
        assert_eq!(theil_sen(&[(0.0, 1.0)]), 0.0);
    }
}
