//! Leader stalls (G9): while the leader is stopped (the `pause` nemesis: SIGSTOP past the
//! election timeout and the session TTL), the clients move to the new leader before their
//! belief deadlines, so no client that was not itself paused loses a permit to it.
//!
//! A loss counts against a stall when a `hold` op records its permit lost to its session
//! (the belief deadline passed, or the session expired) and saw it between the pause's start
//! and [`AFTER_HEAL_MS`] after its heal (a deadline that passed during the stall can be
//! noticed a little later). The process the `client-pause` nemesis stops is left out: its own
//! pause is what costs it its permit. Losses to halts are the halts checker's.
//!
//! G9 holds a client to its deadline *when the rest of the cluster elects a new leader*, and
//! promises grants again within 1.5 s. A stall is therefore judged only when the status
//! monitor saw a new leader within [`ELECTED_WITHIN_MS`] of the stop: a cluster that took
//! longer (a debug build on a loaded machine: openraft's followers wait out the leader lease
//! plus an election timeout, 0.75-0.9 s, before the first vote, and a split or a refused vote
//! adds a round each) leaves a 3 s session no time to renew, whatever the library does, so its
//! losses say nothing about the client. Those stalls are counted and named in the verdict,
//! not judged; with none judged the verdict is unknown.

use std::collections::BTreeSet;

use super::{Verdict, oks, s};
use crate::history::{Kind, NEMESIS, Op};

/// How long after a stall's heal a loss still counts against it: the session TTL (3 s).
pub const AFTER_HEAL_MS: u64 = 3_000;
/// A stall is judged when the monitor saw a new leader within this long of the stop: G9's
/// own bound on grants resuming.
pub const ELECTED_WITHIN_MS: u64 = 1_500;

/// The texts of `Lost::Deadline` and `Lost::Expired`, as the workloads record them.
const SESSION_LOSSES: [&str; 2] = [
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
    /// Of those, the ones judged: a new leader seen within [`ELECTED_WITHIN_MS`].
    pub judged: usize,
    /// For each stall not judged, when the new leader was seen after the stop (ms), or
    /// `None` if it was not seen before the heal.
    pub slow_ms: Vec<Option<u64>>,
}

impl Tally {
    /// One line for `verdict.txt`.
    pub fn summary(&self) -> String {
        let slow: Vec<String> = self
            .slow_ms
            .iter()
            .map(|ms| match ms {
                Some(ms) => format!("{:.2} s", *ms as f64 / 1000.0),
                None => "not before the heal".into(),
            })
            .collect();
        let mut line = format!(
            "leader stalls {} (judged {}: a new leader within {} ms)  unpaused clients that lost a permit to one {}",
            self.stalls, self.judged, ELECTED_WITHIN_MS, self.losers
        );
        if !slow.is_empty() {
            line.push_str(&format!(
                "  not judged, new leader seen after: {}",
                slow.join(", ")
            ));
        }
        line
    }
}

/// The leader stalls of `ops` and the clients that lost a permit to the judged ones.
pub fn count(ops: &[Op]) -> Tally {
    // (stop, end of the window, when the first new leader was seen)
    let mut windows: Vec<(u64, u64, Option<u64>)> = vec![];
    let mut open: Option<(u64, Option<u64>)> = None;
    for o in ops.iter().filter(|o| o.process == NEMESIS) {
        match (o.f.as_str(), o.kind) {
            ("pause", Kind::Info) => open = Some((o.time_ns, None)),
            ("leader", Kind::Info) => {
                if let Some((from, elected @ None)) = &mut open {
                    *elected = Some(o.time_ns.saturating_sub(*from));
                }
            }
            ("heal", _) => {
                if let Some((from, elected)) = open.take() {
                    windows.push((from, o.time_ns + AFTER_HEAL_MS * 1_000_000, elected));
                }
            }
            _ => {}
        }
    }
    if let Some((from, elected)) = open {
        windows.push((from, u64::MAX, elected));
    }
    let mut tally = Tally {
        stalls: windows.len(),
        ..Tally::default()
    };
    let judged: Vec<(u64, u64)> = windows
        .iter()
        .filter_map(|&(a, b, elected_ns)| {
            let elected_ms = elected_ns.map(|ns| ns / 1_000_000);
            if elected_ms.is_some_and(|ms| ms <= ELECTED_WITHIN_MS) {
                Some((a, b))
            } else {
                tally.slow_ms.push(elected_ms);
                None
            }
        })
        .collect();
    tally.judged = judged.len();
    let paused: BTreeSet<u64> = ops
        .iter()
        .filter(|o| o.f == "client-pause")
        .map(|o| o.process)
        .collect();
    let losers: BTreeSet<u64> = oks(ops, "hold")
        .filter(|o| !paused.contains(&o.process))
        .filter(|o| s(o, "lost").is_some_and(|l| SESSION_LOSSES.contains(&l)))
        .filter(|o| judged.iter().any(|(a, b)| (*a..=*b).contains(&o.time_ns)))
        .map(|o| o.process)
        .collect();
    tally.losers = losers.len();
    tally
}

pub fn check(ops: &[Op]) -> Verdict {
    let t = count(ops);
    match t {
        Tally { stalls: 0, .. } => Verdict::Unknown("no leader stall fired".into()),
        Tally { judged: 0, .. } => Verdict::Unknown(format!(
            "no stall judged: the cluster took over {ELECTED_WITHIN_MS} ms to elect a new leader in all {} ({})",
            t.stalls,
            t.summary()
        )),
        Tally { losers: 0, .. } => Verdict::Valid,
        Tally { losers, judged, .. } => Verdict::Invalid(format!(
            "G9: {losers} clients not themselves paused lost a permit to {judged} leader stalls with a new leader within {ELECTED_WITHIN_MS} ms"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    const S: u64 = 1_000_000_000;

    fn hold(process: u64, lost: Option<&str>, at: u64) -> Op {
        op(process, Kind::Ok, "hold", json!({"lost": lost}), at)
    }

    /// A stall from `from` to `heal`, its new leader seen `elected` after the stop.
    fn stall_elected(from: u64, heal: u64, elected: u64) -> Vec<Op> {
        vec![
            op(
                NEMESIS,
                Kind::Info,
                "pause",
                json!({"fault": "pause-leader"}),
                from,
            ),
            op(
                NEMESIS,
                Kind::Info,
                "leader",
                json!({"node": 2, "term": 3}),
                from + elected,
            ),
            op(NEMESIS, Kind::Info, "heal", json!({"ok": true}), heal),
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
                slow_ms: vec![Some(2_950)]
            }
        );
        assert!(
            t.summary()
                .contains("not judged, new leader seen after: 2.95 s")
        );
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
            op(NEMESIS, Kind::Info, "pause", json!({}), 10 * S),
            op(NEMESIS, Kind::Info, "heal", json!({"ok": true}), 14 * S),
            hold(2, Some(SESSION_LOSSES[0]), 12 * S),
        ];
        assert_eq!(count(&unseen).slow_ms, vec![None]);
        unseen.extend(stall(20 * S, 24 * S));
        assert_eq!(check(&unseen), Verdict::Valid);
    }

    #[test]
    fn no_stall_is_unknown() {
        assert!(matches!(check(&[hold(1, None, S)]), Verdict::Unknown(_)));
    }
}
