//! The token leases the machine keeps: one [`TokenLease`] per (session, limit or key), and
//! each session's request counter ([`TokenLeases`]). The rules that change them are in
//! `machine::state::token_leases`; why they keep G1 is the machine's essay, "Token leases".
//!
//! Invariants (checked by `Machine::check`):
//! - every lease names a live session and a live limit or key that rates;
//! - a limit's derived `leased` sums ([`crate::machine::limit::Leased`]) are exactly the sums
//!   of the leases on it;
//! - a lease never has both its rate and its cap at 0 (asking 0 and 0 ends it);
//! - `seqs` has an entry exactly for the sessions that sent a lease request and are live.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::command::{LimitId, SessionId};

/// The share of a limit's refill and bucket that leases may take together, as a fraction
/// (numerator, denominator): the rest stays with the cluster for callers that do not lease,
/// and for holders over their share, who ask per take.
pub const LEASE_SHARE: (u64, u64) = (3, 4);

/// One session's lease on one limit or key: what the holder may spend beside the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenLease {
    /// The refill share, micro-tokens a second.
    pub rate_micro_per_s: u64,
    /// The holder's bucket size, tokens.
    pub cap: u64,
    /// Log time of the request that first made this lease, ms (shown, never decided on).
    pub since_ms: u64,
}

/// Every token lease, and each leasing session's last request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenLeases {
    /// By (session, limit or key): a session's leases are one range.
    pub leases: BTreeMap<(SessionId, LimitId), TokenLease>,
    /// The `seq` of each session's last applied lease request: one at or below it is a
    /// retry and changes nothing.
    pub seqs: BTreeMap<SessionId, u64>,
}

impl TokenLeases {
    /// The leases of `session`, in limit order.
    pub fn of_session(
        &self,
        session: SessionId,
    ) -> impl Iterator<Item = (LimitId, &TokenLease)> + '_ {
        self.leases
            .range((session, 0)..=(session, LimitId::MAX))
            .map(|(&(_, limit), lease)| (limit, lease))
    }

    /// How many leases `session` has.
    pub fn count_of(&self, session: SessionId) -> usize {
        self.of_session(session).count()
    }
}
