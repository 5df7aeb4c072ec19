//! What the console's reads answer about one limit's permits and queue: [`HolderView`] (a
//! permit held now) and [`WaiterView`] (a ticket waiting, with its place in serving order),
//! in pages ([`QueuePage`]). Plain data built by `Machine::holders` and `Machine::waiters`
//! from the state; nothing here changes it.
//!
//! Invariants:
//! - A page holds at most [`crate::bounds::QUEUE_PAGE_MAX`] items, in a deterministic order
//!   (holders by key then fence, waiters by key then serving order), so every replica
//!   answers the same page for the same `after`.
//! - `total` counts every item of the limit, not only the page's.

use serde::{Deserialize, Serialize};

use super::command::{Fence, SessionId, TicketId};

/// A permit held on a limit (or on one key of a keyed limit).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderView {
    /// The key of a keyed limit; `None` on an unkeyed one.
    pub key: Option<String>,
    pub fence: Fence,
    pub session: SessionId,
    pub ticket: TicketId,
    pub units: u32,
    pub agent: Option<String>,
    /// Log time the holding session's lease runs to, ms (0 for a session already gone).
    pub lease_expires_at_ms: u64,
    /// Log time of the grant, ms: the permit has been held for the page's `now_ms` less
    /// this (a permit restored from a version 5 snapshot counts from that snapshot's clock).
    pub granted_at_ms: u64,
}

/// A ticket waiting on a limit (or on one key of a keyed limit).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterView {
    /// The key of a keyed limit; `None` on an unkeyed one.
    pub key: Option<String>,
    /// Tickets ahead of this one in its queue (0 is served next).
    pub position: u32,
    /// Priority level: higher levels are served first.
    pub level: i32,
    /// The fairness key it shares service under within its level.
    pub fairness_key: String,
    /// Its fairness weight within its level (at least 1; 0 for a ticket queued before
    /// snapshot version 6, which did not keep it).
    pub weight: u32,
    pub session: SessionId,
    pub ticket: TicketId,
    pub units: u32,
    pub agent: Option<String>,
}

/// One page of a limit's holders or waiters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuePage<T> {
    /// At most the page size asked for, in the order of the module doc.
    pub items: Vec<T>,
    /// Items the limit has in all.
    pub total: u64,
    /// The log clock when the page was read, ms: what a holder's `granted_at_ms` is
    /// measured against (the log clock is the machine's only clock; see the machine's
    /// module doc).
    pub now_ms: u64,
}
