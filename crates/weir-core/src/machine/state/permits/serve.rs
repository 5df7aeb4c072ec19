//! Serving a limit's queue when room appears (a release, an expiry, a refill, a changed
//! definition), and filing the limit under the time the refill alone changes it.
//!
//! The walk is the machine's module doc, "Several parts": a waiter without room stops it; a
//! waiter of one part with room is granted; a waiter of several parts is granted when every
//! other part is ready for it, else passed over.
//!
//! Invariants: every limit served is filed (or dropped when gone) before `serve` returns;
//! a waiter is granted only when its limit has room for it.

use super::grant::Took;
use super::limit_mut;
use crate::machine::command::{LimitId, SessionId, TicketId};
use crate::machine::limit::{Holder, Room};
use crate::machine::queue_key::QueueKey;
use crate::machine::reply::Event;
use crate::machine::session::Ticket;
use crate::machine::state::Machine;

impl Machine {
    /// Serves limit `id`'s queue in order: grants each waiter that has room here, until one
    /// has none (it blocks those behind it). A waiter of several parts that has room here is
    /// granted when every other part is ready for it too (room, and no waiter ahead of it
    /// there without room); else it is passed over, since the room here is not what it
    /// waits for. Then files the limit (see the machine's module doc, "Several parts").
    pub(in crate::machine::state) fn serve(&mut self, id: LimitId, events: &mut Vec<Event>) {
        let now_ms = self.now_ms();
        let mut passed: Option<QueueKey> = None;
        loop {
            let limit = self.saved.limits.get_mut(&id).expect("served limits exist");
            limit.refill(now_ms);
            let Some((&key, w)) = limit.queue.next_after(passed.as_ref()) else {
                break;
            };
            if limit.room_for(w.units, now_ms) != Room::Yes {
                break;
            }
            let (session, ticket) = (w.session, w.ticket);
            let live = self.saved.sessions[&session].live.get(&ticket);
            if let Some(Ticket::QueuedParts { parts, estimate }) = live {
                let (parts, estimate) = (parts.clone(), *estimate);
                if self.parts_ready(&parts, id, now_ms) {
                    self.grant_waiting_parts(session, ticket, &parts, estimate, id, events);
                } else {
                    passed = Some(key);
                }
                continue;
            }
            let limit = self.saved.limits.get_mut(&id).expect("served limits exist");
            let w = limit.queue.take(&key).expect("listed");
            let units = w.units;
            let holder = Holder {
                session,
                ticket,
                units,
                agent: w.agent,
                granted_at_ms: now_ms,
            };
            let fence = self.grant(id, holder);
            events.push(Event::Granted {
                session,
                ticket,
                fence,
                units,
            });
        }
        self.file(id);
    }

    /// Whether every part of a waiting request but the one on limit `serving` is ready: its
    /// limit has room for it, and no waiter ahead of it there lacks room (it would block).
    fn parts_ready(
        &mut self,
        parts: &[(LimitId, QueueKey)],
        serving: LimitId,
        now_ms: u64,
    ) -> bool {
        parts
            .iter()
            .filter(|(id, _)| *id != serving)
            .all(|(id, key)| {
                let limit = limit_mut(&mut self.saved.limits, id);
                limit.refill(now_ms);
                let units = limit
                    .queue
                    .get(key)
                    .expect("a queued part is in its queue")
                    .units;
                limit.room_for(units, now_ms) == Room::Yes
                    && limit
                        .queue
                        .iter()
                        .take_while(|(k, _)| *k < key)
                        .all(|(_, v)| limit.room_for(v.units, now_ms) == Room::Yes)
            })
    }

    /// Grants a waiting request of several parts, every part ready: takes it out of every
    /// queue (as service), charges every part under one fence, and tells its session. Files
    /// every part's limit but `serving`, which its `serve` files.
    fn grant_waiting_parts(
        &mut self,
        session: SessionId,
        ticket: TicketId,
        parts: &[(LimitId, QueueKey)],
        estimate: bool,
        serving: LimitId,
        events: &mut Vec<Event>,
    ) {
        let fence = self.next_fence();
        let now_ms = self.now_ms();
        let mut took = Took::default();
        let mut first_units = None;
        for (id, key) in parts {
            let limit = limit_mut(&mut self.saved.limits, id);
            let w = limit
                .queue
                .take(key)
                .expect("a queued part is in its queue");
            let units = w.units;
            first_units.get_or_insert(units);
            let holder = Holder {
                session,
                ticket,
                units,
                agent: w.agent,
                granted_at_ms: now_ms,
            };
            took.grant(limit, *id, fence, holder, estimate);
        }
        let units = first_units.expect("a request has parts");
        self.record_grant(session, ticket, fence, units, took);
        events.push(Event::Granted {
            session,
            ticket,
            fence,
            units,
        });
        for (id, _) in parts {
            if *id != serving {
                self.file(*id);
            }
        }
    }

    /// Drops limit `id` if it is gone (removed and empty, or a key that is fresh again);
    /// makes a key with nothing but a bucket below its burst lean (`lean_keys`); otherwise
    /// files it under the time the refill alone changes it (or unfiles it: see
    /// `Limit::tokens_due_ms`).
    pub(in crate::machine::state) fn file(&mut self, id: LimitId) {
        let limit = &self.saved.limits[&id];
        // A definition goes with its last key, lean ones included.
        if !limit.is_gone() || self.saved.lean_keys.contains_key(&id) {
            if self.is_lean(id) {
                self.demote(id);
                return;
            }
            let due = limit.tokens_due_ms();
            self.deadlines.serve.set(id, due);
            return;
        }
        let limit = self.saved.limits.remove(&id).expect("filed limits exist");
        self.deadlines.serve.set(id, None);
        if let Some(def) = limit.of {
            self.totals.live_keys -= 1;
            let d = self
                .saved
                .limits
                .get_mut(&def)
                .expect("keys have definitions");
            d.keys.remove(&limit.name);
            if d.is_gone() {
                self.file(def);
            }
            return;
        }
        let t = self
            .saved
            .tenants
            .get_mut(&limit.tenant)
            .expect("limits have tenants");
        t.limits.remove(&limit.name);
        if t.is_empty() {
            self.saved.tenants.remove(&limit.tenant);
            self.refile_receipts(&limit.tenant);
        }
    }
}
