//! Sessions: a client's identity on the cluster, its lease, and its tickets.
//!
//! A session's lease runs `ttl_ms` of log time from its last keep-alive (or its opening).
//! When the log clock reaches `expires_at_ms` the session expires: the machine releases its
//! permits and withdraws its tickets, in the entry that first sees the clock there.
//!
//! Each ticket is in exactly one of three places: live (queued on one limit, or holding a
//! permit of one limit), finished (remembered so that a late duplicate of its acquire gets
//! the same answer), or unknown. Finished tickets are kept newest-first up to
//! [`SESSION_FINISHED_TICKETS_MAX`].
//!
//! Invariants:
//! - A ticket id is never both live and finished.
//! - `finished_order` lists exactly the finished tickets, oldest first.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::command::{Fence, LimitId, TicketId};
use super::queue::QueueKey;
use super::reply::{Refusal, Reply};
use crate::bounds::SESSION_FINISHED_TICKETS_MAX;

/// A live ticket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ticket {
    /// Waiting in `limit`'s queue under `key`.
    Queued { limit: LimitId, key: QueueKey },
    /// Holding `units` of `limit` under `fence`.
    Held {
        limit: LimitId,
        fence: Fence,
        units: u32,
    },
}

/// How a finished ticket ended: what a duplicate of its acquire is answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Finished {
    /// Granted on a limit that holds nothing (a rate take).
    Taken { fence: Fence, units: u32 },
    /// Released (or withdrawn) by the client.
    Released,
    /// Refused while it waited.
    Refused(Refusal),
}

impl Finished {
    /// The answer to an acquire naming this finished ticket again.
    pub fn reply(&self) -> Reply {
        match self {
            Finished::Taken { fence, units } => Reply::Granted {
                fence: *fence,
                units: *units,
            },
            Finished::Released => Reply::Refused(Refusal::TicketReleased),
            Finished::Refused(r) => Reply::Refused(r.clone()),
        }
    }
}

/// One session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub ttl_ms: u64,
    /// Log time at which the lease runs out.
    pub expires_at_ms: u64,
    pub live: BTreeMap<TicketId, Ticket>,
    pub finished: BTreeMap<TicketId, Finished>,
    finished_order: VecDeque<TicketId>,
}

impl Session {
    pub fn new(ttl_ms: u64, now_ms: u64) -> Session {
        Session {
            ttl_ms,
            expires_at_ms: now_ms.saturating_add(ttl_ms),
            live: BTreeMap::new(),
            finished: BTreeMap::new(),
            finished_order: VecDeque::new(),
        }
    }

    /// Moves `ticket` from live to finished with `how`, dropping the oldest finished ticket
    /// beyond the bound.
    pub fn finish(&mut self, ticket: TicketId, how: Finished) {
        self.live.remove(&ticket);
        if self.finished.insert(ticket, how).is_none() {
            self.finished_order.push_back(ticket);
        }
        while self.finished_order.len() > SESSION_FINISHED_TICKETS_MAX {
            let oldest = self
                .finished_order
                .pop_front()
                .expect("longer than the bound");
            self.finished.remove(&oldest);
        }
    }

    /// Checks the invariants of the module doc.
    pub fn check(&self) -> Result<(), String> {
        if let Some(t) = self.live.keys().find(|t| self.finished.contains_key(t)) {
            return Err(format!("ticket {t} is both live and finished"));
        }
        if self.finished_order.len() != self.finished.len()
            || self
                .finished_order
                .iter()
                .any(|t| !self.finished.contains_key(t))
        {
            return Err("finished_order does not list the finished tickets".into());
        }
        Ok(())
    }
}
