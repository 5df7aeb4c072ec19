//! [`Pending`]: the takes this node forwarded that the leader granted and this node has not
//! applied yet. A follower answers `limit_remaining` from its own applied state, which
//! learns of a commit up to a heartbeat later; counting these off what it shows makes
//! the figures of a client that always calls one node exact, without waiting.
//!
//! Invariants:
//! - At most [`PENDING_MAX`] takes are remembered (the oldest is forgotten first: its
//!   figure then shows one take too many left, never a wrong decision: decisions are the
//!   leader's machine's).
//! - A take is forgotten once this node's machine has applied it, or [`PENDING_TTL`] after
//!   it was granted (its session may have expired here before the take was seen applied:
//!   then nothing would ever say so).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use weir_core::machine::{Machine, Part, SessionId, TicketId};

/// Most takes remembered: far more than a node forwards within one heartbeat at the
/// throughput a node reaches.
pub const PENDING_MAX: usize = 4_096;

/// How long a granted take is counted at most: a node applies a committed entry within a
/// heartbeat or two (100 ms each by default); a view later than this is stale anyway.
pub const PENDING_TTL: Duration = Duration::from_secs(1);

struct PendingTake {
    granted_at: Instant,
    session: SessionId,
    ticket: TicketId,
    tenant: String,
    parts: Vec<Part>,
}

/// Granted takes this node has not applied (see the module doc).
#[derive(Default)]
pub struct Pending {
    /// A std lock: held only to push, prune and sum, never across an await.
    takes: Mutex<VecDeque<PendingTake>>,
}

impl Pending {
    /// Remembers the granted take of `parts` by (`session`, `ticket`), unless `machine`
    /// (this node's) has applied it already.
    pub fn add(
        &self,
        machine: &Machine,
        (session, ticket): (SessionId, TicketId),
        tenant: &str,
        parts: &[Part],
    ) {
        if machine.ticket_applied(session, ticket) {
            return;
        }
        let mut takes = weir_server::lock::lock(&self.takes);
        if takes.len() >= PENDING_MAX {
            takes.pop_front();
        }
        takes.push_back(PendingTake {
            granted_at: Instant::now(),
            session,
            ticket,
            tenant: tenant.to_owned(),
            parts: parts.to_vec(),
        });
    }

    /// For each of `parts` of `tenant`: the units taken from its (limit, key) by granted
    /// takes `machine` has not applied. Forgets the takes it has, and those past
    /// [`PENDING_TTL`].
    pub fn unapplied(&self, machine: &Machine, tenant: &str, parts: &[Part]) -> Vec<u64> {
        let mut takes = weir_server::lock::lock(&self.takes);
        takes.retain(|t| {
            t.granted_at.elapsed() < PENDING_TTL && !machine.ticket_applied(t.session, t.ticket)
        });
        parts
            .iter()
            .map(|p| {
                takes
                    .iter()
                    .filter(|t| t.tenant == tenant)
                    .flat_map(|t| &t.parts)
                    .filter(|q| q.limit == p.limit && q.key == p.key)
                    .map(|q| q.units as u64)
                    .sum()
            })
            .collect()
    }
}
