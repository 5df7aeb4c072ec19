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
//! - `redelivered duplicates`: acknowledged payloads delivered again and answered as
//!   duplicates (the exactly-once charge met a second delivery);
//! - `ceiling refusals`: reserves refused at `max_running` (`TooManyRuns`);
//! - `queued rounds`: rounds of tickets queued before a fault and granted after its heal;
//! - `skewed leaderships`: leaderships whose log clock the monitor saw run at least 2% off
//!   real time over three seconds or more (the clock nemesis' rate skew, observed);
//! - `multi-part grants`, `multi-part refusals`: requests of several parts on the keyed
//!   limits granted, and refused with nothing granted (`workload::keyed`); key counts in
//!   every history that has such requests;
//! - `snapshots built`, `snapshots sent`, `snapshots installed`, `snapshots loaded`:
//!   snapshots the nodes built, a leader sent to a follower (the last chunk taken),
//!   followers installed, and starts that loaded one, summed over the nodes, from their
//!   logs (the harness's `snapshots` fact); `snapshots built` is key when the run asked for
//!   frequent snapshots (`--snapshot-every`);
//! - `lost-fsync crashes`: nodes power-lost by the `power-loss` fault (kill -9, then every
//!   write not fsynced dropped), each restarted on what it had made durable; a key count
//!   when `power-loss` is requested.
//! - `local lease takes`, `lease lapses`: tokens the token-lease holders took from their
//!   local buckets, and their leases that ended with their session rather than by being
//!   given up (a crash, a close under the lease, a stall past the TTL: the lease counted as
//!   spent); key counts when the history has lease takes (`workload::leased`), the lapses
//!   only when a holder of `leased` (whose holders crash, close and stall) opened a lease;
//!   `local lease takes` is key only when lease holders (not only Envoy holders) ran.
//! - `envoy takes`: requests to the nodes' `ShouldRateLimit` answered `OK`
//!   (`workload::rls`); key when the history has such requests.
//!
//! Which counts are key follows the faults that fired in the run (the nemesis' `info` ops,
//! each naming its variant) and the workloads every run starts, so a key is required only
//! where the run cannot miss it. A requested fault that never fired is the `nemesis` row's
//! business (unknown), not this one's.
//!
//! | key | required when | why it cannot be missed then |
//! |---|---|---|
//! | `stale validations` | always | the reader validates released fences of every capped limit |
//! | `halted refusals` | always | the halter halts the tenant and agent scopes the admitters reserve in |
//! | `conflict refusals` | always | the ledger settles a conflicting payload after each settle |
//! | `redelivered duplicates` | the history has redelivered settles (every run since the ledger redelivers; a recorded older history has none) | the ledger delivers one acknowledged payload in four again, long after any fault could make it unknown |
//! | `ceiling refusals` | always | the ceiling setter lowers `max_running` under three admitters |
//! | `multi-part grants`, `multi-part refusals` | the history has requests of several parts | three processes send them without waiting on a bucket of 3 tokens and semaphore keys of one, all run long |
//! | `queued rounds` | any fault fired | every step queues a round before its fault |
//! | `leader changes` | `kill-leader`, `power-loss-leader`, `isolate-leader` or `pause-leader` fired, or on five nodes `kill-leader-and-one`, `power-loss-leader-and-one` or `split-3-2` | each stops or cuts off the leader for longer than an election while the others, a majority, elect one of themselves: a new (term, leader) pair |
//! | `deadline-ended beliefs`, `lease takeovers` | `pause-client`, `client-cut` or `client-delay` fired | the paused holder stops past its TTL, so its belief ends at its deadline, and the permit goes to a waiting holder of `fenced`; the cut client, pinned to its permit, is heard by no leader for longer than its TTL, so its deadline passes and the permit goes to a waiter of `cut` |
//! | `snapshots built` | the `snapshots` fact has a nonzero `every` of at most [`SNAPSHOT_EVERY_KEY`] | every node builds one each `every` entries; a run of a few seconds applies thousands |
//! | `snapshots built` | the `snapshots` fact has a nonzero `every` of at most [`SNAPSHOT_EVERY_KEY`] | every node builds one each `every` entries; a run of a few seconds applies thousands |
//! | `lost-fsync crashes` | a `power-loss` fault fired | each one power-loses a node (or two, or all of them) and restarts it |
//! | `envoy takes` | the history has Envoy holders' requests | each holder asks about 20 times a second on a limit refilling 10 a second |
//! | `local lease takes` | the history has lease holders' takes | the holders take from their local buckets as fast as they refill |
//! | `lease lapses` | a holder of `leased` opened a lease | six lives in ten of such a holder end in a crash, a close under the lease or a stall, and it lives 1–3 s |
//! | `skewed leaderships` | a `clocks` fault set every node's rate at least [`SKEW_SET`] off true | whichever node leads then runs skewed |
//!
//! A kill of one node, a partition other than `isolate-leader`, a delay or a leader stall
//! may or may not move the leader or let a lease lapse (G9 wants a stall to lapse none), and
//! after `kill-all` or a `clocks` rolling restart the old leader may resume its own term
//! (an unplanted `clock` run, 20 s, seed 1, saw no new pair), so they require neither count: before this table every `kill` and `partition` run that
//! happened to lapse no lease ended "unknown: never exercised: deadline-ended beliefs".

use std::collections::BTreeMap;

use super::ops::{s, u};
use super::verdict::Verdict;
use crate::history::{Kind, NEMESIS, Op};

/// A leadership counts as skewed when its log clock ran at least this far off real time...
const SKEW_SEEN: f64 = 0.02;

/// ...over at least this long (the applied log time lags by up to a few hundred ms, so a
/// shorter span could not tell 2% from noise).
const SKEW_SPAN_MS_MIN: u64 = 3_000;

/// `snapshots built` is key when the run asked for a snapshot at least this often.
pub const SNAPSHOT_EVERY_KEY: u64 = 1_000;

/// The `snapshots` fact's count `name` (0 without the fact).
fn snapshot_count(ops: &[Op], name: &str) -> u64 {
    ops.iter()
        .filter(|o| o.process == NEMESIS && o.f == "snapshots")
        .filter_map(|o| u(o, name))
        .sum()
}

/// How many ops `keep` selects.
fn count(ops: &[Op], keep: impl Fn(&Op) -> bool) -> u64 {
    ops.iter().filter(|o| keep(o)).count() as u64
}

/// Whether `op` is a failed op of one of `fs` whose error contains `error`.
fn refused(op: &Op, fs: &[&str], error: &str) -> bool {
    op.kind == Kind::Fail
        && fs.contains(&op.f.as_str())
        && s(op, "error").is_some_and(|e| e.contains(error))
}

/// A belief that ended at its deadline: told it may be lost at or after the library's
/// deadline (a hold recorded as the application saw it), or (a holder stopped whole, a
/// Python holder) ending at the deadline, which passed before the holder next heard.
fn lapsed(op: &Op) -> bool {
    if let (Some(told), Some(deadline)) = (u(op, "told_ns"), u(op, "deadline_ns")) {
        return told >= deadline;
    }
    matches!((u(op, "to_ns"), u(op, "deadline_ns"), u(op, "seen_ns")),
        (Some(to), Some(d), Some(seen)) if to == d && d < seen)
}

/// Per capped limit, the lapsed beliefs followed by the next grant (in fence order).
fn takeovers(holds: &[&Op]) -> u64 {
    let mut by_limit: BTreeMap<&str, Vec<(u64, bool)>> = BTreeMap::new();
    for h in holds {
        if let (Some(limit), Some(fence)) = (s(h, "limit"), u(h, "fence")) {
            by_limit.entry(limit).or_default().push((fence, lapsed(h)));
        }
    }
    by_limit
        .values_mut()
        .map(|v| {
            v.sort_unstable();
            v.windows(2).filter(|w| w[0].1).count() as u64
        })
        .sum()
}

/// Every count, in report order.
pub fn counts(ops: &[Op]) -> Vec<(&'static str, u64)> {
    let holds: Vec<&Op> = ops
        .iter()
        .filter(|o| o.kind == Kind::Ok && o.f == "hold")
        .collect();
    let deadline_ended = holds.iter().filter(|o| lapsed(o)).count() as u64;
    let nemesis = |f: &'static str| move |o: &Op| o.process == NEMESIS && o.f == f;
    let leaders = count(ops, nemesis("leader"));
    let stale = count(ops, |o| {
        o.kind == Kind::Ok && o.f == "validate" && o.value.get("held") == Some(&false.into())
    });
    let halted = count(ops, |o| refused(o, &["reserve", "acquire"], "alted"));
    let conflicts = count(ops, |o| {
        o.kind == Kind::Fail
            && (o.f == "settle" || o.f == "settle-conflict")
            && s(o, "error") == Some("conflict")
    });
    let redelivered = count(ops, |o| {
        o.kind == Kind::Ok
            && o.f == "settle"
            && o.value.get("redelivered") == Some(&true.into())
            && o.value.get("duplicate") == Some(&true.into())
    });
    let skewed = count(ops, |o| {
        let (real, log) = (u(o, "real_ms").unwrap_or(0), u(o, "log_ms").unwrap_or(0));
        nemesis("leadership")(o)
            && real >= SKEW_SPAN_MS_MIN
            && (log as f64 / real as f64 - 1.0).abs() >= SKEW_SEEN
    });
    let ceiling = count(ops, |o| refused(o, &["reserve-run"], "TooManyRuns"));
    let queued = count(ops, nemesis("queue-round"));
    // Each power-loss fault that fired: one node, or as many as it lists losses of (two,
    // or all of them).
    let lost_fsync = ops
        .iter()
        .filter(|o| o.kind == Kind::Info && nemesis("power-loss")(o))
        .map(|o| {
            o.value["lost"]
                .as_array()
                .map_or(1, |lost| lost.len() as u64)
        })
        .sum();
    vec![
        ("deadline-ended beliefs", deadline_ended),
        ("lease takeovers", takeovers(&holds)),
        ("leader changes", leaders.saturating_sub(1)),
        ("stale validations", stale),
        ("halted refusals", halted),
        ("conflict refusals", conflicts),
        ("redelivered duplicates", redelivered),
        ("ceiling refusals", ceiling),
        ("queued rounds", queued),
        ("skewed leaderships", skewed),
        ("lost-fsync crashes", lost_fsync),
        ("snapshots built", snapshot_count(ops, "built")),
        ("snapshots sent", snapshot_count(ops, "sent")),
        ("snapshots installed", snapshot_count(ops, "installed")),
        ("snapshots loaded", snapshot_count(ops, "loaded")),
        (
            "multi-part grants",
            count(ops, |o| o.kind == Kind::Ok && o.f == "multi"),
        ),
        (
            "multi-part refusals",
            count(ops, |o| refused(o, &["multi"], "refused")),
        ),
        (
            "local lease takes",
            count(ops, |o| {
                o.kind == Kind::Ok
                    && o.f == "lease-take"
                    && o.value.get("local") == Some(&true.into())
            }),
        ),
        (
            "envoy takes",
            count(ops, |o| {
                o.kind == Kind::Ok
                    && o.f == "lease-take"
                    && o.value.get("rls") == Some(&true.into())
            }),
        ),
        (
            "lease lapses",
            count(ops, |o| {
                o.f == "lease" && matches!(s(o, "event"), Some("crash" | "close" | "stall"))
            }),
        ),
    ]
}

/// A clock fault makes `skewed leaderships` key when it set every node at least this far
/// off true: [`SKEW_SEEN`] plus room for the monitor's lag.
pub const SKEW_SET: f64 = 0.03;

/// The key counts for the run in `ops`, by the faults that fired (see the module's table).
pub fn keys(ops: &[Op]) -> Vec<&'static str> {
    let fired: Vec<&Op> = ops
        .iter()
        .filter(|o| o.process == NEMESIS && o.kind == Kind::Info && o.value.get("fault").is_some())
        // A clock rate from the environment is a setting of the whole run, not a fault.
        .filter(|o| s(o, "fault") != Some("env-clocks"))
        .collect();
    let fired_any = |names: &[&str]| {
        fired
            .iter()
            .any(|o| s(o, "fault").is_some_and(|f| names.contains(&f)))
    };
    let mut keys = vec![
        "stale validations",
        "halted refusals",
        "conflict refusals",
        "ceiling refusals",
    ];
    if ops
        .iter()
        .any(|o| o.f == "settle" && o.value.get("redelivered").is_some())
    {
        keys.push("redelivered duplicates");
    }
    if !fired.is_empty() {
        keys.push("queued rounds");
    }
    if super::keyed::present(ops) {
        keys.extend(["multi-part grants", "multi-part refusals"]);
    }
    let rls = |o: &Op| o.value.get("rls") == Some(&true.into());
    if ops.iter().any(|o| o.f == "lease-take" && !rls(o)) {
        keys.push("local lease takes");
    }
    if ops.iter().any(|o| o.f == "lease-take" && rls(o)) {
        keys.push("envoy takes");
    }
    let leased = crate::setup::LEASED_LIMITS[0].0;
    if ops
        .iter()
        .any(|o| o.f == "lease" && s(o, "event") == Some("open") && s(o, "limit") == Some(leased))
    {
        keys.push("lease lapses");
    }
    if ops
        .iter()
        .filter(|o| o.process == NEMESIS && o.f == "snapshots")
        .any(|o| u(o, "every").is_some_and(|n| n > 0 && n <= SNAPSHOT_EVERY_KEY))
    {
        keys.push("snapshots built");
    }
    if fired_any(&[
        "kill-leader",
        "power-loss-leader",
        "isolate-leader",
        "pause-leader",
        "kill-leader-and-one",
        "power-loss-leader-and-one",
        "split-3-2",
    ]) {
        keys.push("leader changes");
    }
    if fired_any(&["pause-client", "client-cut", "client-delay"]) {
        keys.extend(["deadline-ended beliefs", "lease takeovers"]);
    }
    let all_skewed = fired
        .iter()
        .filter(|o| s(o, "fault") == Some("clocks"))
        .any(|o| {
            o.value["nodes"].as_array().is_some_and(|nodes| {
                !nodes.is_empty()
                    && nodes.iter().all(|n| {
                        n["rate"]
                            .as_f64()
                            .is_some_and(|r| (r - 1.0).abs() >= SKEW_SET)
                    })
            })
        });
    if all_skewed {
        keys.push("skewed leaderships");
    }
    if fired_any(&[
        "power-loss",
        "power-loss-leader",
        "power-loss-all",
        "power-loss-two",
        "power-loss-leader-and-one",
    ]) {
        keys.push("lost-fsync crashes");
    }
    keys
}

pub fn check(ops: &[Op]) -> Verdict {
    let counts = counts(ops);
    let zero: Vec<&str> = keys(ops)
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{fact, op};
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
    fn an_application_told_at_or_after_its_deadline_lapsed_and_one_released_did_not() {
        let told = |fence, told: Option<u64>| {
            let mut o = hold(fence, told.unwrap_or(50), 100, 120);
            o.value["told_ns"] = told.into();
            o.value["application"] = true.into();
            o
        };
        let h = [
            told(3, Some(103)),
            told(5, None),
            told(7, Some(100)),
            told(9, Some(80)),
        ];
        let c = counts(&h);
        assert!(c.contains(&("deadline-ended beliefs", 2)), "{c:?}");
        assert!(c.contains(&("lease takeovers", 2)), "{c:?}");
    }

    fn fired(value: serde_json::Value) -> Op {
        fact("fault", value, 1)
    }

    /// The four refusals and the duplicate every run's workloads produce.
    fn always() -> Vec<Op> {
        vec![
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
                Kind::Ok,
                "settle",
                json!({"redelivered": true, "duplicate": true}),
                1,
            ),
            op(
                1,
                Kind::Fail,
                "reserve-run",
                json!({"error": "Refused(TooManyRuns { running: 2 })"}),
                1,
            ),
        ]
    }

    #[test]
    fn power_losses_count_their_nodes_and_are_key_when_fired() {
        // As recorded: one loss of one node, a list of them for several.
        let nemesis = |fault: &str, nodes: usize| {
            let lost = match nodes {
                1 => json!({}),
                n => json!(vec![json!({}); n]),
            };
            fact("power-loss", json!({"fault": fault, "lost": lost}), 1)
        };
        let failed = op(NEMESIS, Kind::Fail, "power-loss", json!({"error": "x"}), 1);
        let h = [
            nemesis("power-loss", 1),
            nemesis("power-loss-all", 3),
            failed,
        ];
        assert!(counts(&h).contains(&("lost-fsync crashes", 4)));
        assert!(keys(&h).contains(&"lost-fsync crashes"));
        assert!(keys(&[nemesis("power-loss-leader", 1)]).contains(&"leader changes"));
        // Five nodes: two at once, or all five.
        let five = [nemesis("power-loss-two", 2), nemesis("power-loss-all", 5)];
        assert!(counts(&five).contains(&("lost-fsync crashes", 7)));
        assert!(keys(&five).contains(&"lost-fsync crashes"));
        let with_leader = [nemesis("power-loss-leader-and-one", 2)];
        assert!(keys(&with_leader).contains(&"leader changes"));
        assert!(
            !keys(&[fired(json!({"fault": "kill", "node": 2}))]).contains(&"lost-fsync crashes")
        );
        // Fired, but no node power-lost (the count reads the power-loss ops themselves).
        let mut lost = always();
        lost.push(fired(json!({"fault": "power-loss", "node": 1})));
        assert!(matches!(check(&lost), Verdict::Unknown(d) if d.contains("lost-fsync crashes")));
    }

    #[test]
    fn requests_of_several_parts_are_counted_and_key_when_present() {
        let multi = |kind, error: &str| op(1, kind, "multi", json!({"error": error}), 1);
        let mut h = always();
        h.push(multi(Kind::Invoke, ""));
        h.push(multi(Kind::Ok, ""));
        assert!(
            matches!(check(&h), Verdict::Unknown(d) if d == "never exercised: multi-part refusals")
        );
        // An unknown outcome is no refusal.
        h.push(multi(Kind::Info, "refused? the connection closed"));
        assert!(counts(&h).contains(&("multi-part refusals", 0)));
        h.push(multi(Kind::Fail, "refused: busy"));
        assert!(counts(&h).contains(&("multi-part grants", 1)));
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn lease_takes_and_lapses_are_counted_and_key_when_leases_ran() {
        let lease = |event: &str, limit: &str| {
            op(
                48,
                Kind::Info,
                "lease",
                json!({"event": event, "limit": limit}),
                1,
            )
        };
        let local = op(
            48,
            Kind::Ok,
            "lease-take",
            json!({"limit": "leased", "local": true}),
            2,
        );
        let fast_only = vec![lease("open", "leased-fast"), local.clone()];
        assert!(keys(&fast_only).contains(&"local lease takes"));
        assert!(!keys(&fast_only).contains(&"lease lapses"));
        let mut h = vec![lease("open", "leased"), local];
        assert!(keys(&h).contains(&"lease lapses"));
        assert!(counts(&h).contains(&("lease lapses", 0)));
        h.extend([
            lease("crash", "leased"),
            lease("close", "leased"),
            lease("end", "leased"),
        ]);
        let c = counts(&h);
        assert!(c.contains(&("lease lapses", 2)), "{c:?}");
        assert!(c.contains(&("local lease takes", 1)), "{c:?}");
    }

    #[test]
    fn a_key_count_of_zero_is_unknown() {
        assert!(matches!(check(&[]), Verdict::Unknown(d) if d.contains("stale validations")));
        assert_eq!(check(&always()), Verdict::Valid);
        // Redelivered, and answered as a new settlement: no duplicate met.
        let mut charged_again: Vec<Op> = always()
            .into_iter()
            .filter(|o| o.value.get("redelivered").is_none())
            .collect();
        assert_eq!(check(&charged_again), Verdict::Valid);
        charged_again.push(op(
            1,
            Kind::Ok,
            "settle",
            json!({"redelivered": true, "duplicate": false}),
            1,
        ));
        assert!(
            matches!(check(&charged_again), Verdict::Unknown(d) if d == "never exercised: redelivered duplicates")
        );
        let mut kill_leader = always();
        kill_leader.push(fired(json!({"fault": "kill-leader", "node": 1})));
        assert!(
            matches!(check(&kill_leader), Verdict::Unknown(d) if d.contains("leader changes") && d.contains("queued rounds") && !d.contains("deadline"))
        );
    }

    #[test]
    fn a_kill_or_a_partition_that_need_not_move_the_leader_requires_neither_count() {
        for fault in [
            json!({"fault": "kill", "node": 2}),
            json!({"fault": "isolate", "node": 3, "cut": "silent"}),
            json!({"fault": "majorities-ring", "cut": "reset"}),
            json!({"fault": "delay", "ms": 10, "jitter_ms": 5}),
            json!({"fault": "kill-client", "kill": 1, "killed_ns": 5}),
        ] {
            let k = keys(&[fired(fault.clone())]);
            assert!(k.contains(&"queued rounds"), "{fault}");
            assert!(!k.contains(&"leader changes"), "{fault}");
            assert!(!k.contains(&"deadline-ended beliefs"), "{fault}");
        }
    }

    #[test]
    fn snapshots_are_counted_from_the_fact_and_built_ones_key_when_asked_for_often() {
        let snapshots = |every: u64, built: u64| {
            fact(
                "snapshots",
                json!({"every": every, "built": built, "sent": 2, "installed": 1, "loaded": 4, "judged": 3}),
                9,
            )
        };
        let c = counts(&[snapshots(500, 12)]);
        for (name, n) in [
            ("snapshots built", 12),
            ("snapshots sent", 2),
            ("snapshots installed", 1),
            ("snapshots loaded", 4),
        ] {
            assert!(c.contains(&(name, n)), "{name}: {c:?}");
        }
        let mut none_built = always();
        none_built.push(snapshots(500, 0));
        assert!(
            matches!(check(&none_built), Verdict::Unknown(d) if d == "never exercised: snapshots built")
        );
        // The nodes' own default (10,000 entries), or none asked for: not key.
        for every in [0, 10_000] {
            let mut h = always();
            h.push(snapshots(every, 0));
            assert_eq!(check(&h), Verdict::Valid, "every {every}");
        }
    }

    #[test]
    fn each_fault_requires_the_counts_it_cannot_miss() {
        for f in ["kill-leader", "isolate-leader", "pause-leader"] {
            assert!(
                keys(&[fired(json!({"fault": f}))]).contains(&"leader changes"),
                "{f}"
            );
        }
        let paused = keys(&[fired(json!({"fault": "pause-client", "ms": 4_000}))]);
        assert!(paused.contains(&"deadline-ended beliefs") && paused.contains(&"lease takeovers"));
        let clocks = |rates: [f64; 3]| {
            fired(
                json!({"fault": "clocks", "nodes": rates.iter().map(|r| json!({"wall_skew_ms": 0, "rate": r})).collect::<Vec<_>>()}),
            )
        };
        let skewed = keys(&[clocks([0.96, 1.04, 1.031])]);
        assert!(skewed.contains(&"skewed leaderships"));
        // A restarted leader may resume its own term: neither a rolling restart nor a
        // kill of all three guarantees a new (term, leader) pair.
        assert!(!skewed.contains(&"leader changes"));
        assert!(!keys(&[fired(json!({"fault": "kill-all"}))]).contains(&"leader changes"));
        assert!(!keys(&[clocks([0.96, 1.01, 1.04])]).contains(&"skewed leaderships"));
        // A fault that failed to inject (a `fail` op) requires nothing.
        let failed = op(
            NEMESIS,
            Kind::Fail,
            "kill",
            json!({"error": "no leader"}),
            1,
        );
        assert_eq!(keys(&[failed]).len(), 4);
    }
}
