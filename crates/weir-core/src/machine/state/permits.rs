//! Permits: acquiring (granted at once, queued, or refused), releasing, and serving a
//! limit's queue when room appears.
//!
//! A ticket gets a permit in one of two ways, at once on its acquire or from the queue when
//! the limit is served; both go through [`Machine::grant`], which takes the fence. A live
//! ticket leaves its limit in one of two ways, its release or its session's end; both go
//! through [`Machine::unlink`], and the caller then serves the limit.

use super::Machine;
use crate::bounds::{
    FINISHED_REFUSALS_MAX, FINISHED_TICKETS_MAX, LIMIT_WAITERS_MAX, SESSION_TICKETS_MAX,
    TICKETS_LIVE_MAX, TICKETS_QUEUED_MAX,
};
use crate::machine::command::{Acquire, Fence, LimitId, SessionId, TicketId};
use crate::machine::limit::{Holder, Room};
use crate::machine::queue::Waiter;
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::session::{Finished, Session, Ticket};

impl Machine {
    pub(super) fn acquire(
        &mut self,
        a: &Acquire,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        if let Some(reply) = self.ticket_admits(a)? {
            return Ok(reply);
        }
        self.room_for_ticket()?;
        // PLANTED(halt-skipped)
        if let Some(t) = self.saved.tenants.get(&a.tenant)
            && !crate::planted::is(crate::planted::Plant::HaltSkipped)
        {
            t.refuse_if_halted(&a.tenant, a.agent.as_deref())?;
        }
        let id = self.live_limit_id(&a.tenant, &a.limit)?;
        let now_ms = self.now_ms();
        let limit = self.saved.limits.get_mut(&id).expect("live limit");
        if let Some(max) = limit.spec.max_units()
            && a.units as u64 > max
        {
            return Err(Refusal::TooLarge {
                tenant: a.tenant.clone(),
                name: a.limit.clone(),
                units: a.units,
                max,
            });
        }
        limit.refill(now_ms);
        let room = limit.room_for(a.units, now_ms);
        if limit.queue.is_empty() && room == Room::Yes {
            let fence = self.grant(id, holder_of(a));
            return Ok(Reply::Granted {
                fence,
                units: a.units,
            });
        }
        if !a.wait {
            let retry_at_ms = match room {
                Room::NeedsTokensAt(at) if limit.queue.is_empty() => Some(at),
                _ => None,
            };
            return Err(Refusal::Busy { retry_at_ms });
        }
        self.enqueue(id, a, events)
    }

    /// The session's side of an acquire: `Some` answer for a ticket it already knows (the
    /// same answer, no second effect: G5), else whether it has room for a new ticket. Prunes
    /// the session's finished tickets that are due first.
    fn ticket_admits(&mut self, a: &Acquire) -> Result<Option<Reply>, Refusal> {
        let now_ms = self.now_ms();
        let session = self
            .saved
            .sessions
            .get_mut(&a.session)
            .ok_or(Refusal::UnknownSession { session: a.session })?;
        session.prune_finished(now_ms, &mut self.totals);
        self.refile_tickets(a.session);
        let session = &self.saved.sessions[&a.session];
        if let Some(reply) = self.answer_again(a, session) {
            return Ok(Some(reply));
        }
        // A new ticket ends finished; there must be room to remember it (never forget one
        // a client may still retry).
        session.room_to_finish(a.session)?;
        let live = session.live.len() as u64;
        let what = format_args!("live tickets of session {}", a.session);
        Refusal::room(live, SESSION_TICKETS_MAX, what)?;
        Ok(None)
    }

    /// What an acquire naming a ticket the session already knows is answered, or `None`
    /// for a new ticket.
    fn answer_again(&self, a: &Acquire, session: &Session) -> Option<Reply> {
        let ticket = a.ticket;
        match session.live.get(&ticket) {
            Some(Ticket::Queued { limit, key }) => Some(Reply::Queued {
                position: self.saved.limits[limit].queue.position(key),
            }),
            Some(Ticket::Held { fence, units, .. }) => Some(Reply::Granted {
                fence: *fence,
                units: *units,
            }),
            None => session
                .finished
                .get(&ticket)
                .map(|f| f.reply(a.session, ticket, &a.tenant)),
        }
    }

    /// Queues `a` on limit `id`, unless the queue is full.
    fn enqueue(
        &mut self,
        id: LimitId,
        a: &Acquire,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let limit = self.saved.limits.get_mut(&id).expect("live limit");
        if limit.queue.len() >= LIMIT_WAITERS_MAX {
            return Err(Refusal::QueueFull {
                tenant: a.tenant.clone(),
                name: a.limit.clone(),
            });
        }
        Refusal::room(
            self.totals.queued_tickets,
            TICKETS_QUEUED_MAX,
            format_args!("queued tickets of all sessions"),
        )?;
        let waiter = Waiter {
            session: a.session,
            ticket: a.ticket,
            units: a.units,
            agent: a.agent.clone(),
            fairness_key: String::new(),
        };
        let key = limit.queue.push(waiter, &a.priority);
        let position = limit.queue.position(&key);
        let session = self
            .saved
            .sessions
            .get_mut(&a.session)
            .expect("checked by acquire");
        session.set_live(
            a.ticket,
            Ticket::Queued { limit: id, key },
            &mut self.totals,
        );
        // Queuing never makes room, but it files a rated limit for serving on refill.
        self.serve(id, events);
        Ok(Reply::Queued { position })
    }

    pub(super) fn release(
        &mut self,
        id: SessionId,
        ticket: TicketId,
        events: &mut Vec<Event>,
    ) -> Reply {
        // An unknown ticket of an open session is finished too: a late acquire of it is
        // answered `TicketReleased`, not granted. Recording it needs room (see `session`).
        let now_ms = self.now_ms();
        if let Some(session) = self.saved.sessions.get_mut(&id) {
            session.prune_finished(now_ms, &mut self.totals);
            let known =
                session.live.contains_key(&ticket) || session.finished.contains_key(&ticket);
            let room = session.room_to_finish(id).and(self.room_to_finish());
            self.refile_tickets(id);
            if !known && let Err(refusal) = room {
                return Reply::Refused(refusal);
            }
        }
        let totals = &mut self.totals;
        let live = self.saved.sessions.get_mut(&id).and_then(|session| {
            let live = session.live.get(&ticket).cloned();
            session.finish(ticket, Finished::Released, now_ms, totals);
            live
        });
        self.refile_tickets(id);
        let Some(live) = live else {
            return Reply::Released {
                held: false,
                withdrawn: false,
            };
        };
        let limit = self.unlink(&live);
        self.serve(limit, events);
        Reply::Released {
            held: matches!(live, Ticket::Held { .. }),
            withdrawn: matches!(live, Ticket::Queued { .. }),
        }
    }

    /// Grants `holder` its units on limit `id`, whose room the caller checked: takes the
    /// next fence, and records the ticket in its session as held, or as finished when the
    /// limit holds nothing (a rate take). Returns the fence.
    fn grant(&mut self, id: LimitId, holder: Holder) -> Fence {
        let last = self.saved.last_fence;
        // PLANTED(reused-fence)
        let fence = if crate::planted::is(crate::planted::Plant::ReusedFence)
            && last > 0
            && !self.saved.limits[&id].holders.contains_key(&last)
        {
            last
        } else {
            self.next_fence()
        };
        let now_ms = self.now_ms();
        let (session, ticket, units) = (holder.session, holder.ticket, holder.units);
        let session_id = session;
        let limit = self
            .saved
            .limits
            .get_mut(&id)
            .expect("granted limits exist");
        let held = limit.grant(fence, holder);
        let session = self
            .saved
            .sessions
            .get_mut(&session)
            .expect("grants go to open sessions");
        if held {
            let ticket_now = Ticket::Held {
                limit: id,
                fence,
                units,
            };
            session.set_live(ticket, ticket_now, &mut self.totals);
        } else {
            session.finish(
                ticket,
                Finished::Taken { fence, units },
                now_ms,
                &mut self.totals,
            );
            self.refile_tickets(session_id);
        }
        fence
    }

    /// Takes a live ticket out of its limit: a queued one leaves the queue, a held one frees
    /// its permit. The session's own record is the caller's. Returns the limit, which the
    /// caller must serve.
    pub(super) fn unlink(&mut self, ticket: &Ticket) -> LimitId {
        let (Ticket::Queued { limit: id, .. } | Ticket::Held { limit: id, .. }) = *ticket;
        let limit = self
            .saved
            .limits
            .get_mut(&id)
            .expect("tickets name live limits");
        match ticket {
            Ticket::Queued { key, .. } => {
                limit
                    .queue
                    .remove(key)
                    .expect("a queued ticket is in its queue");
            }
            Ticket::Held { fence, .. } => {
                limit.release(*fence).expect("a held ticket is a holder");
            }
        }
        id
    }

    /// `AtCapacity` when a new ticket would pass a global ticket bound: live tickets, or
    /// finished tickets (a new ticket ends finished).
    fn room_for_ticket(&self) -> Result<(), Refusal> {
        Refusal::room(
            self.totals.live_tickets,
            TICKETS_LIVE_MAX,
            format_args!("live tickets of all sessions"),
        )?;
        self.room_to_finish()
    }

    /// `AtCapacity` when the machine keeps [`FINISHED_TICKETS_MAX`] finished tickets, or
    /// [`FINISHED_REFUSALS_MAX`] refusals among them (a new ticket may end as either).
    fn room_to_finish(&self) -> Result<(), Refusal> {
        Refusal::room(
            self.totals.finished_tickets,
            FINISHED_TICKETS_MAX,
            format_args!("finished tickets of all sessions kept for retries"),
        )?;
        Refusal::room(
            self.totals.finished_refusals,
            FINISHED_REFUSALS_MAX,
            format_args!("finished refusals of all sessions kept for retries"),
        )?;
        Ok(())
    }

    /// The next fence: the entry's index when above every earlier fence, else one more.
    fn next_fence(&mut self) -> Fence {
        let last = self.saved.last_fence;
        let fence = self.applied_index().max(last + 1);
        assert!(fence > last, "fences increase: {fence} after {last}");
        self.saved.last_fence = fence;
        fence
    }

    /// Grants what the head of limit `id`'s queue can take, head first, until the head must
    /// wait; then files the limit.
    pub(super) fn serve(&mut self, id: LimitId, events: &mut Vec<Event>) {
        let now_ms = self.now_ms();
        loop {
            let limit = self.saved.limits.get_mut(&id).expect("served limits exist");
            limit.refill(now_ms);
            let Some((_, head)) = limit.queue.peek() else {
                break;
            };
            if limit.room_for(head.units, now_ms) != Room::Yes {
                break;
            }
            let (_, w) = limit.queue.pop().expect("peeked");
            let (session, ticket, units) = (w.session, w.ticket, w.units);
            let holder = Holder {
                session,
                ticket,
                units,
                agent: w.agent,
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

    /// Drops limit `id` if it was removed and is now empty; otherwise files it under the
    /// time its head can be served by the refill alone (or unfiles it: see
    /// `Limit::tokens_due_ms`).
    fn file(&mut self, id: LimitId) {
        let limit = &self.saved.limits[&id];
        if limit.is_gone() {
            let name = limit.name.clone();
            let tenant = limit.tenant.clone();
            self.saved.limits.remove(&id);
            self.deadlines.serve.set(id, None);
            let t = self
                .saved
                .tenants
                .get_mut(&tenant)
                .expect("limits have tenants");
            t.limits.remove(&name);
            if t.is_empty() {
                self.saved.tenants.remove(&tenant);
                self.refile_receipts(&tenant);
            }
        } else {
            let due = limit.tokens_due_ms();
            self.deadlines.serve.set(id, due);
        }
    }

    /// Tells a waiter already taken out of its queue that it is refused, and finishes its
    /// ticket so a duplicate acquire gets the same answer.
    pub(super) fn refuse_waiter(&mut self, w: &Waiter, refusal: Refusal, events: &mut Vec<Event>) {
        let now_ms = self.now_ms();
        let session = self
            .saved
            .sessions
            .get_mut(&w.session)
            .expect("waiters have sessions");
        session.finish(
            w.ticket,
            Finished::refused(refusal.clone()),
            now_ms,
            &mut self.totals,
        );
        self.refile_tickets(w.session);
        events.push(Event::Refused {
            session: w.session,
            ticket: w.ticket,
            refusal,
        });
    }
}

/// The holder an acquire granted at once becomes.
fn holder_of(a: &Acquire) -> Holder {
    Holder {
        session: a.session,
        ticket: a.ticket,
        units: a.units,
        agent: a.agent.clone(),
    }
}
