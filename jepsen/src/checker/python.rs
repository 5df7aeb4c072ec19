//! The Python holders ran as asked (`--python-holders`), and the Go holders
//! (`--go-holders`, [`check_for`] with their `go-holder` facts): each driver started, had none of
//! its lines refused, and exited 0 after the run stopped it, and they recorded at least one
//! belief between them. (One of them may hold nothing in a short run: `mutex` has ten Rust
//! holders queueing beside it, and an acquire gives up after 5 s as theirs do.)
//!
//! Whether their beliefs were safe is not judged here: their `acquire`, `hold` and
//! `release` ops are in the history like any holder's, and P1, capacity and
//! linearizability judge them with the Rust holders'. This row says those verdicts cover
//! Python holders at all: a driver that could not start (no interpreter, the client not
//! installed), died, or wrote what the harness could not record leaves them judging only
//! Rust holders, which is unknown, never a pass.

use std::collections::BTreeMap;

use super::ops::{oks, s, u};
use super::verdict::Verdict;
use crate::history::Op;

/// Whether the run had Python holders.
pub fn present(ops: &[Op]) -> bool {
    present_for(ops, "python-holder")
}

pub fn check(ops: &[Op]) -> Verdict {
    check_for(ops, "python-holder", "Python")
}

/// Whether the run had holder drivers whose stretches the fact `fact` records (the Go
/// holders' is `go-holder`).
pub fn present_for(ops: &[Op], fact: &str) -> bool {
    ops.iter().any(|o| o.f == fact)
}

/// The same rule for the drivers whose stretches `fact` records, named `who` (`Go`).
pub fn check_for(ops: &[Op], fact: &str, who: &str) -> Verdict {
    // Per driver process: its end fact, if any.
    let mut drivers: BTreeMap<u64, Option<&Op>> = BTreeMap::new();
    for o in oks(ops, fact) {
        let end = drivers.entry(o.process).or_default();
        if o.value.get("started").is_none() {
            *end = Some(o);
        }
    }
    for (process, end) in &drivers {
        let Some(end) = end else {
            return Verdict::Unknown(format!("{who} holder {process} never ended"));
        };
        let exit = u(end, "exit");
        let problem = if let Some(e) = s(end, "error") {
            Some(e.to_string())
        } else if end.value.get("early").and_then(|e| e.as_bool()) == Some(true) {
            Some(format!("exited with {exit:?} before the run stopped it"))
        } else if exit != Some(0) {
            Some(format!("exited with {exit:?}"))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Verdict::Unknown(format!(
                "{who} holder {process}: {problem} ({fact}-{process}.log)"
            ));
        }
    }
    if drivers.is_empty() {
        return Verdict::Unknown(format!("no {who} holder ran"));
    }
    if !oks(ops, "hold").any(|h| drivers.contains_key(&h.process)) {
        return Verdict::Unknown(format!("no {who} holder held a permit"));
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{self, op};
    use crate::history::Kind;
    use serde_json::json;

    fn started(process: u64) -> Op {
        op(
            process,
            Kind::Ok,
            "python-holder",
            json!({"limit": "mutex", "started": true}),
            1,
        )
    }

    fn ended(process: u64, exit: Option<i32>, early: bool, error: Option<&str>) -> Op {
        let value = json!({"limit": "mutex", "exit": exit, "recorded": 4, "refused": 0, "error": error, "early": early});
        op(process, Kind::Ok, "python-holder", value, 90)
    }

    fn held(process: u64) -> Op {
        let mut h = test_support::hold("mutex", 1, 7, 10, 20);
        h.process = process;
        h
    }

    #[test]
    fn drivers_that_held_and_exited_cleanly_are_valid() {
        let ops = [
            started(4),
            held(4),
            ended(4, Some(0), false, None),
            started(5),
            ended(5, Some(0), false, None),
        ];
        assert!(present(&ops));
        assert_eq!(check(&ops), Verdict::Valid);
    }

    #[test]
    fn a_driver_that_did_not_run_as_asked_is_unknown() {
        let cases: [(Vec<Op>, &str); 5] = [
            (vec![started(4), held(4)], "never ended"),
            (
                vec![
                    started(4),
                    ended(4, None, false, Some("cannot start python3")),
                ],
                "cannot start",
            ),
            (
                vec![started(4), held(4), ended(4, Some(1), true, None)],
                "before the run stopped it",
            ),
            (
                vec![started(4), held(4), ended(4, Some(1), false, None)],
                "exited with Some(1)",
            ),
            (
                vec![started(4), ended(4, Some(0), false, None), held(3)],
                "held a permit",
            ),
        ];
        for (ops, why) in cases {
            match check(&ops) {
                Verdict::Unknown(m) => assert!(m.contains(why), "{m} lacks {why}"),
                v => panic!("{why}: {v:?}"),
            }
        }
        assert!(!present(&[held(4)]));
    }

    #[test]
    fn go_drivers_are_judged_by_their_own_facts_and_named() {
        let rename = |mut o: Op| {
            o.f = "go-holder".into();
            o
        };
        let ops = [rename(started(6)), rename(ended(6, Some(2), false, None))];
        assert!(present_for(&ops, "go-holder") && !present(&ops));
        match check_for(&ops, "go-holder", "Go") {
            Verdict::Unknown(why) => assert!(
                why.contains("Go holder 6: exited with Some(2) (go-holder-6.log)"),
                "{why}"
            ),
            other => panic!("a Go driver that exited 2 judged {other:?}"),
        }
        let held_ok = [
            rename(started(6)),
            held(6),
            rename(ended(6, Some(0), false, None)),
        ];
        assert_eq!(check_for(&held_ok, "go-holder", "Go"), Verdict::Valid);
    }
}
