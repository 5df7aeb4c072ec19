//! The console's reads of one limit: its holders and its waiters in serving order, in pages
//! of at most `QUEUE_PAGE_MAX`, and which limit a live ticket is on (the event feed names
//! the limit of a grant or a release with it). Reads never change the state.
//!
//! A keyed limit's holders and waiters are those of its live keys, key by key in key order
//! (each key has a queue of its own, so "serving order" is within a key). An unkeyed limit
//! is its own only "key". Paging is by offset into that order: the state between two pages
//! may change, so a page is a consistent view of one moment, not a cursor into a snapshot.

use super::Machine;
use crate::bounds::QUEUE_PAGE_MAX;
use crate::machine::command::{LimitId, SessionId, TicketId};
use crate::machine::limit::Limit;
use crate::machine::queue_view::{HolderView, QueuePage, WaiterView};
use crate::machine::session::Ticket;

impl Machine {
    /// The limits (tenant, name) stands for, with the key each is under: the limit itself
    /// when unkeyed, else each live key's state in key order. `None` for no such limit.
    fn queue_parts(&self, tenant: &str, name: &str) -> Option<Vec<(Option<String>, &Limit)>> {
        let def = &self.saved.limits[&self.limit_id(tenant, name)?];
        if def.spec.keys_max.is_none() {
            return Some(vec![(None, def)]);
        }
        Some(
            def.keys
                .iter()
                .map(|(key, kid)| (Some(key.clone()), &*self.saved.limits[kid]))
                .collect(),
        )
    }

    /// Page of (tenant, name)'s permits held now, skipping the first `after`, at most
    /// `max` (capped at `QUEUE_PAGE_MAX`), by key then fence. `None` for no such limit.
    pub fn holders(
        &self,
        tenant: &str,
        name: &str,
        after: u64,
        max: u32,
    ) -> Option<QueuePage<HolderView>> {
        let parts = self.queue_parts(tenant, name)?;
        let total = parts.iter().map(|(_, l)| l.holders.len() as u64).sum();
        let items = parts
            .into_iter()
            .flat_map(|(key, limit)| limit.holders.iter().map(move |(f, h)| (key.clone(), f, h)))
            .skip(usize::try_from(after).unwrap_or(usize::MAX))
            .take(page_size(max))
            .map(|(key, fence, h)| HolderView {
                key,
                fence: *fence,
                session: h.session,
                ticket: h.ticket,
                units: h.units,
                agent: h.agent.clone(),
                lease_expires_at_ms: self
                    .saved
                    .sessions
                    .get(&h.session)
                    .map_or(0, |s| s.expires_at_ms),
                granted_at_ms: h.granted_at_ms,
            })
            .collect();
        let now_ms = self.now_ms();
        Some(QueuePage {
            items,
            total,
            now_ms,
        })
    }

    /// Page of (tenant, name)'s waiting tickets in serving order (key by key), skipping the
    /// first `after`, at most `max` (capped at `QUEUE_PAGE_MAX`). `None` for no such limit.
    pub fn waiters(
        &self,
        tenant: &str,
        name: &str,
        after: u64,
        max: u32,
    ) -> Option<QueuePage<WaiterView>> {
        let parts = self.queue_parts(tenant, name)?;
        let total = parts.iter().map(|(_, l)| l.queue.len() as u64).sum();
        let items = parts
            .into_iter()
            .flat_map(|(key, limit)| {
                (limit.queue.iter().enumerate()).map(move |(i, (qk, w))| (key.clone(), i, qk, w))
            })
            .skip(usize::try_from(after).unwrap_or(usize::MAX))
            .take(page_size(max))
            .map(|(key, position, qk, w)| WaiterView {
                key,
                position: u32::try_from(position).unwrap_or(u32::MAX),
                level: qk.level(),
                fairness_key: w.fairness_key.clone(),
                weight: w.weight,
                session: w.session,
                ticket: w.ticket,
                units: w.units,
                agent: w.agent.clone(),
            })
            .collect();
        let now_ms = self.now_ms();
        Some(QueuePage {
            items,
            total,
            now_ms,
        })
    }

    /// The (tenant, name) of the limit a live ticket waits on or holds, its first part's
    /// for a request of several parts; `None` for a ticket that is not live.
    pub fn ticket_limit(&self, session: SessionId, ticket: TicketId) -> Option<(String, String)> {
        let id: LimitId = match self.saved.sessions.get(&session)?.live.get(&ticket)? {
            Ticket::Queued { limit, .. } | Ticket::Held { limit, .. } => *limit,
            Ticket::QueuedParts { parts, .. } => parts.first()?.0,
            Ticket::HeldParts {
                parts, estimates, ..
            } => parts.first().or(estimates.first())?.0,
        };
        let limit = &self.saved.limits[&id];
        // A key's state names its definition in `of`; the definition has the names.
        let named = limit.of.map_or(limit, |def| &self.saved.limits[&def]);
        Some((named.tenant.clone(), named.name.clone()))
    }
}

/// `max` as a page size: at least 1, at most `QUEUE_PAGE_MAX`.
fn page_size(max: u32) -> usize {
    (max.clamp(1, QUEUE_PAGE_MAX)) as usize
}
