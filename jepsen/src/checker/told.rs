//! Told in time (G2, the library's half): the application is told that a permit may be lost
//! soon after the library's own deadline passes, never seconds later.
//!
//! Each `hold` the workloads record as the application saw it (`"application": true`, see
//! `workload::belief`) carries its end as the application knew it (`to_ns`: when it was
//! told the permit may be lost, or when it sent the release) and the library's belief
//! deadline (`deadline_ns`). A library that keeps the deadline right but tells the
//! application late (`lost()`, `lost_reason()`, the CLI's signal to its command) leaves the
//! application working on a permit the cluster may have expired and handed on; P1 sees it
//! only when another holder was granted inside the lateness, this check every time.
//!
//! The check: no application-visible end later than the deadline (or the grant's arrival,
//! for a grant that arrived after it and was given up at once) by more than
//! [`TOLD_LATE_MAX_NS`]. Holds of a process stopped whole (`client-pause`) are left out:
//! nothing runs in it to be told. A history with no such hold judged nothing: unknown.
//!
//! What it cannot see: lateness under the bound (the margin covers up to a tenth of the
//! TTL, which P1 judges), or a library whose deadline itself is wrong (P1, `margin-zero`,
//! `keepalive-arrival`).

use super::ops::{oks, u};
use super::verdict::Verdict;
use crate::history::Op;

/// How much later than the library's deadline the application may be told: four of the
/// library's look intervals (`weir_client::LOOK_EVERY`, 250 ms: a wait on the deadline
/// looks at least that often). One is the library's own worst case; three more are for
/// the harness's runtime, which runs every holder, to get to the holder's task on a loaded
/// machine (2 cores at load 5–15 while these runs are made).
pub const TOLD_LATE_MAX_NS: u64 = 4 * weir_client::LOOK_EVERY.as_nanos() as u64;

/// Whether the history has holds recorded as the application saw them.
pub fn present(ops: &[Op]) -> bool {
    oks(ops, "hold").any(|o| application(&o))
}

fn application(op: &&Op) -> bool {
    op.value.get("application").and_then(|a| a.as_bool()) == Some(true)
}

pub fn check(ops: &[Op]) -> Verdict {
    let mut judged = 0;
    let mut worst: Option<(u64, &Op)> = None;
    for op in oks(ops, "hold").filter(application) {
        let (Some(from), Some(to), Some(deadline)) =
            (u(op, "from_ns"), u(op, "to_ns"), u(op, "deadline_ns"))
        else {
            return Verdict::Unknown(format!("malformed hold op: {}", op.value));
        };
        judged += 1;
        let late = to.saturating_sub(deadline.max(from));
        if late > TOLD_LATE_MAX_NS && worst.is_none_or(|(w, _)| late > w) {
            worst = Some((late, op));
        }
    }
    if let Some((late, op)) = worst {
        let told = match u(op, "told_ns") {
            Some(_) => format!("was told {}", op.value["lost"]),
            None => "was never told and sent its release".to_string(),
        };
        return Verdict::Invalid(format!(
            "process {} holding {} fence {} {told} {} ms after the library's deadline (bound {} ms)",
            op.process,
            op.value["limit"],
            op.value["fence"],
            late / 1_000_000,
            TOLD_LATE_MAX_NS / 1_000_000
        ));
    }
    if judged == 0 {
        return Verdict::Unknown("no permit held as an application holds one".into());
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support;
    use serde_json::json;

    const MS: u64 = 1_000_000;

    fn hold(from: u64, to: u64, deadline: u64, told: Option<u64>) -> Op {
        let mut op = test_support::hold("cut", 1, 7, from, to);
        op.process = 12;
        let extra = json!({"deadline_ns": deadline, "told_ns": told, "application": true,
            "lost": told.map(|_| "lease deadline passed without a keep-alive")});
        op.value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        op
    }

    #[test]
    fn told_at_the_deadline_released_before_it_or_given_up_at_a_late_grant_is_valid() {
        let h = [
            // Told 3 ms after its deadline.
            hold(0, 2_003 * MS, 2_000 * MS, Some(2_003 * MS)),
            // Released long before its deadline.
            hold(0, 100 * MS, 2_000 * MS, None),
            // Granted 2 s after the deadline had passed, told at once.
            hold(4_000 * MS, 4_000 * MS, 2_000 * MS, Some(4_000 * MS)),
            // Told exactly at the bound.
            hold(0, 2_000 * MS + TOLD_LATE_MAX_NS, 2_000 * MS, Some(1)),
        ];
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn told_seconds_late_or_never_told_before_a_late_release_is_invalid() {
        // The told-late plant: told 3 s after the deadline.
        let late = hold(0, 5_000 * MS, 2_000 * MS, Some(5_000 * MS));
        assert_eq!(
            check(&[late]),
            Verdict::Invalid(
                "process 12 holding \"cut\" fence 7 was told \"lease deadline passed without a keep-alive\" 3000 ms after the library's deadline (bound 1000 ms)"
                    .into()
            )
        );
        let never = hold(0, 3_500 * MS, 2_000 * MS, None);
        assert!(
            matches!(check(&[never]), Verdict::Invalid(d) if d.contains("never told") && d.contains("1500 ms"))
        );
    }

    #[test]
    fn paused_holds_are_left_out_and_none_left_is_unknown() {
        let mut paused = hold(0, 2_000 * MS, 2_000 * MS, None);
        paused.value["application"] = false.into();
        assert!(!present(std::slice::from_ref(&paused)));
        assert!(matches!(check(&[paused]), Verdict::Unknown(_)));
    }
}
