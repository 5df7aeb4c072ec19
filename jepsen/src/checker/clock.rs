//! The log clock never runs ahead of real time (`src/machine/clock.rs`'s invariant: over
//! any stretch of log, `now_ms` advances by at most the real time that passed on the
//! monotonic clocks of the leaders that stamped it, and by nothing at a leader change).
//! Every lease and refill is decided against this clock, so a log clock that jumps ahead
//! expires sessions early and refills buckets early.
//!
//! Judged from the status monitor's `log-clock` facts ([`crate::monitor`]): a node reported
//! `log_ms` in a reply that reached the harness at `real_ns` (harness time, which starts
//! before the cluster does). The log clock starts at 0 with the first batch, stamped after
//! the cluster started, and batches are stamped in log order at increasing real times (an
//! entry of a deposed leader reaches the next leader's log only if it was stamped before
//! that leader was elected), so at every reply
//!
//! `log_ms ≤ real_ms × r + SLACK_MS`
//!
//! where `r` is the fastest proposer clock rate any `clock` fault set in the run (1 when
//! none did; the bound over the whole run is loose but sound: time a skewed leader added
//! stays in the clock after the heal). The monitor records only the samples that set a new
//! maximum of `log − real`; any other sample that broke the bound would have an earlier
//! recorded one that breaks it too (for `r ≥ 1`).
//!
//! That bound is loose by the cluster's start (the log clock starts seconds after the
//! harness does), so a clock a few percent fast stays under it for minutes. Hence a second
//! bound, per leadership, from the monitor's `leadership` facts (the real time and the log
//! time between the first and the last status one leader gave):
//!
//! `log_ms ≤ real_ms × r + LEADERSHIP_NOISE_MS`
//!
//! [`LEADERSHIP_NOISE_MS`] covers how far each end's reading can be off: the applied log
//! time trails the leader's clock by the commit of the last batch, and each status reply's
//! arrival by up to the monitor's ask timeout.
//!
//! What it catches: a clock that is not frozen across a leader change (the new leader's
//! stamp added whole), a fast proposer clock (a leader of over 25 s at 4% fast: 1 s
//! over). It cannot see a clock that runs slow (leases then live longer, which is the safe
//! side), nor a few hundred ms credited at each leader change (under both bounds' slack).

use super::ops::u;
use super::verdict::Verdict;
use crate::history::{Kind, NEMESIS, Op};

/// Stamps are whole milliseconds, each difference rounded down; the status read and the
/// reply add nothing positive. A few ms of slack covers rounding in the harness's own
/// conversion; a real jump is seconds.
pub const SLACK_MS: u64 = 50;

/// How far one leadership's log time may exceed its real time × the rate: each end's log
/// reading trails the leader's clock by the commit of the last batch, and each reply's
/// arrival is off by up to the monitor's ask timeout (300 ms). Most leaderships of the runs
/// here read within 130 ms; the first leadership of the recorded fixture
/// (`jepsen/fixtures/kill-30s-seed3`, made under load) read 756 ms over, its first status
/// taken while the applied log was still catching up at start. Hence a second.
pub const LEADERSHIP_NOISE_MS: u64 = 1_000;

pub fn check(ops: &[Op]) -> Verdict {
    let rate = fastest_rate(ops);
    let samples: Vec<&Op> = ops
        .iter()
        .filter(|o| o.process == NEMESIS && o.kind == Kind::Info && o.f == "log-clock")
        .collect();
    if samples.is_empty() {
        return Verdict::Unknown("no log-clock sample from the status monitor".into());
    }
    for o in samples {
        let (Some(log_ms), Some(real_ns)) = (u(o, "log_ms"), u(o, "real_ns")) else {
            return Verdict::Unknown(format!("malformed log-clock sample: {}", o.value));
        };
        let allowed_ms = (real_ns as f64 / 1e6 * rate) as u64 + SLACK_MS;
        if log_ms > allowed_ms {
            return Verdict::Invalid(format!(
                "node {} reported log time {log_ms} ms {:.0} ms into the run (at most {allowed_ms} ms at clock rate {rate}): the log clock ran ahead of real time",
                o.value["node"],
                real_ns as f64 / 1e6
            ));
        }
    }
    leaderships(ops, rate)
}

/// The per-leadership bound: no leader's log clock ran faster than `rate` over its term.
fn leaderships(ops: &[Op], rate: f64) -> Verdict {
    for o in ops
        .iter()
        .filter(|o| o.process == NEMESIS && o.kind == Kind::Info && o.f == "leadership")
    {
        let (Some(log_ms), Some(real_ms)) = (u(o, "log_ms"), u(o, "real_ms")) else {
            return Verdict::Unknown(format!("malformed leadership fact: {}", o.value));
        };
        let allowed_ms = (real_ms as f64 * rate) as u64 + LEADERSHIP_NOISE_MS;
        if log_ms > allowed_ms {
            return Verdict::Invalid(format!(
                "node {} led term {} for {real_ms} ms of real time and {log_ms} ms of log time (at most {allowed_ms} ms at clock rate {rate}): its clock ran fast",
                o.value["node"], o.value["term"]
            ));
        }
    }
    Verdict::Valid
}

/// The fastest proposer clock rate any `clock` fault set (at least 1).
fn fastest_rate(ops: &[Op]) -> f64 {
    ops.iter()
        .filter(|o| o.process == NEMESIS && o.kind == Kind::Info && o.f == "clock")
        .filter_map(|o| o.value["nodes"].as_array())
        .flatten()
        .filter_map(|n| n["rate"].as_f64())
        .fold(1.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::fact;
    use serde_json::json;

    fn sample(log_ms: u64, real_ms: u64) -> Op {
        fact(
            "log-clock",
            json!({"node": 2, "log_ms": log_ms, "real_ns": real_ms * 1_000_000}),
            real_ms * 1_000_000,
        )
    }

    #[test]
    fn a_log_clock_behind_real_time_is_valid() {
        assert_eq!(
            check(&[sample(0, 900), sample(4_000, 5_000), sample(9_020, 9_000)]),
            Verdict::Valid
        );
        assert!(matches!(check(&[]), Verdict::Unknown(_)));
    }

    #[test]
    fn a_jump_at_a_leader_change_is_invalid() {
        // 8 s of log time after 5 s of run: a new leader's 3 s uptime added at the change.
        let h = [sample(4_000, 5_000), sample(8_000, 5_100)];
        assert!(matches!(check(&h), Verdict::Invalid(d) if d.contains("ahead of real time")));
    }

    fn leadership(real_ms: u64, log_ms: u64) -> Op {
        let v = json!({"term": 4, "node": 1, "start": 1, "real_ms": real_ms, "log_ms": log_ms});
        fact("leadership", v, 1)
    }

    #[test]
    fn a_leader_clock_a_few_percent_fast_over_its_term_is_invalid() {
        let early = sample(0, 5_000);
        // 30 s of leadership on a clock 4% fast: 1.2 s more log time than real.
        let fast = [early.clone(), leadership(30_000, 31_200)];
        assert!(matches!(check(&fast), Verdict::Invalid(d) if d.contains("ran fast")));
        // The readings' noise (the fixture's first leadership, 756 ms over), and a slow
        // clock, are not.
        let noisy = [early, leadership(4_651, 5_407), leadership(10_000, 9_000)];
        assert_eq!(check(&noisy), Verdict::Valid);
    }

    #[test]
    fn a_clock_fault_allows_its_rate_and_no_more() {
        let clock = fact(
            "clock",
            json!({"fault": "clocks", "nodes": [{"rate": 0.97}, {"rate": 1.05}, {"rate": 1.0}]}),
            1,
        );
        assert_eq!(
            check(&[clock.clone(), sample(10_400, 10_000)]),
            Verdict::Valid
        );
        assert!(matches!(
            check(&[clock, sample(10_600, 10_000)]),
            Verdict::Invalid(_)
        ));
    }
}
