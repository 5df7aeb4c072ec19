//! A session: the client's identity on the cluster, kept alive in the background, and the
//! acquires made under it.
//!
//! Keep-alive: every TTL/3 the session sends `KeepAlive`. When one is acknowledged, the
//! session's **deadline** becomes `send time + TTL − margin` on this process's monotonic
//! clock (G2: the cluster cannot expire the lease before that, see the `machine` module
//! doc). Every permit of the session is believed held only until that deadline; when it
//! passes without a newer acknowledgement, every permit is lost.
//!
//! Acquire: a ticket is registered as waiting *before* its acquire is sent, so a grant
//! pushed before the acquire's own answer arrives is not lost (the pending-then-confirmed
//! rule). Grants, refusals, halts and expiry arrive as pushed events; and whenever the
//! client opens a new connection (a failover), the session re-asks every waiting ticket —
//! idempotent by (session, ticket) — so a push lost with the old connection loses nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use super::permit::{Lost, Permit};
use super::{AbortOnDrop, Client, ClientError};
use crate::machine::{
    Acquire, Command, Event, Fence, Priority, Refusal, Reply, SessionId, TicketId,
};

/// The safety margin subtracted from the TTL in the belief deadline: a tenth of the TTL,
/// and at least 100 ms. It covers a clock-rate drift between this client and the leaders far
/// larger than NTP-disciplined clocks show (the bound needed is TTL × ρ / (1 + ρ)).
pub fn margin_for(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(100))
}

/// How an acquire went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireError {
    /// The cluster refused it (halted, unknown limit, too large, busy, ...).
    Refused(Refusal),
    /// It waited longer than the timeout; the ticket was withdrawn.
    TimedOut,
    /// The session ended (expired or closed) while it waited.
    SessionLost,
    Client(ClientError),
}

impl std::fmt::Display for AcquireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcquireError::Refused(r) => write!(f, "refused: {r}"),
            AcquireError::TimedOut => f.write_str("timed out waiting"),
            AcquireError::SessionLost => f.write_str("session lost"),
            AcquireError::Client(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AcquireError {}

/// What to acquire.
#[derive(Clone, Debug)]
pub struct AcquireOptions {
    pub tenant: String,
    pub limit: String,
    pub units: u32,
    pub priority: Priority,
    pub agent: Option<String>,
    /// Queue when there is no room (`false`: refuse `Busy` at once).
    pub wait: bool,
    /// Give up waiting after this long (the ticket is withdrawn).
    pub timeout: Option<Duration>,
}

impl AcquireOptions {
    /// One unit of `tenant/limit`, default priority, waiting without a timeout.
    pub fn new(tenant: &str, limit: &str) -> AcquireOptions {
        AcquireOptions {
            tenant: tenant.into(),
            limit: limit.into(),
            units: 1,
            priority: Priority::default(),
            agent: None,
            wait: true,
            timeout: None,
        }
    }
}

/// A grant as the session learned it.
type Granted = Result<(Fence, u32), AcquireError>;

struct Waiting {
    acquire: Acquire,
    answer: Option<oneshot::Sender<Granted>>,
}

#[derive(Default)]
struct Tickets {
    next: TicketId,
    waiting: BTreeMap<TicketId, Waiting>,
    held: BTreeMap<TicketId, watch::Sender<Option<Lost>>>,
    /// Why the session ended, once it has.
    ended: Option<Lost>,
}

pub(super) struct Shared {
    pub(super) client: Client,
    pub(super) id: SessionId,
    pub(super) ttl: Duration,
    /// The belief deadline (module doc).
    pub(super) deadline: watch::Sender<Instant>,
    tickets: Mutex<Tickets>,
    task: Mutex<Option<AbortOnDrop>>,
}

impl Shared {
    fn tickets(&self) -> std::sync::MutexGuard<'_, Tickets> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends every held permit and waiting ticket with `why`.
    fn end(&self, why: Lost) {
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
    fn granted(&self, ticket: TicketId, fence: Fence, units: u32) {
        if let Some(mut w) = self.tickets().waiting.remove(&ticket)
            && let Some(a) = w.answer.take()
        {
            let _ = a.send(Ok((fence, units)));
        }
    }

    fn refused(&self, ticket: TicketId, refusal: Refusal) {
        if let Some(mut w) = self.tickets().waiting.remove(&ticket)
            && let Some(a) = w.answer.take()
        {
            let _ = a.send(Err(AcquireError::Refused(refusal)));
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
    fn answered(&self, ticket: TicketId, reply: Reply) {
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

/// A session. Dropping it stops its keep-alives (the cluster expires it after its TTL);
/// [`Session::close`] ends it at once.
pub struct Session {
    shared: Arc<Shared>,
}

impl Session {
    /// Opens a session with `ttl` and starts keeping it alive.
    pub async fn open(client: &Client, ttl: Duration) -> Result<Session, ClientError> {
        let sent = Instant::now();
        let reply = client
            .write(Command::OpenSession {
                ttl_ms: ttl.as_millis() as u64,
            })
            .await?;
        let id = match reply {
            Reply::SessionOpened { session, .. } => session,
            Reply::Refused(r) => {
                return Err(ClientError::Failed(crate::protocol::Failure::BadRequest(
                    r.to_string(),
                )));
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "open session answered {other:?}"
                )));
            }
        };
        let (deadline, _) = watch::channel(sent + ttl - margin_for(ttl));
        let shared = Arc::new(Shared {
            client: client.clone(),
            id,
            ttl,
            deadline,
            tickets: Mutex::new(Tickets {
                next: 1,
                ..Tickets::default()
            }),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(maintain(Arc::downgrade(&shared), client.clone()));
        *shared.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(AbortOnDrop(task));
        Ok(Session { shared })
    }

    /// The session's id on the cluster.
    pub fn id(&self) -> SessionId {
        self.shared.id
    }

    /// The current belief deadline.
    pub fn deadline(&self) -> Instant {
        *self.shared.deadline.borrow()
    }

    /// Acquires a permit: waits (if allowed) until the cluster grants it.
    pub async fn acquire(&self, options: AcquireOptions) -> Result<Permit, AcquireError> {
        let (answer, granted) = oneshot::channel();
        let ticket = {
            let mut t = self.shared.tickets();
            if t.ended.is_some() {
                return Err(AcquireError::SessionLost);
            }
            let ticket = t.next;
            t.next += 1;
            let acquire = Acquire {
                session: self.shared.id,
                ticket,
                tenant: options.tenant.clone(),
                limit: options.limit.clone(),
                units: options.units,
                priority: options.priority.clone(),
                agent: options.agent.clone(),
                wait: options.wait,
            };
            t.waiting.insert(
                ticket,
                Waiting {
                    acquire,
                    answer: Some(answer),
                },
            );
            ticket
        };
        let command = self.shared.tickets().waiting[&ticket].acquire.clone();
        match self.shared.client.write(Command::Acquire(command)).await {
            Ok(reply) => self.shared.answered(ticket, reply),
            Err(e) => {
                self.shared.tickets().waiting.remove(&ticket);
                return Err(AcquireError::Client(e));
            }
        }
        let outcome = match options.timeout {
            Some(limit) => match tokio::time::timeout(limit, granted).await {
                Ok(o) => o,
                Err(_) => {
                    self.withdraw(ticket).await;
                    return Err(AcquireError::TimedOut);
                }
            },
            None => granted.await,
        };
        let (fence, units) = outcome.unwrap_or(Err(AcquireError::SessionLost))?;
        let (lost_tx, lost_rx) = watch::channel(None);
        {
            let mut t = self.shared.tickets();
            if let Some(why) = &t.ended {
                lost_tx.send_replace(Some(why.clone()));
            }
            t.held.insert(ticket, lost_tx);
        }
        Ok(Permit::new(
            self.shared.clone(),
            options.tenant,
            options.limit,
            ticket,
            fence,
            units,
            lost_rx,
        ))
    }

    /// Withdraws a waiting ticket; a grant that raced the withdrawal is released with it.
    async fn withdraw(&self, ticket: TicketId) {
        self.shared.tickets().waiting.remove(&ticket);
        let _ = self
            .shared
            .client
            .write(Command::Release {
                session: self.shared.id,
                ticket,
            })
            .await;
    }

    /// Closes the session: every permit is released and every ticket withdrawn.
    pub async fn close(self) -> Result<(), ClientError> {
        self.shared.end(Lost::Closed);
        self.shared
            .client
            .write(Command::CloseSession {
                session: self.shared.id,
            })
            .await
            .map(|_| ())
    }
}

/// The session's background work: keep-alives, pushed events, re-asks after reconnects, and
/// the deadline. Ends when the session is dropped (only `Weak` is held).
async fn maintain(shared: std::sync::Weak<Shared>, client: Client) {
    let mut events = client.events();
    let mut generation = client.generation();
    let (ttl, id) = match shared.upgrade() {
        Some(s) => (s.ttl, s.id),
        None => return,
    };
    let every = ttl / 3;
    let mut next_keepalive = Instant::now() + every;
    loop {
        let deadline = match shared.upgrade() {
            Some(s) => *s.deadline.borrow(),
            None => return,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next_keepalive.into()) => {
                next_keepalive = Instant::now() + every;
                let Some(s) = shared.upgrade() else { return };
                let sent = Instant::now();
                match s.client.write(Command::KeepAlive { session: id }).await {
                    Ok(Reply::KeptAlive { .. }) => {
                        let new = sent + ttl - margin_for(ttl);
                        s.deadline.send_if_modified(|d| {
                            let later = new > *d;
                            if later {
                                *d = new;
                            }
                            later
                        });
                    }
                    Ok(Reply::Refused(Refusal::UnknownSession)) => s.end(Lost::Expired),
                    // Unknown outcome or no answer: the deadline stays; it may pass.
                    _ => next_keepalive = Instant::now() + Duration::from_millis(100).min(every),
                }
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                let Some(s) = shared.upgrade() else { return };
                if *s.deadline.borrow() <= Instant::now() {
                    let held: Vec<TicketId> = s.tickets().held.keys().copied().collect();
                    for t in held {
                        s.lose(t, Lost::Deadline);
                    }
                    // Wait for the next keep-alive; nothing to do until then.
                    tokio::time::sleep_until(next_keepalive.into()).await;
                }
            }
            event = events.recv() => {
                let Some(s) = shared.upgrade() else { return };
                match event {
                    Ok(Event::Granted { session, ticket, fence, units }) if session == id => s.granted(ticket, fence, units),
                    Ok(Event::Refused { session, ticket, refusal }) if session == id => s.refused(ticket, refusal),
                    Ok(Event::Halted { session, ticket, scope, reason }) if session == id => {
                        s.lose(ticket, Lost::Halted { scope, reason });
                    }
                    Ok(Event::SessionExpired { session }) if session == id => s.end(Lost::Expired),
                    Ok(_) => {}
                    // Missed events: re-ask, as after a reconnect.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => reask(&s).await,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
            changed = generation.changed() => {
                if changed.is_err() {
                    return;
                }
                let Some(s) = shared.upgrade() else { return };
                // The new connection follows this session once a write names it.
                reask(&s).await;
            }
        }
    }
}

/// Asks again for every waiting ticket (idempotent): a grant pushed to a lost connection is
/// learned from the answer.
async fn reask(s: &Shared) {
    let waiting: Vec<Acquire> = s
        .tickets()
        .waiting
        .values()
        .map(|w| w.acquire.clone())
        .collect();
    if waiting.is_empty() {
        // Name the session on the new connection so its events are pushed here.
        if let Ok(Reply::Refused(Refusal::UnknownSession)) =
            s.client.write(Command::KeepAlive { session: s.id }).await
        {
            s.end(Lost::Expired);
        }
        return;
    }
    for a in waiting {
        let ticket = a.ticket;
        if let Ok(reply) = s.client.write(Command::Acquire(a)).await {
            s.answered(ticket, reply);
        }
    }
}
