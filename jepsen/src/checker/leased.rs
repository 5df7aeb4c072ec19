//! G1 with token leases, in spend time: over any window, the tokens of a leased limit that
//! the cluster granted and the lease holders spent from their local buckets together never
//! exceed `burst + per_second × window` (the machine's essay, "Token leases").
//!
//! Every `lease-take` is judged alike: a cluster grant by its invoke and acknowledgement, a
//! local spend by the instants just before and just after `Leased::try_take` decided it,
//! both on the harness clock. A take counts in the window `[a, b]` when both of its instants
//! are inside, and the bound is `rate.rs`'s: the rate allowed at the fastest clock rate of
//! the leaders that could have led (the clock nemesis, `WEIR_TEST_CLOCK_RATE`), and one
//! log millisecond more. Applying the leaders' rate to the holders' refill too is
//! generous by at most that factor: a holder refills on its own boot clock. What the
//! essay's argument allows and nothing more: a holder that stopped at its belief deadline
//! (the send time of its last acknowledged keep-alive plus the TTL, less the margin, which
//! covers the clock rates the nemesis sets) spent nothing after its lease lapsed, and a
//! lapsed lease's tokens are never spent again by the cluster, so no window gets more.
//!
//! The Envoy holders' takes (`"rls": true`, `workload/rls.rs`) are judged alike on their
//! limit: a node decided each between the request's send and the answer's receipt, from
//! a lease of its own or through the cluster; a node that spends its lease past its belief
//! deadline, or more than its lease holds, puts that limit over the bound.
//!
//! A violation names, per limit, the window furthest over the bound.
//!
//! Unknown when the history has lease takes but none decided locally and no Envoy take
//! granted (whose answer does not tell where it was decided): a run in which no lease
//! could have spent is not a pass of this property.

use std::collections::BTreeMap;

use super::ops::oks;
use super::rate::{Clocks, Takes, add_take, worst_over_bound};
use super::verdict::Verdict;
use crate::history::Op;

/// Whether the history has lease takes (a run with `--lease-holders`).
pub fn present(ops: &[Op]) -> bool {
    ops.iter().any(|o| o.f == "lease-take")
}

pub fn check(ops: &[Op]) -> Verdict {
    let clocks = Clocks::of(ops);
    let mut by_limit: Takes = BTreeMap::new();
    let mut local = 0u64;
    let mut rls = 0u64;
    for op in oks(ops, "lease-take") {
        if let Err(why) = add_take(&mut by_limit, op) {
            return Verdict::Unknown(why);
        }
        if op.value.get("local").and_then(|l| l.as_bool()) == Some(true) {
            local += 1;
        }
        if op.value.get("rls").and_then(|l| l.as_bool()) == Some(true) {
            rls += 1;
        }
    }
    if local == 0 && rls == 0 {
        return Verdict::Unknown(
            "no lease take was decided locally and no Envoy take was granted".into(),
        );
    }
    let over: Vec<String> = by_limit
        .into_iter()
        .filter_map(|(limit, (rate, burst, takes))| {
            worst_over_bound(limit, rate, burst, takes, &clocks)
        })
        .collect();
    if over.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Invalid(format!(
            "{} (cluster grants and local spends together)",
            over.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use crate::history::Kind;
    use serde_json::json;

    /// A take of one token of a 4-burst, 10/s limit, decided within [from, to] ms.
    fn take(from_ms: u64, to_ms: u64, local: bool) -> Op {
        op(
            1,
            Kind::Ok,
            "lease-take",
            json!({"limit": "leased-fast", "invoke_ns": from_ms * 1_000_000, "units": 1,
                "per_second": 10.0, "burst": 4, "local": local}),
            to_ms * 1_000_000,
        )
    }

    #[test]
    fn local_spends_and_cluster_grants_within_the_bound_are_valid() {
        // A holder with a cap of 3 spends it, the cluster grants its 1, then both refill:
        // the holder at 7/s, the cluster at 3/s, each taken as it comes.
        let mut h = vec![
            take(0, 0, true),
            take(0, 0, true),
            take(0, 0, true),
            take(0, 2, false),
        ];
        h.extend((1..=14).map(|i| take(i * 143, i * 143, true)));
        h.extend((1..=6).map(|i| take(i * 333, i * 333 + 2, false)));
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn a_holder_spending_beside_a_cluster_that_took_its_share_back_is_invalid() {
        // After the lapse the cluster refills at 10/s; a holder still spending at 7/s puts
        // the pair at 17/s: past the burst of 4 within a second.
        let mut h: Vec<Op> = (0..10).map(|i| take(i * 100, i * 100 + 2, false)).collect();
        h.extend((0..7).map(|i| take(i * 143, i * 143, true)));
        let Verdict::Invalid(why) = check(&h) else {
            panic!("17 tokens in a second of a 4 + 10/s limit passed");
        };
        assert!(
            why.contains("tokens of leased-fast granted within"),
            "{why}"
        );
    }

    /// An Envoy holder's take of `units` of a 12-burst, 10/s limit, asked at `from_ms` and
    /// answered at `to_ms`.
    fn rls_take(from_ms: u64, to_ms: u64, units: u64) -> Op {
        op(
            2,
            Kind::Ok,
            "lease-take",
            json!({"limit": "envoy:rls=hot", "invoke_ns": from_ms * 1_000_000, "units": units,
                "per_second": 10.0, "burst": 12, "node": 1, "rls": true}),
            to_ms * 1_000_000,
        )
    }

    #[test]
    fn envoy_takes_are_judged_on_their_limit_over_their_span() {
        // 12 at once, then 10 a second for two seconds: the bound exactly.
        let mut h: Vec<Op> = (0..6).map(|_| rls_take(0, 1, 2)).collect();
        h.extend((1..=20).map(|i| rls_take(i * 100, i * 100 + 1, 1)));
        assert_eq!(check(&h), Verdict::Valid);
        // Two more within those two seconds (a node spending past what it holds).
        h.extend([rls_take(1_000, 1_001, 2)]);
        let Verdict::Invalid(why) = check(&h) else {
            panic!("34 tokens within 2 s of a 12 + 10/s limit passed");
        };
        assert!(why.contains("envoy:rls=hot"), "{why}");
        // Answers that came late (a stopped node) count only in windows that hold them.
        let late: Vec<Op> = (0..6)
            .map(|_| rls_take(0, 1, 2))
            .chain((1..=20).map(|i| rls_take(i * 100, 5_000, 1)))
            .collect();
        assert_eq!(check(&late), Verdict::Valid);
    }

    #[test]
    fn takes_none_of_them_local_are_unknown() {
        assert!(matches!(check(&[take(0, 1, false)]), Verdict::Unknown(_)));
    }
}
