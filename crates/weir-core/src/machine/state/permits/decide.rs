//! Deciding a new acquire or take of one or several parts: granted at once under one fence,
//! queued on every part, or refused with nothing charged.
//!
//! The session's side comes first (`ticket_admits`): a ticket it already knows is answered
//! again, the same answer with no second effect (G5); a new ticket needs room in its session
//! and in the machine's bounds. Then the parts are resolved (`resolve`) and the request
//! decided: granted when every part is ready, refused when it may not wait, else queued on
//! every part's limit. A request refused at once (waiting or not) is remembered as a
//! finished ticket, so that asking again answers the same refusal.
//!
//! Invariants: a refusal charges nothing (no bucket, no queue, no key state); a grant charges
//! every part in this entry under one fence; every limit charged or queued on is filed.

use super::grant::Took;
use super::resolve::Resolved;
use crate::bounds::{
    FINISHED_REFUSALS_MAX, FINISHED_TICKETS_MAX, LIMIT_WAITERS_MAX, SESSION_TICKETS_MAX,
    TICKETS_LIVE_MAX, TICKETS_QUEUED_MAX,
};
use crate::machine::command::{Acquire, AcquireParts, LimitId, SessionId, TicketId};
use crate::machine::limit::{Holder, Room};
use crate::machine::queue::Waiter;
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::session::{Finished, Session, Ticket};
use crate::machine::state::Machine;

impl Machine {
    /// An acquire of one limit: an [`AcquireParts`] of one keyless part.
    pub(in crate::machine::state) fn acquire(
        &mut self,
        a: &Acquire,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        self.acquire_parts(&AcquireParts::from(a), events)
    }

    /// An acquire or take of one or more parts: every part granted in this entry under one
    /// fence, or the request queued on every part, or refused with nothing charged.
    pub(in crate::machine::state) fn acquire_parts(
        &mut self,
        a: &AcquireParts,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        if let Some(reply) = self.ticket_admits(a)? {
            return Ok(reply);
        }
        let decided = self.decide_new(a, events);
        if let Err(refusal) = &decided {
            self.remember_refusal(a, refusal);
        }
        decided
    }

    /// The session's side of an acquire: `Some` answer for a ticket it already knows (the
    /// same answer, no second effect: G5), else whether it has room for a new ticket. Prunes
    /// the session's finished tickets that are due first.
    fn ticket_admits(&mut self, a: &AcquireParts) -> Result<Option<Reply>, Refusal> {
        let now_ms = self.now_ms();
        let session = self
            .saved
            .sessions
            .get_mut(&a.session)
            .ok_or(Refusal::UnknownSession { session: a.session })?;
        session.prune_finished(now_ms, &mut self.totals);
        self.refile_tickets(a.session);
        let session = &self.saved.sessions[&a.session];
        if let Some(reply) = self.answer_again(a.session, a.ticket, &a.tenant, session) {
            return Ok(Some(reply));
        }
        if !session.remembers(a.ticket) {
            return Err(Refusal::Invalid(format!(
                "ticket {} of session {} is below the session's acknowledged mark {}: a new \
                 request takes a new ticket",
                a.ticket, a.session, session.acked_below
            )));
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
    fn answer_again(
        &self,
        session_id: SessionId,
        ticket: TicketId,
        tenant: &str,
        session: &Session,
    ) -> Option<Reply> {
        let position = |limit: &LimitId, key| self.saved.limits[limit].queue.position(key);
        match session.live.get(&ticket) {
            Some(Ticket::Queued { limit, key }) => Some(Reply::Queued {
                position: position(limit, key),
            }),
            Some(Ticket::QueuedParts { parts, .. }) => Some(Reply::Queued {
                position: position(&parts[0].0, &parts[0].1),
            }),
            Some(Ticket::Held { fence, units, .. } | Ticket::HeldParts { fence, units, .. }) => {
                Some(Reply::Granted {
                    fence: *fence,
                    units: *units,
                })
            }
            None => session
                .finished
                .get(&ticket)
                .map(|f| f.reply(session_id, ticket, tenant)),
        }
    }

    /// Remembers that the new request `a` was refused at once with `refusal`, as a finished
    /// ticket, so that asking again (a re-ask after a reconnect, a retry, a late duplicate
    /// still in flight through another node) answers the same refusal instead of deciding a
    /// second time: a grant after a refusal the caller may have seen would charge and hold
    /// what no one believes it holds. A refusal for want of
    /// room to remember finished tickets cannot be remembered, and is not: the request was
    /// decided nothing, so asking again decides it afresh.
    fn remember_refusal(&mut self, a: &AcquireParts, refusal: &Refusal) {
        let now_ms = self.now_ms();
        let room = self.room_to_finish();
        let session = self
            .saved
            .sessions
            .get_mut(&a.session)
            .expect("checked by ticket_admits");
        if room.and(session.room_to_finish(a.session)).is_err() {
            return;
        }
        let how = Finished::refused(refusal.clone());
        session.finish(a.ticket, how, now_ms, &mut self.totals);
        self.refile_tickets(a.session);
    }

    /// A new request (its session has room for it): granted, queued, or refused.
    fn decide_new(&mut self, a: &AcquireParts, events: &mut Vec<Event>) -> Result<Reply, Refusal> {
        self.room_for_ticket()?;
        // PLANTED(halt-skipped)
        if let Some(t) = self.saved.tenants.get(&a.tenant)
            && !crate::planted::is(crate::planted::Plant::HaltSkipped)
        {
            t.refuse_if_halted(&a.tenant, a.agent.as_deref())?;
        }
        let (passed, parts): (Vec<Resolved>, Vec<Resolved>) = self
            .resolve(a)?
            .into_iter()
            .partition(|p| p.shadow_pass.is_some());
        if parts.iter().all(Resolved::ready) {
            self.count_shadow(&passed);
            return Ok(self.grant_now(a, &parts));
        }
        if !a.wait {
            // PLANTED(refused-charges-first)
            if crate::planted::is(crate::planted::Plant::RefusedChargesFirst)
                && parts.len() > 1
                && parts[0].ready()
            {
                self.charge_refused(&parts[0]);
            }
            // A retry time only when every part that lacks room waits for tokens alone.
            let waits: Option<Vec<u64>> = parts
                .iter()
                .filter(|p| !p.ready())
                .map(|p| match p.room {
                    Room::NeedsTokensAt(at) if !p.blocked => Some(at),
                    _ => None,
                })
                .collect();
            let retry_at_ms = waits.and_then(|w| w.into_iter().max());
            return Err(Refusal::Busy { retry_at_ms });
        }
        let reply = self.enqueue(a, &parts, events)?;
        self.count_shadow(&passed);
        Ok(reply)
    }

    /// Grants `a` now: every part is ready.
    fn grant_now(&mut self, a: &AcquireParts, parts: &[Resolved]) -> Reply {
        let units = a.parts[0].units;
        if let [part] = parts
            && part.units == units
            && !a.estimate
        {
            let id = self.target_of(part);
            let fence = self.grant(id, holder_of(a, units, self.now_ms()));
            self.file(id);
            return Reply::Granted { fence, units };
        }
        let fence = self.next_fence();
        let now_ms = self.now_ms();
        let mut took = Took::default();
        let mut ids = Vec::with_capacity(parts.len());
        for part in parts {
            let id = self.target_of(part);
            let limit = self.saved.limits.get_mut(&id).expect("created");
            took.grant(
                limit,
                id,
                fence,
                holder_of(a, part.units, now_ms),
                a.estimate,
            );
            ids.push(id);
        }
        self.record_grant(a.session, a.ticket, fence, units, took);
        for id in ids {
            self.file(id);
        }
        Reply::Granted { fence, units }
    }

    /// Queues `a` on every part's limit, unless a queue is full.
    fn enqueue(
        &mut self,
        a: &AcquireParts,
        parts: &[Resolved],
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        for (part, asked) in parts.iter().zip(&a.parts) {
            let waiting = part
                .target
                .map_or(0, |id| self.saved.limits[&id].queue.len());
            if waiting >= LIMIT_WAITERS_MAX {
                return Err(Refusal::QueueFull {
                    tenant: a.tenant.clone(),
                    name: asked.limit.clone(),
                });
            }
        }
        if self.totals.queued_tickets + parts.len() as u64 > TICKETS_QUEUED_MAX as u64 {
            return Err(Refusal::AtCapacity {
                what: "queued tickets of all sessions".into(),
                limit: TICKETS_QUEUED_MAX as u64,
            });
        }
        let mut queued = Vec::with_capacity(parts.len());
        for part in parts {
            let id = self.target_of(part);
            let waiter = Waiter {
                session: a.session,
                ticket: a.ticket,
                units: part.units,
                agent: a.agent.clone(),
                fairness_key: String::new(),
                weight: 0,
            };
            let limit = self.saved.limits.get_mut(&id).expect("created");
            let key = limit.queue.push(waiter, &a.priority);
            queued.push((id, key));
        }
        let (first, first_key) = queued[0];
        let position = self.saved.limits[&first].queue.position(&first_key);
        let ticket = match queued.as_slice() {
            [(limit, key)] if !a.estimate => Ticket::Queued {
                limit: *limit,
                key: *key,
            },
            _ => Ticket::QueuedParts {
                parts: queued.clone(),
                estimate: a.estimate,
            },
        };
        let session = self
            .saved
            .sessions
            .get_mut(&a.session)
            .expect("checked by acquire");
        session.set_live(a.ticket, ticket, &mut self.totals);
        // Queuing never makes room for this ticket, but it files a rated limit for serving
        // on refill (and may let a waiter behind a passed-over one through, see `serve`).
        for (id, _) in queued {
            self.serve(id, events);
        }
        Ok(Reply::Queued { position })
    }

    /// The planted bug `refused-charges-first`: takes `part`'s tokens (its room checked)
    /// although its request is refused.
    fn charge_refused(&mut self, part: &Resolved) {
        let id = self.target_of(part);
        let limit = self.saved.limits.get_mut(&id).expect("created");
        if limit.spec.rates() {
            limit.tokens_micro -= part.units as u64 * crate::machine::limit::MICRO;
        }
        self.file(id);
    }

    /// Counts the would-be refusals of shadow parts that passed a request granted or queued.
    fn count_shadow(&mut self, passed: &[Resolved]) {
        for part in passed {
            let def = self.saved.limits.get_mut(&part.def).expect("live limit");
            let kind = part.shadow_pass.expect("passed parts have a kind");
            def.shadow_refusals.count(kind);
        }
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
    pub(super) fn room_to_finish(&self) -> Result<(), Refusal> {
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
}

/// The holder of `units` a request granted at once becomes.
fn holder_of(a: &AcquireParts, units: u32, now_ms: u64) -> Holder {
    Holder {
        session: a.session,
        ticket: a.ticket,
        units,
        agent: a.agent.clone(),
        granted_at_ms: now_ms,
    }
}
