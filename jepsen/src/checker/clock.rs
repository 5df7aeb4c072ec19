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
//! What it catches: a clock that is not frozen across a leader change (the new leader's
//! stamp added whole), a fast proposer clock (4% fast: the log clock starts within a second
//! of the harness, so it is over a second ahead after 30–40 s of run). It cannot see a
//! clock that runs slow (leases then live longer, which is the safe side), nor a few
//! hundred ms credited at each leader change (`no-freeze-small`, 300 ms): the correct clock
//! freezes for each change's whole outage, the election included (over 300 ms here), so
//! such a clock still never runs ahead of real time; a machine test of the freeze catches
//! it (`jepsen/README.md`, *Planted bugs*). A per-leadership bound from the monitor's
//! `leadership` facts is not sound: the last status of a deposed leader that still calls
//! itself leader carries log time its successors stamped (a `kill` smoke: 33 s of log time
//! in a 19.8 s span).

use super::ops::u;
use super::verdict::Verdict;
use crate::history::{Kind, NEMESIS, Op};

/// Stamps are whole milliseconds, each difference rounded down; the status read and the
/// reply add nothing positive. A few ms of slack covers rounding in the harness's own
/// conversion; a real jump is seconds.
pub const SLACK_MS: u64 = 50;

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
