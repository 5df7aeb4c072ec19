//! Leader stalls (G9): while the leader is stopped (the `pause` nemesis: SIGSTOP past the
//! election timeout and the session TTL), the clients move to the new leader before their
//! belief deadlines, so no client that was not itself paused loses a permit to it.
//!
//! A loss counts against a stall when a `hold` op records its permit lost to its session
//! (the belief deadline passed, or the session expired), or an `acquire` fails because its
//! session ended while its owner waited (`session lost`: a queued ticket's session is kept
//! alive as a holder's is), between the pause's start and [`AFTER_HEAL_MS`] after its heal
//! (a deadline that passed during the stall can be noticed a little later). The process the
//! `client-pause` nemesis stops is left out: its own pause is what costs it its permit.
//! Losses to halts are the halts checker's.
//!
//! G9 holds a client to its deadline *when the rest of the cluster elects a new leader*, and
//! promises grants again within 1.5 s. A stall is therefore judged only when the status
//! monitor saw a new leader within [`ELECTED_WITHIN_MS`] of the stop: a cluster that took
//! longer (a debug build on a loaded machine: openraft's followers wait out the leader lease
//! plus an election timeout, 0.75-0.9 s, before the first vote, and a split or a refused vote
//! adds a round each) leaves a 3 s session no time to renew, whatever the library does, so its
//! losses say nothing about the client. Nor is a stall judged that another fault was
//! composed with (a partition that cuts the new leader off, a kill: the rest of the cluster
//! may have no leader to move to), or that began less than [`AFTER_HEAL_MS`] after another
//! fault's heal (that fault may have cost the holders their renewals already; a client's own
//! pause aside, whose holder is not counted), and a fault injected within [`AFTER_HEAL_MS`]
//! of the heal ends the stall's window. Those stalls are counted and named in the verdict,
//! not judged; with none judged the verdict is unknown.

use std::collections::BTreeSet;

use super::ops::s;
use super::verdict::Verdict;
use crate::history::{Kind, NEMESIS, Op};

/// How long after a stall's heal a loss still counts against it: the session TTL (3 s).
pub const AFTER_HEAL_MS: u64 = 3_000;
/// A stall is judged when the monitor saw a new leader within this long of the stop: G9's
/// own bound on grants resuming.
pub const ELECTED_WITHIN_MS: u64 = 1_500;

/// The texts of `Lost::Deadline` and `Lost::Expired`, as the workloads record them.
pub(super) const SESSION_LOSSES: [&str; 2] = [
    "lease deadline passed without a keep-alive",
    "session expired",
];

/// What the leader stalls of a run came to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tally {
    /// Distinct clients (not themselves paused) that lost a permit to a judged stall.
    pub losers: usize,
    /// Leader stalls that fired.
    pub stalls: usize,
    /// Of those, the ones judged: alone, a new leader seen within [`ELECTED_WITHIN_MS`].
    pub judged: usize,
    /// Why each stall not judged was not.
    pub not_judged: Vec<String>,
}

impl Tally {
    /// One line for `verdict.txt`.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "leader stalls {} (judged {}: alone, a new leader within {} ms)  unpaused clients that lost a permit or a waiting session to one {}",
            self.stalls, self.judged, ELECTED_WITHIN_MS, self.losers
        );
        if !self.not_judged.is_empty() {
            line.push_str(&format!("  not judged: {}", self.not_judged.join("; ")));
        }
        line
    }
}

/// One leader stall as the nemesis and the monitor recorded it.
struct Stall {
    from_ns: u64,
    /// Where its losses stop counting: [`AFTER_HEAL_MS`] after the heal, or the next fault.
    until_ns: u64,
    /// When the monitor first saw a leader of a newer term, after the stop.
    elected_after_ns: Option<u64>,
    /// Another fault injected during it (a composed step: `nemesis` module doc).
    composed: Option<String>,
}

impl Stall {
    fn not_judged(&self) -> Option<String> {
        if let Some(why) = &self.composed {
            return Some(why.clone());
        }
        match self.elected_after_ns.map(|ns| ns / 1_000_000) {
            Some(ms) if ms <= ELECTED_WITHIN_MS => None,
            Some(ms) => Some(format!("new leader after {:.2} s", ms as f64 / 1000.0)),
            None => Some("no new leader seen before the heal".into()),
        }
    }
}

/// The leader stalls of `ops` and the clients that lost a permit to the judged ones. A stall
/// another fault was composed with (a partition cutting the new leader off, a kill) is not
/// G9's case, and a fault injected within [`AFTER_HEAL_MS`] of the heal ends the window.
pub fn count(ops: &[Op]) -> Tally {
    let mut stalls: Vec<Stall> = vec![];
    let mut open: Option<Stall> = None;
    // A fault other than a stall injected since the last heal (composed steps heal together).
    let mut active: Option<&str> = None;
    // Of those, the first that is not a client's own pause.
    let mut uncovered: Option<&str> = None;
    // The last heal of a fault other than a stall: when, and its kind.
    let mut healed: Option<(u64, &str)> = None;
    for o in ops.iter().filter(|o| o.process == NEMESIS) {
        match (o.f.as_str(), o.kind) {
            ("pause", Kind::Info) => {
                // Another fault healed less than a TTL before may have cost the holders their
                // renewals already: the stall is not judged alone.
                let after = healed.and_then(|(at, kind)| {
                    let ago_ms = o.time_ns.saturating_sub(at) / 1_000_000;
                    (ago_ms < AFTER_HEAL_MS).then(|| format!("{kind} healed {ago_ms} ms before"))
                });
                open = Some(Stall {
                    from_ns: o.time_ns,
                    until_ns: u64::MAX,
                    elected_after_ns: None,
                    composed: active.map(|k| format!("composed with {k}")).or(after),
                })
            }
            ("leader", Kind::Info) => {
                if let Some(st) = open.as_mut().filter(|st| st.elected_after_ns.is_none()) {
                    st.elected_after_ns = Some(o.time_ns.saturating_sub(st.from_ns));
                }
            }
            ("heal", Kind::Info) => {
                // A client's own pause costs only its own permits, which are not counted.
                if let Some(kind) = uncovered.take() {
                    healed = Some((o.time_ns, kind));
                }
                active = None;
                if let Some(mut st) = open.take() {
                    st.until_ns = o.time_ns + AFTER_HEAL_MS * 1_000_000;
                    stalls.push(st);
                }
            }
            ("heal", _) | ("pause", _) => {}
            // The environment's clock rates (in force for the whole run, no heal) are not a
            // step of the nemesis: no stall is composed with them.
            ("clock", Kind::Invoke) if s(o, "fault") == Some("env-clocks") => {}
            (kind, Kind::Invoke) => {
                active = Some(kind);
                if kind != "client-pause" {
                    uncovered.get_or_insert(kind);
                }
                if let Some(st) = open.as_mut() {
                    st.composed
                        .get_or_insert_with(|| format!("composed with {kind}"));
                } else if let Some(last) = stalls.last_mut() {
                    last.until_ns = last.until_ns.min(o.time_ns);
                }
            }
            _ => {}
        }
    }
    stalls.extend(open);
    let mut tally = Tally {
        stalls: stalls.len(),
        ..Tally::default()
    };
    let mut judged: Vec<(u64, u64)> = vec![];
    for st in &stalls {
        match st.not_judged() {
            Some(why) => tally.not_judged.push(why),
            None => judged.push((st.from_ns, st.until_ns)),
        }
    }
    tally.judged = judged.len();
    let paused: BTreeSet<u64> = ops
        .iter()
        .filter(|o| o.f == "client-pause")
        .map(|o| o.process)
        .collect();
    let losers: BTreeSet<u64> = ops
        .iter()
        .filter(|o| lost_session(o) && !paused.contains(&o.process))
        .filter(|o| judged.iter().any(|(a, b)| (*a..=*b).contains(&o.time_ns)))
        .map(|o| o.process)
        .collect();
    tally.losers = losers.len();
    tally
}

/// Whether `o` records a session lost to its end: a held permit lost to its deadline or
/// its expiry, or an acquire whose session ended while it waited.
pub(super) fn lost_session(o: &Op) -> bool {
    match (o.f.as_str(), o.kind) {
        ("hold", Kind::Ok) => s(o, "lost").is_some_and(|l| SESSION_LOSSES.contains(&l)),
        ("acquire", Kind::Fail) => {
            s(o, "error") == Some("session lost")
                || o.value.get("session_lost").and_then(|v| v.as_bool()) == Some(true)
        }
        _ => false,
    }
}

pub fn check(ops: &[Op]) -> Verdict {
    let t = count(ops);
    match t {
        Tally { stalls: 0, .. } => Verdict::Unknown("no leader stall fired".into()),
        Tally { judged: 0, .. } => {
            Verdict::Unknown(format!("no stall judged of {} ({})", t.stalls, t.summary()))
        }
        Tally { losers: 0, .. } => Verdict::Valid,
        Tally { losers, judged, .. } => Verdict::Invalid(format!(
            "G9: {losers} clients not themselves paused lost a permit or a waiting session to {judged} leader stalls (alone, a new leader within {ELECTED_WITHIN_MS} ms)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{fact, op};
    use serde_json::json;

    const S: u64 = 1_000_000_000;

    fn hold(process: u64, lost: Option<&str>, at: u64) -> Op {
        op(process, Kind::Ok, "hold", json!({"lost": lost}), at)
    }

    /// A stall from `from` to `heal`, its new leader seen `elected` after the stop.
    fn stall_elected(from: u64, heal: u64, elected: u64) -> Vec<Op> {
        vec![
            fact("pause", json!({"fault": "pause-leader"}), from),
            fact("leader", json!({"node": 2, "term": 3}), from + elected),
            fact("heal", json!({"ok": true}), heal),
        ]
    }

    fn stall(from: u64, heal: u64) -> Vec<Op> {
        stall_elected(from, heal, S)
    }

    #[test]
    fn a_session_loss_during_a_stall_counts_once_per_client() {
        let mut ops = stall(10 * S, 14 * S);
        ops.push(hold(1, Some(SESSION_LOSSES[0]), 12 * S));
        ops.push(hold(1, Some(SESSION_LOSSES[1]), 13 * S));
        ops.push(hold(2, Some(SESSION_LOSSES[0]), 16 * S));
        assert_eq!((count(&ops).losers, count(&ops).judged), (2, 1));
        assert!(
            matches!(check(&ops), Verdict::Invalid(ref why) if why.contains("2 clients")),
            "a holder lost to a leader stall violates G9"
        );
    }

    #[test]
    fn a_session_lost_while_its_owner_waited_in_an_acquire_counts() {
        let mut ops = stall(10 * S, 14 * S);
        let waiting = json!({"limit": "mutex", "error": "session lost"});
        ops.push(op(6, Kind::Fail, "acquire", waiting, 12 * S));
        let queued = json!({"limit": "queue", "error": "session lost", "session_lost": true});
        ops.push(op(7, Kind::Fail, "acquire", queued, 13 * S));
        // Timed out waiting, or refused: the session lives on.
        let timed_out = json!({"limit": "mutex", "error": "timed out"});
        ops.push(op(8, Kind::Fail, "acquire", timed_out, 12 * S));
        assert_eq!(count(&ops).losers, 2);
        assert!(
            matches!(check(&ops), Verdict::Invalid(ref why) if why.contains("waiting session"))
        );
    }

    #[test]
    fn losses_outside_stalls_by_halts_or_by_the_paused_client_do_not_count() {
        let mut ops = stall(10 * S, 14 * S);
        ops.push(hold(1, Some(SESSION_LOSSES[0]), 5 * S));
        ops.push(hold(2, Some(SESSION_LOSSES[0]), 30 * S));
        ops.push(hold(3, Some("halted (tenant): stop"), 12 * S));
        ops.push(op(4, Kind::Ok, "client-pause", json!({}), 20 * S));
        ops.push(hold(4, Some(SESSION_LOSSES[0]), 12 * S));
        ops.push(hold(5, None, 12 * S));
        assert_eq!((count(&ops).losers, count(&ops).judged), (0, 1));
        assert_eq!(check(&ops), Verdict::Valid);
    }

    #[test]
    fn a_stall_whose_election_took_longer_than_g9s_bound_is_named_not_judged() {
        // Stall one: a new leader after 1 s, a loss. Stall two: after 2.95 s, two losses.
        let mut ops = stall(10 * S, 14 * S);
        ops.extend(stall_elected(30 * S, 34 * S, 2_950_000_000));
        ops.push(hold(1, Some(SESSION_LOSSES[0]), 12 * S));
        ops.push(hold(2, Some(SESSION_LOSSES[0]), 32 * S));
        ops.push(hold(3, Some(SESSION_LOSSES[1]), 33 * S));
        let t = count(&ops);
        assert_eq!(
            t,
            Tally {
                losers: 1,
                stalls: 2,
                judged: 1,
                not_judged: vec!["new leader after 2.95 s".into()]
            }
        );
        assert!(t.summary().contains("not judged: new leader after 2.95 s"));
        assert!(
            matches!(check(&ops), Verdict::Invalid(ref why) if why.contains("1 clients")),
            "the prompt stall's loss is still a violation"
        );
        // Without the prompt stall's loss the run is valid; without the prompt stall at all,
        // nothing is judged and the verdict says why.
        let valid: Vec<Op> = ops.iter().filter(|o| o.process != 1).cloned().collect();
        assert_eq!(check(&valid), Verdict::Valid);
        let mut slow_only = stall_elected(30 * S, 34 * S, 2_950_000_000);
        slow_only.push(hold(2, Some(SESSION_LOSSES[0]), 32 * S));
        assert!(
            matches!(check(&slow_only), Verdict::Unknown(ref why) if why.contains("2.95 s")),
            "{:?}",
            check(&slow_only)
        );
        // A stall whose new leader was never seen before the heal is not judged either.
        let mut unseen = vec![
            fact("pause", json!({}), 10 * S),
            fact("heal", json!({"ok": true}), 14 * S),
            hold(2, Some(SESSION_LOSSES[0]), 12 * S),
        ];
        assert_eq!(
            count(&unseen).not_judged,
            vec!["no new leader seen before the heal".to_string()]
        );
        unseen.extend(stall(20 * S, 24 * S));
        assert_eq!(check(&unseen), Verdict::Valid);
    }

    /// The environment's clock rates, recorded as a clock fault in force for the whole run,
    /// compose with no stall; a clock fault of the nemesis does.
    #[test]
    fn the_environments_clock_rates_are_no_composed_fault() {
        let env = json!({"fault": "env-clocks"});
        let mut ops = vec![op(NEMESIS, Kind::Invoke, "clock", env.clone(), S)];
        ops.push(fact("clock", env, S));
        ops.extend(stall(10 * S, 14 * S));
        ops.push(hold(1, Some(SESSION_LOSSES[0]), 12 * S));
        let t = count(&ops);
        assert_eq!((t.losers, t.judged), (1, 1), "{t:?}");
        ops[0] = op(NEMESIS, Kind::Invoke, "clock", json!({"fault": "skew"}), S);
        let t = count(&ops);
        assert_eq!(
            (t.judged, t.not_judged),
            (0, vec!["composed with clock".into()])
        );
    }

    /// A stall less than a TTL after another fault's heal is not judged (that fault may
    /// have eaten the holders' renewals); a TTL and more after, it is.
    #[test]
    fn a_stall_soon_after_another_faults_heal_is_not_judged() {
        let mut ops = vec![
            op(NEMESIS, Kind::Invoke, "delay", json!({}), 5 * S),
            fact("delay", json!({"fault": "drops"}), 5 * S),
            op(NEMESIS, Kind::Invoke, "heal", json!({}), 9 * S),
            fact("heal", json!({"ok": true}), 9 * S),
        ];
        let soon = |from: u64| {
            let mut ops = ops.clone();
            ops.extend(stall(from, from + 4 * S));
            ops.push(hold(1, Some(SESSION_LOSSES[0]), from + S));
            ops
        };
        let t = count(&soon(10 * S));
        assert_eq!(
            (t.judged, t.not_judged.clone()),
            (0, vec!["delay healed 1000 ms before".to_string()])
        );
        let t = count(&soon(12 * S));
        assert_eq!((t.judged, t.losers), (1, 1));
        // A step of a delay and then a client's pause, healed together: the delay counts.
        let mut both = ops.clone();
        both.insert(
            2,
            op(NEMESIS, Kind::Invoke, "client-pause", json!({}), 6 * S),
        );
        both.extend(stall(10 * S, 14 * S));
        assert_eq!(count(&both).judged, 0);
        // After a client's own pause, or a stall's own heal, the next stall is judged.
        let mut own = vec![
            op(NEMESIS, Kind::Invoke, "client-pause", json!({}), 5 * S),
            op(NEMESIS, Kind::Invoke, "heal", json!({}), 9 * S),
            fact("heal", json!({"ok": true}), 9 * S),
        ];
        own.extend(stall(10 * S, 14 * S));
        assert_eq!(count(&own).judged, 1);
        ops = stall(5 * S, 9 * S);
        ops.extend(stall(10 * S, 14 * S));
        ops.push(hold(1, Some(SESSION_LOSSES[0]), 11 * S));
        assert_eq!((count(&ops).judged, count(&ops).losers), (2, 1));
    }

    #[test]
    fn no_stall_is_unknown() {
        assert!(matches!(check(&[hold(1, None, S)]), Verdict::Unknown(_)));
    }

    #[test]
    fn a_stall_composed_with_another_fault_is_not_judged_and_a_later_fault_ends_the_window() {
        // Stall one: the new leader is cut off halfway through (a composed partition).
        let mut ops = stall(10 * S, 14 * S);
        ops.insert(2, op(NEMESIS, Kind::Invoke, "partition", json!({}), 12 * S));
        ops.push(hold(1, Some(SESSION_LOSSES[0]), 13 * S));
        // Stall two, alone; a kill-all 1 s after its heal, and a loss after the kill.
        ops.extend(stall(20 * S, 24 * S));
        ops.push(op(NEMESIS, Kind::Invoke, "kill", json!({}), 25 * S));
        ops.push(hold(2, Some(SESSION_LOSSES[0]), 26 * S));
        ops.sort_by_key(|o| o.time_ns);
        let t = count(&ops);
        assert_eq!(
            (t.losers, t.stalls, t.judged, t.not_judged.clone()),
            (0, 2, 1, vec!["composed with partition".to_string()])
        );
        assert_eq!(check(&ops), Verdict::Valid);
        // A stall composed into another fault's hold (the partition first) is not judged.
        let mut second = vec![op(NEMESIS, Kind::Invoke, "partition", json!({}), 5 * S)];
        second.extend(stall(10 * S, 14 * S));
        second.push(hold(1, Some(SESSION_LOSSES[0]), 13 * S));
        assert_eq!(
            count(&second).not_judged,
            vec!["composed with partition".to_string()]
        );
        // The same loss inside stall two's window still counts.
        ops.push(hold(3, Some(SESSION_LOSSES[0]), 24 * S + S / 2));
        assert!(matches!(check(&ops), Verdict::Invalid(_)));
    }
}
