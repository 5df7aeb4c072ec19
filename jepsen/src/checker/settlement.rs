//! The settlement ledger (G3, G5), exactly, per key: each settlement key (tenant, run,
//! epoch) is charged once, with one of the payloads sent for it, or not at all.
//!
//! Every key settles into a period of its own, and the final read of that period's spend
//! says exactly what the key was charged — so a double charge cannot hide behind another
//! key's unknown outcome. Per key, with every payload sent for it (the first one, and any
//! conflicting ones, raced or sent later):
//! - a payload acknowledged as settled was charged: the spend is exactly its tokens, and
//!   two different payloads both acknowledged is a conflict accepted;
//! - otherwise, if a payload was refused as a conflict, some other payload was applied
//!   first: the spend is the tokens of one payload whose outcome is unknown;
//! - otherwise the spend is 0 or the tokens of one payload whose outcome is unknown;
//! - a payload that definitely failed (another refusal) charged nothing;
//! - a payload delivered again after it was acknowledged (`redelivered`) is answered as a
//!   duplicate, never as a new settlement (its charge is judged by the spend as above).

use std::collections::BTreeMap;

use super::ops::{s, u};
use super::verdict::Verdict;
use crate::history::{Kind, Op};

/// What is known of one key.
#[derive(Default)]
struct Key<'a> {
    period: Option<&'a str>,
    /// Tokens of payloads acknowledged as settled.
    settled: Vec<u64>,
    /// Tokens of payloads whose outcome is unknown (or never completed).
    unknown: Vec<u64>,
    /// A payload was refused as a conflict: another one had been applied.
    conflicted: bool,
}

/// What is known of every key sent: its payloads' outcomes, from the `settle` and
/// `settle-conflict` ops (an invoke never completed counts as unknown).
fn keys(ops: &[Op]) -> Result<BTreeMap<&str, Key<'_>>, Verdict> {
    let mut keys: BTreeMap<&str, Key> = BTreeMap::new();
    // Invokes not yet completed, per (process, f).
    let mut pending: BTreeMap<(u64, &str), (&str, u64)> = BTreeMap::new();
    for op in ops
        .iter()
        .filter(|o| o.f == "settle" || o.f == "settle-conflict")
    {
        let (Some(key), Some(tokens)) = (s(op, "key"), u(op, "tokens")) else {
            return Err(Verdict::Unknown(format!(
                "malformed {} op: {}",
                op.f, op.value
            )));
        };
        let k = keys.entry(key).or_default();
        match op.kind {
            Kind::Invoke => {
                if let Some(p) = s(op, "period") {
                    k.period = Some(p);
                }
                pending.insert((op.process, op.f.as_str()), (key, tokens));
                continue;
            }
            Kind::Ok => k.settled.push(tokens),
            Kind::Info => k.unknown.push(tokens),
            Kind::Fail => {
                if s(op, "error") == Some("conflict") {
                    k.conflicted = true;
                }
            }
        }
        pending.remove(&(op.process, op.f.as_str()));
    }
    for (key, tokens) in pending.into_values() {
        keys.entry(key).or_default().unknown.push(tokens);
    }
    Ok(keys)
}

impl Key<'_> {
    /// Whether `spent`, what the final read found charged to `key`'s period, is one of
    /// the charges its payloads' outcomes allow.
    fn judge(&self, key: &str, spent: u64) -> Result<(), Verdict> {
        let mut settled = self.settled.clone();
        settled.sort_unstable();
        settled.dedup();
        if settled.len() > 1 {
            return Err(Verdict::Invalid(format!(
                "key {key}: two different payloads were both settled ({settled:?} tokens)"
            )));
        }
        if let Some(t) = settled.first() {
            if spent != *t {
                return Err(Verdict::Invalid(format!(
                    "key {key}: charged {spent} tokens, but the payload acknowledged was {t}{}",
                    if spent > *t {
                        " (charged twice?)"
                    } else {
                        " (lost?)"
                    }
                )));
            }
        } else if !self.unknown.contains(&spent) && (self.conflicted || spent != 0) {
            return Err(Verdict::Invalid(format!(
                "key {key}: charged {spent} tokens; possible: {}{:?} (outcomes unknown){}",
                if self.conflicted { "" } else { "0 or " },
                self.unknown,
                if self.conflicted {
                    ", and a conflict refusal says one was applied"
                } else {
                    ""
                }
            )));
        }
        Ok(())
    }
}

pub fn check(ops: &[Op]) -> Verdict {
    if let Some(op) = ops.iter().find(|o| {
        o.kind == Kind::Ok
            && o.f == "settle"
            && o.value.get("redelivered") == Some(&true.into())
            && o.value.get("duplicate") == Some(&false.into())
    }) {
        return Verdict::Invalid(format!(
            "key {}: a payload delivered again after its acknowledgement was answered as a new settlement",
            s(op, "key").unwrap_or("?")
        ));
    }
    let keys = match keys(ops) {
        Ok(keys) => keys,
        Err(verdict) => return verdict,
    };
    let spent: BTreeMap<&str, u64> = ops
        .iter()
        .filter(|o| o.kind == Kind::Ok && o.f == "spent")
        .filter_map(|o| Some((s(o, "period")?, u(o, "tokens")?)))
        .collect();
    let (mut judged, mut unread) = (0, 0);
    for (key, k) in &keys {
        let Some(spent) = k.period.and_then(|p| spent.get(p)).copied() else {
            unread += 1;
            continue;
        };
        judged += 1;
        if let Err(verdict) = k.judge(key, spent) {
            return verdict;
        }
    }
    if judged == 0 {
        return Verdict::Unknown(format!(
            "no settled key was read back ({} keys, {unread} unread)",
            keys.len()
        ));
    }
    if unread > 0 {
        return Verdict::Unknown(format!(
            "{unread} of {} keys were not read back",
            keys.len()
        ));
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    fn settle(process: u64, kind: Kind, key: &str, tokens: u64) -> Op {
        let mut v = json!({"key": key, "tokens": tokens, "period": format!("p-{key}")});
        if kind == Kind::Fail {
            v["error"] = "conflict".into();
        }
        op(process, kind, "settle", v, 1)
    }

    /// Process 2's payload for key `a` (6 tokens), raced against process 1's; a failure is
    /// the conflict refusal.
    fn conflicting(kind: Kind, time_ns: u64) -> Op {
        let mut v = json!({"key": "a", "tokens": 6});
        if kind == Kind::Fail {
            v["error"] = "conflict".into();
        }
        op(2, kind, "settle-conflict", v, time_ns)
    }

    /// Process 1's settles, each (key, tokens, how it completed): its invoke and completion.
    fn settles(each: &[(&str, u64, Kind)]) -> Vec<Op> {
        each.iter()
            .flat_map(|(key, tokens, kind)| {
                [
                    settle(1, Kind::Invoke, key, *tokens),
                    settle(1, *kind, key, *tokens),
                ]
            })
            .collect()
    }

    /// Key a settled with 5 tokens, completing as `first`, and a conflicting payload for the
    /// same key, completing as `second`.
    fn raced(first: Kind, second: Kind) -> Vec<Op> {
        let mut h = settles(&[("a", 5, first)]);
        h.extend([conflicting(Kind::Invoke, 2), conflicting(second, 3)]);
        h
    }

    fn spent(key: &str, tokens: u64) -> Op {
        op(
            0,
            Kind::Ok,
            "spent",
            json!({"period": format!("p-{key}"), "tokens": tokens}),
            9,
        )
    }

    #[test]
    fn each_key_charged_with_its_acknowledged_or_possible_payload_is_valid() {
        let mut h = settles(&[
            ("a", 5, Kind::Ok),
            ("b", 3, Kind::Info),
            ("c", 4, Kind::Info),
        ]);
        h.extend([spent("a", 5), spent("b", 3), spent("c", 0)]);
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn a_double_charge_cannot_hide_behind_another_keys_unknown() {
        // Key a acknowledged 5 and charged 10; key b's unknown 5 never applied. An aggregate
        // check (10 <= 5 + 5) would let this pass.
        let mut h = settles(&[("a", 5, Kind::Ok), ("b", 5, Kind::Info)]);
        h.extend([spent("a", 10), spent("b", 0)]);
        assert!(matches!(check(&h), Verdict::Invalid(d) if d.contains("key a")));
    }

    #[test]
    fn a_conflict_after_an_unknown_outcome_decides_which_payload_applied() {
        // The first payload's outcome is unknown; a conflicting one raced it and was refused:
        // the first was applied, so its tokens must be charged.
        let with = |t| {
            let mut h = raced(Kind::Info, Kind::Fail);
            h.push(spent("a", t));
            h
        };
        assert_eq!(check(&with(5)), Verdict::Valid);
        assert!(matches!(check(&with(0)), Verdict::Invalid(_)));
        assert!(matches!(check(&with(6)), Verdict::Invalid(_)));
    }

    #[test]
    fn a_redelivered_payload_must_be_a_duplicate_and_charge_once() {
        let redelivered = |kind, duplicate: bool| {
            let mut o = settle(1, kind, "a", 5);
            o.value["redelivered"] = true.into();
            if kind == Kind::Ok {
                o.value["duplicate"] = duplicate.into();
            }
            o
        };
        let with = |duplicate, charged| {
            let mut h = settles(&[("a", 5, Kind::Ok)]);
            h.extend([
                redelivered(Kind::Invoke, false),
                redelivered(Kind::Ok, duplicate),
                spent("a", charged),
            ]);
            h
        };
        assert_eq!(check(&with(true, 5)), Verdict::Valid);
        assert!(
            matches!(check(&with(true, 10)), Verdict::Invalid(d) if d.contains("charged twice"))
        );
        assert!(
            matches!(check(&with(false, 5)), Verdict::Invalid(d) if d.contains("as a new settlement"))
        );
    }

    #[test]
    fn two_payloads_settled_is_invalid_and_an_unread_key_unknown() {
        let mut h = raced(Kind::Ok, Kind::Ok);
        h.push(spent("a", 5));
        assert!(matches!(check(&h), Verdict::Invalid(d) if d.contains("both settled")));
        assert!(matches!(check(&h[..2]), Verdict::Unknown(_)));
    }
}
