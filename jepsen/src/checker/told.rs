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
//! Three clients are judged, each against its own deadline and a bound named from its own
//! look interval ([`bound_ns`]): the Rust library's holders in the harness, the Python
//! client's (`"client": "python"`: the driver records when `lost()` / `lost_reason()` told
//! its application), and the CLI's (`"client": "cli"`: the command of `weir acquire --
//! COMMAND` records when it received SIGTERM, and the CLI says its deadline as it stops the
//! command; a CLI hold whose command ended on its own carries no deadline and is left
//! out).
//!
//! The check: no application-visible end later than the deadline (or the grant's arrival,
//! for a grant that arrived after it and was given up at once) by more than the bound.
//! Holds of a process stopped whole (`client-pause`) are judged only from its resume, when
//! it records one (the Python holders do: `resumed_ns`): nothing runs in it to be told while
//! it stands still, but once it runs again it must be told at once, within the same bound.
//! The Rust `fenced` holder the nemesis pauses records no resume on its hold: it acts, then
//! validates over the network before it asks, so its moment of asking carries a network
//! round; what `lost_reason()` answered then is judged by [`super::fenced`]'s third rule
//! (asked after the deadline, it must say lost), which needs no bound.
//! A history with no hold judged nothing: unknown.
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

/// The Python client's look interval (`LOOK_EVERY` of `clients/python/src/weir/_clock.py`,
/// 0.25 s: `lost()` looks at the deadline at least that often, and its keep-alive task marks
/// held permits lost at the first look past it).
pub const PYTHON_LOOK_EVERY_NS: u64 = 250_000_000;

/// How much later than the Python client's deadline its application may be told: four of
/// its look intervals, as for the Rust library (the driver is a process of its own, on the
/// same loaded machine).
pub const PYTHON_TOLD_LATE_MAX_NS: u64 = 4 * PYTHON_LOOK_EVERY_NS;

/// The Go client's look interval (`lookEvery` of `clients/go/clock.go`, 250 ms: its
/// deadline watcher looks at least that often, and `Permit.Err` looks at every call).
pub const GO_LOOK_EVERY_NS: u64 = 250_000_000;

/// How much later than the Go client's deadline its application may be told: four of its
/// look intervals, as for the others.
pub const GO_TOLD_LATE_MAX_NS: u64 = 4 * GO_LOOK_EVERY_NS;

/// The TypeScript client's look interval (`LOOK_EVERY_MS` of
/// `clients/typescript/src/clock.ts`, 250 ms: its deadline watcher looks at least that
/// often, and `lostReason()` reads the clock at every call).
pub const TS_LOOK_EVERY_NS: u64 = 250_000_000;

/// How much later than the TypeScript client's deadline its application may be told: four
/// of its look intervals, as for the others.
pub const TS_TOLD_LATE_MAX_NS: u64 = 4 * TS_LOOK_EVERY_NS;

/// How much later than the CLI's deadline its command may get SIGTERM: four of the CLI's
/// look intervals (the CLI waits on the library's `Permit::lost`, so its look interval is
/// `weir_client::LOOK_EVERY`), which also cover its `kill` and the command's note of the
/// signal on a loaded machine.
pub const CLI_TOLD_LATE_MAX_NS: u64 = 4 * weir_client::LOOK_EVERY.as_nanos() as u64;

/// The bound for the hold `op`, by the client that held it.
pub fn bound_ns(op: &Op) -> u64 {
    match client(op) {
        Some("python") => PYTHON_TOLD_LATE_MAX_NS,
        Some("go") => GO_TOLD_LATE_MAX_NS,
        Some("typescript") => TS_TOLD_LATE_MAX_NS,
        Some("cli") => CLI_TOLD_LATE_MAX_NS,
        _ => TOLD_LATE_MAX_NS,
    }
}

fn client(op: &Op) -> Option<&str> {
    op.value.get("client").and_then(|c| c.as_str())
}

/// Whether the history has holds recorded as the application saw them.
pub fn present(ops: &[Op]) -> bool {
    oks(ops, "hold").any(|o| application(&o))
}

fn application(op: &&Op) -> bool {
    op.value.get("application").and_then(|a| a.as_bool()) == Some(true)
}

/// A hold of a process stopped whole that ran again while it held (`resumed_ns`; the
/// Python holders record it): judged from its resume.
fn resumed(op: &&Op) -> bool {
    !application(op) && u(op, "resumed_ns").is_some()
}

/// The application-visible end of a judged hold, and the earliest moment it could have
/// been told but for the deadline: the grant's arrival, or the resume of a paused hold.
fn span(op: &Op) -> Option<(u64, u64)> {
    let from = u(op, "from_ns")?;
    match u(op, "resumed_ns") {
        Some(resumed) if !application(&op) => {
            let end = u(op, "told_ns").or(u(op, "seen_ns"))?;
            Some((end, from.max(resumed)))
        }
        _ => Some((u(op, "to_ns")?, from)),
    }
}

pub fn check(ops: &[Op]) -> Verdict {
    let mut judged = 0;
    let mut worst: Option<(u64, &Op)> = None;
    for op in oks(ops, "hold").filter(|o| application(o) || resumed(o)) {
        let Some((to, from)) = span(op) else {
            return Verdict::Unknown(format!("malformed hold op: {}", op.value));
        };
        let Some(deadline) = u(op, "deadline_ns") else {
            // A CLI that never lost the permit never said its deadline: not judged here.
            if client(op) == Some("cli") {
                continue;
            }
            return Verdict::Unknown(format!("malformed hold op: {}", op.value));
        };
        judged += 1;
        let late = to.saturating_sub(deadline.max(from));
        let over = late.saturating_sub(bound_ns(op));
        if over > 0 && worst.is_none_or(|(w, _)| over > w) {
            worst = Some((over, op));
        }
    }
    if let Some((over, op)) = worst {
        let bound = bound_ns(op);
        let (who, told) = match (client(op), u(op, "told_ns")) {
            (Some("cli"), Some(_)) => (" (CLI)", "got SIGTERM".to_string()),
            (Some("cli"), None) => (" (CLI)", "was never stopped and exited".to_string()),
            (c, Some(_)) => (python(c), format!("was told {}", op.value["lost"])),
            (c, None) => (python(c), "was never told and sent its release".to_string()),
        };
        let after = match resumed(&op) {
            true => "its process resumed, past the library's deadline",
            false => "the library's deadline",
        };
        return Verdict::Invalid(format!(
            "process {}{who} holding {} fence {} {told} {} ms after {after} (bound {} ms)",
            op.process,
            op.value["limit"],
            op.value["fence"],
            (over + bound) / 1_000_000,
            bound / 1_000_000
        ));
    }
    if judged == 0 {
        return Verdict::Unknown("no permit held as an application holds one".into());
    }
    Verdict::Valid
}

fn python(client: Option<&str>) -> &'static str {
    match client {
        Some("python") => " (Python)",
        Some("go") => " (Go)",
        Some("typescript") => " (TypeScript)",
        _ => "",
    }
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
    fn python_and_cli_holds_are_judged_against_their_own_bounds() {
        let mut python = hold(0, 5_000 * MS, 2_000 * MS, Some(5_000 * MS));
        python.value["client"] = "python".into();
        assert_eq!(
            check(&[python]),
            Verdict::Invalid(
                "process 12 (Python) holding \"cut\" fence 7 was told \"lease deadline passed without a keep-alive\" 3000 ms after the library's deadline (bound 1000 ms)"
                    .into()
            )
        );
        let mut cli = hold(
            0,
            2_000 * MS + CLI_TOLD_LATE_MAX_NS + MS,
            2_000 * MS,
            Some(1),
        );
        cli.value["client"] = "cli".into();
        assert!(
            matches!(check(std::slice::from_ref(&cli)), Verdict::Invalid(d) if d.contains("(CLI)") && d.contains("got SIGTERM 1001 ms"))
        );
        cli.value["to_ns"] = (2_000 * MS + CLI_TOLD_LATE_MAX_NS).into();
        assert_eq!(check(&[cli]), Verdict::Valid);
    }

    #[test]
    fn the_python_bound_is_named_from_the_python_clients_own_look_interval() {
        let clock = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../clients/python/src/weir/_clock.py"
        ))
        .expect("the Python client's clock module");
        let look = clock
            .lines()
            .find_map(|l| l.strip_prefix("LOOK_EVERY = "))
            .expect("LOOK_EVERY in _clock.py");
        let seconds: f64 = look
            .trim()
            .parse()
            .expect("LOOK_EVERY is a number of seconds");
        assert_eq!((seconds * 1e9).round() as u64, PYTHON_LOOK_EVERY_NS);
    }

    #[test]
    fn the_go_bound_is_named_from_the_go_clients_own_look_interval() {
        let clock = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../clients/go/clock.go"
        ))
        .expect("the Go client's clock file");
        let look = clock
            .lines()
            .find_map(|l| l.strip_prefix("const lookEvery = "))
            .expect("const lookEvery in clock.go");
        let ms: u64 = look
            .trim()
            .strip_suffix(" * time.Millisecond")
            .and_then(|n| n.parse().ok())
            .expect("lookEvery is N * time.Millisecond");
        assert_eq!(ms * 1_000_000, GO_LOOK_EVERY_NS);
    }

    #[test]
    fn a_go_hold_told_past_its_bound_is_flagged_and_named() {
        let mut go = hold(0, 5_000 * MS, 2_000 * MS, Some(5_000 * MS));
        go.value["client"] = "go".into();
        match check(&[go]) {
            Verdict::Invalid(why) => assert!(why.contains("(Go)"), "{why}"),
            other => panic!("a Go hold told 3 s late passed: {other:?}"),
        }
    }

    #[test]
    fn the_typescript_bound_is_named_from_the_typescript_clients_own_look_interval() {
        let clock = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../clients/typescript/src/clock.ts"
        ))
        .expect("the TypeScript client's clock module");
        let look = clock
            .lines()
            .find_map(|l| l.strip_prefix("export const LOOK_EVERY_MS = "))
            .expect("LOOK_EVERY_MS in clock.ts");
        let ms: u64 = look
            .trim()
            .trim_end_matches(';')
            .parse()
            .expect("LOOK_EVERY_MS is a whole number of ms");
        assert_eq!(ms * 1_000_000, TS_LOOK_EVERY_NS);
        let mut ts = hold(0, 5_000 * MS, 2_000 * MS, Some(5_000 * MS));
        ts.value["client"] = "typescript".into();
        match check(&[ts]) {
            Verdict::Invalid(why) => assert!(why.contains("(TypeScript)"), "{why}"),
            other => panic!("a TypeScript hold told 3 s late passed: {other:?}"),
        }
    }

    #[test]
    fn a_paused_python_hold_is_judged_from_its_resume() {
        // Paused from 1 s to 4.5 s past a deadline at 2 s; told at the resume: valid.
        let mut paused = hold(0, 2_000 * MS, 2_000 * MS, Some(4_503 * MS));
        paused.value["application"] = false.into();
        paused.value["resumed_ns"] = (4_500 * MS).into();
        paused.value["client"] = "python".into();
        assert_eq!(check(std::slice::from_ref(&paused)), Verdict::Valid);
        // Told 3 s after the deadline, 0.5 s after the resume: within the bound.
        paused.value["told_ns"] = (5_000 * MS).into();
        assert_eq!(check(std::slice::from_ref(&paused)), Verdict::Valid);
        // Resumed 1 s after the deadline, told 2 s after the resume (the plant): invalid.
        paused.value["resumed_ns"] = (3_000 * MS).into();
        assert!(
            matches!(check(&[paused]), Verdict::Invalid(d) if d.contains("(Python)") && d.contains("2000 ms"))
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
