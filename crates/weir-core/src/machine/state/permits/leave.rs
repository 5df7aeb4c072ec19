//! A live ticket leaving its limits: its release, its session's end (`unlink`), or its
//! refusal while it waits (`refuse_waiter`).
//!
//! Invariants: a ticket that leaves is finished in its session (released or refused), so a
//! late duplicate gets the same answer; the limits it leaves are returned to (or served by)
//! the caller, since its going may let others through.

use super::limit_mut;
use crate::machine::command::{LimitId, SessionId, TicketId};
use crate::machine::queue::Waiter;
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::session::{Finished, Ticket};
use crate::machine::state::Machine;

impl Machine {
    /// Releases `ticket` of session `id`: finishes it as released, takes it out of its
    /// limits and serves them.
    pub(in crate::machine::state) fn release(
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
            // A ticket below the mark is not recorded, so needs no room.
            let known = session.live.contains_key(&ticket)
                || session.finished.contains_key(&ticket)
                || !session.remembers(ticket);
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
        for limit in self.unlink(&live) {
            self.serve(limit, events);
        }
        Reply::Released {
            held: matches!(live, Ticket::Held { .. } | Ticket::HeldParts { .. }),
            withdrawn: matches!(live, Ticket::Queued { .. } | Ticket::QueuedParts { .. }),
        }
    }

    /// Takes a live ticket out of its limits: a queued one leaves the queues, a held one
    /// frees its permits. The session's own record is the caller's. Returns the limits,
    /// which the caller must serve.
    pub(in crate::machine::state) fn unlink(&mut self, ticket: &Ticket) -> Vec<LimitId> {
        let limits = &mut self.saved.limits;
        match ticket {
            Ticket::Queued { limit: id, key } => {
                let waiter = limit_mut(limits, id).queue.remove(key);
                waiter.expect("a queued ticket is in its queue");
                vec![*id]
            }
            Ticket::Held {
                limit: id, fence, ..
            } => {
                let holder = limit_mut(limits, id).release(*fence);
                holder.expect("a held ticket is a holder");
                vec![*id]
            }
            Ticket::QueuedParts { parts, .. } => parts
                .iter()
                .map(|(id, key)| {
                    let waiter = limit_mut(limits, id).queue.remove(key);
                    waiter.expect("a queued part is in its queue");
                    *id
                })
                .collect(),
            Ticket::HeldParts {
                fence,
                parts,
                estimates,
                ..
            } => {
                let mut ids: Vec<LimitId> = parts
                    .iter()
                    .map(|(id, _)| {
                        let holder = limit_mut(limits, id).release(*fence);
                        holder.expect("a held part is a holder");
                        *id
                    })
                    .collect();
                // An estimate left unsettled stands as taken.
                for (id, _) in estimates {
                    let estimate = limit_mut(limits, id).estimating.remove(fence);
                    estimate.expect("an unsettled estimate is recorded");
                    ids.push(*id);
                }
                ids.sort_unstable();
                ids.dedup();
                ids
            }
        }
    }

    /// Tells a waiter already taken out of its queue that it is refused, and finishes its
    /// ticket so a duplicate acquire gets the same answer. A request of several parts leaves
    /// its other queues too: returns those limits, which the caller must serve (it may have
    /// blocked them) once it has refused every waiter it refuses.
    #[must_use]
    pub(in crate::machine::state) fn refuse_waiter(
        &mut self,
        w: &Waiter,
        refusal: Refusal,
        events: &mut Vec<Event>,
    ) -> Vec<LimitId> {
        let now_ms = self.now_ms();
        let mut others = Vec::new();
        if let Some(Ticket::QueuedParts { parts, .. }) =
            self.saved.sessions[&w.session].live.get(&w.ticket)
        {
            for (id, key) in parts {
                let limit = limit_mut(&mut self.saved.limits, id);
                if limit.queue.remove(key).is_some() {
                    others.push(*id);
                }
            }
        }
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
        others
    }
}
