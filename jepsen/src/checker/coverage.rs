//! Coverage: what a run exercised, counted from its history, so a run that never reached a
//! hard case cannot pass for one that survived it. `verdict.txt` lists every count; a key
//! count of zero makes the verdict unknown (exit 2), never valid.
//!
//! Counts:
//! - `deadline-ended beliefs`: holds whose belief ended at the session's deadline, before
//!   the holder noticed (a lease lapsed under a fault);
//! - `lease takeovers`: grants of a capped limit right after (by fence) a permit whose belief
//!   ended at its deadline — the permit moved on from a lapsed lease;
//! - `leader changes`: new (term, leader) pairs the status monitor saw, less the first;
//! - `stale validations`: validations answered "not held" (a released, expired or taken
//!   over fence);
//! - `halted refusals`: reserves and acquires refused because their scope was halted;
//! - `conflict refusals`: settles refused as conflicting with an earlier payload;
//! - `ceiling refusals`: reserves refused at `max_running` (`TooManyRuns`);
//! - `queued rounds`: rounds of tickets queued before a fault and granted after its heal;
//! - `skewed leaderships`: leaderships whose log clock the monitor saw run at least 2% off
//!   real time over three seconds or more (the clock nemesis' rate skew, observed);
//! - lost-fsync crashes: not counted yet (the power-loss fault does not exist yet).
//!
//! Which counts are key depends on the faults requested: leader changes and
//! deadline-ended beliefs need a fault that moves or stalls the leader (`partition`,
//! `kill`, `pause`), skewed leaderships the `clock` fault; the rest every run must show.

use std::collections::BTreeMap;

use super::{Verdict, s, u};
use crate::history::{Kind, NEMESIS, Op};

/// A leadership counts as skewed when its log clock ran at least this far off real time...
const SKEW_SEEN: f64 = 0.02;

/// ...over at least this long (the applied log time lags by up to a few hundred ms, so a
/// shorter span could not tell 2% from noise).
const SKEW_SPAN_MS_MIN: u64 = 3_000;

/// Every count, in report order.
pub fn counts(ops: &[Op]) -> Vec<(&'static str, u64)> {
    let holds: Vec<&Op> = ops
        .iter()
        .filter(|o| o.kind == Kind::Ok && o.f == "hold")
        .collect();
    let lapsed = |o: &Op| {
        matches!((u(o, "to_ns"), u(o, "deadline_ns"), u(o, "seen_ns")),
            (Some(to), Some(d), Some(seen)) if to == d && d < seen)
    };
    let deadline_ended = holds.iter().filter(|o| lapsed(o)).count() as u64;
    // Per capped limit, holds by fence: a lapsed one followed by the next grant.
    let mut by_limit: BTreeMap<&str, Vec<(u64, bool)>> = BTreeMap::new();
    for h in &holds {
        if let (Some(limit), Some(fence)) = (s(h, "limit"), u(h, "fence")) {
            by_limit.entry(limit).or_default().push((fence, lapsed(h)));
        }
    }
    let takeovers = by_limit
        .values_mut()
        .map(|v| {
            v.sort_unstable();
            v.windows(2).filter(|w| w[0].1).count() as u64
        })
        .sum();
    let leaders = ops
        .iter()
        .filter(|o| o.process == NEMESIS && o.f == "leader")
        .count() as u64;
    let stale = ops
        .iter()
        .filter(|o| o.kind == Kind::Ok && o.f == "validate")
        .filter(|o| o.value.get("held") == Some(&false.into()))
        .count() as u64;
    let halted = ops
        .iter()
        .filter(|o| o.kind == Kind::Fail && (o.f == "reserve" || o.f == "acquire"))
        .filter(|o| s(o, "error").is_some_and(|e| e.contains("alted")))
        .count() as u64;
    let conflicts = ops
        .iter()
        .filter(|o| o.kind == Kind::Fail && (o.f == "settle" || o.f == "settle-conflict"))
        .filter(|o| s(o, "error") == Some("conflict"))
        .count() as u64;
    let skewed = ops
        .iter()
        .filter(|o| o.process == NEMESIS && o.f == "leadership")
        .filter(|o| {
            let (real, log) = (u(o, "real_ms").unwrap_or(0), u(o, "log_ms").unwrap_or(0));
            real >= SKEW_SPAN_MS_MIN && (log as f64 / real as f64 - 1.0).abs() >= SKEW_SEEN
        })
        .count() as u64;
    let ceiling = ops
        .iter()
        .filter(|o| o.kind == Kind::Fail && o.f == "reserve-run")
        .filter(|o| s(o, "error").is_some_and(|e| e.contains("TooManyRuns")))
        .count() as u64;
    let queued = ops
        .iter()
        .filter(|o| o.process == NEMESIS && o.f == "queue-round")
        .count() as u64;
    vec![
        ("deadline-ended beliefs", deadline_ended),
        ("lease takeovers", takeovers),
        ("leader changes", leaders.saturating_sub(1)),
        ("stale validations", stale),
        ("halted refusals", halted),
        ("conflict refusals", conflicts),
        ("ceiling refusals", ceiling),
        ("queued rounds", queued),
        ("skewed leaderships", skewed),
    ]
}

/// The key counts for a run that requested `nemeses`.
fn keys(nemeses: &[String]) -> Vec<&'static str> {
    let mut keys = vec![
        "stale validations",
        "halted refusals",
        "conflict refusals",
        "ceiling refusals",
    ];
    if !nemeses.is_empty() {
        keys.push("queued rounds");
    }
    if nemeses
        .iter()
        .any(|n| ["partition", "kill", "pause"].contains(&n.as_str()))
    {
        keys.extend(["leader changes", "deadline-ended beliefs"]);
    }
    if nemeses.iter().any(|n| n == "clock") {
        keys.push("skewed leaderships");
    }
    keys
}

pub fn check(ops: &[Op], nemeses: &[String]) -> Verdict {
    let counts = counts(ops);
    let zero: Vec<&str> = keys(nemeses)
        .into_iter()
        .filter(|k| counts.iter().any(|(n, c)| n == k && *c == 0))
        .collect();
    if zero.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Unknown(format!("never exercised: {}", zero.join(", ")))
    }
}

/// The counts as verdict.txt's lines.
pub fn report(ops: &[Op]) -> String {
    let mut out = String::from("coverage:\n");
    for (name, count) in counts(ops) {
        out.push_str(&format!("  {name:<24} {count}\n"));
    }
    out.push_str("  lost-fsync crashes       n/a (no power-loss fault yet)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    fn hold(fence: u64, to: u64, deadline: u64, seen: u64) -> Op {
        op(
            1,
            Kind::Ok,
            "hold",
            json!({"limit": "m", "fence": fence, "to_ns": to, "deadline_ns": deadline, "seen_ns": seen}),
            seen,
        )
    }

    #[test]
    fn a_lapsed_lease_and_the_grant_after_it_are_counted() {
        let h = [hold(5, 100, 100, 300), hold(9, 400, 900, 400)];
        let c = counts(&h);
        assert!(c.contains(&("deadline-ended beliefs", 1)));
        assert!(c.contains(&("lease takeovers", 1)));
    }

    #[test]
    fn a_key_count_of_zero_is_unknown() {
        let kill = vec!["kill".to_string()];
        assert!(matches!(check(&[], &kill), Verdict::Unknown(d) if d.contains("leader changes")));
        let h = [
            op(1, Kind::Ok, "validate", json!({"held": false}), 1),
            op(
                1,
                Kind::Fail,
                "reserve",
                json!({"error": "Halted { .. }"}),
                1,
            ),
            op(
                1,
                Kind::Fail,
                "settle-conflict",
                json!({"error": "conflict"}),
                1,
            ),
            op(
                1,
                Kind::Fail,
                "reserve-run",
                json!({"error": "Refused(TooManyRuns { running: 2 })"}),
                1,
            ),
        ];
        assert_eq!(check(&h, &[]), Verdict::Valid);
    }
}
