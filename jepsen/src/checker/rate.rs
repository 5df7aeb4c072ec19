//! G1 for rates: the tokens granted over any window never exceed `burst + per_second ×
//! window`.
//!
//! Judged conservatively on the harness clock: a take invoked at or after `a` and
//! acknowledged at or before `b` was granted at a log time inside a log window no longer than
//! `(b − a) × r`, where `r` is the fastest leader clock rate in the run (1 without clock
//! faults: the log clock never outruns its leaders' clocks), so the takes wholly inside
//! `[a, b]` must fit the bucket's bound for that window.

use std::collections::BTreeMap;

use super::{Verdict, oks, s, u};
use crate::history::Op;

/// Per limit: rate, burst, and (invoked, acknowledged, units) of each take.
type Takes<'a> = BTreeMap<&'a str, (f64, u64, Vec<(u64, u64, u64)>)>;

/// The fastest proposer clock rate the clock nemesis gave any node (1 when none).
fn fastest_clock(ops: &[Op]) -> f64 {
    ops.iter()
        .filter(|o| o.process == crate::history::NEMESIS && o.f == "clock")
        .filter_map(|o| o.value.get("nodes")?.as_array().cloned())
        .flatten()
        .filter_map(|n| n.get("rate")?.as_f64())
        .fold(1.0, f64::max)
}

pub fn check(ops: &[Op]) -> Verdict {
    let clock = fastest_clock(ops);
    let mut by_limit: Takes = BTreeMap::new();
    for op in oks(ops, "take") {
        let (Some(limit), Some(invoke), Some(units), Some(rate), Some(burst)) = (
            s(op, "limit"),
            u(op, "invoke_ns"),
            u(op, "units"),
            op.value.get("per_second").and_then(|v| v.as_f64()),
            u(op, "burst"),
        ) else {
            return Verdict::Unknown(format!("malformed take op: {}", op.value));
        };
        by_limit
            .entry(limit)
            .or_insert((rate, burst, vec![]))
            .2
            .push((invoke, op.time_ns, units));
    }
    if by_limit.is_empty() {
        return Verdict::Unknown("no rate take succeeded".into());
    }
    for (limit, (rate, burst, takes)) in by_limit {
        for &(a, _, _) in &takes {
            for &(_, b, _) in &takes {
                if b < a {
                    continue;
                }
                let inside: u64 = takes
                    .iter()
                    .filter(|t| t.0 >= a && t.1 <= b)
                    .map(|t| t.2)
                    .sum();
                let bound = burst as f64 + rate * clock * (b - a) as f64 / 1e9;
                if inside as f64 > bound + 1e-9 {
                    return Verdict::Invalid(format!(
                        "{inside} tokens of {limit} granted within {:.3} s; the bound is {bound:.2}",
                        (b - a) as f64 / 1e9
                    ));
                }
            }
        }
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use crate::history::Kind;
    use serde_json::json;

    fn take(invoke_ms: u64, ok_ms: u64) -> Op {
        op(
            1,
            Kind::Ok,
            "take",
            json!({"limit": "r", "invoke_ns": invoke_ms * 1_000_000, "units": 1, "per_second": 10.0, "burst": 2}),
            ok_ms * 1_000_000,
        )
    }

    #[test]
    fn a_burst_then_the_rate_is_valid() {
        assert_eq!(
            check(&[take(0, 1), take(0, 2), take(100, 101), take(200, 201)]),
            Verdict::Valid
        );
    }

    #[test]
    fn a_fast_leader_clock_refills_faster_in_real_time() {
        // Two at once, then one every 96 ms: 12 tokens in 961 ms is more than 2 + 10/s
        // allows (11.6), and within what a leader clock 5% fast refills (12.09).
        let mut h = vec![take(0, 1), take(0, 1)];
        h.extend((1..=10).map(|i| take(i * 96, i * 96 + 1)));
        assert!(matches!(check(&h), Verdict::Invalid(_)));
        h.push(op(
            crate::history::NEMESIS,
            Kind::Info,
            "clock",
            json!({"nodes": [{"rate": 1.05}]}),
            0,
        ));
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn more_than_the_burst_at_once_is_invalid() {
        assert!(matches!(
            check(&[take(0, 1), take(0, 1), take(0, 2)]),
            Verdict::Invalid(_)
        ));
    }
}
