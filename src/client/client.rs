//! [`Client`]: the handle every request goes through; it finds the leader, keeps one
//! connection to it, and retries what is safe to retry (see the module doc of
//! [`crate::client`] for the whole design).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};

use super::ClientError;
use super::conn::{CONNECT_TIMEOUT, Conn};
use crate::machine::{Command, Event, Reply};
use crate::protocol::{Answer, Failure, Query, Request, Response};
use crate::security::ClientSecurity;

/// Most tries of one request (connects and redirects included). Failed tries pause
/// `RETRY_PAUSE`, so [`REQUEST_DEADLINE`] is what usually ends the retries.
pub const ATTEMPTS_MAX: u32 = 200;
/// Longest a request is retried for. Covers a leader election (about 1 s) several times.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Pause between tries when no leader is known.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Events buffered for slow subscribers.
const EVENT_BACKLOG: usize = 4_096;

/// The connection in use, and where to connect next.
#[derive(Default)]
struct Current {
    /// The connection requests go to; `None` until the first request, and after it died
    /// or was abandoned.
    conn: Option<Arc<Conn>>,
    /// The address to try first when there is no connection: the leader a `NotLeader`
    /// named. Taken by the next connect; without it the connect goes round-robin.
    preferred: Option<String>,
}

/// What clones of a [`Client`] share.
struct Inner {
    servers: Vec<String>,
    /// The connection in use, and the address to try first when there is none.
    ///
    /// A tokio mutex, held across the connect in [`Client::connection`], and on purpose:
    /// when the connection dies under many concurrent requests (hundreds, in the bench),
    /// exactly one of them reconnects while the rest wait on the lock, then find the new
    /// live connection and use it. Released during the connect, each of them would open
    /// its own connection (a stampede on a node that just took over), all but one would be
    /// dropped, and every one would bump [`Inner::generation`], making every session
    /// re-ask its tickets once per extra connection. The cost is that requests wait for
    /// the one connect in flight, at most [`CONNECT_TIMEOUT`] — which they would have to
    /// do anyway, having no connection. A std mutex cannot be held across the await.
    current: tokio::sync::Mutex<Current>,
    /// Round-robin position in `servers`.
    next_server: AtomicUsize,
    events: broadcast::Sender<Event>,
    /// Bumped once per new connection (see [`Client::generation`]).
    generation: watch::Sender<u64>,
    /// TLS and token for every connection ([`Client::with_security`]).
    security: ClientSecurity,
}

/// A client of the cluster, following its leader. Clones share the connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Reads answered from whichever node answers, possibly stale ([`Client::stale_reads`]).
    stale: bool,
}

/// How one try of a request ended, when it did not answer.
enum Retry {
    /// Try again at once (a redirect, or a connect to the next server).
    Now,
    /// Try again after [`RETRY_PAUSE`] (a round of the servers or the preferred address
    /// failed to connect, or the node could not serve it now).
    Pause,
}

impl Client {
    /// A client of the cluster reachable through any of `servers` (`host:port`). Connects
    /// lazily, on the first request.
    pub fn new(servers: Vec<String>) -> Client {
        Client::with_security(servers, ClientSecurity::default())
    }

    /// A client that connects with `security`: TLS verified against its CA, and its token
    /// in every hello.
    pub fn with_security(servers: Vec<String>, security: ClientSecurity) -> Client {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let (generation, _) = watch::channel(0);
        Client {
            inner: Arc::new(Inner {
                servers,
                current: tokio::sync::Mutex::new(Current::default()),
                next_server: AtomicUsize::default(),
                events,
                generation,
                security,
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

    /// The TLS and token this client connects with.
    pub fn security(&self) -> &ClientSecurity {
        &self.inner.security
    }

    /// Bumped on every new connection.
    pub fn generation(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }

    /// The live connection, opening one if needed (to the preferred address, else the next
    /// server in turn). On failure, also says whether a round of the server list just ended.
    async fn connection(&self) -> Result<Arc<Conn>, (ClientError, bool)> {
        let mut current = self.inner.current.lock().await;
        if let Some(c) = &current.conn
            && c.is_alive()
        {
            return Ok(c.clone());
        }
        current.conn = None;
        let (addr, wrapped) = match current.preferred.take() {
            Some(a) => (a, true),
            None => {
                let n = self.inner.servers.len().max(1);
                let i = self.inner.next_server.fetch_add(1, Ordering::Relaxed);
                (self.inner.servers[i % n].clone(), (i + 1) % n == 0)
            }
        };
        match Conn::open(&addr, self.inner.events.clone(), &self.inner.security).await {
            Ok(c) => {
                let c = Arc::new(c);
                current.conn = Some(c.clone());
                self.inner.generation.send_modify(|g| *g += 1);
                Ok(c)
            }
            Err(e) => Err((e, wrapped)),
        }
    }

    /// Drops `conn` if it is still the current one; the next try goes to `next` if given.
    async fn abandon(&self, conn: &Arc<Conn>, next: Option<String>) {
        let mut current = self.inner.current.lock().await;
        if current.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            current.conn = None;
        }
        if next.is_some() {
            current.preferred = next;
        }
    }

    /// Sends `request` to the leader (or, for `Status` and `ReadLocal`, to whichever node
    /// answers), following redirects and retrying within [`ATTEMPTS_MAX`] tries and
    /// [`REQUEST_DEADLINE`]. A write that may have been applied on some try and then ran
    /// out of retries is `OutcomeUnknown`.
    pub async fn request(&self, request: Request) -> Result<Response, ClientError> {
        let started = Instant::now();
        let mut last_error =
            ClientError::Unreachable(format!("none of {:?} answered", self.inner.servers));
        let mut maybe_applied = false;
        for _ in 0..ATTEMPTS_MAX {
            if started.elapsed() > REQUEST_DEADLINE {
                break;
            }
            let retry = match self.try_once(&request).await {
                Ok(response) => return Ok(response),
                // A refused certificate or token: every try would fail the same way.
                Err((e @ ClientError::Protocol(_), _)) => return Err(e),
                Err((e, retry)) => {
                    maybe_applied |= !e.definitely_failed();
                    last_error = e;
                    retry
                }
            };
            if let Retry::Pause = retry {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
        if maybe_applied && is_write(&request) {
            return Err(ClientError::OutcomeUnknown(last_error.to_string()));
        }
        Err(last_error)
    }

    /// One try of `request`: on the current connection (opening one if needed), giving the
    /// connection up if the node cannot serve it. An answer the caller should see —
    /// refusals and every failure but the retried ones — is `Ok`.
    async fn try_once(&self, request: &Request) -> Result<Response, (ClientError, Retry)> {
        let conn = match self.connection().await {
            Ok(c) => c,
            Err((e, wrapped)) => {
                return Err((e, if wrapped { Retry::Pause } else { Retry::Now }));
            }
        };
        match conn.call(request).await {
            Ok(Response::Failed(Failure::NotLeader { leader })) => {
                let redirect = leader.map(|(_, a)| a).filter(|a| *a != conn.addr);
                if redirect.is_none() {
                    // No other leader known: an election is likely under way. Pause before
                    // giving the connection up, so the requests sharing it do not all
                    // reconnect meanwhile.
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                self.abandon(&conn, redirect).await;
                let e = ClientError::Failed(Failure::NotLeader { leader: None });
                Err((e, Retry::Now))
            }
            Ok(Response::Failed(f @ (Failure::Unavailable(_) | Failure::OutcomeUnknown(_)))) => {
                self.abandon(&conn, None).await;
                Err((ClientError::Failed(f), Retry::Pause))
            }
            Ok(response) => Ok(response),
            Err(e) => {
                self.abandon(&conn, None).await;
                Err((e, Retry::Now))
            }
        }
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
        Client::ask_node_with(addr, request, &ClientSecurity::default()).await
    }

    /// [`Client::ask_node`] with TLS and a token.
    pub async fn ask_node_with(
        addr: &str,
        request: &Request,
        security: &ClientSecurity,
    ) -> Result<Response, ClientError> {
        let (events, _) = broadcast::channel(1);
        let conn = Conn::open(addr, events, security).await?;
        tokio::time::timeout(CONNECT_TIMEOUT, conn.call(request))
            .await
            .unwrap_or_else(|_| Err(ClientError::OutcomeUnknown(format!("{addr}: no answer"))))
    }
}

/// Whether `request` changes state (so an unknown outcome matters).
fn is_write(request: &Request) -> bool {
    matches!(
        request,
        Request::Write(_) | Request::AddNode { .. } | Request::RemoveNode { .. }
    )
}
