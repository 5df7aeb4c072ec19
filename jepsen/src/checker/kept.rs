//! Permits kept through faults that leave a quorum up (G9, single and double faults): a
//! holder with a TTL of at least 3 s (every harness holder, Rust and Python: `setup::TTL`)
//! whose client could reach a quorum throughout loses no permit to a stalled or killed
//! leader, nor to two such faults within one TTL (the compound kinds, `nemesis` module
//! doc).
//!
//! A fault's window runs from its invoke to [`AFTER_HEAL_MS`] after its heal (a deadline
//! that passed during it can be noticed a little later), and ends early at the next fault's
//! invoke. A window is judged when every fault injected in it keeps a quorum up and every
//! client's links whole: a leader pause, a kill of one node or of the leader (on five nodes
//! also of two), and the compound kinds. A window that also holds another fault (a
//! partition, a kill of every node, a power loss, a delay, a clock or membership change, a
//! client fault) is not judged: a partition or a lost quorum is the one way G9 lets a
//! permit go. Nor is a window that opens less than a TTL after the heal of such a fault: it
//! may have cost the holders their renewals already, leaving them less than a TTL of belief
//! to meet the next fault with (a client's own pause aside: its holder is not counted). A
//! fault that failed to fire judges nothing.
//!
//! A loss counts as the `stalls` checker counts one: a `hold` recording its permit lost to
//! its deadline or its session's expiry, or an `acquire` failed because its session ended
//! while it waited. The process the `client-pause` nemesis stops is left out (its own pause
//! costs it its permit). Losses to halts are the halts checker's. Unlike `stalls`, a window
//! is judged however long its election took: a cluster slower to elect than a holder's
//! TTL loses the permit to the cluster, and this checker says so.

use std::collections::BTreeSet;

use super::ops::s;
use super::stalls::lost_session;
use super::verdict::Verdict;
use crate::history::{Kind, NEMESIS, Op};
use crate::nemesis::{ALL, COMPOUND};

/// How long after a heal a loss still counts against the fault: the session TTL (3 s).
pub const AFTER_HEAL_MS: u64 = 3_000;

/// The `fault` names of the kills that take the quorum (every node at once).
const QUORUM_KILLS: [&str; 2] = ["kill-all", "power-loss-all"];

/// One fault window as the nemesis recorded it.
struct Window {
    from_ns: u64,
    until_ns: u64,
    /// Kinds that fired in it.
    fired: Vec<String>,
    /// A fault in it that does not keep a quorum and the links (a client's own pause
    /// aside), if any.
    uncovered: Option<String>,
    /// Why it is not judged: that fault, or one healed less than a TTL before it opened.
    not_judged: Option<String>,
}

/// Whether a fault of `kind` (its recorded `fault` name `what`) keeps a quorum up and every
/// client's links whole.
fn keeps_quorum(kind: &str, what: Option<&str>) -> bool {
    match kind {
        "pause" => true,
        "kill" => !what.is_some_and(|w| QUORUM_KILLS.contains(&w)),
        k => COMPOUND.contains(&k),
    }
}

/// Whether `f` names a fault kind (the nemesis process also records heals and the
/// monitor's facts).
fn is_fault(f: &str) -> bool {
    ALL.contains(&f) || COMPOUND.contains(&f)
}

/// The fault windows of `ops`, in order.
fn windows(ops: &[Op]) -> Vec<Window> {
    let mut done: Vec<Window> = vec![];
    let mut open: Option<Window> = None;
    // The last heal, and the fault it ended that G9 does not cover, if any.
    let mut healed: Option<(u64, Option<String>)> = None;
    for o in ops.iter().filter(|o| o.process == NEMESIS) {
        match (o.f.as_str(), o.kind) {
            ("heal", Kind::Info) => {
                if let Some(mut w) = open.take() {
                    w.until_ns = o.time_ns + AFTER_HEAL_MS * 1_000_000;
                    healed = Some((o.time_ns, w.uncovered.clone()));
                    done.push(w);
                }
            }
            // The environment's clock rates (in force for the whole run, no heal) are not a
            // fault of the nemesis: they open no window.
            ("clock", _) if s(o, "fault") == Some("env-clocks") => {}
            (kind, Kind::Invoke) if is_fault(kind) => {
                if let Some(last) = done.last_mut() {
                    last.until_ns = last.until_ns.min(o.time_ns);
                }
                // A fault G9 does not cover, healed less than a TTL before, may have cost the
                // holders their renewals already: what follows is not judged alone.
                let after = healed.as_ref().and_then(|(at, why)| {
                    let ago_ms = o.time_ns.saturating_sub(*at) / 1_000_000;
                    why.as_ref()
                        .filter(|_| ago_ms < AFTER_HEAL_MS)
                        .map(|why| format!("{why} healed {ago_ms} ms before"))
                });
                open.get_or_insert(Window {
                    from_ns: o.time_ns,
                    until_ns: u64::MAX,
                    fired: vec![],
                    uncovered: None,
                    not_judged: after,
                });
            }
            (kind, Kind::Info) if is_fault(kind) => {
                if let Some(w) = open.as_mut() {
                    let what = s(o, "fault");
                    if !keeps_quorum(kind, what) {
                        let what = what.unwrap_or(kind).to_string();
                        // A client's own pause costs only its own permits, which are not
                        // counted: it makes no window after it suspect.
                        if kind != "client-pause" && w.uncovered.is_none() {
                            w.uncovered = Some(what.clone());
                        }
                        w.not_judged.get_or_insert(what);
                    }
                    w.fired.push(kind.to_string());
                }
            }
            _ => {}
        }
    }
    done.extend(open);
    done
}

/// What the judged windows came to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tally {
    /// Windows in which a fault fired.
    pub windows: usize,
    /// Of those, the ones judged.
    pub judged: usize,
    /// Processes that lost a permit (or a waiting session) in a judged window.
    pub losers: Vec<u64>,
    /// The faults of the judged windows with losses, once each.
    pub costly: Vec<String>,
    /// Why windows were not judged, once each.
    pub not_judged: Vec<String>,
}

pub fn count(ops: &[Op]) -> Tally {
    let windows: Vec<Window> = windows(ops)
        .into_iter()
        .filter(|w| !w.fired.is_empty())
        .collect();
    let mut tally = Tally {
        windows: windows.len(),
        ..Tally::default()
    };
    let paused: BTreeSet<u64> = ops
        .iter()
        .filter(|o| o.f == "client-pause")
        .map(|o| o.process)
        .collect();
    let mut losers = BTreeSet::new();
    let mut costly = BTreeSet::new();
    let mut not_judged = BTreeSet::new();
    for w in &windows {
        if let Some(why) = &w.not_judged {
            not_judged.insert(format!("with {why}"));
            continue;
        }
        tally.judged += 1;
        for o in ops.iter().filter(|o| {
            lost_session(o)
                && !paused.contains(&o.process)
                && (w.from_ns..=w.until_ns).contains(&o.time_ns)
        }) {
            losers.insert(o.process);
            costly.insert(w.fired.join("+"));
        }
    }
    tally.losers = losers.into_iter().collect();
    tally.costly = costly.into_iter().collect();
    tally.not_judged = not_judged.into_iter().collect();
    tally
}

pub fn check(ops: &[Op]) -> Verdict {
    let t = count(ops);
    if t.judged == 0 {
        return Verdict::Unknown(match t.windows {
            0 => "no fault fired".into(),
            n => format!(
                "none of {n} fault windows judged ({})",
                t.not_judged.join("; ")
            ),
        });
    }
    if t.losers.is_empty() {
        return Verdict::Valid;
    }
    let processes: Vec<String> = t.losers.iter().map(|p| p.to_string()).collect();
    Verdict::Invalid(format!(
        "G9: {} holders lost a permit or a waiting session to faults that kept a quorum up ({}), of {} judged windows: processes {}",
        t.losers.len(),
        t.costly.join(", "),
        t.judged,
        processes.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::stalls::SESSION_LOSSES;
    use crate::checker::test_support::{fact, op};
    use serde_json::json;

    const S: u64 = 1_000_000_000;

    fn hold(process: u64, lost: Option<&str>, at: u64) -> Op {
        op(process, Kind::Ok, "hold", json!({"lost": lost}), at)
    }

    /// A fault of `kind` (recorded `fault` name `what`) invoked at `from`, fired at once,
    /// healed at `heal`.
    fn fault(kind: &str, what: &str, from: u64, heal: u64) -> Vec<Op> {
        vec![
            op(NEMESIS, Kind::Invoke, kind, json!({}), from),
            fact(kind, json!({"fault": what}), from + S / 10),
            op(NEMESIS, Kind::Invoke, "heal", json!({}), heal),
            fact("heal", json!({"ok": true}), heal + S / 10),
        ]
    }

    #[test]
    fn a_permit_lost_to_a_stall_then_a_kill_is_flagged_once_per_holder() {
        let mut ops = fault("stall-then-kill", "stall-then-kill", 10 * S, 22 * S);
        ops.push(hold(3, Some(SESSION_LOSSES[0]), 19 * S));
        ops.push(hold(3, Some(SESSION_LOSSES[1]), 20 * S));
        // A Python holder (any process number) lost its permit 2 s after the heal.
        ops.push(hold(41, Some(SESSION_LOSSES[0]), 24 * S));
        ops.push(hold(5, None, 19 * S));
        let t = count(&ops);
        assert_eq!((t.windows, t.judged, t.losers.clone()), (1, 1, vec![3, 41]));
        match check(&ops) {
            Verdict::Invalid(why) => {
                assert!(why.contains("2 holders"), "{why}");
                assert!(why.contains("stall-then-kill"), "{why}");
                assert!(why.contains("processes 3, 41"), "{why}");
            }
            other => panic!("a lost permit is flagged, not {other:?}"),
        }
    }

    #[test]
    fn a_run_whose_holders_kept_their_permits_is_valid() {
        let mut ops = fault("kill-then-kill", "kill-then-kill", 10 * S, 18 * S);
        ops.extend(fault("pause", "pause-leader", 30 * S, 35 * S));
        ops.push(hold(3, None, 12 * S));
        ops.push(hold(4, None, 31 * S));
        // Outside every window, to a halt, or the client-pause nemesis's own process.
        ops.push(hold(5, Some(SESSION_LOSSES[0]), 5 * S));
        ops.push(hold(6, Some("halted (tenant): stop"), 12 * S));
        ops.push(op(7, Kind::Ok, "client-pause", json!({}), 40 * S));
        ops.push(hold(7, Some(SESSION_LOSSES[0]), 32 * S));
        let t = count(&ops);
        assert_eq!((t.windows, t.judged, t.losers.len()), (2, 2, 0));
        assert_eq!(check(&ops), Verdict::Valid);
    }

    #[test]
    fn a_window_with_a_partition_or_a_lost_quorum_is_named_not_judged() {
        let mut ops = fault("kill", "kill-all", 10 * S, 14 * S);
        ops.extend(fault("partition", "isolate-leader", 20 * S, 24 * S));
        ops.push(hold(3, Some(SESSION_LOSSES[0]), 12 * S));
        ops.push(hold(4, Some(SESSION_LOSSES[1]), 22 * S));
        let t = count(&ops);
        assert_eq!((t.windows, t.judged), (2, 0));
        assert_eq!(
            t.not_judged,
            vec!["with isolate-leader".to_string(), "with kill-all".into()]
        );
        assert!(matches!(check(&ops), Verdict::Unknown(ref why) if why.contains("kill-all")));
        // A pause composed with a partition inside its hold is not judged either; a kill a
        // TTL and more after its heal is.
        let mut composed = fault("pause", "pause-leader", 10 * S, 16 * S);
        composed.insert(2, op(NEMESIS, Kind::Invoke, "partition", json!({}), 12 * S));
        composed.insert(3, fact("partition", json!({"fault": "bridge"}), 12 * S));
        composed.push(hold(3, Some(SESSION_LOSSES[0]), 13 * S));
        composed.extend(fault("kill", "kill-leader", 20 * S, 23 * S));
        composed.push(hold(4, Some(SESSION_LOSSES[0]), 24 * S));
        let t = count(&composed);
        assert_eq!((t.judged, t.losers.clone()), (1, vec![4]));
        assert!(matches!(check(&composed), Verdict::Invalid(ref w) if w.contains("kill")));
    }

    /// A fault G9 does not cover may eat the holders' renewals: a window opened less than a
    /// TTL after its heal is not judged. After a covered fault (a pause) it is, and the next
    /// fault's invoke ends the earlier window.
    #[test]
    fn a_window_opened_within_a_ttl_of_an_uncovered_faults_heal_is_not_judged() {
        let mut ops = fault("partition", "isolate-leader", 10 * S, 14 * S);
        ops.extend(fault("pause", "pause-leader", 15 * S, 18 * S));
        ops.push(hold(3, Some(SESSION_LOSSES[0]), 16 * S));
        let t = count(&ops);
        assert_eq!((t.windows, t.judged), (2, 0), "{t:?}");
        assert!(
            t.not_judged
                .contains(&"with isolate-leader healed 900 ms before".to_string()),
            "{t:?}"
        );
        // The same pause 3.5 s after the heal is judged, and so is one right after a pause.
        let mut later = fault("partition", "isolate-leader", 10 * S, 14 * S);
        later.extend(fault("pause", "pause-leader", 17_600_000_000, 20 * S));
        later.push(hold(3, Some(SESSION_LOSSES[0]), 19 * S));
        assert_eq!(count(&later).judged, 1);
        assert!(matches!(check(&later), Verdict::Invalid(_)));
        // The reason is not passed along: a kill a second after that pause's heal is judged
        // (the partition healed 4.9 s before it).
        let mut chained = ops.clone();
        chained.extend(fault("kill", "kill-leader", 19_100_000_000, 21 * S));
        chained.push(hold(4, Some(SESSION_LOSSES[0]), 20 * S));
        let t = count(&chained);
        assert_eq!(
            (t.windows, t.judged, t.losers.clone()),
            (3, 1, vec![4]),
            "{t:?}"
        );
        let mut own = fault("client-pause", "client-pause", 10 * S, 14 * S);
        own.extend(fault("pause", "pause-leader", 15 * S, 18 * S));
        own.push(hold(3, Some(SESSION_LOSSES[0]), 16 * S));
        assert_eq!(count(&own).judged, 1, "after a client's own pause");
        let mut paired = fault("pause", "pause-leader", 10 * S, 14 * S);
        paired.extend(fault("kill", "kill-leader", 15 * S, 18 * S));
        paired.push(hold(4, Some(SESSION_LOSSES[0]), 16 * S));
        let t = count(&paired);
        assert_eq!(
            (t.judged, t.losers.clone(), t.costly.clone()),
            (2, vec![4], vec!["kill".to_string()])
        );
    }

    #[test]
    fn no_fault_is_unknown() {
        assert!(matches!(check(&[hold(1, None, S)]), Verdict::Unknown(_)));
        // A fault that failed to fire judges nothing.
        let failed = vec![
            op(NEMESIS, Kind::Invoke, "stall-then-kill", json!({}), S),
            op(NEMESIS, Kind::Fail, "stall-then-kill", json!({}), 2 * S),
            op(NEMESIS, Kind::Invoke, "heal", json!({}), 3 * S),
            fact("heal", json!({"ok": true}), 3 * S),
            hold(1, Some(SESSION_LOSSES[0]), 3 * S),
        ];
        assert!(matches!(check(&failed), Verdict::Unknown(_)));
    }
}
