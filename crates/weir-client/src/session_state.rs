//! [`SessionState`]: what a [`Session`](super::Session), its [`Permit`](super::Permit)s
//! and its background task share — the session's id, its belief deadline, and its tickets.
//!
//! Tickets are *waiting* (an acquire sent, no grant yet; its acquirer waits on a oneshot)
//! or *held* (granted; its permit, or the acquirer about to make one, watches for a
//! [`Lost`] reason). Invariants:
//! - a ticket is in at most one of `waiting` and `held`: a grant moves it from one to the
//!   other under one lock, so a halt or an expiry that arrives between the grant and the
//!   acquirer's wake-up still finds it (and a halt pushed while it waits is kept for it);
//! - a held ticket may be owned by several permits: a ticket asked for again while held
//!   (`AcquireOptions::ticket`) answers the same grant, and its new permit shares the held
//!   entry (its `lost` watch), so a halt or the session's end tells them all, and when one
//!   of them releases it (or is consumed, or dropped) the others are told
//!   [`Lost::Released`]: no permit is believed held on a ticket another one released;
//! - a ticket that leaves both maps without a permit owning it (an acquire that failed
//!   with an unknown outcome, timed out or was cancelled, a grant no one is left to take) is
//!   released in the background ([`release_in_background`]): nothing stays held on the
//!   cluster that no one here believes it holds;
//! - once the session has ended (`ended` is set) nothing new waits: an acquire after the
//!   end fails with `SessionLost`, and a grant that raced the end is held already lost;
//! - the deadline only moves later. It is a [`BootInstant`], so suspended time counts.
//!
//! This file sits below `session.rs` and `permit.rs` (both use it, it uses neither), so
//! the imports between the three point one way.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::boot_clock::BootInstant;
use super::client::Client;
use super::error::AcquireError;
use super::lost::Lost;
use super::rules::told_at;
use weir_core::machine::{
    Acquire, AcquireParts, Command, Fence, HaltScope, Refusal, Reply, SessionId, TicketId,
};
use weir_proto::task::AbortOnDrop;

/// Writes a background release makes at most (each retried by the client within its own
/// `REQUEST_DEADLINE`), pausing [`RELEASE_PAUSE`] between them: enough to outlast a
/// failover or two; past that the session's own end (close or expiry) frees the ticket.
const RELEASE_TRIES: u32 = 3;
/// Pause between the writes of a background release.
const RELEASE_PAUSE: Duration = Duration::from_secs(1);

/// A grant as the session learned it.
pub(super) struct Grant {
    pub(super) fence: Fence,
    pub(super) units: u32,
    /// Where its loss will be told.
    pub(super) lost: watch::Receiver<Option<Lost>>,
}

/// A grant, or why there is none.
pub(super) type GrantOutcome = Result<Grant, AcquireError>;

/// A ticket whose acquire has been sent and not yet granted.
struct Waiting {
    /// The acquire as sent: re-sent unchanged on a re-ask (idempotent by session, ticket).
    acquire: AcquireParts,
    /// Where its outcome goes; taken when it is answered.
    answer: Option<oneshot::Sender<GrantOutcome>>,
    /// A loss learned before the grant (a halt pushed ahead of it): the permit starts lost.
    lost: Option<Lost>,
    /// How many tickets were ahead of it when the cluster last answered `Queued` (at the
    /// first ask, or a re-ask after a reconnect); `None` until then.
    position: Option<u32>,
}

/// A granted ticket.
struct Held {
    /// Tells its permit why it may no longer be held.
    lost: watch::Sender<Option<Lost>>,
    /// The tenant and agent it was acquired for: which halts cover it.
    tenant: String,
    agent: Option<String>,
}

/// The session's tickets (module doc).
struct Tickets {
    /// The next ticket id: unique within the session, from 1.
    next: TicketId,
    waiting: BTreeMap<TicketId, Waiting>,
    held: BTreeMap<TicketId, Held>,
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
    pub(super) deadline: watch::Sender<BootInstant>,
    /// Why the last keep-alive was refused (the node refused this client's hello), until
    /// one is acknowledged: what a permit lost at the deadline is lost to.
    refused: Mutex<Option<String>>,
    /// A std mutex: held only to read or change the maps, never across an await.
    tickets: Mutex<Tickets>,
    /// The background task (keep-alives, events); aborted when the last holder of this
    /// state — the session or one of its permits — drops it.
    task: Mutex<Option<AbortOnDrop>>,
    /// Writes of this session hedged to the other nodes (`hedge` module doc): for tests,
    /// the bench and diagnostics.
    hedged: AtomicU64,
    /// The last lease request's `seq` (`leased` module doc): the cluster applies a session's
    /// lease requests in increasing `seq` only.
    pub(super) lease_seq: AtomicU64,
    /// Held by a lease request from taking its `seq` to its answer: a session's lease
    /// requests go one at a time, so none arrives after a later one and is taken for a
    /// retry (which would change nothing, its update lost).
    pub(super) lease_requests: tokio::sync::Mutex<()>,
    /// The session's live token leases, by what they lease (`leased` module doc): one per
    /// limit or key, for the takes that opt in to use them. Weak: a lease lives as long as
    /// its handle.
    leases: Mutex<HashMap<LeaseKey, Weak<dyn Any + Send + Sync>>>,
}

/// What a token lease is on: tenant, limit, key.
pub(super) type LeaseKey = (String, String, Option<String>);

impl SessionState {
    /// The state of the newly opened session `id`, believed alive until `deadline`.
    pub(super) fn new(client: Client, id: SessionId, ttl: Duration, deadline: BootInstant) -> Self {
        SessionState {
            client,
            id,
            ttl,
            deadline: watch::channel(deadline).0,
            refused: Mutex::new(None),
            tickets: Mutex::new(Tickets {
                next: 1,
                waiting: BTreeMap::new(),
                held: BTreeMap::new(),
                ended: None,
            }),
            task: Mutex::new(None),
            hedged: AtomicU64::new(0),
            lease_seq: AtomicU64::new(0),
            lease_requests: tokio::sync::Mutex::new(()),
            leases: Mutex::new(HashMap::new()),
        }
    }

    /// Registers a lease on `key`; false when a live one is registered already.
    pub(super) fn add_lease(&self, key: LeaseKey, lease: Weak<dyn Any + Send + Sync>) -> bool {
        let mut leases = self.leases.lock().expect("leases lock");
        leases.retain(|_, l| l.strong_count() > 0);
        if leases.contains_key(&key) {
            return false;
        }
        leases.insert(key, lease);
        true
    }

    /// Forgets the lease on `key`.
    pub(super) fn remove_lease(&self, key: &LeaseKey) {
        self.leases.lock().expect("leases lock").remove(key);
    }

    /// The live lease on `key`, if any.
    pub(super) fn lease_of(&self, key: &LeaseKey) -> Option<Arc<dyn Any + Send + Sync>> {
        self.leases.lock().expect("leases lock").get(key)?.upgrade()
    }

    /// Counts one write of this session hedged.
    pub(super) fn note_hedged(&self) {
        self.hedged.fetch_add(1, Ordering::Relaxed);
    }

    /// How many writes of this session were hedged.
    pub(super) fn hedged(&self) -> u64 {
        self.hedged.load(Ordering::Relaxed)
    }

    /// Records why a keep-alive was refused (`None`: one was acknowledged).
    pub(super) fn keep_alive_refused(&self, why: Option<String>) {
        *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }

    /// When the application is told that the belief deadline passed (`Permit::lost`,
    /// `Permit::lost_reason`, the loss marked on held permits): at the deadline itself.
    pub(super) fn told_at(&self) -> BootInstant {
        told_at(*self.deadline.borrow())
    }

    /// What a permit is lost to when the deadline passes: the refusal of the keep-alives,
    /// if the cluster refused them, else the deadline itself.
    pub(super) fn deadline_loss(&self) -> Lost {
        match &*self.refused.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => Lost::Refused(why.clone()),
            None => Lost::Deadline,
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
    /// of the acquire's own answer finds it): `chosen`, or else the session's next. `acquire`
    /// builds the request for the ticket. Returns the request and where its outcome will
    /// arrive. A chosen ticket already waiting or held here is refused `Invalid` (a held
    /// one is asked again through [`SessionState::share`] instead), and the session's own
    /// numbering goes on above it.
    pub(super) fn register(
        &self,
        chosen: Option<TicketId>,
        acquire: impl FnOnce(TicketId) -> AcquireParts,
    ) -> Result<(AcquireParts, oneshot::Receiver<GrantOutcome>), AcquireError> {
        let mut t = self.tickets();
        if t.ended.is_some() {
            return Err(AcquireError::SessionLost);
        }
        let ticket = match chosen {
            Some(c) if t.waiting.contains_key(&c) || t.held.contains_key(&c) => {
                return Err(AcquireError::Refused(Refusal::Invalid(format!(
                    "ticket {c} is already waiting or held in session {}",
                    self.id
                ))));
            }
            Some(c) => {
                t.next = t.next.max(c.saturating_add(1));
                c
            }
            None => {
                t.next += 1;
                t.next - 1
            }
        };
        let (answer, granted) = oneshot::channel();
        let acquire = acquire(ticket);
        let waiting = Waiting {
            acquire: acquire.clone(),
            answer: Some(answer),
            lost: None,
            position: None,
        };
        t.waiting.insert(ticket, waiting);
        Ok((acquire, granted))
    }

    /// The position the cluster last answered for the first of this session's waiting
    /// tickets that has one ([`Waiting::position`]).
    pub(super) fn queued_position(&self) -> Option<u32> {
        self.tickets().waiting.values().find_map(|w| w.position)
    }

    /// Stops waiting for `ticket` (its acquire failed or is being withdrawn).
    /// The session's acknowledged mark (`weir_core::machine::session`): its lowest ticket
    /// still waiting — an acquire sent and not yet answered for good, which a re-ask or a
    /// retry may still name — else the next ticket. Every ticket below it was answered
    /// (granted, refused) or given up, and is never asked about again: a held ticket is
    /// live on the cluster, where a re-ask of it (a caller's `AcquireOptions::ticket`) is
    /// answered whatever the mark, so it does not hold the mark back.
    pub(super) fn acked_below(&self) -> TicketId {
        let t = self.tickets();
        t.waiting.keys().next().copied().unwrap_or(t.next)
    }

    pub(super) fn unregister(&self, ticket: TicketId) {
        self.tickets().waiting.remove(&ticket);
    }

    /// Gives up `ticket`, which no permit owns (its acquire failed with an unknown outcome,
    /// timed out or was cancelled): it stops waiting or being held here, and is released
    /// on the cluster in the background, in case it was queued or granted there.
    pub(super) fn abandon(&self, ticket: TicketId) {
        {
            let mut t = self.tickets();
            t.waiting.remove(&ticket);
            t.held.remove(&ticket);
        }
        release_in_background(self.client.clone(), self.id, ticket);
    }

    /// The acquires of every waiting ticket, to re-send.
    pub(super) fn waiting_acquires(&self) -> Vec<AcquireParts> {
        let t = self.tickets();
        t.waiting.values().map(|w| w.acquire.clone()).collect()
    }

    /// Every held ticket.
    pub(super) fn held_tickets(&self) -> Vec<TicketId> {
        self.tickets().held.keys().copied().collect()
    }

    /// The tenants of the held tickets, each once.
    pub(super) fn held_tenants(&self) -> Vec<String> {
        let t = self.tickets();
        let mut tenants: Vec<String> = t.held.values().map(|h| h.tenant.clone()).collect();
        tenants.sort();
        tenants.dedup();
        tenants
    }

    /// Marks lost every held ticket of `tenant` that one of `halts` covers, by the machine's
    /// own rule ([`HaltScope::covers`]: a tenant-wide halt covers all, an agent's its own).
    pub(super) fn learn_halts(&self, tenant: &str, halts: &[(HaltScope, String)]) {
        let t = self.tickets();
        for h in t.held.values().filter(|h| h.tenant == tenant) {
            let agent = h.agent.as_deref();
            let covering = halts.iter().find(|(scope, _)| scope.covers(agent));
            if let Some((scope, reason)) = covering
                && h.lost.borrow().is_none()
            {
                h.lost.send_replace(Some(Lost::Halted {
                    scope: scope.clone(),
                    reason: reason.clone(),
                }));
            }
        }
    }

    /// Whether the session ended (closed, expired, or lost to its deadline for good): then
    /// nothing of it is believed, a lease's local bucket included.
    pub(super) fn is_ended(&self) -> bool {
        self.tickets().ended.is_some()
    }

    /// Ends every held permit and waiting ticket with `why`.
    pub(super) fn end(&self, why: Lost) {
        let mut t = self.tickets();
        if t.ended.is_none() {
            t.ended = Some(why.clone());
        }
        for (_, held) in std::mem::take(&mut t.held) {
            held.lost.send_replace(Some(why.clone()));
        }
        for (_, mut w) in std::mem::take(&mut t.waiting) {
            if let Some(a) = w.answer.take() {
                let _ = a.send(Err(AcquireError::SessionLost));
            }
        }
    }

    /// A ticket was granted: it moves from waiting to held (one lock, so nothing aimed at
    /// it can fall between), and its acquirer gets the grant. A grant no acquirer is left to
    /// take is released.
    pub(super) fn granted(&self, ticket: TicketId, fence: Fence, units: u32) {
        let orphan = {
            let mut t = self.tickets();
            let Some(mut w) = t.waiting.remove(&ticket) else {
                return;
            };
            let lost = t.ended.clone().or(w.lost.take());
            let (lost_tx, lost_rx) = watch::channel(lost);
            let held = Held {
                lost: lost_tx,
                tenant: w.acquire.tenant.clone(),
                agent: w.acquire.agent.clone(),
            };
            let gone = match w.answer.take() {
                Some(a) => a
                    .send(Ok(Grant {
                        fence,
                        units,
                        lost: lost_rx,
                    }))
                    .is_err(),
                None => true,
            };
            if !gone {
                t.held.insert(ticket, held);
            }
            gone
        };
        if orphan {
            release_in_background(self.client.clone(), self.id, ticket);
        }
    }

    /// A ticket was refused: hand the refusal to its acquirer.
    pub(super) fn refused(&self, ticket: TicketId, refusal: Refusal) {
        if let Some(mut w) = self.tickets().waiting.remove(&ticket)
            && let Some(a) = w.answer.take()
        {
            let _ = a.send(Err(AcquireError::Refused(refusal)));
        }
    }

    /// Marks a permit lost (it stays held on the cluster until released): a held one, or a
    /// waiting one whose grant is still to come (it will start lost).
    pub(super) fn lose(&self, ticket: TicketId, why: Lost) {
        let mut t = self.tickets();
        if let Some(h) = t.held.get(&ticket) {
            h.lost.send_replace(Some(why));
        } else if let Some(w) = t.waiting.get_mut(&ticket) {
            w.lost = Some(why);
        }
    }

    /// Whether `ticket` is held here.
    pub(super) fn holds(&self, ticket: TicketId) -> bool {
        self.tickets().held.contains_key(&ticket)
    }

    /// Where a second permit of the held `ticket` (asked for again) learns its loss: the
    /// held entry's own, shared (module doc); `None` when it is not held here (any more).
    pub(super) fn share(&self, ticket: TicketId) -> Option<watch::Receiver<Option<Lost>>> {
        self.tickets().held.get(&ticket).map(|h| h.lost.subscribe())
    }

    /// Stops tracking a held permit (it is being released, consumed or dropped). Any other
    /// permit of the same ticket not lost already is told [`Lost::Released`].
    pub(super) fn forget(&self, ticket: TicketId) {
        let held = self.tickets().held.remove(&ticket);
        if let Some(h) = held
            && h.lost.borrow().is_none()
        {
            h.lost.send_replace(Some(Lost::Released));
        }
    }

    /// Whether `ticket` is waiting, held, or neither (for tests of the races).
    #[cfg(test)]
    pub(super) fn whereabouts(&self, ticket: TicketId) -> (bool, bool) {
        let t = self.tickets();
        (
            t.waiting.contains_key(&ticket),
            t.held.contains_key(&ticket),
        )
    }

    /// Handles one answer to an acquire (sent first or re-asked).
    pub(super) fn answered(&self, ticket: TicketId, reply: Reply) {
        match reply {
            Reply::Granted { fence, units } => self.granted(ticket, fence, units),
            Reply::Queued { position } => {
                if let Some(w) = self.tickets().waiting.get_mut(&ticket) {
                    w.position = Some(position);
                }
            }
            Reply::Refused(Refusal::UnknownSession { .. }) => self.end(Lost::Expired),
            Reply::Refused(r) => self.refused(ticket, r),
            other => self.refused(
                ticket,
                Refusal::Invalid(format!("unexpected answer {other:?}")),
            ),
        }
    }
}

/// Releases `ticket` of `session` in the background, retrying up to [`RELEASE_TRIES`]
/// writes (see there). Nothing waits for it.
pub(super) fn release_in_background(client: Client, session: SessionId, ticket: TicketId) {
    spawn_release(client, session, ticket, 0);
}

/// Goes on with the release of `ticket` of `session` in a task of its own, after `tried`
/// writes that did not confirm it (then after a [`RELEASE_PAUSE`]), up to [`RELEASE_TRIES`]
/// in all. The task outlives whoever started the release: a caller that gives up (a
/// timeout around [`Permit::release`]) or a write whose outcome is unknown leaves the
/// retries running, so no permit stays held under a live session because one answer was
/// lost (G9). Without a runtime nothing is sent.
///
/// [`Permit::release`]: super::Permit::release
pub(super) fn spawn_release(client: Client, session: SessionId, ticket: TicketId, tried: u32) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        for attempt in tried + 1..=RELEASE_TRIES {
            if attempt > 1 {
                tokio::time::sleep(RELEASE_PAUSE).await;
            }
            match client.write(Command::Release { session, ticket }).await {
                Ok(_) => return,
                Err(e) if attempt == RELEASE_TRIES => {
                    tracing::warn!("release of ticket {ticket} of session {session}: {e}");
                }
                Err(_) => {}
            }
        }
    });
}

/// The command that sends `a`: an `Acquire` for one part without a key nor an estimate (what every node
/// of this protocol version and the log's older entries know), an `AcquireParts` otherwise.
pub(super) fn acquire_command(a: &AcquireParts) -> Command {
    match a.parts.as_slice() {
        [part] if part.key.is_none() && !a.estimate => Command::Acquire(Acquire {
            session: a.session,
            ticket: a.ticket,
            tenant: a.tenant.clone(),
            limit: part.limit.clone(),
            units: part.units,
            priority: a.priority.clone(),
            agent: a.agent.clone(),
            wait: a.wait,
        }),
        _ => Command::AcquireParts(a.clone()),
    }
}
