//! Stranded permits (G9): a lost answer strands nothing, so a capped limit that clients keep
//! asking for is granted again once faults heal. A permit left held under a live session
//! (a release whose outcome was unknown and never retried) blocks its limit for the life of
//! that session, with every acquire on it timing out: no other checker sees it, since the
//! cluster itself is consistent and nobody believes they hold the permit.
//!
//! The check: on each capped limit (its `hold` ops carry `cap`), no stretch of more than
//! [`STARVED_MAX_S`] between one grant and the next in which an acquire of that limit
//! timed out waiting; after the limit's last grant, the stretch runs to its last timed-out
//! acquire (the run's final reads and checks that follow ask for no permit: measured to the
//! history's last op instead, a 600 s run whose last grant fell 50 s before its end was
//! flagged though its one timeout came 4 s after that grant). The bound is far above any fault's hold plus
//! the cluster's recovery (a kill of all three nodes, a power loss: seconds), and far below
//! a session's life under a workload that keeps it alive. A history with no grant of a
//! capped limit judged nothing: unknown.

use std::collections::BTreeMap;

use super::ops::{oks, s, u};
use super::verdict::Verdict;
use crate::history::{Kind, Op};

/// The longest a capped limit may go without a grant while an acquire of it timed out.
pub const STARVED_MAX_S: u64 = 30;

/// The longest starved stretch found: (limit, from, to), times in ns.
pub fn worst(ops: &[Op]) -> Option<(String, u64, u64)> {
    let mut grants: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for o in oks(ops, "hold") {
        if let (Some(limit), Some(_), Some(from)) = (s(o, "limit"), u(o, "cap"), u(o, "from_ns")) {
            grants.entry(limit).or_default().push(from);
        }
    }
    let mut timeouts: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for o in ops
        .iter()
        .filter(|o| o.kind == Kind::Fail && o.f == "acquire" && s(o, "error") == Some("timed out"))
    {
        if let Some(limit) = s(o, "limit") {
            timeouts.entry(limit).or_default().push(o.time_ns);
        }
    }
    let mut worst: Option<(String, u64, u64)> = None;
    for (limit, mut at) in grants {
        at.sort_unstable();
        let timed_out = timeouts.get(limit).map(Vec::as_slice).unwrap_or(&[]);
        // The stretch after the last grant ends at the last acquire that timed out in it.
        if let Some(last) = timed_out.iter().max().filter(|t| at.last() < Some(t)) {
            at.push(*last);
        }
        for pair in at.windows(2) {
            let (from, to) = (pair[0], pair[1]);
            let starved = timed_out.iter().any(|t| (from..=to).contains(t));
            let longer = worst.as_ref().is_none_or(|(_, a, b)| to - from > b - a);
            if starved && longer {
                worst = Some((limit.to_string(), from, to));
            }
        }
    }
    worst
}

pub fn check(ops: &[Op]) -> Verdict {
    if !oks(ops, "hold").any(|o| u(o, "cap").is_some()) {
        return Verdict::Unknown("no permit of a capped limit was granted".into());
    }
    match worst(ops) {
        Some((limit, from, to)) if to - from > STARVED_MAX_S * 1_000_000_000 => {
            Verdict::Invalid(format!(
                "G9: `{limit}` granted nobody from {:.1} s to {:.1} s while its acquires timed out (a permit stranded under a live session?)",
                from as f64 / 1e9,
                to as f64 / 1e9
            ))
        }
        _ => Verdict::Valid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    const S: u64 = 1_000_000_000;

    fn grant(process: u64, limit: &str, at: u64) -> Op {
        op(
            process,
            Kind::Ok,
            "hold",
            json!({"limit": limit, "cap": 1, "from_ns": at}),
            at + S / 10,
        )
    }

    fn timed_out(process: u64, limit: &str, at: u64) -> Op {
        op(
            process,
            Kind::Fail,
            "acquire",
            json!({"limit": limit, "error": "timed out"}),
            at,
        )
    }

    #[test]
    fn a_limit_that_grants_nobody_for_long_while_acquires_time_out_is_stranded() {
        let mut ops = vec![grant(1, "fenced", 3 * S)];
        ops.extend((1..26).map(|i| timed_out(2, "fenced", 3 * S + i * 5 * S)));
        ops.push(grant(2, "fenced", 133 * S));
        assert!(
            matches!(check(&ops), Verdict::Invalid(ref why) if why.contains("`fenced` granted nobody from 3.0 s to 133.0 s")),
            "{:?}",
            check(&ops)
        );
    }

    #[test]
    fn a_short_starved_stretch_a_long_idle_one_and_other_limits_are_valid() {
        // Starved 20 s (a fault's hold and recovery): valid.
        let mut ops = vec![grant(1, "fenced", 3 * S), timed_out(2, "fenced", 10 * S)];
        ops.push(grant(2, "fenced", 23 * S));
        // 60 s without a grant but nobody timed out (nobody asked): valid.
        ops.push(grant(1, "fenced", 83 * S));
        // Another limit's timeouts do not count against this one.
        ops.push(timed_out(3, "three", 50 * S));
        assert_eq!(check(&ops), Verdict::Valid);
        assert_eq!(
            worst(&ops).map(|(l, a, b)| (l, a / S, b / S)),
            Some(("fenced".to_string(), 3, 23))
        );
        // After the last grant, the stretch runs to the last timeout, not to the run's end
        // (its final phase asks for no permit).
        ops.push(timed_out(2, "fenced", 100 * S));
        ops.push(op(9, Kind::Info, "heal", json!({}), 150 * S));
        assert_eq!(check(&ops), Verdict::Valid);
        // Timeouts that go on past the bound after the last grant: stranded at the end.
        ops.push(timed_out(2, "fenced", 118 * S));
        assert!(
            matches!(check(&ops), Verdict::Invalid(ref why) if why.contains("from 83.0 s to 118.0 s")),
            "{:?}",
            check(&ops)
        );
    }
}
