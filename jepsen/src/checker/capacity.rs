//! G1 for capacity, judged in log order: at no log index do the permits held on a limit
//! exceed its `concurrent`, and the cluster's own high-water mark (`max_in_use` of
//! `LimitStatus`, read at the end) never exceeded it either.
//!
//! A permit's fence is the log index of the entry that granted it, so fences place grants
//! on the log's line. Where a permit ended (its release or its session's expiry) is not
//! reported, so it is bounded from below, conservatively: a permit believed from its grant
//! until `to_ns` (its release was sent then, or its conservative deadline passed) was still
//! held at every entry acknowledged to anyone before `to_ns` — its release entry came after
//! the release was sent, and its expiry after its deadline (G2's premise; a cluster that
//! expired early is caught by P1 as well, and `max_in_use` tells the two apart). So permit
//! `A` certainly held every index in `[fence_A, L_A]`, where `L_A` is the largest fence
//! acknowledged (on any limit) before `to_A`. More than `concurrent` such intervals over one
//! index is a violation no order of the unknown ends can explain. A grant that reached its
//! holder only after its deadline had passed is bounded by the deadline instead
//! ([`super::hold_end`]): its session may have expired right after it.

use std::collections::BTreeMap;

use super::ops::{hold_end, oks, s, u};
use super::verdict::Verdict;
use crate::history::Op;

/// Per limit: its cap and the fence intervals its permits certainly held.
type Held<'a> = BTreeMap<&'a str, (u64, Vec<(u64, u64)>)>;

pub fn check(ops: &[Op]) -> Verdict {
    // Every acknowledged fence, by acknowledgement time (the log's index line).
    let mut acked: Vec<(u64, u64)> = ops
        .iter()
        .filter(|o| o.kind == crate::history::Kind::Ok && (o.f == "acquire" || o.f == "take"))
        .filter_map(|o| Some((o.time_ns, u(o, "fence")?)))
        .collect();
    acked.sort();
    // Running maximum, so "the largest fence acknowledged before t" is one binary search.
    let mut running = Vec::with_capacity(acked.len());
    let mut max = 0;
    for (t, f) in &acked {
        max = max.max(*f);
        running.push((*t, max));
    }
    let largest_before = |t: u64| -> u64 {
        let i = running.partition_point(|(at, _)| *at < t);
        if i == 0 { 0 } else { running[i - 1].1 }
    };
    // Per limit: cap, and the certainly-held fence intervals.
    let mut by_limit: Held = BTreeMap::new();
    for op in oks(ops, "hold") {
        let (Some(limit), Some(cap), Some(fence), Some(to)) =
            (s(op, "limit"), u(op, "cap"), u(op, "fence"), hold_end(op))
        else {
            return Verdict::Unknown(format!("malformed hold op: {}", op.value));
        };
        let end = largest_before(to).max(fence);
        by_limit
            .entry(limit)
            .or_insert((cap, vec![]))
            .1
            .push((fence, end));
    }
    for (limit, (cap, intervals)) in &by_limit {
        // Sweep: +1 at each start, -1 just past each end.
        let mut events: Vec<(u64, i64, u64)> = vec![];
        for (from, to) in intervals {
            events.push((*from, 1, *from));
            events.push((*to + 1, -1, *from));
        }
        // Ends before starts at one index: an interval ending at i-1 is gone at i.
        events.sort_by_key(|(at, delta, _)| (*at, *delta));
        let mut held: Vec<u64> = vec![];
        for (at, delta, fence) in events {
            if delta > 0 {
                held.push(fence);
                if held.len() as u64 > *cap {
                    return Verdict::Invalid(format!(
                        "G1: at log index {at} of {limit:?}, {} permits were held (fences {held:?}), concurrent {cap}",
                        held.len()
                    ));
                }
            } else if let Some(i) = held.iter().position(|f| *f == fence) {
                held.swap_remove(i);
            }
        }
    }
    let mut statuses = 0;
    for op in oks(ops, "limit-status") {
        let (Some(limit), Some(concurrent), Some(max_in_use)) =
            (s(op, "limit"), u(op, "concurrent"), u(op, "max_in_use"))
        else {
            return Verdict::Unknown(format!("malformed limit-status op: {}", op.value));
        };
        statuses += 1;
        if concurrent > 0 && max_in_use > concurrent {
            return Verdict::Invalid(format!(
                "G1: the cluster reports max_in_use {max_in_use} on {limit:?}, concurrent {concurrent}"
            ));
        }
    }
    if by_limit.is_empty() {
        return Verdict::Unknown("no permit was held".into());
    }
    if statuses == 0 {
        return Verdict::Unknown("no limit status was read at the end".into());
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{self, op};
    use crate::history::Kind;
    use serde_json::json;

    fn granted(fence: u64, at: u64) -> Op {
        test_support::granted("m", fence, at, at)
    }

    fn hold(fence: u64, from: u64, to: u64) -> Op {
        test_support::hold("m", 1, fence, from, to)
    }

    fn status(max_in_use: u64) -> Op {
        op(
            0,
            Kind::Ok,
            "limit-status",
            json!({"limit": "m", "concurrent": 1, "max_in_use": max_in_use}),
            99,
        )
    }

    /// Fence 5 held 10..20, then fence 9 granted at `at` and held until 40.
    fn five_then_nine(at: u64) -> [Op; 5] {
        [
            granted(5, 10),
            hold(5, 10, 20),
            granted(9, at),
            hold(9, at, 40),
            status(1),
        ]
    }

    #[test]
    fn one_holder_after_another_is_valid() {
        // Fence 9 granted at 30, after 5's belief ended.
        assert_eq!(check(&five_then_nine(30)), Verdict::Valid);
    }

    #[test]
    fn a_grant_that_arrived_after_its_deadline_is_bounded_by_the_deadline() {
        // Fence 5 reached its holder at 40, its session's deadline having passed at 12 (a
        // partition): recorded as believed 40..40. Fence 6 was acknowledged at 38: its
        // session may have expired at index 6, right after granting 5. Bounded by the
        // arrival (40), 5 would seem held at 6; bounded by the deadline it is not.
        let mut late = hold(5, 40, 40);
        late.value["deadline_ns"] = json!(12);
        let history = |late: Op| {
            [
                granted(6, 38),
                granted(5, 40),
                late,
                hold(6, 38, 50),
                status(1),
            ]
        };
        assert_eq!(check(&history(late.clone())), Verdict::Valid);
        // Believed until 40 (a deadline after the arrival), the same grants are invalid.
        let mut believed = late;
        believed.value["deadline_ns"] = json!(45);
        let h = history(believed);
        assert!(matches!(check(&h), Verdict::Invalid(d) if d.contains("log index 6")));
    }

    #[test]
    fn a_grant_acknowledged_inside_another_holders_belief_is_invalid() {
        // Fence 9 was acknowledged at 15, while 5 was still believed (until 20): at index 9
        // both were held.
        let h = [
            granted(5, 10),
            granted(9, 15),
            hold(5, 10, 20),
            hold(9, 15, 40),
            status(1),
        ];
        assert!(matches!(check(&h), Verdict::Invalid(d) if d.contains("log index 9")));
    }

    #[test]
    fn a_grant_overlapping_only_in_real_time_is_not_judged_in_log_order() {
        // Fence 9 acknowledged at 25, after 5's belief ended at 20: 5's end entry may come
        // before index 9.
        assert_eq!(check(&five_then_nine(25)), Verdict::Valid);
    }

    #[test]
    fn a_high_water_mark_above_the_cap_is_invalid_and_none_read_is_unknown() {
        let h = [granted(5, 10), hold(5, 10, 20), status(2)];
        assert!(matches!(check(&h), Verdict::Invalid(d) if d.contains("max_in_use 2")));
        assert!(matches!(check(&h[..2]), Verdict::Unknown(_)));
    }
}
