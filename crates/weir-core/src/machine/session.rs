//! Sessions: a client's identity on the cluster, its lease, and its tickets.
//!
//! A session's lease runs `ttl_ms` of log time from its last keep-alive (or its opening).
//! When the log clock reaches `expires_at_ms` the session expires: the machine releases its
//! permits and withdraws its tickets, in the entry that first sees the clock there.
//!
//! Each ticket is in exactly one of three places: live (queued on one limit, or holding a
//! permit of one limit), finished (remembered so that a late duplicate of its acquire gets
//! the same answer), or unknown.
//!
//! A request refused at once (busy, halted, an unknown limit, too large, a full queue, a
//! bound of the state), whether it would wait or not, finishes its ticket with that refusal
//! too, as one refused while it waited does: the client re-asks every waiting ticket after
//! a reconnect, any request may be sent twice (a retry after a lost answer, a hedge to
//! another node, a copy still in a forwarder when its node lost the leadership), and a copy
//! decided after the answer the caller saw must get that answer, not a second decision: a
//! grant after a refusal would charge a bucket and hold a permit no one believes it holds.
//! The one exception is a refusal for want of room to remember finished tickets, which
//! cannot be remembered: nothing was decided, and asking again decides afresh. A `Busy`
//! refusal carries no text, so it is kept among the small finished tickets, not counted
//! against the bound on refusals.
//!
//! # Forgetting finished tickets: the acknowledged mark
//!
//! Ticket ids are the client's: the Rust client numbers a session's tickets 1, 2, 3, …
//! (going on above any its caller chooses) and never reuses one of its own
//! (`weir-client`'s `session_state`); the Python client and HTTP callers
//! choose their own, unique in the session. A session carries an *acknowledged mark*
//! `acked_below` (0 at its opening): the client's word that it will never ask about a
//! ticket below it again, neither acquire nor re-ask. The client raises it with
//! `Command::KeepAliveAcked` (the Rust client on every keep-alive; an HTTP caller with the
//! optional `acked_below` of `POST /v1/sessions/{id}/keepalive`); it never moves down. The
//! rule:
//!
//! - a finished ticket below the mark is forgotten (when the mark passes it, or at once
//!   when a live ticket below the mark finishes: it is not recorded);
//! - an acquire naming a ticket below the mark that is not live is refused `Invalid`
//!   ("below the session's acknowledged mark"), and decides nothing; a release of one
//!   answers that nothing was released (as for any unknown ticket) and records nothing;
//! - a live ticket below the mark stays live and answers as before: the mark forgets
//!   answers, never permits or places in a queue.
//!
//! *G5 holds whatever the client sends:* a ticket below the mark is either live (answered
//! as live) or refused without effect, so no acquire is ever granted twice, and no late
//! duplicate is granted after its first answer. *A retry finds its answer when the client
//! keeps its side:* it raises the mark only past tickets it will not ask about again — the
//! Rust client to its lowest ticket still waiting or with a request in flight (a held
//! ticket does not hold the mark back: it is live, so the re-ask of it that a caller's own
//! ticket number can make is answered as live) —
//! so every ticket it may still retry is at or above the mark, and its finished answer is
//! kept.
//!
//! So what a session remembers is bounded by what its client has in flight, plus what
//! finished since its last keep-alive (a fifth of its TTL for the Rust client). A session
//! whose client carries no mark (an HTTP caller that sends none, the Python client, the
//! node's own take sessions) keeps the log-time window as before: a finished ticket is
//! forgotten [`FINISHED_TICKET_RETENTION_MS`] of log time after it finished, mark or not.
//! Log time never runs faster than real time (see the machine's module doc), so a retry
//! the client sends within its deadline always finds the ticket. Nothing is forgotten
//! early: a session holding [`SESSION_FINISHED_TICKETS_MAX`] finished tickets has its new
//! tickets (and releases of unknown ones) refused `AtCapacity` until its mark passes them or
//! they age out; a closed or expired session drops everything. (Tickets that finish without
//! a request of their own — a queued ticket refused by a halt, an expiry — are never
//! refused, so the count can pass the bound by at most the session's live tickets,
//! [`crate::bounds::SESSION_TICKETS_MAX`].)
//!
//! Invariants:
//! - A ticket id is never both live and finished.
//! - A ticket refused by a halt is kept as `Finished::Halted`, never `Finished::Refused`.
//! - `finished_order` lists exactly the finished tickets with their finish times, oldest
//!   first.
//! - No finished ticket is below `acked_below`.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::command::{Fence, HaltScope, LimitId, Owner, SessionId, TicketId};
use super::queue_key::QueueKey;
use super::reply::{Refusal, Reply};
use super::totals::Totals;
use crate::bounds::{FINISHED_TICKET_RETENTION_MS, SESSION_FINISHED_TICKETS_MAX};

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
    /// A request of several parts (or of one, taken with an estimate), waiting in the queue
    /// of each part's limit (or key) under the key beside it, in the request's part order.
    QueuedParts {
        parts: Vec<(LimitId, QueueKey)>,
        /// Taken with an estimate (see `AcquireParts::estimate`).
        estimate: bool,
    },
    /// A request of several parts (or taken with an estimate), granted under `fence`:
    /// holding on each part's limit (or key) that caps concurrency the units beside it (its
    /// rate parts took their tokens at the grant). `units` is the request's first part's,
    /// what a repeat of it is answered. `estimates`: the rate parts' estimates taken, until
    /// the take is settled (empty once settled, or without an estimate).
    HeldParts {
        fence: Fence,
        units: u32,
        parts: Vec<(LimitId, u32)>,
        estimates: Vec<(LimitId, u32)>,
    },
}

impl Ticket {
    /// How many places the ticket takes in limits: 1, or one per part of a request of
    /// several. The live-ticket bounds count these (`machine::totals`), since each place
    /// costs the state a waiter or a holder.
    pub fn places(&self) -> u64 {
        match self {
            Ticket::Queued { .. } | Ticket::Held { .. } => 1,
            Ticket::QueuedParts { parts, .. } => parts.len() as u64,
            Ticket::HeldParts {
                parts, estimates, ..
            } => (parts.len() + estimates.len()) as u64,
        }
    }

    /// How many queues it waits in.
    pub fn waiters(&self) -> u64 {
        match self {
            Ticket::Queued { .. } => 1,
            Ticket::QueuedParts { parts, .. } => parts.len() as u64,
            Ticket::Held { .. } | Ticket::HeldParts { .. } => 0,
        }
    }
}

/// How a finished ticket ended: what a duplicate of its acquire is answered.
///
/// The refusals are boxed: every acquire finishes a ticket, a busy session keeps thousands,
/// and the small kinds (a take, a release) are nearly all of them, so the map's nodes stay
/// small (32 bytes a value, not 88). A box encodes as what it holds: the bytes are the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Finished {
    /// Granted on a limit that holds nothing (a rate take).
    Taken { fence: Fence, units: u32 },
    /// Released (or withdrawn) by the client.
    Released,
    /// Refused while it waited (or at once, asked to wait), for any reason but a halt.
    Refused(Box<Refusal>),
    /// Refused while it waited (or at once, asked to wait), by a halt of its tenant in `scope`. Kept apart from
    /// `Refused` without the tenant's name, which the duplicate acquire names itself: the
    /// largest finished ticket stays a halt reason and an agent name, not a tenant's name
    /// more (the snapshot arithmetic of `machine::snapshot_size` counts every finished ticket).
    Halted {
        scope: Box<HaltScope>,
        reason: Box<str>,
    },
}

impl Finished {
    /// A refusal that may carry a reason text (bounded apart from the small kinds:
    /// [`crate::bounds::FINISHED_REFUSALS_MAX`]). `Busy` carries none: it is small.
    pub fn is_refusal(&self) -> bool {
        match self {
            Finished::Refused(r) => !matches!(**r, Refusal::Busy { .. }),
            Finished::Halted { .. } => true,
            Finished::Taken { .. } | Finished::Released => false,
        }
    }

    /// How a waiter refused with `refusal` is remembered.
    pub fn refused(refusal: Refusal) -> Finished {
        match refusal {
            Refusal::Halted { scope, reason, .. } => Finished::Halted {
                scope: Box::new(scope),
                reason: reason.into_boxed_str(),
            },
            other => Finished::Refused(Box::new(other)),
        }
    }

    /// The answer to an acquire of `tenant` naming this finished ticket (`ticket` of
    /// `session`) again.
    pub fn reply(&self, session: SessionId, ticket: TicketId, tenant: &str) -> Reply {
        match self {
            Finished::Taken { fence, units } => Reply::Granted {
                fence: *fence,
                units: *units,
            },
            Finished::Released => Reply::Refused(Refusal::TicketReleased { session, ticket }),
            Finished::Refused(r) => Reply::Refused((**r).clone()),
            Finished::Halted { scope, reason } => Reply::Refused(Refusal::Halted {
                tenant: tenant.to_owned(),
                scope: (**scope).clone(),
                reason: reason.to_string(),
            }),
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
    /// (log time it finished, ticket), oldest first.
    finished_order: VecDeque<(u64, TicketId)>,
    /// Who opened it; `None`: opened without authentication, anyone may act on it. Never
    /// changes. The edge refuses another principal's keep-alive, acquire, release, close
    /// and event-following (G10).
    pub owner: Option<Owner>,
    /// The acknowledged mark (module doc): every ticket below it that is not live is
    /// forgotten and refused. Only rises; 0 at the opening.
    pub acked_below: TicketId,
}

/// A session as snapshot version 5 encoded it: without its acknowledged mark.
#[derive(Deserialize)]
pub(super) struct SessionV5 {
    ttl_ms: u64,
    expires_at_ms: u64,
    live: BTreeMap<TicketId, Ticket>,
    finished: BTreeMap<TicketId, Finished>,
    finished_order: VecDeque<(u64, TicketId)>,
    owner: Option<Owner>,
}

impl From<SessionV5> for Session {
    /// The same session with no ticket acknowledged: its finished tickets stay until its
    /// mark passes them, their window runs out, or it ends.
    fn from(v5: SessionV5) -> Session {
        Session {
            ttl_ms: v5.ttl_ms,
            expires_at_ms: v5.expires_at_ms,
            live: v5.live,
            finished: v5.finished,
            finished_order: v5.finished_order,
            owner: v5.owner,
            acked_below: 0,
        }
    }
}

impl Session {
    pub fn new(ttl_ms: u64, now_ms: u64, owner: Option<Owner>) -> Session {
        Session {
            ttl_ms,
            expires_at_ms: now_ms.saturating_add(ttl_ms),
            live: BTreeMap::new(),
            finished: BTreeMap::new(),
            finished_order: VecDeque::new(),
            owner,
            acked_below: 0,
        }
    }

    /// Adds what this session keeps to `totals` (a count of the whole state).
    pub fn count_into(&self, totals: &mut Totals) {
        totals.live_tickets += self.places_count();
        totals.queued_tickets += self.queued_count();
        totals.finished_tickets += self.finished.len() as u64;
        totals.finished_refusals += self.refusal_count();
    }

    /// Takes what this session keeps away from `totals`: it is being dropped.
    pub fn forget_from(&self, totals: &mut Totals) {
        totals.live_tickets -= self.places_count();
        totals.queued_tickets -= self.queued_count();
        totals.finished_tickets -= self.finished.len() as u64;
        totals.finished_refusals -= self.refusal_count();
    }

    fn queued_count(&self) -> u64 {
        self.live.values().map(Ticket::waiters).sum()
    }

    fn places_count(&self) -> u64 {
        self.live.values().map(Ticket::places).sum()
    }

    fn refusal_count(&self) -> u64 {
        self.finished.values().filter(|f| f.is_refusal()).count() as u64
    }

    /// Records `ticket` as live in `state` (new, or queued and now held), keeping `totals`.
    pub fn set_live(&mut self, ticket: TicketId, state: Ticket, totals: &mut Totals) {
        totals.live_tickets += state.places();
        totals.queued_tickets += state.waiters();
        if let Some(old) = self.live.insert(ticket, state) {
            totals.live_tickets -= old.places();
            totals.queued_tickets -= old.waiters();
        }
    }

    /// Whether the session would remember `ticket` finished: it is at or above the mark.
    pub fn remembers(&self, ticket: TicketId) -> bool {
        ticket >= self.acked_below
    }

    /// Moves `ticket` from live to finished with `how`, at log time `now_ms`, keeping
    /// `totals`. A ticket below the mark is not recorded (module doc).
    pub fn finish(&mut self, ticket: TicketId, how: Finished, now_ms: u64, totals: &mut Totals) {
        if let Some(old) = self.live.remove(&ticket) {
            totals.live_tickets -= old.places();
            totals.queued_tickets -= old.waiters();
        }
        if !self.remembers(ticket) {
            return;
        }
        if how.is_refusal() {
            totals.finished_refusals += 1;
        }
        match self.finished.insert(ticket, how) {
            None => {
                self.finished_order.push_back((now_ms, ticket));
                totals.finished_tickets += 1;
            }
            Some(old) if old.is_refusal() => totals.finished_refusals -= 1,
            Some(_) => {}
        }
    }

    /// Raises the acknowledged mark to `below` (it never moves down) and forgets the
    /// finished tickets under it, keeping `totals`.
    pub fn acknowledge(&mut self, below: TicketId, totals: &mut Totals) {
        if below <= self.acked_below {
            return;
        }
        self.acked_below = below;
        let kept = self.finished.split_off(&below);
        let forgotten = std::mem::replace(&mut self.finished, kept);
        if forgotten.is_empty() {
            return;
        }
        totals.finished_tickets -= forgotten.len() as u64;
        totals.finished_refusals -= forgotten.values().filter(|f| f.is_refusal()).count() as u64;
        self.finished_order.retain(|&(_, t)| t >= below);
    }

    /// Forgets the finished tickets whose retention ran out at log time `now_ms`.
    pub fn prune_finished(&mut self, now_ms: u64, totals: &mut Totals) {
        while let Some(&(at_ms, ticket)) = self.finished_order.front() {
            if now_ms.saturating_sub(at_ms) < FINISHED_TICKET_RETENTION_MS {
                break;
            }
            self.finished_order.pop_front();
            if self
                .finished
                .remove(&ticket)
                .is_some_and(|f| f.is_refusal())
            {
                totals.finished_refusals -= 1;
            }
            totals.finished_tickets -= 1;
        }
    }

    /// When the oldest finished ticket's retention runs out (the machine's prune
    /// deadline for this session), or `None` when it keeps none.
    pub fn finished_due_ms(&self) -> Option<u64> {
        self.finished_order
            .front()
            .map(|&(at_ms, _)| at_ms.saturating_add(FINISHED_TICKET_RETENTION_MS))
    }

    /// `AtCapacity` when the session keeps as many finished tickets as the bound allows:
    /// recording one more would mean forgetting one a client may still retry.
    pub fn room_to_finish(&self, id: u64) -> Result<(), Refusal> {
        Refusal::room(
            self.finished.len() as u64,
            SESSION_FINISHED_TICKETS_MAX,
            format_args!("finished tickets of session {id} kept for retries"),
        )?;
        Ok(())
    }

    /// The copy of this session a tenant's move carries (`machine::frozen_tenant`): the same
    /// lease, owner, mark and finished tickets, with `live` as its live tickets (those of the
    /// moving tenant).
    pub fn moved_copy(&self, live: BTreeMap<TicketId, Ticket>) -> Session {
        Session {
            live,
            ..self.clone()
        }
    }

    /// Moves every log time it keeps through `shift` (a tenant's adopt): its lease's end and
    /// its finished tickets' times, which keep their order since `shift` is monotonic.
    pub fn shift_times(&mut self, shift: &dyn Fn(u64) -> u64) {
        self.expires_at_ms = shift(self.expires_at_ms);
        for (at_ms, _) in &mut self.finished_order {
            *at_ms = shift(*at_ms);
        }
    }

    /// Takes `other` (the same session, as a move carried it) into this one: its live
    /// tickets, its finished tickets (this session's answer kept where both have one), the
    /// later lease end and the higher mark. Refused, changing nothing, when the owners
    /// differ or a ticket is live in both.
    pub fn merge(&mut self, other: Session) -> Result<(), String> {
        if self.owner != other.owner {
            return Err("a session of another owner has its id".into());
        }
        if let Some(t) = other.live.keys().find(|t| self.live.contains_key(t)) {
            return Err(format!("ticket {t} is live in both"));
        }
        self.live.extend(other.live);
        self.expires_at_ms = self.expires_at_ms.max(other.expires_at_ms);
        self.acked_below = self.acked_below.max(other.acked_below);
        for (at_ms, t) in other.finished_order {
            if let (false, Some(how)) = (self.finished.contains_key(&t), other.finished.get(&t)) {
                self.finished.insert(t, how.clone());
                self.finished_order.push_back((at_ms, t));
            }
        }
        let below = self.acked_below;
        self.finished.retain(|&t, _| t >= below);
        self.finished_order.retain(|&(_, t)| t >= below);
        self.finished_order.make_contiguous().sort_unstable();
        Ok(())
    }

    /// Checks the invariants of the module doc.
    pub fn check(&self) -> Result<(), String> {
        if let Some(t) = self.live.keys().find(|t| self.finished.contains_key(t)) {
            return Err(format!("ticket {t} is both live and finished"));
        }
        if let Some(t) = self.finished.iter().find(
            |(_, f)| matches!(f, Finished::Refused(r) if matches!(**r, Refusal::Halted { .. })),
        ) {
            return Err(format!("finished ticket {} keeps a halt as Refused", t.0));
        }
        if self.finished_order.len() != self.finished.len()
            || self
                .finished_order
                .iter()
                .any(|(_, t)| !self.finished.contains_key(t))
            || self
                .finished_order
                .iter()
                .zip(self.finished_order.iter().skip(1))
                .any(|(a, b)| a.0 > b.0)
        {
            return Err("finished_order does not list the finished tickets".into());
        }
        if let Some((t, _)) = self.finished.first_key_value()
            && *t < self.acked_below
        {
            return Err(format!(
                "finished ticket {t} is below the acknowledged mark {}",
                self.acked_below
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The boxes change the size in memory, not the bytes: a snapshot written before them
    /// reads the same, and this is what was written (a struct variant's fields in order,
    /// a newtype variant's value).
    #[test]
    fn boxed_refusals_encode_as_before() {
        #[derive(Serialize)]
        enum Unboxed {
            _Taken { fence: Fence, units: u32 },
            _Released,
            Refused(Refusal),
            Halted { scope: HaltScope, reason: String },
        }
        let refusal = Refusal::Busy {
            retry_at_ms: Some(7),
        };
        let scope = HaltScope::Agent("a".into());
        assert_eq!(
            crate::codec::encode(&Finished::refused(refusal.clone())),
            crate::codec::encode(&Unboxed::Refused(refusal))
        );
        let halted = Finished::Halted {
            scope: Box::new(scope.clone()),
            reason: "stop".into(),
        };
        let bytes = crate::codec::encode(&halted);
        assert_eq!(
            bytes,
            crate::codec::encode(&Unboxed::Halted {
                scope,
                reason: "stop".into()
            })
        );
        assert_eq!(crate::codec::decode::<Finished>(&bytes).unwrap(), halted);
        assert_eq!(std::mem::size_of::<Finished>(), 32);
    }
}
