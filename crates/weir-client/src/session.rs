//! A session: the client's identity on the cluster, kept alive in the background, and the
//! acquires made under it.
//!
//! # Keep-alive and the belief deadline
//!
//! A [`Session`] sends `KeepAliveAcked` every TTL/5 ([`KEEPALIVES_PER_TTL`]), carrying
//! the session's acknowledged mark (its lowest ticket still waiting: the cluster forgets
//! the finished tickets below it, see `weir_core::machine::session`). When one is
//! acknowledged, the session's **belief deadline** becomes `send time + TTL − margin`
//! ([`margin_for`], [`deadline_after`]) on CLOCK_BOOTTIME ([`BootInstant`]): the cluster
//! cannot expire the session before then (G2, see the `machine` module doc). The boot clock
//! counts the time the machine spends suspended, which the monotonic clock (`Instant`) does
//! not, so a client resuming from a suspend finds its deadline passed instead of believing
//! in permits whose lease ran out in real time; timers only say when to look. Every
//! permit of the session is believed held only until that deadline. A keep-alive with no
//! acknowledgement leaves the deadline where it was and is retried soon
//! ([`KEEPALIVE_RETRY`]); when the deadline passes, every held permit is lost
//! ([`Lost::Deadline`]). A keep-alive answered `UnknownSession` ends the session
//! ([`Lost::Expired`]). Near the deadline, a keep-alive or acquire unanswered for 400 ms is
//! hedged to the other nodes, whether or not its node heartbeats (`hedge.rs`).
//!
//! # Acquires, pushes and re-asks
//!
//! A ticket is registered as waiting *before* its acquire is sent, so a grant pushed ahead
//! of the acquire's own answer is not lost (the pending-then-confirmed rule). A node pushes
//! to a connection the events of the sessions that connection has used, and the client
//! fans them out to every [`Client::events`] subscriber; a session learns its grants,
//! refusals, halts and expiry from them without asking. A push can still be lost — with a
//! connection that broke, by a subscriber that fell behind, or by the node's forwarder that
//! fell behind (it then sends `Resync`, which bumps [`Client::generation`]) — so on every
//! new connection, every `Resync` and every lag of its own the session re-asks each waiting
//! ticket: the acquire is idempotent by (session, ticket), and a ticket granted meanwhile
//! answers `Granted` with the same fence, and one refused (at once, or while it waited)
//! answers the same refusal: the cluster remembers the refusals of requests that wait
//! (`machine::session`). An acquire that never waits (`wait: false`) is not re-asked: its
//! own write's answer decides it, and the cluster does not remember its refusal, so a
//! second ask could be granted after the caller was told `Refused`. With no ticket waiting
//! it sends a keep-alive
//! instead, which names the session on the new connection so its pushes follow it there.
//! Asking again for a *held* ticket answers `Granted` even under a halt, so for held
//! permits the re-ask reads the halts of their tenants instead, and marks lost every permit
//! a halt covers: a `Halted` push that was lost is learned too.
//!
//! A caller may also ask again itself, naming a ticket ([`AcquireOptions::ticket`]): for a
//! ticket this session holds the cluster answers the same grant, and the new permit shares
//! the held ticket's state (the `session_state` module doc), so the two are one holding.
//!
//! Keep-alives and re-asks run in two loops ([`maintain`]), so a keep-alive never waits for
//! a re-ask.
//!
//! # Nothing stays held that no one believes it holds
//!
//! A ticket leaves the session's maps without a permit owning it when its acquire fails
//! with an unknown outcome, times out, or is cancelled (the future dropped), or when a
//! grant arrives for an acquirer that is gone. Each of these releases the ticket in the
//! background ([`SessionState::abandon`]), with bounded retries (a release is idempotent,
//! and releases a queued ticket too); so does a permit dropped without `release`, and a
//! withdrawal whose release failed. A definite refusal holds nothing and sends nothing. A
//! background release that runs out of retries leaves the ticket to the session's end
//! (close, or expiry after its TTL).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::boot_clock::{BootInstant, LOOK_EVERY};
use super::hedge::{hedged_keep_alive, hedged_write};

use tokio::sync::broadcast::error::RecvError;

use super::client::Client;
use super::error::{AcquireError, ClientError};
use super::lost::Lost;
use super::permit::Permit;
use super::rules::keep_alive_credit;
use super::session_state::{Grant, SessionState, acquire_command, release_in_background};
use weir_core::machine::{
    AcquireParts, Command, Event, Part, Priority, Refusal, Reply, SessionId, TicketId,
};
use weir_proto::protocol::{Answer, Query};
use weir_proto::task::AbortOnDrop;

/// Keep-alives sent per TTL. The belief deadline runs from the send time of the last
/// acknowledged keep-alive, so a stop just after a send leaves `TTL − margin − TTL/N` of
/// belief to find the new leader in: with a 3 s TTL, 1.7 s at N = 3 and 2.1 s at N = 5 (the
/// budget in the client module doc). The cost is N keep-alive writes a TTL per session,
/// batched into entries like every other command: at 3 s, 1.7 writes/s a session.
pub(crate) const KEEPALIVES_PER_TTL: u32 = 5;
/// How soon a keep-alive that got no acknowledgement is tried again (or TTL/5, if sooner):
/// often enough to renew before the deadline after a brief failover.
const KEEPALIVE_RETRY: Duration = Duration::from_millis(100);

/// The safety margin subtracted from the TTL in the belief deadline: a tenth of the TTL,
/// and at least 100 ms. It covers a clock-rate drift between this client and the leaders far
/// larger than NTP-disciplined clocks show (the bound needed is TTL × ρ / (1 + ρ)).
pub fn margin_for(ttl: Duration) -> Duration {
    // PLANTED(margin-zero)
    if weir_core::planted::is(weir_core::planted::Plant::MarginZero) {
        return Duration::ZERO;
    }
    (ttl / 10).max(Duration::from_millis(100))
}

/// The belief deadline after a keep-alive (or open) sent at `sent` was acknowledged: the
/// cluster cannot expire the session before `sent + ttl` (G2), less the margin.
pub fn deadline_after(sent: BootInstant, ttl: Duration) -> BootInstant {
    sent + ttl - margin_for(ttl)
}

/// Whether a permit under `deadline` is still believed held at `now`.
pub fn believed_at(deadline: BootInstant, now: BootInstant) -> bool {
    now < deadline
}

/// What to acquire.
#[derive(Clone, Debug)]
pub struct AcquireOptions {
    /// The tenant of the limit.
    pub tenant: String,
    /// The limit's name.
    pub limit: String,
    /// The key of `limit`, when it is keyed (a user, an API key, an IP, a model).
    pub key: Option<String>,
    /// Units to hold (and tokens to take, on a rated limit).
    pub units: u32,
    /// More limits of the same tenant, decided with `limit` in one entry: granted on
    /// every part under one fence, or on none (nothing charged when one refuses).
    pub parts: Vec<Part>,
    /// The units of the rate parts are an estimate, settled later with
    /// [`Permit::settle`](crate::Permit::settle).
    pub estimate: bool,
    /// Where the ticket queues: level first, then fair share by key.
    pub priority: Priority,
    /// The agent acting, for agent-scoped halts.
    pub agent: Option<String>,
    /// Queue when there is no room (`false`: refuse `Busy` at once).
    pub wait: bool,
    /// Give up waiting after this long (the ticket is withdrawn).
    pub timeout: Option<Duration>,
    /// Ask with this ticket instead of the session's next one (the session numbers its own
    /// 1, 2, 3, … and goes on above a chosen one). Asking again for a ticket this session
    /// holds answers the same grant with the same fence, charging nothing twice; the two
    /// permits are then one holding: a halt or the session's end tells both, and releasing
    /// (or dropping) either releases the ticket and tells the other [`Lost::Released`]. A
    /// ticket the session is done with is refused `Invalid` once the session's
    /// acknowledged mark has passed it (`weir_core::machine::session`), and one waiting
    /// here already is refused `Invalid` at once.
    pub ticket: Option<TicketId>,
}

impl AcquireOptions {
    /// One unit of `tenant/limit`, default priority, waiting without a timeout.
    pub fn new(tenant: &str, limit: &str) -> AcquireOptions {
        AcquireOptions {
            tenant: tenant.into(),
            limit: limit.into(),
            key: None,
            units: 1,
            parts: Vec::new(),
            estimate: false,
            priority: Priority::default(),
            agent: None,
            wait: true,
            timeout: None,
            ticket: None,
        }
    }
}

/// A session. Dropping it, and every permit taken under it, stops its keep-alives (the
/// cluster expires it after its TTL); [`Session::close`] ends it at once.
pub struct Session {
    state: Arc<SessionState>,
}

impl Session {
    /// Opens a session with `ttl` and starts keeping it alive.
    pub async fn open(client: &Client, ttl: Duration) -> Result<Session, ClientError> {
        let sent = BootInstant::now();
        let reply = client
            .write(Command::OpenSession {
                ttl_ms: ttl.as_millis() as u64,
            })
            .await?;
        let id = match reply {
            Reply::SessionOpened { session, .. } => session,
            Reply::Refused(r) => {
                return Err(ClientError::Failed(
                    weir_proto::protocol::Failure::BadRequest(r.to_string()),
                ));
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "open session answered {other:?}"
                )));
            }
        };
        let deadline = deadline_after(sent, ttl);
        let state = Arc::new(SessionState::new(client.clone(), id, ttl, deadline));
        let task = tokio::spawn(maintain(Arc::downgrade(&state), client.clone()));
        state.keep_task(AbortOnDrop(task));
        Ok(Session { state })
    }

    /// A handle on the session whose state this is (for the session's own parts: a lease's
    /// takes from the cluster).
    pub(crate) fn from_state(state: Arc<SessionState>) -> Session {
        Session { state }
    }

    /// The session's state, for the session's own parts (a lease).
    pub(crate) fn state(&self) -> &Arc<SessionState> {
        &self.state
    }

    /// The session's id on the cluster.
    pub fn id(&self) -> SessionId {
        self.state.id
    }

    /// The current belief deadline, as an `Instant` from now (the deadline itself is kept on
    /// the boot clock, which counts suspended time).
    pub fn deadline(&self) -> Instant {
        let deadline = *self.state.deadline.borrow();
        let (now, instant_now) = (BootInstant::now(), Instant::now());
        // A deadline already passed maps to the past, not to now: a caller that reads it
        // after a pause must see when the belief ended, not when it looked.
        match deadline.remaining(now) {
            left if !left.is_zero() => instant_now + left,
            _ => instant_now
                .checked_sub(now.saturating_since(deadline))
                .unwrap_or(instant_now),
        }
    }

    /// How many of this session's keep-alives and acquires were hedged to the other nodes
    /// (unanswered near the deadline: the `hedge` module doc).
    pub fn writes_hedged(&self) -> u64 {
        self.state.hedged()
    }

    /// The current belief deadline on the boot clock.
    pub fn boot_deadline(&self) -> BootInstant {
        *self.state.deadline.borrow()
    }

    /// While an acquire of this session waits: how many tickets were ahead of it when the
    /// cluster last answered `Queued` (when it was queued, or re-asked after a reconnect).
    /// The queue moves on without telling the client, so this is an upper bound on the
    /// position now, unless higher-priority tickets arrived since. `None` when nothing of
    /// this session waits or no `Queued` answer came yet.
    pub fn queued_position(&self) -> Option<u32> {
        self.state.queued_position()
    }

    /// Acquires a permit: waits (if allowed) until the cluster grants it.
    pub async fn acquire(&self, options: AcquireOptions) -> Result<Permit, AcquireError> {
        if let Some(ticket) = options.ticket
            && self.state.holds(ticket)
        {
            return self.ask_again(ticket, options).await;
        }
        let (acquire, granted) = self
            .state
            .register(options.ticket, |ticket| self.request(ticket, &options))?;
        let ticket = acquire.ticket;
        // Until it becomes a permit, the ticket is given up (and released in the background)
        // if this future ends any other way than a definite refusal: an unknown outcome, a
        // timeout, a cancellation by the caller.
        let mut pending = Pending {
            state: &self.state,
            ticket,
            armed: true,
        };
        match hedged_write(&self.state, acquire_command(&acquire)).await {
            Ok(reply) => self.state.answered(ticket, reply),
            Err(e) => {
                if e.definitely_failed() {
                    pending.armed = false;
                    self.state.unregister(ticket);
                }
                return Err(AcquireError::Client(e));
            }
        }
        let outcome = match options.timeout {
            Some(limit) => match tokio::time::timeout(limit, granted).await {
                Ok(o) => o,
                Err(_) => {
                    pending.armed = false;
                    self.withdraw(ticket).await;
                    return Err(AcquireError::TimedOut);
                }
            },
            None => granted.await,
        };
        let outcome = outcome.unwrap_or(Err(AcquireError::SessionLost));
        if matches!(
            outcome,
            Err(AcquireError::Refused(_) | AcquireError::SessionLost)
        ) {
            // Refused: nothing is held. Session lost: its end frees every ticket.
            pending.armed = false;
        }
        let grant = outcome?;
        pending.armed = false;
        Ok(Permit::new(
            self.state.clone(),
            options.tenant,
            options.limit,
            ticket,
            grant,
        ))
    }

    /// The acquire of `options` as ticket `ticket` of this session.
    fn request(&self, ticket: TicketId, options: &AcquireOptions) -> AcquireParts {
        let first = Part {
            limit: options.limit.clone(),
            key: options.key.clone(),
            units: options.units,
        };
        AcquireParts {
            session: self.state.id,
            ticket,
            tenant: options.tenant.clone(),
            parts: std::iter::once(first)
                .chain(options.parts.iter().cloned())
                .collect(),
            priority: options.priority.clone(),
            agent: options.agent.clone(),
            wait: options.wait,
            estimate: options.estimate,
        }
    }

    /// Asks again for `ticket`, which this session holds: the cluster answers its grant
    /// (idempotent by session and ticket), and the new permit shares the held ticket's
    /// entry (the `session_state` module doc). Nothing is registered, so nothing is
    /// released if this fails: the ticket stays with the permit that holds it.
    async fn ask_again(
        &self,
        ticket: TicketId,
        options: AcquireOptions,
    ) -> Result<Permit, AcquireError> {
        let acquire = self.request(ticket, &options);
        let reply = hedged_write(&self.state, acquire_command(&acquire))
            .await
            .map_err(AcquireError::Client)?;
        let (fence, units) = match reply {
            Reply::Granted { fence, units } => (fence, units),
            Reply::Refused(r) => return Err(AcquireError::Refused(r)),
            other => {
                let why = format!("unexpected answer to a held ticket: {other:?}");
                return Err(AcquireError::Client(ClientError::Protocol(why)));
            }
        };
        // Released meanwhile by its other permit: the grant answered is no longer held.
        let lost =
            self.state
                .share(ticket)
                .ok_or(AcquireError::Refused(Refusal::TicketReleased {
                    session: self.state.id,
                    ticket,
                }))?;
        let grant = Grant { fence, units, lost };
        Ok(Permit::new(
            self.state.clone(),
            options.tenant,
            options.limit,
            ticket,
            grant,
        ))
    }

    /// Withdraws a waiting ticket; a grant that raced the withdrawal is released with it. A
    /// release that fails is retried in the background.
    async fn withdraw(&self, ticket: TicketId) {
        self.state.unregister(ticket);
        self.state.forget(ticket);
        let release = Command::Release {
            session: self.state.id,
            ticket,
        };
        if self.state.client.write(release).await.is_err() {
            release_in_background(self.state.client.clone(), self.state.id, ticket);
        }
    }

    /// Closes the session: every permit is released and every ticket withdrawn.
    pub async fn close(self) -> Result<(), ClientError> {
        self.state.end(Lost::Closed);
        self.state
            .client
            .write(Command::CloseSession {
                session: self.state.id,
            })
            .await
            .map(|_| ())
    }
}

/// An acquire's ticket until it becomes a permit: dropped armed, it gives the ticket up.
struct Pending<'a> {
    state: &'a SessionState,
    ticket: TicketId,
    armed: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.state.abandon(self.ticket);
        }
    }
}

/// The session's background work: keep-alives and the deadline in one loop, pushed events
/// and re-asks after reconnects in another, run concurrently so that neither waits for the
/// other. Ends when the session's state is dropped (only `Weak` is held).
///
/// Why two loops: a re-ask is a string of writes and linearizable reads, each retried
/// through an election (seconds, under load), and a keep-alive retried across a failover
/// takes as long. In one loop, a keep-alive due during a re-ask waited for it — after a
/// failover, exactly when the belief deadline is nearest — and a holder with a queued
/// ticket or a held permit lost its permit to its own re-ask.
async fn maintain(state: Weak<SessionState>, client: Client) {
    tokio::join!(renew(state.clone()), follow(state, client));
}

/// Keeps the session alive: a keep-alive every TTL/5 (sooner after one that got no
/// acknowledgement), and every held permit lost once the deadline passes.
async fn renew(state: Weak<SessionState>) {
    let Some(ttl) = state.upgrade().map(|s| s.ttl) else {
        return;
    };
    let every = ttl / KEEPALIVES_PER_TTL;
    let mut next_keepalive = Instant::now() + every;
    loop {
        // The deadline is on the boot clock; the timer only says when to look (at least
        // every LOOK_EVERY, so a deadline passed during a suspend is seen soon after).
        let deadline = match state.upgrade() {
            Some(s) => {
                let left = s.told_at().remaining(BootInstant::now());
                Instant::now() + left.min(LOOK_EVERY)
            }
            None => return,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next_keepalive.into()) => {
                let Some(s) = state.upgrade() else { return };
                next_keepalive = keep_alive(&s, every).await;
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                let Some(s) = state.upgrade() else { return };
                if !believed_at(s.told_at(), BootInstant::now()) {
                    tracing::info!("session {}: the belief deadline passed", s.id);
                    for t in s.held_tickets() {
                        s.lose(t, s.deadline_loss());
                    }
                    // Wait for the next keep-alive; nothing to do until then.
                    tokio::time::sleep_until(next_keepalive.into()).await;
                }
            }
        }
    }
}

/// Follows the session's pushed events, and re-asks after every new connection, `Resync`
/// or lag of its own.
async fn follow(state: Weak<SessionState>, client: Client) {
    let mut events = client.events();
    let mut generation = client.generation();
    loop {
        tokio::select! {
            event = events.recv() => {
                let Some(s) = state.upgrade() else { return };
                match event {
                    Ok(event) => on_event(&s, event),
                    // Missed events: re-ask, as after a reconnect.
                    Err(RecvError::Lagged(_)) => reask(&s).await,
                    Err(RecvError::Closed) => return,
                }
            }
            changed = generation.changed() => {
                if changed.is_err() {
                    return;
                }
                let Some(s) = state.upgrade() else { return };
                // The new connection follows this session once a write names it.
                reask(&s).await;
            }
        }
    }
}

/// Sends one keep-alive; an acknowledged one moves the deadline to `send time + TTL −
/// margin`. Returns when the next one is due: `every` from now, or sooner after a try that
/// got no acknowledgement.
async fn keep_alive(s: &SessionState, every: Duration) -> Instant {
    let next = Instant::now() + every;
    let sent = BootInstant::now();
    let answer = hedged_keep_alive(s).await;
    trace_keep_alive(s, sent, &answer);
    match answer {
        Ok(Reply::KeptAlive { .. }) => {
            let sent = keep_alive_credit(sent, BootInstant::now(), every);
            extend(s, sent);
            s.keep_alive_refused(None);
            next
        }
        Err(ClientError::Refused(why)) => {
            s.keep_alive_refused(Some(why));
            Instant::now() + KEEPALIVE_RETRY.min(every)
        }
        Ok(Reply::Refused(Refusal::UnknownSession { .. })) => {
            s.end(Lost::Expired);
            next
        }
        // Unknown outcome or no answer: the deadline stays; it may pass.
        _ => Instant::now() + KEEPALIVE_RETRY.min(every),
    }
}

/// Traces one keep-alive: how long its answer took, and how much of the belief deadline
/// was left when it came (the budget in the `client` module doc).
fn trace_keep_alive(s: &SessionState, sent: BootInstant, answer: &Result<Reply, ClientError>) {
    let now = BootInstant::now();
    let took_ms = now.saturating_since(sent).as_millis();
    let left_ms = s.deadline.borrow().remaining(now).as_millis();
    match answer {
        Ok(reply) => tracing::debug!(
            "session {}: keep-alive answered {reply:?} after {took_ms} ms, {left_ms} ms before the deadline",
            s.id
        ),
        Err(e) => tracing::info!(
            "session {}: keep-alive failed after {took_ms} ms ({e}), {left_ms} ms before the deadline",
            s.id
        ),
    }
}

/// Moves the deadline after an acknowledged keep-alive sent at `sent` (only ever later).
fn extend(s: &SessionState, sent: BootInstant) {
    let new = deadline_after(sent, s.ttl);
    s.deadline.send_if_modified(|d| {
        let later = new > *d;
        if later {
            *d = new;
        }
        later
    });
}

/// Applies one pushed event, if it is about this session.
fn on_event(s: &SessionState, event: Event) {
    if event.session() != s.id {
        return;
    }
    match event {
        Event::Granted {
            ticket,
            fence,
            units,
            ..
        } => s.granted(ticket, fence, units),
        Event::Refused {
            ticket, refusal, ..
        } => s.refused(ticket, refusal),
        Event::Halted {
            ticket,
            scope,
            reason,
            ..
        } => s.lose(ticket, Lost::Halted { scope, reason }),
        Event::SessionExpired { .. } => s.end(Lost::Expired),
    }
}

/// Asks again for every waiting ticket (idempotent): a grant pushed to a lost connection is
/// learned from the answer. Then reads the halts of every tenant it holds permits of: a
/// halt pushed to a lost connection is learned too (asking again for a held ticket answers
/// `Granted` even under a halt, so the halts are read instead).
async fn reask(s: &SessionState) {
    // An acquire that never waits is decided by its own write, whose answer it awaits: no
    // push can grant it, and asking again could only have it decided twice (the machine
    // remembers a refusal only for a ticket that waited), refused to the caller and
    // granted, tokens charged, to the re-ask.
    let waiting: Vec<AcquireParts> = s
        .waiting_acquires()
        .into_iter()
        .filter(|a| a.wait)
        .collect();
    if waiting.is_empty() {
        // Name the session on the new connection so its events are pushed here.
        let sent = BootInstant::now();
        match s.client.write(Command::KeepAlive { session: s.id }).await {
            Ok(Reply::KeptAlive { .. }) => extend(s, sent),
            Ok(Reply::Refused(Refusal::UnknownSession { .. })) => {
                s.end(Lost::Expired);
                return;
            }
            _ => {}
        }
    }
    for a in waiting {
        let ticket = a.ticket;
        if let Ok(reply) = s.client.write(acquire_command(&a)).await {
            s.answered(ticket, reply);
        }
    }
    for tenant in s.held_tenants() {
        let query = Query::Halts {
            tenant: tenant.clone(),
        };
        if let Ok(Answer::Halts(halts)) = s.client.read(query).await {
            s.learn_halts(&tenant, &halts);
        }
    }
}
