//! P2, fences: unique per limit, and increasing in real-time order — an acquire that was
//! acknowledged before another was invoked has the smaller fence. (A grant received late —
//! it waited, or its push was lost and it was asked again — keeps the fence it was granted
//! with, so real-time order is judged on the acquires, not on the belief intervals.)

use std::collections::BTreeMap;

use super::ops::{oks, s, u};
use super::verdict::Verdict;
use crate::history::Op;

pub fn check(ops: &[Op]) -> Verdict {
    // (fence, invoked, acknowledged) per limit.
    let mut by_limit: BTreeMap<&str, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for op in oks(ops, "acquire") {
        let (Some(limit), Some(fence), Some(invoked)) =
            (s(op, "limit"), u(op, "fence"), u(op, "invoke_ns"))
        else {
            return Verdict::Unknown(format!("malformed acquire op: {}", op.value));
        };
        by_limit
            .entry(limit)
            .or_default()
            .push((fence, invoked, op.time_ns));
    }
    if by_limit.is_empty() {
        return Verdict::Unknown("no acquire succeeded".into());
    }
    for (limit, grants) in by_limit {
        let mut fences: Vec<u64> = grants.iter().map(|g| g.0).collect();
        fences.sort();
        if let Some(w) = fences.windows(2).find(|w| w[0] == w[1]) {
            return Verdict::Invalid(format!("fence {} granted twice on {limit}", w[0]));
        }
        let mut by_done = grants.clone();
        by_done.sort_by_key(|g| g.2);
        let mut by_invoke = grants;
        by_invoke.sort_by_key(|g| g.1);
        let (mut i, mut max_done) = (0, None::<(u64, u64)>);
        for (fence, invoked, _) in by_invoke {
            while i < by_done.len() && by_done[i].2 < invoked {
                if max_done.is_none_or(|(f, _)| by_done[i].0 > f) {
                    max_done = Some((by_done[i].0, by_done[i].2));
                }
                i += 1;
            }
            if let Some((earlier, done)) = max_done
                && earlier > fence
            {
                return Verdict::Invalid(format!(
                    "on {limit}, fence {fence} was asked for at {invoked} ns after fence {earlier} was granted at {done} ns"
                ));
            }
        }
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::granted;

    fn acquired(fence: u64, invoked: u64, done: u64) -> Op {
        granted("m", fence, invoked, done)
    }

    #[test]
    fn increasing_fences_are_valid_and_concurrent_acquires_may_cross() {
        assert_eq!(
            check(&[acquired(5, 0, 10), acquired(9, 11, 20), acquired(7, 5, 30)]),
            Verdict::Valid
        );
    }

    #[test]
    fn a_reused_fence_is_invalid() {
        assert_eq!(
            check(&[acquired(5, 0, 10), acquired(5, 20, 30)]),
            Verdict::Invalid("fence 5 granted twice on m".into())
        );
    }

    #[test]
    fn a_smaller_fence_asked_for_after_a_larger_was_granted_is_invalid() {
        assert!(matches!(
            check(&[acquired(9, 0, 10), acquired(5, 11, 20)]),
            Verdict::Invalid(_)
        ));
    }
}
