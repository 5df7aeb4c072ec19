//! Granting: the fence a grant takes, and what it records in the ticket's session.
//!
//! A request of one part is granted with [`Machine::grant`], which takes the fence and
//! records the ticket; one of several parts (or taken with an estimate) takes one fence with
//! [`Machine::next_fence`] for all its parts ([`Took`]) and records them with
//! `record_grant`. Both the decision on a new request and the serving of a queue grant
//! through here.
//!
//! Invariants: fences are unique and increasing (`next_fence` asserts it); a grant whose
//! permits hold nothing (a rate take) finishes the ticket as taken, else the ticket is held.

use crate::machine::command::{Fence, LimitId, SessionId, TicketId};
use crate::machine::limit::{Holder, Limit};
use crate::machine::session::{Finished, Ticket};
use crate::machine::state::Machine;

impl Machine {
    /// Grants `holder` its units on limit `id`, whose room the caller checked: takes the
    /// next fence, and records the ticket in its session as held, or as finished when the
    /// limit holds nothing (a rate take). Returns the fence.
    pub(super) fn grant(&mut self, id: LimitId, holder: Holder) -> Fence {
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

    /// The next fence: the entry's index when above every earlier fence, else one more.
    pub(super) fn next_fence(&mut self) -> Fence {
        let last = self.saved.last_fence;
        let fence = self.applied_index().max(last + 1);
        assert!(fence > last, "fences increase: {fence} after {last}");
        self.saved.last_fence = fence;
        fence
    }

    /// Records in its session that a request of several parts (or taken with an estimate)
    /// was granted under `fence`: held while a part holds or an estimate is unsettled, else
    /// finished as a take.
    pub(super) fn record_grant(
        &mut self,
        session: SessionId,
        ticket: TicketId,
        fence: Fence,
        units: u32,
        took: Took,
    ) {
        let now_ms = self.now_ms();
        let s = self
            .saved
            .sessions
            .get_mut(&session)
            .expect("grants go to open sessions");
        if took.holding.is_empty() && took.estimates.is_empty() {
            s.finish(
                ticket,
                Finished::Taken { fence, units },
                now_ms,
                &mut self.totals,
            );
            self.refile_tickets(session);
        } else {
            let held = Ticket::HeldParts {
                fence,
                units,
                parts: took.holding,
                estimates: took.estimates,
            };
            s.set_live(ticket, held, &mut self.totals);
        }
    }
}

/// What a grant of several parts (or with an estimate) took: the parts that hold, and the
/// estimates recorded on the rate parts.
#[derive(Default)]
pub(super) struct Took {
    holding: Vec<(LimitId, u32)>,
    estimates: Vec<(LimitId, u32)>,
}

impl Took {
    /// Grants `holder` its units on `limit` (of id `id`) under `fence`, whose room the caller
    /// checked; with `estimate`, records the units taken as an estimate to settle.
    pub(super) fn grant(
        &mut self,
        limit: &mut Limit,
        id: LimitId,
        fence: Fence,
        holder: Holder,
        estimate: bool,
    ) {
        let units = holder.units;
        if limit.grant(fence, holder) {
            self.holding.push((id, units));
        }
        if estimate && limit.spec.rates() {
            limit.estimating.insert(fence, units);
            self.estimates.push((id, units));
        }
    }
}
