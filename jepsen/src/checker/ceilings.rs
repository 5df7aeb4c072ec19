//! `max_running` raced (G6's ceiling half): no run is admitted while the runs certainly
//! running reach the highest ceiling possibly in effect.
//!
//! A reserve invoked at `a` and acknowledged at `b` was admitted at some point in
//! `[a, b]`. Runs certainly running throughout: admitted (acknowledged) before `a`, their
//! release not invoked before `b`. Ceilings possibly in effect: the last one acknowledged
//! before `a`, and every one invoked before `b`. (Lowering the ceiling keeps admitted runs:
//! only admissions are judged.) Reserves before the first acknowledged ceiling are not
//! judged.

use std::collections::BTreeMap;

use super::ops::{s, u};
use super::verdict::Verdict;
use crate::history::{Kind, Op};

pub fn check(ops: &[Op]) -> Verdict {
    // Ceilings: (invoked, acknowledged or MAX, value).
    let mut sets = vec![];
    let mut pending: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    // Runs: run -> (admitted at, release invoked at or MAX).
    let mut admitted: Vec<(&str, u64, u64)> = vec![];
    let mut runs: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for o in ops {
        match (o.f.as_str(), o.kind) {
            ("set-max-running", Kind::Invoke) => {
                if let Some(n) = u(o, "max_running") {
                    pending.insert(o.process, (o.time_ns, n));
                }
            }
            ("set-max-running", kind) => {
                if let Some((at, n)) = pending.remove(&o.process) {
                    let done = if kind == Kind::Ok {
                        o.time_ns
                    } else {
                        u64::MAX
                    };
                    if kind != Kind::Fail {
                        sets.push((at, done, n));
                    }
                }
            }
            ("reserve-run", Kind::Ok) => {
                if let (Some(run), Some(invoked)) = (s(o, "run"), u(o, "invoke_ns")) {
                    runs.insert(run, (o.time_ns, u64::MAX));
                    admitted.push((run, invoked, o.time_ns));
                }
            }
            ("release-run", Kind::Invoke) => {
                if let Some(r) = s(o, "run").and_then(|r| runs.get_mut(r)) {
                    r.1 = o.time_ns;
                }
            }
            _ => {}
        }
    }
    // Never completed: possibly in effect from its invoke on.
    for (at, n) in pending.into_values() {
        sets.push((at, u64::MAX, n));
    }
    let mut judged = 0;
    for (run, a, b) in &admitted {
        let Some(last) = sets
            .iter()
            .filter(|(_, done, _)| *done < *a)
            .max_by_key(|(_, done, _)| *done)
        else {
            continue;
        };
        let ceiling = sets
            .iter()
            .filter(|(invoked, _, _)| *invoked < *b)
            .filter(|(_, done, _)| *done >= *a)
            .map(|(_, _, n)| *n)
            .chain([last.2])
            .max()
            .unwrap_or(last.2);
        let running = runs
            .iter()
            .filter(|(r, (at, released))| *r != run && *at < *a && *released >= *b)
            .count() as u64;
        judged += 1;
        if running >= ceiling {
            return Verdict::Invalid(format!(
                "run {run} admitted ({a}..{b} ns) while {running} runs were running and max_running was at most {ceiling}"
            ));
        }
    }
    if judged == 0 {
        return Verdict::Unknown("no admission under a known ceiling".into());
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    fn set(kind: Kind, n: u64, t: u64) -> Op {
        op(9, kind, "set-max-running", json!({"max_running": n}), t)
    }
    fn admit(p: u64, run: &str, a: u64, b: u64) -> Op {
        op(
            p,
            Kind::Ok,
            "reserve-run",
            json!({"run": run, "invoke_ns": a}),
            b,
        )
    }
    fn release(p: u64, run: &str, t: u64) -> Op {
        op(p, Kind::Invoke, "release-run", json!({"run": run}), t)
    }

    /// A ceiling of 1 set, then run x admitted under it.
    fn one_admitted_under_one() -> [Op; 3] {
        [
            set(Kind::Invoke, 1, 0),
            set(Kind::Ok, 1, 1),
            admit(1, "x", 2, 3),
        ]
    }

    #[test]
    fn admissions_under_the_ceiling_are_valid() {
        let mut h = one_admitted_under_one().to_vec();
        h.extend([release(1, "x", 10), admit(2, "y", 11, 12)]);
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn an_admission_at_the_ceiling_is_invalid_unless_a_raise_overlaps_it() {
        let base = one_admitted_under_one();
        let over: Vec<Op> = base.iter().cloned().chain([admit(2, "y", 5, 6)]).collect();
        assert!(matches!(check(&over), Verdict::Invalid(d) if d.contains("run y")));
        // A raise to 2 invoked before y was acknowledged may have applied first.
        let raised: Vec<Op> = base
            .iter()
            .cloned()
            .chain([
                set(Kind::Invoke, 2, 4),
                admit(2, "y", 5, 6),
                set(Kind::Ok, 2, 7),
            ])
            .collect();
        assert_eq!(check(&raised), Verdict::Valid);
    }
}
