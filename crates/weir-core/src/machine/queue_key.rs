//! [`QueueKey`]: a waiting ticket's place in its limit's service order.
//!
//! The wait queue ([`crate::machine::queue`]) makes keys and keeps its waiters in key
//! order; the ranks ([`crate::machine::queue_rank`]) count keys; a queued ticket
//! ([`crate::machine::session::Ticket`]) remembers its key. All three read this file, and it
//! reads none of them. Keys order by (level descending, virtual finish tag, arrival): the
//! derived `Ord` over the fields in this order is the service order.

use serde::{Deserialize, Serialize};

/// A ticket's place in the service order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QueueKey {
    /// `i32::MAX - level`, so that the highest level sorts first.
    pub(super) rank: u32,
    /// Virtual finish tag within the level.
    pub(super) finish: u128,
    /// Arrival order on this limit.
    pub(super) seq: u64,
}

impl QueueKey {
    /// A key for tests of the rank structure: distinct for distinct `n`, in an order that
    /// is not `n`'s.
    #[cfg(test)]
    pub(crate) fn for_tests(n: u64) -> QueueKey {
        QueueKey {
            rank: (n % 3) as u32,
            finish: (n / 3 % 50) as u128,
            seq: n,
        }
    }

    /// The priority level this key was queued at.
    pub fn level(&self) -> i32 {
        (i32::MAX as i64 - self.rank as i64) as i32
    }
}
