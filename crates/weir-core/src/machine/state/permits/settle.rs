//! Settling a take granted with an estimate (`SettleTake`): the estimate on every rate part
//! is replaced by the cost, any overrun recorded on the limit's definition, and the limits
//! served (returned tokens may let waiters through).
//!
//! Invariants: a take settles once; asking again (or settling a take without an estimate)
//! answers `Settled { duplicate: true }` and changes nothing (G5).

use crate::machine::command::{SessionId, TicketId};
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::session::{Finished, Ticket};
use crate::machine::state::Machine;

impl Machine {
    /// Settles the take `ticket` of `session`, granted with an estimate, at `cost` tokens on
    /// every rate part; then serves those limits (returned tokens may let waiters through).
    pub(in crate::machine::state) fn settle_take(
        &mut self,
        session: SessionId,
        ticket: TicketId,
        cost: u64,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let now_ms = self.now_ms();
        let s = self
            .saved
            .sessions
            .get(&session)
            .ok_or(Refusal::UnknownSession { session })?;
        let (fence, units, holding, estimates) = match s.live.get(&ticket) {
            Some(Ticket::HeldParts {
                fence,
                units,
                parts,
                estimates,
            }) if !estimates.is_empty() => (*fence, *units, parts.clone(), estimates.clone()),
            // Settled before (or taken without an estimate): nothing more to do (G5).
            Some(Ticket::HeldParts { .. } | Ticket::Held { .. }) => {
                return Ok(Reply::Settled { duplicate: true });
            }
            // Finished as a take, or finished and forgotten below the mark: nothing more.
            None if matches!(s.finished.get(&ticket), Some(Finished::Taken { .. }))
                || !s.remembers(ticket) =>
            {
                return Ok(Reply::Settled { duplicate: true });
            }
            Some(Ticket::Queued { .. } | Ticket::QueuedParts { .. }) => {
                return Err(Refusal::Invalid(format!(
                    "ticket {ticket} of session {session} waits: only a granted take settles"
                )));
            }
            None => {
                return Err(Refusal::Invalid(format!(
                    "ticket {ticket} of session {session} holds no take to settle"
                )));
            }
        };
        let mut overrun = 0;
        for (id, _) in &estimates {
            let limit = self
                .saved
                .limits
                .get_mut(id)
                .expect("estimates name live limits");
            limit.refill(now_ms);
            let extra = limit.settle_estimate(fence, cost);
            overrun = overrun.max(extra);
            let def = limit.of.unwrap_or(*id);
            self.saved
                .limits
                .get_mut(&def)
                .expect("keys have definitions")
                .overrun_tokens += extra;
        }
        let s = self.saved.sessions.get_mut(&session).expect("looked up");
        if holding.is_empty() {
            s.finish(
                ticket,
                Finished::Taken { fence, units },
                now_ms,
                &mut self.totals,
            );
        } else {
            let held = Ticket::HeldParts {
                fence,
                units,
                parts: holding,
                estimates: Vec::new(),
            };
            s.set_live(ticket, held, &mut self.totals);
        }
        self.refile_tickets(session);
        for (id, _) in estimates {
            self.serve(id, events);
        }
        Ok(if overrun > 0 {
            Reply::Overrun {
                tokens: overrun,
                minor_units: 0,
            }
        } else {
            Reply::Settled { duplicate: false }
        })
    }
}
