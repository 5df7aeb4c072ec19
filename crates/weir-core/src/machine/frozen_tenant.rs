//! [`FrozenTenant`]: one tenant's whole state taken out of a machine as one value, to be
//! installed in another machine (a tenant moving between groups: `Command::FreezeTenant`
//! in the source, `Command::AdoptTenant` in the destination, `Command::DropFrozen` in the
//! source once the move is placed). The rules that take it out and put it in are in
//! `machine::state::moves`; this file holds the value and the arithmetic of the move.
//!
//! What moves: the tenant's record (ceilings, budgets, runs, spend, receipts, halts), its
//! limits with their definitions, buckets, holders (each with its session, ticket and
//! fence), waiters (in their queue order) and unsettled estimates; its keys, lean and
//! whole; the token leases on its limits with their sessions' request counters; and, for
//! every session with a live ticket or a lease of the tenant, a copy of that session (its
//! id, owner, TTL, lease end, acknowledged mark and finished tickets) whose live tickets
//! are the tenant's alone. Limit ids are the source's, renumbered by the adopt in the order
//! of these ids; session ids stay.
//!
//! Invariants:
//! - Every bucket and lean key was refilled to the freeze (`refilled_at_ms == frozen_at_ms`
//!   for every bucket that rates and is not full), so moving the log times loses no refill
//!   however the two clocks stand: *tokens are exact across the move* (a bucket holds at the
//!   adopt what it held at the freeze, and refills from there at the same rate).
//! - `last_fence` is the source's fence counter at the freeze, at or above every fence the
//!   tenant's holders and finished takes carry. The adopt raises the destination's counter
//!   to at least it, so *fences are strictly increasing across the move*: every later grant
//!   of the tenant, in either group, is above every fence it had before.
//! - The log-clock shift ([`FrozenTenant::shift`]) maps the freeze's time to the adopt's
//!   and keeps every difference from it that it can: a time at or after the freeze (a
//!   session's lease end) keeps exactly the time it had left, and one before it (a
//!   finished ticket, a receipt, a grant's time) moves to at least the adopt's time less
//!   its age, never below 0, so a retention window is never shorter. No lease, session or
//!   retention has less time left in the destination than it had in the source (the clock
//!   stands still across the move, as across a change of leader).
//! - Its encoding is at most [`crate::bounds::MOVE_BYTES_MAX`] bytes (the adopt is one
//!   command of one entry): a freeze of a larger tenant is refused, naming the bound.

use serde::{Deserialize, Serialize};

use super::command::{Fence, LimitId, SessionId};
use super::limit::Limit;
use super::session::Session;
use super::tenant::Tenant;
use super::token_lease::TokenLease;

/// A Raft group's id: where a moved tenant went.
pub type GroupId = u64;

/// The log-time map of an adopt (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shift {
    /// The source's clock at the freeze.
    pub from_ms: u64,
    /// The destination's clock at the adopt.
    pub to_ms: u64,
}

impl Shift {
    /// The destination's time of the source's time `t_ms`: `t_ms + (to_ms − from_ms)`,
    /// floored at 0 and capped at `u64::MAX`.
    pub fn at(self, t_ms: u64) -> u64 {
        if t_ms >= self.from_ms {
            self.to_ms.saturating_add(t_ms - self.from_ms)
        } else {
            self.to_ms.saturating_sub(self.from_ms - t_ms)
        }
    }
}

/// A lean key as a move carries it (see `machine::key_table`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeanKey {
    pub name: String,
    pub tokens_micro: u64,
    pub refill_remainder: u16,
    pub refilled_at_ms: u64,
}

/// One tenant's state, frozen. See the module doc.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrozenTenant {
    /// The tenant's name.
    pub name: String,
    /// The group it moves to.
    pub to: GroupId,
    /// The source's log clock at the freeze, ms.
    pub frozen_at_ms: u64,
    /// The source's fence counter at the freeze.
    pub last_fence: Fence,
    /// Its record (limit names map to the source's ids).
    pub tenant: Tenant,
    /// Its limits and whole keys, by the source's ids, in id order.
    pub limits: Vec<(LimitId, Limit)>,
    /// Each keyed definition's lean keys (by the source's id of the definition), in key
    /// order.
    pub lean_keys: Vec<(LimitId, Vec<LeanKey>)>,
    /// The sessions that hold, wait or lease in it, with its live tickets only.
    pub sessions: Vec<(SessionId, Session)>,
    /// The token leases on its limits and keys, by (session, source id).
    pub token_leases: Vec<((SessionId, LimitId), TokenLease)>,
    /// Those sessions' last lease request counters.
    pub lease_seqs: Vec<(SessionId, u64)>,
}

impl FrozenTenant {
    /// The log-time map into the adopting machine, whose clock reads `now_ms`.
    pub fn shift(&self, now_ms: u64) -> Shift {
        Shift {
            from_ms: self.frozen_at_ms,
            to_ms: now_ms,
        }
    }

    /// The value as an `AdoptTenant` carries it: the machine's codec.
    pub fn encode(&self) -> Vec<u8> {
        crate::codec::encode(self)
    }

    /// The value from [`FrozenTenant::encode`]'s bytes, or why they are not one.
    pub fn decode(bytes: &[u8]) -> Result<FrozenTenant, String> {
        crate::codec::decode(bytes).map_err(|e| format!("undecodable frozen tenant: {e}"))
    }

    /// Whether `ticket` of `session` was live in the tenant when it froze (a release of it
    /// in the source is answered `Moved`).
    pub fn has_ticket(&self, session: SessionId, ticket: u64) -> bool {
        self.sessions
            .iter()
            .any(|(id, s)| *id == session && s.live.contains_key(&ticket))
    }

    /// How many limits (definitions and whole keys), lean keys and sessions it carries.
    pub fn counts(&self) -> (usize, usize, usize) {
        let lean = self.lean_keys.iter().map(|(_, k)| k.len()).sum();
        (self.limits.len(), lean, self.sessions.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frozen_at(ms: u64) -> FrozenTenant {
        FrozenTenant {
            name: "t".into(),
            to: 2,
            frozen_at_ms: ms,
            last_fence: 0,
            tenant: Tenant::default(),
            limits: Vec::new(),
            lean_keys: Vec::new(),
            sessions: Vec::new(),
            token_leases: Vec::new(),
            lease_seqs: Vec::new(),
        }
    }

    #[test]
    fn the_shift_keeps_time_left_and_floors_the_past() {
        // Adopted where the clock is behind the source's.
        let s = frozen_at(10_000).shift(3_000);
        let shift = |t| s.at(t);
        assert_eq!(shift(10_000), 3_000);
        assert_eq!(shift(15_000), 8_000, "a lease end keeps its 5 s");
        assert_eq!(shift(9_000), 2_000);
        assert_eq!(shift(1_000), 0, "older than the adopt's clock: floored");
        // Ahead of it.
        let s = frozen_at(1_000).shift(50_000);
        let shift = |t| s.at(t);
        assert_eq!(shift(1_500), 50_500);
        assert_eq!(shift(400), 49_400);
        assert_eq!(shift(u64::MAX), u64::MAX);
    }
}
