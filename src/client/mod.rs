//! The client library: one multiplexed connection to the cluster's leader, followed across
//! failovers, with typed errors that say whether a request may have taken effect.
//!
//! [`Client`] is a cheap handle (clone it freely). Requests from many tasks share one
//! connection; each carries an id and its response may come back in any order. Pushed
//! events are fanned out to [`Client::events`] subscribers ([`Session`]s use them to learn
//! of grants without asking).
//!
//! [`Client::request`] follows `NotLeader` redirects and retries what is safe to retry — at
//! most [`ATTEMPTS_MAX`] tries within [`REQUEST_DEADLINE`]. Every write of the machine is
//! idempotent by its ids (a retried `OpenSession` at worst opens a session that expires
//! unused), so a write whose answer was lost is retried too; when retries run out after
//! such a loss the error is [`ClientError::OutcomeUnknown`], not "failed".
//!
//! Each new connection bumps [`Client::generation`]: a session watching it re-asks its
//! waiting tickets, so a grant pushed while it was disconnected is not lost.

mod ops;
mod permit;
mod session;

pub use permit::{Lost, Permit};
pub use session::{AcquireError, AcquireOptions, Session, margin_for};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{broadcast, oneshot, watch};

use crate::machine::{Command, Event, Reply};
use crate::protocol::{
    Answer, CLIENT_FRAME_MAX, ClientFrame, Failure, PROTOCOL_VERSION, Query, Request, Response,
    ServerFrame,
};
use crate::wire;

/// Most tries of one request (connects and redirects included). Failed tries pause
/// `RETRY_PAUSE`, so [`REQUEST_DEADLINE`] is what usually ends the retries.
pub const ATTEMPTS_MAX: u32 = 200;
/// Longest a request is retried for. Covers a leader election (about 1 s) several times.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Longest a connect plus hello may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest one try waits for its response. The node answers a write within its commit
/// timeout (10 s) at worst.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(12);
/// Pause between tries when no leader is known.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Events buffered for slow subscribers.
const EVENT_BACKLOG: usize = 4_096;

/// Why a request has no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// No node could be reached, or none served it in time; it was not applied.
    Unreachable(String),
    /// It was sent, and may or may not have been applied.
    OutcomeUnknown(String),
    /// A node broke the protocol.
    Protocol(String),
    /// A node answered that it cannot serve it; see the failure for whether it applied.
    Failed(Failure),
}

impl ClientError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Unreachable(_) | ClientError::OutcomeUnknown(_) => true,
            ClientError::Protocol(_) => false,
            ClientError::Failed(f) => !matches!(f, Failure::BadRequest(_)),
        }
    }

    /// Whether the request certainly did not take effect.
    pub fn definitely_failed(&self) -> bool {
        match self {
            ClientError::Unreachable(_) | ClientError::Protocol(_) => true,
            ClientError::OutcomeUnknown(_) => false,
            ClientError::Failed(f) => !matches!(f, Failure::OutcomeUnknown(_)),
        }
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(why) => write!(f, "unreachable: {why}"),
            ClientError::OutcomeUnknown(why) => write!(f, "outcome unknown: {why}"),
            ClientError::Protocol(why) => write!(f, "protocol error: {why}"),
            ClientError::Failed(failure) => write!(f, "{failure}"),
        }
    }
}

impl std::error::Error for ClientError {}

type Waiters = Arc<Mutex<BTreeMap<u64, oneshot::Sender<Response>>>>;

/// Frames queued for one connection's writer task, at most.
const OUTBOX_MAX: usize = 4_096;

/// One live connection: a writer task (coalescing queued requests into one write), and a
/// reader task that routes responses and events.
struct Conn {
    addr: String,
    outbox: tokio::sync::mpsc::Sender<ClientFrame>,
    waiters: Waiters,
    next_id: std::sync::atomic::AtomicU64,
    alive: watch::Receiver<bool>,
    _reader: AbortOnDrop,
    _writer: AbortOnDrop,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Conn {
    /// Connects to `addr`, says hello, and starts the reader.
    async fn open(addr: &str, events: broadcast::Sender<Event>) -> Result<Conn, ClientError> {
        let opened = async {
            let mut stream = TcpStream::connect(addr)
                .await
                .map_err(|e| ClientError::Unreachable(format!("{addr}: {e}")))?;
            let _ = stream.set_nodelay(true);
            wire::write_frame(
                &mut stream,
                &ClientFrame::Hello {
                    version: PROTOCOL_VERSION,
                },
            )
            .await
            .map_err(|e| ClientError::Unreachable(format!("{addr}: {e}")))?;
            match wire::read_frame::<_, ServerFrame>(&mut stream, CLIENT_FRAME_MAX).await {
                Ok(ServerFrame::Welcome { .. }) => Ok(stream),
                Ok(ServerFrame::Error { reason }) => {
                    Err(ClientError::Protocol(format!("{addr}: {reason}")))
                }
                Ok(other) => Err(ClientError::Protocol(format!(
                    "{addr}: expected a welcome, got {other:?}"
                ))),
                Err(e) => Err(ClientError::Unreachable(format!("{addr}: {e}"))),
            }
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, opened)
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Unreachable(format!(
                    "{addr}: no welcome within {CONNECT_TIMEOUT:?}"
                )))
            })?;
        let (rd, wr) = stream.into_split();
        let mut rd = tokio::io::BufReader::with_capacity(64 * 1024, rd);
        let waiters: Waiters = Arc::default();
        let (alive_tx, alive) = watch::channel(true);
        let routed = waiters.clone();
        let from = addr.to_owned();
        let reader = tokio::spawn(async move {
            loop {
                match wire::read_frame::<_, ServerFrame>(&mut rd, CLIENT_FRAME_MAX).await {
                    Ok(ServerFrame::Response { id, response }) => {
                        let waiter = routed.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                        if let Some(w) = waiter {
                            let _ = w.send(response);
                        }
                    }
                    Ok(ServerFrame::Event(event)) => {
                        let _ = events.send(event);
                    }
                    Ok(ServerFrame::Error { reason }) => {
                        tracing::warn!("{from} closed the connection: {reason}");
                        break;
                    }
                    Ok(ServerFrame::Welcome { .. }) | Err(_) => break,
                }
            }
            // Dropping the waiters' senders tells every caller the outcome is unknown.
            routed.lock().unwrap_or_else(|p| p.into_inner()).clear();
            let _ = alive_tx.send(false);
        });
        let (outbox, mut queue) = tokio::sync::mpsc::channel(OUTBOX_MAX);
        let writer = tokio::spawn(async move {
            let mut wr: OwnedWriteHalf = wr;
            let _ = wire::write_queued(&mut wr, &mut queue, |_| false).await;
        });
        Ok(Conn {
            addr: addr.to_owned(),
            outbox,
            waiters,
            next_id: std::sync::atomic::AtomicU64::new(1),
            alive,
            _reader: AbortOnDrop(reader),
            _writer: AbortOnDrop(writer),
        })
    }

    fn is_alive(&self) -> bool {
        *self.alive.borrow()
    }

    /// Sends `request` and waits for its response.
    async fn call(&self, request: &Request) -> Result<Response, ClientError> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        if self
            .outbox
            .send(ClientFrame::Request {
                id,
                request: request.clone(),
            })
            .await
            .is_err()
        {
            self.waiters
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            return Err(ClientError::OutcomeUnknown(format!(
                "{}: connection lost",
                self.addr
            )));
        }
        match tokio::time::timeout(RESPONSE_TIMEOUT, rx).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(ClientError::OutcomeUnknown(format!(
                "{}: connection lost",
                self.addr
            ))),
            Err(_) => {
                self.waiters
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                Err(ClientError::OutcomeUnknown(format!(
                    "{}: no answer within {RESPONSE_TIMEOUT:?}",
                    self.addr
                )))
            }
        }
    }
}

struct Inner {
    servers: Vec<String>,
    /// The connection in use, and the address to try first when there is none.
    current: tokio::sync::Mutex<(Option<Arc<Conn>>, Option<String>)>,
    /// Round-robin position in `servers`.
    next_server: std::sync::atomic::AtomicUsize,
    events: broadcast::Sender<Event>,
    generation: watch::Sender<u64>,
}

/// A client of the cluster, following its leader. Clones share the connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Reads answered from whichever node answers, possibly stale ([`Client::stale_reads`]).
    stale: bool,
}

impl Client {
    /// A client of the cluster reachable through any of `servers` (`host:port`). Connects
    /// lazily, on the first request.
    pub fn new(servers: Vec<String>) -> Client {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let (generation, _) = watch::channel(0);
        Client {
            inner: Arc::new(Inner {
                servers,
                current: tokio::sync::Mutex::new((None, None)),
                next_server: Default::default(),
                events,
                generation,
            }),
            stale: false,
        }
    }

    /// This client with reads answered by the node it is connected to from its applied state,
    /// without a quorum round: cheaper, and possibly stale (they may miss the latest writes).
    /// Reads are linearizable unless this is set.
    pub fn stale_reads(mut self, stale: bool) -> Client {
        self.stale = stale;
        self
    }

    /// Events pushed by the nodes this client is connected to.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// Bumped on every new connection.
    pub fn generation(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }

    /// The live connection, opening one if needed (to the preferred address, else the next
    /// server in turn). Returns it and whether a round of the server list just ended.
    async fn connection(&self) -> Result<Arc<Conn>, (ClientError, bool)> {
        let mut current = self.inner.current.lock().await;
        if let Some(c) = &current.0
            && c.is_alive()
        {
            return Ok(c.clone());
        }
        current.0 = None;
        let (addr, wrapped) = match current.1.take() {
            Some(a) => (a, true),
            None => {
                let n = self.inner.servers.len().max(1);
                let i = self
                    .inner
                    .next_server
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (self.inner.servers[i % n].clone(), (i + 1) % n == 0)
            }
        };
        match Conn::open(&addr, self.inner.events.clone()).await {
            Ok(c) => {
                let c = Arc::new(c);
                current.0 = Some(c.clone());
                self.inner.generation.send_modify(|g| *g += 1);
                Ok(c)
            }
            Err(e) => Err((e, wrapped)),
        }
    }

    /// Drops `conn` if it is still the current one; the next try goes to `next` if given.
    async fn abandon(&self, conn: &Arc<Conn>, next: Option<String>) {
        let mut current = self.inner.current.lock().await;
        if current.0.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            current.0 = None;
        }
        if next.is_some() {
            current.1 = next;
        }
    }

    /// Sends `request` to the leader (or, for `Status` and `ReadLocal`, to whichever node
    /// answers), following redirects and retrying within the bounds above.
    pub async fn request(&self, request: Request) -> Result<Response, ClientError> {
        let started = Instant::now();
        let mut last_error =
            ClientError::Unreachable(format!("none of {:?} answered", self.inner.servers));
        let mut maybe_applied = false;
        for _ in 0..ATTEMPTS_MAX {
            if started.elapsed() > REQUEST_DEADLINE {
                break;
            }
            let conn = match self.connection().await {
                Ok(c) => c,
                Err((e, wrapped)) => {
                    last_error = e;
                    if wrapped {
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                    continue;
                }
            };
            match conn.call(&request).await {
                Ok(Response::Failed(Failure::NotLeader { leader })) => {
                    let redirect = leader.map(|(_, a)| a).filter(|a| *a != conn.addr);
                    if redirect.is_none() {
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                    self.abandon(&conn, redirect).await;
                    last_error = ClientError::Failed(Failure::NotLeader { leader: None });
                }
                Ok(Response::Failed(
                    f @ (Failure::Unavailable(_) | Failure::OutcomeUnknown(_)),
                )) => {
                    maybe_applied |= matches!(f, Failure::OutcomeUnknown(_));
                    last_error = ClientError::Failed(f);
                    self.abandon(&conn, None).await;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Ok(response) => return Ok(response),
                Err(e) => {
                    maybe_applied |= matches!(e, ClientError::OutcomeUnknown(_));
                    last_error = e;
                    self.abandon(&conn, None).await;
                }
            }
        }
        if maybe_applied && is_write(&request) {
            return Err(ClientError::OutcomeUnknown(last_error.to_string()));
        }
        Err(last_error)
    }

    /// A write through the log: its reply (refusals included).
    pub async fn write(&self, command: Command) -> Result<Reply, ClientError> {
        match self.request(Request::Write(command)).await? {
            Response::Written { reply, .. } => Ok(reply),
            Response::Failed(f) => Err(ClientError::Failed(f)),
            other => Err(ClientError::Protocol(format!(
                "unexpected answer to a write: {other:?}"
            ))),
        }
    }

    /// A read: linearizable, or from the connected node's applied state when
    /// [`Client::stale_reads`] is set.
    pub async fn read(&self, query: Query) -> Result<Answer, ClientError> {
        let request = if self.stale {
            Request::ReadLocal(query)
        } else {
            Request::Read(query)
        };
        match self.request(request).await? {
            Response::Read(answer) => Ok(answer),
            Response::Failed(f) => Err(ClientError::Failed(f)),
            other => Err(ClientError::Protocol(format!(
                "unexpected answer to a read: {other:?}"
            ))),
        }
    }

    /// Asks one node, without redirects or retries (for a given member's status).
    pub async fn ask_node(addr: &str, request: &Request) -> Result<Response, ClientError> {
        let (events, _) = broadcast::channel(1);
        let conn = Conn::open(addr, events).await?;
        tokio::time::timeout(CONNECT_TIMEOUT, conn.call(request))
            .await
            .unwrap_or_else(|_| Err(ClientError::OutcomeUnknown(format!("{addr}: no answer"))))
    }
}

fn is_write(request: &Request) -> bool {
    matches!(
        request,
        Request::Write(_) | Request::AddNode { .. } | Request::RemoveNode { .. }
    )
}
