//! The log clock: the only time the state machine knows.
//!
//! Each [`Batch`] carries the proposer's `clock_ms` and the
//! [`Leadership`] that stamped it. The log clock (`now_ms`) advances by
//! the difference between consecutive stamps of the *same* leadership, and by nothing at the
//! first batch of a new leadership (a new term, node, or proposer incarnation): the clock
//! freezes across a change of leader. Every
//! lease decision (session expiry, token refill) is made against this clock, at apply time,
//! identically on every node.
//!
//! Invariants:
//! - `now_ms` never decreases.
//! - Over any stretch of log, `now_ms` advances by at most the real time that elapsed on the
//!   monotonic clocks of the leaders that stamped it (a stamp goes back or jumps between
//!   leaders: neither moves the log clock).

use serde::{Deserialize, Serialize};

use super::command::{Batch, Leadership};

/// The log clock and its last stamp. (The batch's wall-clock stamp is not the clock's: the
/// machine copies it onto what it shows people, such as a run slot's admitted-at time.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogClock {
    /// Log-clock time, ms since the log began (frozen during leader changes).
    now_ms: u64,
    /// The leadership of the last stamped batch.
    leadership: Leadership,
    /// That batch's `clock_ms`.
    last_stamp_ms: u64,
    /// The last batch's wall stamp, for the `wall-gap` plant only: never serialized, so
    /// snapshots stay byte-identical to a default build's.
    #[cfg(feature = "planted")]
    #[serde(skip)]
    last_wall_ms: u64,
}

impl LogClock {
    /// Moves the clock for `batch` and returns the new `now_ms`.
    pub fn advance(&mut self, batch: &Batch) -> u64 {
        let before = self.now_ms;
        if batch.leadership == self.leadership {
            self.now_ms = self
                .now_ms
                .saturating_add(batch.clock_ms.saturating_sub(self.last_stamp_ms));
            self.last_stamp_ms = self.last_stamp_ms.max(batch.clock_ms);
        } else if crate::planted::is(crate::planted::Plant::NoFreeze) {
            // PLANTED(no-freeze): the new leader's stamp is taken as continuing the old one's.
            self.now_ms = self.now_ms.saturating_add(batch.clock_ms);
            self.leadership = batch.leadership;
            self.last_stamp_ms = batch.clock_ms;
        } else if crate::planted::is(crate::planted::Plant::NoFreezeSmall) {
            // PLANTED(no-freeze-small): 300 ms credited at each leader change.
            self.now_ms = self.now_ms.saturating_add(300);
            self.leadership = batch.leadership;
            self.last_stamp_ms = batch.clock_ms;
        } else if crate::planted::is(crate::planted::Plant::WallGap) && self.last_wall_ms() > 0 {
            // PLANTED(wall-gap): the wall-clock outage between the two leaders is credited.
            self.now_ms = self
                .now_ms
                .saturating_add(batch.wall_ms.saturating_sub(self.last_wall_ms()));
            self.leadership = batch.leadership;
            self.last_stamp_ms = batch.clock_ms;
        } else {
            // A new leader: its clock's offset from the old leader's, and the outage between
            // them, are both unknown. Adding nothing errs on the side of leases living
            // longer, never shorter.
            self.leadership = batch.leadership;
            self.last_stamp_ms = batch.clock_ms;
        }
        #[cfg(feature = "planted")]
        {
            self.last_wall_ms = batch.wall_ms;
        }
        assert!(
            self.now_ms >= before,
            "log clock went back: {before} -> {}",
            self.now_ms
        );
        self.now_ms
    }

    /// The last batch's wall stamp (the `wall-gap` plant's memory); 0 in default builds.
    fn last_wall_ms(&self) -> u64 {
        #[cfg(feature = "planted")]
        return self.last_wall_ms;
        #[cfg(not(feature = "planted"))]
        0
    }

    /// Log-clock time, ms.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(term: u64, node: u64, clock_ms: u64) -> Batch {
        Batch {
            leadership: Leadership {
                term,
                node,
                incarnation: 0,
            },
            clock_ms,
            wall_ms: 0,
            commands: vec![],
        }
    }

    #[test]
    fn log_clock_advances_by_one_leaders_own_differences() {
        let mut c = LogClock::default();
        assert_eq!(c.advance(&batch(1, 1, 1_000)), 0);
        assert_eq!(c.advance(&batch(1, 1, 1_250)), 250);
        assert_eq!(c.advance(&batch(1, 1, 1_250)), 250);
        // A stamp that goes back (it must not, but) does not move the clock back.
        assert_eq!(c.advance(&batch(1, 1, 1_100)), 250);
        assert_eq!(c.advance(&batch(1, 1, 1_300)), 300);
    }

    #[test]
    fn log_clock_freezes_at_a_change_of_leader_even_if_the_new_clock_is_fast() {
        let mut c = LogClock::default();
        c.advance(&batch(1, 1, 0));
        assert_eq!(c.advance(&batch(1, 1, 500)), 500);
        // Node 2 leads with a clock an hour ahead: the first batch adds nothing.
        assert_eq!(c.advance(&batch(2, 2, 3_600_000)), 500);
        assert_eq!(c.advance(&batch(2, 2, 3_600_100)), 600);
        // Node 1 again in a new term, its clock far behind: again nothing is added.
        assert_eq!(c.advance(&batch(3, 1, 10)), 600);
        assert_eq!(c.advance(&batch(3, 1, 40)), 630);
        // Node 1 restarted and resumed term 3: a new incarnation, its clock back at zero.
        let restarted = Batch {
            leadership: Leadership {
                term: 3,
                node: 1,
                incarnation: 7,
            },
            ..batch(3, 1, 0)
        };
        assert_eq!(c.advance(&restarted), 630);
        let later = Batch {
            clock_ms: 25,
            ..restarted.clone()
        };
        assert_eq!(
            c.advance(&later),
            655,
            "the restarted clock counts from its own first stamp"
        );
    }
}
