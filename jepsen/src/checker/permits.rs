//! P1, permit exclusion (G2): at no real instant do more clients believe they hold a permit
//! of a limit than its `concurrent`.
//!
//! Each `hold` op is one client's belief interval, on the harness clock: from receiving the
//! grant (`from_ns`) to its end (`to_ns`). For the Rust holders (`"application": true`) the
//! end is where the application stopped believing: when the library told it the permit may
//! be lost, or when it sent its release, whichever came first — so a library that tells
//! its application late is judged by what the application did. For a holder stopped whole
//! (`client-pause`) and the Python holders, it is the release or the library's deadline,
//! whichever came first (G2's definition; `deadline_ns`), not the moment the client
//! noticed (`seen_ns`), which comes late when the process was stopped. An
//! interval ending at the instant another begins does not overlap it. A violation names the
//! processes that believed at once, and which of them are Python holders (`"client":
//! "python"` in their `hold`).

use std::collections::BTreeMap;

use super::ops::{oks, s, u};
use super::verdict::Verdict;
use crate::history::Op;

/// Per limit: its cap, and (instant, +1 start / -1 end, the hold) events.
type Beliefs<'a> = BTreeMap<&'a str, (u64, Vec<(u64, i64, &'a Op)>)>;

pub fn check(ops: &[Op]) -> Verdict {
    let mut by_limit: Beliefs = BTreeMap::new();
    for op in oks(ops, "hold") {
        let (Some(limit), Some(cap), Some(from), Some(to)) = (
            s(op, "limit"),
            u(op, "cap"),
            u(op, "from_ns"),
            u(op, "to_ns"),
        ) else {
            return Verdict::Unknown(format!("malformed hold op: {}", op.value));
        };
        let entry = by_limit.entry(limit).or_insert((cap, vec![]));
        // An empty belief (granted after its deadline had passed) overlaps nothing.
        if from < to {
            entry.1.push((from, 1, op));
            entry.1.push((to, -1, op));
        }
    }
    if by_limit.is_empty() {
        return Verdict::Unknown("no permit was held".into());
    }
    for (limit, (cap, mut events)) in by_limit {
        // Ends sort before starts at the same instant.
        events.sort_by_key(|(at, delta, _)| (*at, *delta));
        let mut believers: Vec<&Op> = vec![];
        for (at, delta, op) in events {
            if delta > 0 {
                believers.push(op);
            } else if let Some(i) = believers.iter().position(|b| std::ptr::eq(*b, op)) {
                believers.swap_remove(i);
            }
            if believers.len() as u64 > cap {
                return Verdict::Invalid(format!(
                    "{} clients believed they held {limit} (cap {cap}) at {at} ns: {}",
                    believers.len(),
                    named(&believers)
                ));
            }
        }
    }
    Verdict::Valid
}

/// The first instant at which more than `cap` of the intervals given as `events` (instant,
/// +1 start / -1 end) overlap, and how many do; an interval ending at the instant another
/// begins does not overlap it.
pub(crate) fn excess(cap: u64, mut events: Vec<(u64, i64)>) -> Option<(i64, u64)> {
    // Ends sort before starts at the same instant.
    events.sort();
    let mut held = 0i64;
    for (at, delta) in events {
        held += delta;
        if held > cap as i64 {
            return Some((held, at));
        }
    }
    None
}

/// The believers' processes, each marked when it is a Python holder.
fn named(believers: &[&Op]) -> String {
    let mut names: Vec<String> = believers
        .iter()
        .map(|b| match s(b, "client") {
            Some("python") => format!("process {} (Python)", b.process),
            _ => format!("process {}", b.process),
        })
        .collect();
    names.sort();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support;

    fn hold(limit: &str, cap: u64, from: u64, to: u64) -> Op {
        test_support::hold(limit, cap, from, from, to)
    }

    #[test]
    fn sequential_and_touching_holds_are_valid() {
        let one_after_another = [
            hold("m", 1, 0, 10),
            hold("m", 1, 10, 20),
            hold("m", 1, 25, 30),
        ];
        let three_of_three = [
            hold("t", 3, 0, 10),
            hold("t", 3, 1, 10),
            hold("t", 3, 2, 10),
        ];
        for history in [one_after_another, three_of_three] {
            assert_eq!(check(&history), Verdict::Valid);
        }
    }

    #[test]
    fn overlapping_beyond_the_cap_is_invalid() {
        let mut python = hold("m", 1, 9, 20);
        python.process = 45;
        python.value["client"] = "python".into();
        let v = check(&[hold("m", 1, 0, 10), python, hold("m", 1, 12, 12)]);
        assert_eq!(
            v,
            Verdict::Invalid(
                "2 clients believed they held m (cap 1) at 9 ns: process 1, process 45 (Python)"
                    .into()
            )
        );
    }

    #[test]
    fn no_holds_is_unknown() {
        assert!(matches!(check(&[]), Verdict::Unknown(_)));
    }
}
