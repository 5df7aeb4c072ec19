//! Convergence (G4, and every node alive): judged from the cluster's own reports.
//!
//! - every heal succeeded: a node that exited on its own, failed to restart or did not
//!   answer after the heal fails the run (`heal` facts with `ok: false`);
//! - after every heal and at the end, the [`crate::converge`] probe found every node alive
//!   and answering, caught up with the index the cluster had reached at the heal, and (at
//!   the end, with the workloads stopped) all at one applied index;
//! - nowhere — at a heal or in the [`crate::monitor`]'s polls through the run — did two
//!   nodes report equal applied indexes with different digests.
//!
//! Unknown when no final probe ran or it compared no digests.

use super::verdict::Verdict;
use crate::history::{Kind, NEMESIS, Op};

fn facts<'a>(ops: &'a [Op], f: &'a str) -> impl Iterator<Item = &'a Op> + 'a {
    ops.iter()
        .filter(move |o| o.process == NEMESIS && o.kind == Kind::Info && o.f == f)
}

pub fn check(ops: &[Op]) -> Verdict {
    if let Some(h) = facts(ops, "heal").find(|o| o.value.get("ok") == Some(&false.into())) {
        return Verdict::Invalid(format!(
            "a heal failed at {} ns: {}",
            h.time_ns, h.value["error"]
        ));
    }
    if let Some(m) = facts(ops, "digest-mismatch").next() {
        return Verdict::Invalid(format!(
            "two nodes at one applied index report different digests: {}",
            m.value
        ));
    }
    let mut compared = 0;
    let mut last = None;
    for c in facts(ops, "converge") {
        if c.value.get("converged") != Some(&true.into()) {
            return Verdict::Invalid(format!(
                "the replicas did not converge after the heal at {} ns: {}",
                c.time_ns, c.value
            ));
        }
        compared += c.value["compared"].as_u64().unwrap_or(0);
        if c.value["final"] == true {
            last = Some(c);
        }
    }
    compared += facts(ops, "monitor")
        .filter_map(|m| m.value["compared"].as_u64())
        .sum::<u64>();
    if last.is_none() {
        return Verdict::Unknown("no convergence probe at the end".into());
    }
    if compared == 0 {
        return Verdict::Unknown("no two nodes were ever seen at one applied index".into());
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::fact;
    use serde_json::json;

    fn converge(last: bool, converged: bool) -> Op {
        fact(
            "converge",
            json!({"final": last, "converged": converged, "compared": 2}),
            5,
        )
    }

    #[test]
    fn converged_heals_and_a_final_meeting_are_valid() {
        let h = [converge(false, true), converge(true, true)];
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn a_failed_heal_a_mismatch_or_a_replica_that_never_caught_up_is_invalid() {
        let heal = fact(
            "heal",
            json!({"ok": false, "error": "node 2 exited on its own"}),
            3,
        );
        assert!(
            matches!(check(&[heal, converge(true, true)]), Verdict::Invalid(d) if d.contains("node 2"))
        );
        let mismatch = fact("digest-mismatch", json!({"applied": 9}), 3);
        assert!(matches!(
            check(&[mismatch, converge(true, true)]),
            Verdict::Invalid(_)
        ));
        assert!(matches!(
            check(&[converge(false, false), converge(true, true)]),
            Verdict::Invalid(_)
        ));
    }

    #[test]
    fn no_final_probe_or_no_comparison_is_unknown() {
        assert!(matches!(
            check(&[converge(false, true)]),
            Verdict::Unknown(_)
        ));
        let none = fact(
            "converge",
            json!({"final": true, "converged": true, "compared": 0}),
            5,
        );
        assert!(matches!(check(&[none]), Verdict::Unknown(_)));
    }
}
