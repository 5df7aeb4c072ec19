//! Fenced actions on the `fenced` limit (concurrency 1) and its downstream resource, with a
//! client paused between checking its permit and acting on it (P2's resource half, G2's
//! client half):
//!
//! 1. **No stale validation.** `ValidateFence(f)` is linearizable: once a grant with a larger
//!    fence on this limit of one has been acknowledged, `f` cannot be held any more, so a
//!    validation invoked after that acknowledgement must answer "not held".
//! 2. **No early loss.** A validation that ran wholly inside its permit's belief interval
//!    must answer "held": the cluster expires a session only after the client's
//!    conservative deadline has passed.
//! 3. **The library notices.** A client that resumes after its deadline is told its permit
//!    may be lost (`lost_reason`) as soon as it asks.
//!
//! Two checks are not made here because they cannot fail: "every action not paused lies
//! inside its belief" (the workload acts only after `lost_reason()` said the permit is not
//! lost, and the belief's end is taken from the same deadline, so the check would restate
//! the workload's own code), and "the resource accepted fences in order" (the harness's own
//! `Resource` refuses older fences by construction). The
//! resource stays as the scenario the paused holder acts on; whether the cluster's answers
//! are consistent with one fenced semaphore is the [`super::linearizable`] checker's job.

use std::collections::BTreeMap;

use super::ops::{oks, u};
use super::verdict::Verdict;
use crate::history::{Kind, Op};

fn flag(op: &Op, key: &str) -> Option<bool> {
    op.value.get(key)?.as_bool()
}

pub fn check(ops: &[Op]) -> Verdict {
    // Belief intervals of the fenced limit, by fence.
    let mut beliefs: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for op in oks(ops, "hold").filter(|o| super::ops::s(o, "limit") == Some("fenced")) {
        let (Some(fence), Some(from), Some(to)) =
            (u(op, "fence"), u(op, "from_ns"), u(op, "to_ns"))
        else {
            return Verdict::Unknown(format!("malformed hold op: {}", op.value));
        };
        beliefs.insert(fence, (from, to));
    }
    // Acknowledged grants on the fenced limit: (acknowledged at, fence), in time order.
    let grants: Vec<(u64, u64)> = oks(ops, "acquire")
        .filter(|o| super::ops::s(o, "limit") == Some("fenced"))
        .filter_map(|o| Some((o.time_ns, u(o, "fence")?)))
        .collect();
    let largest_granted_before = |t: u64| {
        grants
            .iter()
            .take_while(|(at, _)| *at < t)
            .map(|(_, f)| *f)
            .max()
    };
    let mut validations = 0;
    for op in
        oks(ops, "validate").filter(|o| super::ops::s(o, "limit").is_none_or(|l| l == "fenced"))
    {
        let (Some(fence), Some(invoked), Some(held)) =
            (u(op, "fence"), u(op, "invoke_ns"), flag(op, "held"))
        else {
            return Verdict::Unknown(format!("malformed validate op: {}", op.value));
        };
        validations += 1;
        if held && let Some(newer) = largest_granted_before(invoked).filter(|n| *n > fence) {
            return Verdict::Invalid(format!(
                "fence {fence} validated as held at {invoked} ns, after fence {newer} was granted"
            ));
        }
        if !held
            && let Some((from, to)) = beliefs.get(&fence)
            && *from <= invoked
            && op.time_ns < *to
        {
            return Verdict::Invalid(format!(
                "fence {fence} validated as not held at {invoked}..{} ns, inside its belief interval {from}..{to} ns",
                op.time_ns
            ));
        }
    }
    let uses = ops
        .iter()
        .filter(|o| o.f == "use" && o.kind != Kind::Invoke)
        .filter(|o| o.value.get("taken").and_then(|t| t.as_bool()) != Some(false))
        .count();
    for op in oks(ops, "client-pause") {
        let (Some(fence), Some(deadline), Some(resumed)) =
            (u(op, "fence"), u(op, "deadline_ns"), u(op, "resumed_ns"))
        else {
            return Verdict::Unknown(format!("malformed client-pause op: {}", op.value));
        };
        if resumed > deadline && op.value.get("lost").is_none_or(|l| l.is_null()) {
            return Verdict::Invalid(format!(
                "the client paused with fence {fence} resumed {} ms past its deadline and was not told its permit may be lost",
                (resumed - deadline) / 1_000_000
            ));
        }
    }
    if validations == 0 || uses == 0 {
        return Verdict::Unknown("no fenced action was validated and taken".into());
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{self, op};
    use serde_json::json;

    fn acquired(fence: u64, at: u64) -> Op {
        test_support::granted("fenced", fence, at - 1, at)
    }

    fn hold(fence: u64, from: u64, to: u64) -> Op {
        test_support::hold("fenced", 1, fence, from, to)
    }

    fn validated(fence: u64, invoked: u64, done: u64, held: bool) -> Op {
        op(
            1,
            Kind::Ok,
            "validate",
            json!({"fence": fence, "paused": false, "invoke_ns": invoked, "held": held}),
            done,
        )
    }

    fn used(fence: u64, at: u64, accepted: bool, paused: bool) -> Op {
        let kind = if accepted { Kind::Ok } else { Kind::Fail };
        op(
            1,
            kind,
            "use",
            json!({"fence": fence, "paused": paused, "invoke_ns": at}),
            at,
        )
    }

    fn paused(fence: u64, deadline: u64, resumed: u64, lost: Option<&str>) -> Op {
        op(
            2,
            Kind::Ok,
            "client-pause",
            json!({"fence": fence, "ms": 3000, "deadline_ns": deadline, "resumed_ns": resumed, "lost": lost}),
            resumed + 1,
        )
    }

    /// A holder with fence 5 pauses, its deadline passes at 100, fence 9 is granted at 150
    /// and acts; fence 5 resumes at 300, is refused by the resource and validates as lost.
    fn takeover() -> Vec<Op> {
        vec![
            acquired(5, 10),
            validated(5, 20, 25, true),
            hold(5, 10, 100),
            acquired(9, 150),
            validated(9, 160, 165, true),
            used(9, 170, true, false),
            hold(9, 150, 200),
            used(5, 300, false, true),
            validated(5, 301, 305, false),
            paused(
                5,
                100,
                300,
                Some("lease deadline passed without a keep-alive"),
            ),
        ]
    }

    #[test]
    fn a_paused_holder_refused_after_a_takeover_is_valid() {
        assert_eq!(check(&takeover()), Verdict::Valid);
    }

    #[test]
    fn a_stale_fence_validated_as_held_is_invalid() {
        let mut h = takeover();
        h[8] = validated(5, 301, 305, true);
        assert_eq!(
            check(&h),
            Verdict::Invalid(
                "fence 5 validated as held at 301 ns, after fence 9 was granted".into()
            )
        );
    }

    #[test]
    fn a_permit_lost_while_believed_is_invalid() {
        let mut h = takeover();
        h[1] = validated(5, 20, 25, false);
        assert!(
            matches!(check(&h), Verdict::Invalid(d) if d.contains("inside its belief interval"))
        );
    }

    #[test]
    fn a_use_not_taken_because_the_permit_was_lost_is_no_action() {
        let mut h = takeover();
        h.insert(
            7,
            op(1, Kind::Fail, "use", json!({"fence": 9, "paused": false, "invoke_ns": 250, "taken": false, "lost": "lease deadline passed without a keep-alive"}), 250),
        );
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn a_resumed_client_not_told_of_the_loss_is_invalid() {
        let mut h = takeover();
        h[9] = paused(5, 100, 300, None);
        assert!(matches!(check(&h), Verdict::Invalid(d) if d.contains("not told")));
    }

    #[test]
    fn nothing_to_judge_is_unknown() {
        assert!(matches!(check(&[acquired(5, 10)]), Verdict::Unknown(_)));
    }
}
