//! Keyed limits and requests of several parts (`workload::keyed`): G1 per key, and
//! atomicity — no part of a refused request is charged.
//!
//! - **G1, buckets.** Per key of the keyed bucket, and on the unkeyed one: the tokens of
//!   the acknowledged grants (`multi` parts and `drain` takes) within any real-time window
//!   fit `burst + rate × window × r`, by the rate checker's own bound (`rate::over_bound`,
//!   the same clock allowance). Grants of unknown outcome are not counted: they may not have
//!   happened, and leaving them out can only hide an excess, never invent one.
//! - **G1, holders.** Per key of the keyed semaphore: at no instant do more `multi-hold`
//!   belief intervals overlap than its `concurrent` (`permits::excess`).
//! - **Atomicity.** A key of the keyed bucket refills 0.01 token a second, so its tokens are
//!   spent once. After the last heal the drain takes one token at a time until the key is
//!   refused `Busy` — fewer than one token left. Every token the key ever had (its burst `B`
//!   plus its refill `R ≥ 0`) was then charged, less under one: charged `> B + R − 1`, so
//!   at least `B` whole tokens. Each was charged by an acknowledged grant, by a request of
//!   unknown outcome (`info`, or invoked and never completed), or by nothing the history
//!   shows: a refused request. So a drained key whose acknowledged tokens plus its tokens of
//!   unknown outcome fall short of `B` had tokens charged by a refused request. Unknown
//!   outcomes count as possibly charged, so they can only excuse a shortfall; a key whose
//!   drain did not end in `Busy` (the run ended, an unknown) is not judged; no judged key
//!   is unknown, never valid.
//!
//! What it cannot see: a refused request that charged a part whose tokens later refilled
//! (the refill makes up for it before the drain: hence the slow bucket and the epochs of
//! fresh keys); a charge by a refused request smaller than the tokens of unknown outcome on
//! its key; a refused request that charged the semaphore or the unkeyed bucket (a holder
//! that is never released would starve the key, which no check here times; the unkeyed
//! bucket refills in a fraction of a second). A `Busy` refusal does not name the part
//! that refused, so the history records the refusal's text and its parts, not which one.

use std::collections::BTreeMap;

use super::ops::{oks, s, u};
use super::rate::{Clocks, over_bound};
use super::verdict::Verdict;
use crate::history::{Kind, Op};
use crate::workload::keyed::{
    KEYED_CAP, KEYED_RATE, KEYED_RATE_BURST, KEYED_RATE_PER_SECOND, SHARED_RATE, SHARED_RATE_BURST,
    SHARED_RATE_PER_SECOND,
};

/// Whether the history holds keyed requests (the row is judged only then, so histories
/// recorded before the workload existed are judged as they were).
pub fn present(ops: &[Op]) -> bool {
    ops.iter().any(|o| o.f == "multi")
}

/// A grant's (invoked, acknowledged, units).
type Take = (u64, u64, u64);

/// A belief's start (instant, +1) or end (instant, -1).
type Event = (u64, i64);

/// One bucket key's tally for the atomicity check.
#[derive(Default)]
struct Tally {
    granted: u64,
    unknown: u64,
    drained: bool,
}

/// The (limit, key) of each part of a `multi` op, with its units.
fn parts(op: &Op) -> Vec<(&str, Option<&str>, u64)> {
    op.value["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| {
                    Some((
                        p["limit"].as_str()?,
                        p["key"].as_str(),
                        p["units"].as_u64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The bucket key an op charges (the first part of a `multi`, the key of a `drain`), with
/// its units.
fn bucket_key(op: &Op) -> Option<(&str, u64)> {
    match op.f.as_str() {
        "multi" => parts(op)
            .into_iter()
            .find(|(limit, ..)| *limit == KEYED_RATE)
            .and_then(|(_, key, units)| Some((key?, units))),
        "drain" => Some((s(op, "key")?, u(op, "units")?)),
        _ => None,
    }
}

/// Per bucket key: tokens acknowledged, tokens of unknown outcome (completed `info`, or
/// invoked and never completed), and whether its drain was refused `Busy`.
fn tallies(ops: &[Op]) -> BTreeMap<&str, Tally> {
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut open: BTreeMap<u64, &Op> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.f == "multi" || o.f == "drain") {
        if op.kind == Kind::Invoke {
            open.insert(op.process, op);
            continue;
        }
        open.remove(&op.process);
        let Some((key, units)) = bucket_key(op) else {
            continue;
        };
        let t = tallies.entry(key).or_default();
        match op.kind {
            Kind::Ok => t.granted += units,
            Kind::Info => t.unknown += units,
            _ => t.drained |= op.f == "drain" && op.value["busy"] == true,
        }
    }
    for op in open.into_values() {
        if let Some((key, units)) = bucket_key(op) {
            tallies.entry(key).or_default().unknown += units;
        }
    }
    tallies
}

/// G1 on the buckets: per (limit, key), the acknowledged grants' tokens by window.
fn buckets(ops: &[Op]) -> Result<(), String> {
    let mut takes: BTreeMap<(&str, Option<&str>), Vec<Take>> = BTreeMap::new();
    for op in oks(ops, "multi").chain(oks(ops, "drain")) {
        let invoked = u(op, "invoke_ns").ok_or(format!("no invoke time: {}", op.value))?;
        let charged = match op.f.as_str() {
            "multi" => parts(op),
            _ => bucket_key(op)
                .map(|(key, units)| (KEYED_RATE, Some(key), units))
                .into_iter()
                .collect(),
        };
        for (limit, key, units) in charged.into_iter().filter(|p| p.0 != KEYED_CAP) {
            takes
                .entry((limit, key))
                .or_default()
                .push((invoked, op.time_ns, units));
        }
    }
    let clocks = Clocks::of(ops);
    for ((limit, key), takes) in takes {
        let (rate, burst) = match limit {
            KEYED_RATE => (KEYED_RATE_PER_SECOND, KEYED_RATE_BURST),
            SHARED_RATE => (SHARED_RATE_PER_SECOND, SHARED_RATE_BURST),
            other => return Err(format!("a part of unknown limit {other}")),
        };
        let name = key.map_or(limit.to_string(), |k| format!("{limit} key {k}"));
        if let Some(why) = over_bound(&name, rate, burst, takes, &clocks) {
            return Err(why);
        }
    }
    Ok(())
}

/// G1 on the semaphore: per key, the `multi-hold` beliefs within its cap.
fn holders(ops: &[Op]) -> Result<(), String> {
    let mut by_key: BTreeMap<&str, (u64, Vec<Event>)> = BTreeMap::new();
    for op in oks(ops, "multi-hold") {
        let (Some(key), Some(cap), Some(from), Some(to)) =
            (s(op, "key"), u(op, "cap"), u(op, "from_ns"), u(op, "to_ns"))
        else {
            return Err(format!("malformed multi-hold: {}", op.value));
        };
        let entry = by_key.entry(key).or_insert((cap, vec![]));
        entry.1.extend([(from, 1), (to, -1)]);
    }
    for (key, (cap, events)) in by_key {
        if let Some((held, at)) = super::permits::excess(cap, events) {
            return Err(format!(
                "{held} clients believed they held {KEYED_CAP} key {key} (cap {cap}) at {at} ns"
            ));
        }
    }
    Ok(())
}

pub fn check(ops: &[Op]) -> Verdict {
    if oks(ops, "multi").next().is_none() {
        return Verdict::Unknown("no request of several parts was granted".into());
    }
    if let Err(why) = buckets(ops).and_then(|()| holders(ops)) {
        return Verdict::Invalid(why);
    }
    let tallies = tallies(ops);
    let mut judged = 0;
    for (key, t) in tallies.iter().filter(|(_, t)| t.drained) {
        judged += 1;
        if t.granted + t.unknown < KEYED_RATE_BURST {
            return Verdict::Invalid(format!(
                "{KEYED_RATE} key {key}: {} tokens granted and {} of unknown outcome before the drain was refused: {} of its burst of {KEYED_RATE_BURST} charged by refused requests",
                t.granted,
                t.unknown,
                KEYED_RATE_BURST - t.granted - t.unknown
            ));
        }
    }
    if judged == 0 {
        return Verdict::Unknown("no key of the keyed bucket was drained to a refusal".into());
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    /// A `multi` op of process `p`: the bucket key `key` with `units`, then the semaphore.
    fn multi(p: u64, kind: Kind, key: &str, units: u64, at_ms: u64) -> Op {
        let parts = json!([{"limit": KEYED_RATE, "key": key, "units": units}, {"limit": KEYED_CAP, "key": "c0", "units": 1}]);
        let v = json!({"parts": parts, "invoke_ns": at_ms * 1_000_000, "busy": kind == Kind::Fail});
        op(p, kind, "multi", v, at_ms * 1_000_000)
    }

    fn drain(kind: Kind, key: &str, at_ms: u64) -> Op {
        let v = json!({"key": key, "units": 1, "invoke_ns": at_ms * 1_000_000, "busy": kind == Kind::Fail});
        op(99, kind, "drain", v, at_ms * 1_000_000)
    }

    /// `granted` tokens of key `k` acknowledged in grants of 2, a refused request, then the
    /// drain's refusal.
    fn history(granted: u64) -> Vec<Op> {
        let mut h = vec![];
        for i in 0..granted / 2 {
            h.push(multi(1, Kind::Invoke, "k", 2, i * 100));
            h.push(multi(1, Kind::Ok, "k", 2, i * 100 + 1));
        }
        h.push(multi(2, Kind::Invoke, "k", 2, 1));
        h.push(multi(2, Kind::Fail, "k", 2, 2));
        h.push(drain(Kind::Invoke, "k", 100_000));
        h.push(drain(Kind::Fail, "k", 100_001));
        h
    }

    #[test]
    fn a_key_spent_by_its_grants_is_valid() {
        assert_eq!(check(&history(KEYED_RATE_BURST)), Verdict::Valid);
    }

    #[test]
    fn tokens_charged_by_no_grant_are_invalid_unless_an_unknown_explains_them() {
        let h = history(KEYED_RATE_BURST - 2);
        let Verdict::Invalid(why) = check(&h) else {
            panic!("a shortfall of two tokens passed");
        };
        assert!(
            why.contains("key k: 18 tokens granted and 0 of unknown outcome"),
            "{why}"
        );
        // A request whose outcome is unknown may have taken them.
        let mut unknown = h.clone();
        unknown.push(multi(3, Kind::Invoke, "k", 2, 5));
        unknown.push(multi(3, Kind::Info, "k", 2, 6));
        assert_eq!(check(&unknown), Verdict::Valid);
        // So may one invoked and never completed.
        let mut open = h;
        open.push(multi(3, Kind::Invoke, "k", 2, 5));
        assert_eq!(check(&open), Verdict::Valid);
    }

    #[test]
    fn a_key_not_drained_to_a_refusal_is_not_judged() {
        let mut h = history(2);
        h.truncate(h.len() - 1);
        assert!(matches!(check(&h), Verdict::Unknown(_)));
    }

    #[test]
    fn more_than_the_burst_of_a_key_at_once_is_invalid() {
        let mut h = history(KEYED_RATE_BURST);
        h.push(multi(4, Kind::Invoke, "k", 2, 5));
        h.push(multi(4, Kind::Ok, "k", 2, 6));
        let Verdict::Invalid(why) = check(&h) else {
            panic!("22 tokens of a 20-token key passed");
        };
        assert!(why.starts_with("22 tokens of krate key k granted"), "{why}");
    }

    #[test]
    fn two_holders_of_a_semaphore_key_are_invalid() {
        let hold = |from: u64, to: u64| {
            op(
                1,
                Kind::Ok,
                "multi-hold",
                json!({"key": "c0", "cap": 1, "from_ns": from, "to_ns": to}),
                to,
            )
        };
        let mut h = history(KEYED_RATE_BURST);
        h.extend([hold(0, 10), hold(10, 20)]);
        assert_eq!(check(&h), Verdict::Valid);
        h.push(hold(15, 30));
        assert_eq!(
            check(&h),
            Verdict::Invalid("2 clients believed they held kconc key c0 (cap 1) at 15 ns".into())
        );
    }
}
