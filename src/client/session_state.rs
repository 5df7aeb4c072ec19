//! [`SessionState`]: what a [`Session`](super::Session), its [`Permit`](super::Permit)s
//! and its background task share — the session's id, its belief deadline, and its tickets.
//!
//! Tickets are *waiting* (an acquire sent, no grant yet; its acquirer waits on a oneshot)
//! or *held* (granted; its permit watches for a [`Lost`] reason). Invariants:
//! - a ticket is in at most one of `waiting` and `held` (a grant leaves `waiting` before
//!   its permit enters `held`);
//! - once the session has ended (`ended` is set) nothing new waits: an acquire after the
//!   end fails with `SessionLost`, and a grant that raced the end is held already lost;
//! - the deadline only moves later.
//!
//! This file sits below `session.rs` and `permit.rs` (both use it, it uses neither), so
//! the imports between the three point one way.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use super::{AcquireError, Client, Lost};
use crate::machine::{Acquire, Fence, Refusal, Reply, SessionId, TicketId};
use crate::task::AbortOnDrop;

/// A grant as the session learned it: (fence, units), or why there is none.
pub(super) type GrantOutcome = Result<(Fence, u32), AcquireError>;

/// A ticket whose acquire has been sent and not yet granted.
struct Waiting {
    /// The acquire as sent: re-sent unchanged on a re-ask (idempotent by session, ticket).
    acquire: Acquire,
    /// Where its outcome goes; taken when it is answered.
    answer: Option<oneshot::Sender<GrantOutcome>>,
}

/// The session's tickets (module doc).
struct Tickets {
    /// The next ticket id: unique within the session, from 1.
    next: TicketId,
    waiting: BTreeMap<TicketId, Waiting>,
    held: BTreeMap<TicketId, watch::Sender<Option<Lost>>>,
    /// Why the session ended, once it has.
    ended: Option<Lost>,
}

/// The client-side state of one session (module doc).
pub(super) struct SessionState {
    pub(super) client: Client,
    pub(super) id: SessionId,
    pub(super) ttl: Duration,
    /// The belief deadline (see the `session` module doc): no permit of this session is
    /// believed held past it.
    pub(super) deadline: watch::Sender<Instant>,
    /// A std mutex: held only to read or change the maps, never across an await.
    tickets: Mutex<Tickets>,
    /// The background task (keep-alives, events); aborted when the last holder of this
    /// state — the session or one of its permits — drops it.
    task: Mutex<Option<AbortOnDrop>>,
}

impl SessionState {
    /// The state of the newly opened session `id`, believed alive until `deadline`.
    pub(super) fn new(client: Client, id: SessionId, ttl: Duration, deadline: Instant) -> Self {
        SessionState {
            client,
            id,
            ttl,
            deadline: watch::channel(deadline).0,
            tickets: Mutex::new(Tickets {
                next: 1,
                waiting: BTreeMap::new(),
                held: BTreeMap::new(),
                ended: None,
            }),
            task: Mutex::new(None),
        }
    }

    /// Hands the background task to this state: it lives as long as the state does.
    pub(super) fn keep_task(&self, task: AbortOnDrop) {
        *self.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    fn tickets(&self) -> MutexGuard<'_, Tickets> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new waiting ticket *before* its acquire is sent (so a grant pushed ahead
    /// of the acquire's own answer finds it). `acquire` builds the request for the ticket.
    /// Returns the request and where its outcome will arrive.
    pub(super) fn register(
        &self,
        acquire: impl FnOnce(TicketId) -> Acquire,
    ) -> Result<(Acquire, oneshot::Receiver<GrantOutcome>), AcquireError> {
        let mut t = self.tickets();
        if t.ended.is_some() {
            return Err(AcquireError::SessionLost);
        }
        let ticket = t.next;
        t.next += 1;
        let (answer, granted) = oneshot::channel();
        let acquire = acquire(ticket);
        let waiting = Waiting {
            acquire: acquire.clone(),
            answer: Some(answer),
        };
        t.waiting.insert(ticket, waiting);
        Ok((acquire, granted))
    }

    /// Stops waiting for `ticket` (its acquire failed or is being withdrawn).
    pub(super) fn unregister(&self, ticket: TicketId) {
        self.tickets().waiting.remove(&ticket);
    }

    /// Tracks granted `ticket` as held; the returned watch says when it is lost. A grant
    /// that arrives after the session ended is lost at once.
    pub(super) fn hold(&self, ticket: TicketId) -> watch::Receiver<Option<Lost>> {
        let (lost_tx, lost_rx) = watch::channel(None);
        let mut t = self.tickets();
        assert!(
            !t.waiting.contains_key(&ticket),
            "a ticket is waiting or held, not both: {ticket} is still waiting"
        );
        if let Some(why) = &t.ended {
            lost_tx.send_replace(Some(why.clone()));
        }
        t.held.insert(ticket, lost_tx);
        lost_rx
    }

    /// The acquires of every waiting ticket, to re-send.
    pub(super) fn waiting_acquires(&self) -> Vec<Acquire> {
        let t = self.tickets();
        t.waiting.values().map(|w| w.acquire.clone()).collect()
    }

    /// Every held ticket.
    pub(super) fn held_tickets(&self) -> Vec<TicketId> {
        self.tickets().held.keys().copied().collect()
    }

    /// Ends every held permit and waiting ticket with `why`.
    pub(super) fn end(&self, why: Lost) {
        let mut t = self.tickets();
        if t.ended.is_none() {
            t.ended = Some(why.clone());
        }
        for (_, held) in std::mem::take(&mut t.held) {
            held.send_replace(Some(why.clone()));
        }
        for (_, mut w) in std::mem::take(&mut t.waiting) {
            if let Some(a) = w.answer.take() {
                let _ = a.send(Err(AcquireError::SessionLost));
            }
        }
    }

    /// A ticket was granted: hand the grant to its acquirer.
    pub(super) fn granted(&self, ticket: TicketId, fence: Fence, units: u32) {
        self.answer(ticket, Ok((fence, units)));
    }

    /// A ticket was refused: hand the refusal to its acquirer.
    pub(super) fn refused(&self, ticket: TicketId, refusal: Refusal) {
        self.answer(ticket, Err(AcquireError::Refused(refusal)));
    }

    /// Ends `ticket`'s wait with `outcome`, if it is still waiting.
    fn answer(&self, ticket: TicketId, outcome: GrantOutcome) {
        if let Some(mut w) = self.tickets().waiting.remove(&ticket)
            && let Some(a) = w.answer.take()
        {
            let _ = a.send(outcome);
        }
    }

    /// Marks a held permit lost (it stays held on the cluster until released).
    pub(super) fn lose(&self, ticket: TicketId, why: Lost) {
        if let Some(h) = self.tickets().held.get(&ticket) {
            h.send_replace(Some(why));
        }
    }

    /// Stops tracking a held permit (it is being released).
    pub(super) fn forget(&self, ticket: TicketId) {
        self.tickets().held.remove(&ticket);
    }

    /// Handles one answer to an acquire (sent first or re-asked).
    pub(super) fn answered(&self, ticket: TicketId, reply: Reply) {
        match reply {
            Reply::Granted { fence, units } => self.granted(ticket, fence, units),
            Reply::Queued { .. } => {}
            Reply::Refused(Refusal::UnknownSession) => self.end(Lost::Expired),
            Reply::Refused(r) => self.refused(ticket, r),
            other => self.refused(
                ticket,
                Refusal::Invalid(format!("unexpected answer {other:?}")),
            ),
        }
    }
}
