//! [`Client`]: the handle every request goes through; it finds the leader, keeps one
//! connection to it, and retries what is safe to retry.
//!
//! # Leader following
//!
//! A [`Client`] is a cheap handle (clone it freely); clones share one connection, and the
//! requests of many tasks go over it at once, each with an id, their responses coming back
//! in any order. There is no connection until the first request. A connect goes to the
//! *preferred* address if there is one — the leader a `NotLeader` answer named — and
//! otherwise to the next of the configured servers, round-robin. A `NotLeader` that names
//! another node gives the connection up and sends the next try there at once; one that
//! names no other node (an election is under way) pauses first, so the requests sharing the
//! connection do not all reconnect at once. `Status` and `ReadLocal` are answered by
//! whichever node is asked; [`Client::stale_reads`] sends reads as `ReadLocal`.
//!
//! Only one connect is in flight at a time: the requests that find the connection dead
//! wait for it and then share the new one (the doc of [`Inner::current`] says why). Each
//! new connection bumps [`Client::generation`].
//!
//! On a multi-homed host, [`Client::with_local_addr`] binds every connection of the client
//! (the leader's, the hedge's, each redirect's) to one local address before it connects, so
//! its traffic leaves by that interface and the nodes (and firewalls between) see that
//! source; the partition harness tells one client's links from the others' by it.
//!
//! # Failure detection: a silent node versus a busy one
//!
//! A node that stops answering while its process lives on (SIGSTOP, a frozen VM, a stalled
//! disk) keeps its sockets open: nothing fails, requests just wait. A shorter per-try
//! timeout cannot tell that node from a busy one — during an election, tries legitimately
//! take over a second (`docs/benchmarks.md`, "What was tried and reverted"). So the client
//! does not time requests; it listens for *silence*:
//!
//! - **Heartbeats.** Right after the welcome, every connection sends `Heartbeats`, and the
//!   node then sends a small `Heartbeat` frame every `HEARTBEAT_PERIOD` (200 ms) from a task
//!   of its own, whatever its requests are doing. A busy node — an election under way, a
//!   slow commit — still sends them; a stopped one sends nothing at all.
//! - **The silence bound.** A watchdog per connection declares it dead when *no frame at
//!   all* (response, event or heartbeat) arrived for [`SILENCE_MAX`] (1 s, five periods).
//!   Every request in flight on it then fails at once as "outcome unknown" and is retried
//!   (every write is idempotent) on a new connection; the welcome of a new connection is
//!   held to the same bound, since a stopped process's socket still accepts connects.
//! - **Where to go next.** The silent node is *suspected* for [`SUSPECT_FOR`] (3 s):
//!   connects pass it over, and a `NotLeader` that still names it (a follower that has not
//!   noticed yet) is treated as "no leader known" (a pause, then the next server) instead of
//!   a redirect into the silence. The live nodes elect a leader within about a second, and
//!   the usual `NotLeader` redirects lead there.
//! - **A deposed leader.** Heartbeats carry the node's term and the leader it knows of. A
//!   connection whose node named itself leader and then names another (it lost an
//!   election while partitioned, and is alive) is given up with that leader as the next
//!   address, before any request has to fail there.
//! - **No storms.** One connect at a time per [`Client`], so a dead connection costs one
//!   reconnect per `Client`, not one per request in flight; a kill (connection refused) is
//!   detected at once, so kill-failover is not slowed; and the `Heartbeat` is `try_send` on
//!   the node, so a slow reader is never sent more than its outbox holds.
//! - **Hedged writes** (`hedge.rs`): a keep-alive or acquire near its session's deadline
//!   that has gone unanswered for 400 ms is sent to the other nodes too, whether or not its
//!   connection heartbeats, and the client moves to the node that acknowledges it. The
//!   silence bound judges liveness; the hedge judges answers.
//! - **Jitter.** Every pause between tries (no leader known, a full round of refused
//!   connects, an unavailable node) is 50–150% of [`RETRY_PAUSE`] ([`jittered`]): the mean
//!   is unchanged, so kill-failover waits no longer on average, and clients that lost their
//!   leader at the same instant do not come back in step. Immediate retries (a redirect, the
//!   next server after a refused connect) stay immediate.
//!
//! # Retries
//!
//! [`Client::request`] retries at most [`ATTEMPTS_MAX`] tries within [`REQUEST_DEADLINE`]
//! (or the shorter deadline of [`Client::with_retry_deadline`], past which only a redirect
//! to a named leader still gets its try):
//! - a connect that fails moves on to the next server at once, pausing after a full round
//!   of them or a failed connect to the preferred address;
//! - a node that is `Unavailable`, or that answers `OutcomeUnknown`, loses the connection
//!   and the next try comes after a pause;
//! - a connection that breaks, falls silent ([`SILENCE_MAX`]) or is deposed, or a try with
//!   no response within [`RESPONSE_TIMEOUT`], loses the connection and is tried again at
//!   once;
//! - every other answer, refusals included, is returned.
//!
//! Every write of the machine is idempotent by its ids (a retried `OpenSession` at worst
//! opens a session that expires unused), so a write whose answer was lost is retried too;
//! when retries run out after a try that may have applied, the error is
//! [`ClientError::OutcomeUnknown`], never "failed".
//!
//! # Caveats
//!
//! - A partitioned old leader that still believes it leads keeps sending heartbeats that
//!   name itself; requests there wait for its commit timeout (the partition harness covers
//!   that path). Only a deposed node that *knows* the new leader redirects.
//!
//! [`SILENCE_MAX`]: crate::SILENCE_MAX
//! [`RESPONSE_TIMEOUT`]: crate::RESPONSE_TIMEOUT

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};

use super::conn::{CONNECT_TIMEOUT, Conn, Fate, Feeds};
use super::error::ClientError;

use weir_core::bounds::CLIENT_EVENTS_BACKLOG;
use weir_core::machine::{Command, Event, Reply};
use weir_proto::protocol::{Answer, Failure, Query, Request, Response};
use weir_proto::tls::ClientSecurity;

/// Most tries of one request (connects and redirects included). Failed tries pause
/// `RETRY_PAUSE`, so [`REQUEST_DEADLINE`] is what usually ends the retries.
pub const ATTEMPTS_MAX: u32 = 200;
/// Longest a request is retried for. Covers a leader election (about 1 s) several times.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Pause between tries when no leader is known.
pub(super) const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long a node whose connection fell silent is passed over by the next connects (unless
/// it is the only server): long enough for the rest of the cluster to elect a leader
/// (about a second), short enough that a node back from a pause is soon used again.
const SUSPECT_FOR: Duration = Duration::from_secs(3);

/// The connection in use, and where to connect next.
#[derive(Default)]
pub(super) struct Current {
    /// The connection requests go to; `None` until the first request, and after it died
    /// or was abandoned.
    pub(super) conn: Option<Arc<Conn>>,
    /// The address to try first when there is no connection: the leader a `NotLeader`
    /// named. Taken by the next connect; without it the connect goes round-robin.
    preferred: Option<String>,
    /// The node whose connection last fell silent, and when: connects pass it over for
    /// [`SUSPECT_FOR`], and a redirect to it is not followed meanwhile.
    pub(super) suspect: Option<(String, Instant)>,
}

impl Current {
    /// Whether `addr` fell silent less than [`SUSPECT_FOR`] ago.
    fn suspects(&self, addr: &str) -> bool {
        self.suspect
            .as_ref()
            .is_some_and(|(a, at)| a == addr && at.elapsed() < SUSPECT_FOR)
    }

    /// Learns what a dead connection's [`Fate`] says: a silent node is suspected, a deposed
    /// node's leader is tried next.
    fn learn(&mut self, conn: &Conn) {
        let Fate { silent, redirect } = conn.fate();
        if silent {
            self.suspect = Some((conn.addr.clone(), Instant::now()));
        }
        if let Some(to) = redirect
            && !self.suspects(&to)
        {
            self.preferred = Some(to);
        }
    }
}

/// Tries of a read answered `Unplaced` before the caller is told ([`Client::request`]): a
/// node a little behind the metadata group applies a placement within them.
const UNPLACED_READ_TRIES: u32 = 3;

/// What clones of a [`Client`] share.
pub(super) struct Inner {
    pub(super) servers: Vec<String>,
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
    pub(super) current: tokio::sync::Mutex<Current>,
    /// Round-robin position in `servers`.
    next_server: AtomicUsize,
    /// Where connections send pushes: events, and generation bumps on a `Resync`.
    pub(super) feeds: Feeds,
    /// TLS and token for every connection ([`Client::with_security`]).
    security: ClientSecurity,
    /// The connection hedged writes go to (`hedge` module doc): shared by the
    /// sessions of this client, so they open one between them. A tokio mutex held across
    /// its connect, for the same reason as `current`.
    pub(super) hedge: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// The local address every connection is bound to before it connects
    /// ([`Client::with_local_addr`]); `None`: the kernel picks by its routes.
    local_ip: Option<IpAddr>,
    /// Longest a request is retried for ([`REQUEST_DEADLINE`] unless
    /// [`Client::with_retry_deadline`] set another).
    retry_deadline: Duration,
    /// The group every hello names ([`Client::in_group`]); `None`: the node's default.
    group: Option<u64>,
    /// The client of the metadata group (group 0) that places tenants for this one, made
    /// on the first placement ([`Client::place_tenant`]).
    metadata: std::sync::OnceLock<Client>,
    /// Clients of the other groups, by group, each made the first time a request of no
    /// session is answered `WrongGroup` naming its group ([`Client::request`]).
    others: std::sync::Mutex<std::collections::HashMap<u64, Client>>,
}

/// A client of the cluster, following its leader. Clones share the connection.
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
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
        Client::build(servers, security, None)
    }

    /// This client's servers and security, its connections bound to the local address `ip`
    /// (any port) before they connect: on a multi-homed host, the interface (and so the
    /// route and the source address the nodes and firewalls see) the client's traffic
    /// uses. Every connection of the client is bound — the leader's, the hedge's, every
    /// redirect's. A connect fails as unreachable when `ip` is not an address of this host
    /// or no address of the server is of `ip`'s family.
    ///
    /// Call it on a new client: the one returned is a fresh client with no connection and
    /// no sessions of its own, sharing nothing with `self` (clones of `self` keep
    /// connecting as before).
    pub fn with_local_addr(self, ip: IpAddr) -> Client {
        self.rebuilt_with(|inner| inner.local_ip = Some(ip))
    }

    /// This client's servers and security, its requests retried for at most `deadline`
    /// instead of [`REQUEST_DEADLINE`]: for a node forwarding its own clients' requests,
    /// which answers "no leader yet, try another node" sooner than a client would give up
    /// (`weir-http`'s `forward` module). A try already sent is not cut short: the deadline
    /// is looked at between tries.
    ///
    /// Call it on a new client: the one returned shares nothing with `self`.
    pub fn with_retry_deadline(self, deadline: Duration) -> Client {
        self.rebuilt_with(|inner| inner.retry_deadline = deadline)
    }

    /// This client's servers and security, speaking to Raft group `group` of each node
    /// (its hello names it): the client of one data group of a cluster of several, which
    /// follows that group's leader, and whose sessions live in that group. A session's
    /// request for a tenant another group decides is answered [`Failure::WrongGroup`] naming
    /// it (a session is one group's); a request of no session (a read, a definition, a
    /// ceiling, a halt, a run's reserve or settlement) is asked again of that group, through
    /// a client of it this one keeps. A request for a tenant placed nowhere yet places it in
    /// the default group first ([`Client::place_tenant`]). Group 0 is the metadata group of
    /// a cluster of several, and the one group of a cluster of one.
    ///
    /// Call it on a new client: the one returned shares nothing with `self`.
    pub fn in_group(self, group: u64) -> Client {
        self.rebuilt_with(|inner| inner.group = Some(group))
    }

    /// The client of group `group` that requests of no session answered `WrongGroup` go to.
    fn in_other_group(&self, group: u64) -> Client {
        let mut others = self.inner.others.lock().expect("not poisoned");
        others
            .entry(group)
            .or_insert_with(|| self.rebuilt_with(|inner| inner.group = Some(group)))
            .clone()
    }

    /// The group this client's hellos name (`None`: each node's default group).
    pub fn group(&self) -> Option<u64> {
        self.inner.group
    }

    /// [`Client::rebuilt`], then changed by `change` (a builder's one setting).
    fn rebuilt_with(&self, change: impl FnOnce(&mut Inner)) -> Client {
        let mut client = self.rebuilt();
        change(Arc::get_mut(&mut client.inner).expect("a client just built is not shared"));
        client
    }

    /// A fresh client with this one's servers, security, local address, retry deadline,
    /// group and read mode.
    fn rebuilt(&self) -> Client {
        let mut client = Client::build(
            self.inner.servers.clone(),
            self.inner.security.clone(),
            self.inner.local_ip,
        )
        .stale_reads(self.stale);
        let inner = Arc::get_mut(&mut client.inner).expect("a client just built is not shared");
        inner.retry_deadline = self.inner.retry_deadline;
        inner.group = self.inner.group;
        client
    }

    /// Places `tenant` in data group `group`, or, with `None`, finds the group it lives in,
    /// placing it in the default group (1) if it lives nowhere yet: the group it lives in
    /// (0 on a cluster of one group, whose one group decides every tenant). Asked of the
    /// metadata group's leader. A tenant placed in another group than `group` is
    /// [`Failure::WrongGroup`] naming it: a placement is made once.
    pub async fn place_tenant(&self, tenant: &str, group: Option<u64>) -> Result<u64, ClientError> {
        // Never `self`, even in group 0: a client holding itself would never be dropped.
        let metadata = self
            .inner
            .metadata
            .get_or_init(|| self.rebuilt_with(|inner| inner.group = Some(0)));
        let request = Request::PlaceTenant {
            tenant: tenant.to_owned(),
            group,
        };
        match Box::pin(metadata.request(request)).await? {
            Response::Placed { group, .. } => Ok(group),
            Response::Failed(f) => Err(ClientError::Failed(f)),
            other => Err(ClientError::Protocol(format!(
                "unexpected answer to a placement: {other:?}"
            ))),
        }
    }

    /// Tells the client that the leader is at `addr` (a node that forwards requests learns
    /// it from its own Raft, before any answer would say so): the current connection, if it
    /// goes elsewhere, is given up — the requests waiting there are retried at once, at
    /// `addr` — and the next connect goes to `addr`. The old node is not suspected.
    pub async fn leader_moved(&self, addr: &str) {
        let mut current = self.inner.current.lock().await;
        let elsewhere = current.conn.as_ref().is_some_and(|c| c.addr != addr);
        if elsewhere && let Some(old) = current.conn.take() {
            tracing::debug!("the leader moved to {addr}: leaving {}", old.addr);
            old.redirect(addr.to_owned());
        }
        if current.conn.is_none() {
            current.preferred = Some(addr.to_owned());
        }
    }

    fn build(servers: Vec<String>, security: ClientSecurity, local_ip: Option<IpAddr>) -> Client {
        let (events, _) = broadcast::channel(CLIENT_EVENTS_BACKLOG);
        let (generation, _) = watch::channel(0);
        Client {
            inner: Arc::new(Inner {
                servers,
                current: tokio::sync::Mutex::new(Current::default()),
                next_server: AtomicUsize::default(),
                feeds: Feeds {
                    events,
                    generation: Arc::new(generation),
                },
                security,
                hedge: tokio::sync::Mutex::new(None),
                local_ip,
                retry_deadline: REQUEST_DEADLINE,
                group: None,
                metadata: std::sync::OnceLock::new(),
                others: Default::default(),
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
        self.inner.feeds.events.subscribe()
    }

    /// The TLS and token this client connects with.
    pub fn security(&self) -> &ClientSecurity {
        &self.inner.security
    }

    /// Bumped on every new connection, and whenever a node says it dropped pushes for this
    /// client (`Resync`): after each bump, pushes may have been missed.
    pub fn generation(&self) -> watch::Receiver<u64> {
        self.inner.feeds.generation.subscribe()
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
        if let Some(dead) = current.conn.take() {
            current.learn(&dead);
        }
        let (addr, wrapped) = match current.preferred.take() {
            Some(a) if !current.suspects(&a) => (a, true),
            _ => self.next_round_robin(&current),
        };
        let opening = Instant::now();
        let opened = self.open(&addr).await;
        match &opened {
            Ok(_) => tracing::debug!("connected to {addr} in {:?}", opening.elapsed()),
            Err(e) => tracing::debug!(
                "connect to {addr} failed after {:?}: {e}",
                opening.elapsed()
            ),
        }
        match opened {
            Ok(c) => {
                let c = Arc::new(c);
                current.conn = Some(c.clone());
                self.inner.feeds.generation.send_modify(|g| *g += 1);
                Ok(c)
            }
            Err(e) => Err((e, wrapped)),
        }
    }

    /// A new connection to `addr`, with this client's feeds, security and local address.
    pub(super) async fn open(&self, addr: &str) -> Result<Conn, ClientError> {
        let inner = &self.inner;
        Conn::open(
            addr,
            inner.feeds.clone(),
            &inner.security,
            inner.local_ip,
            inner.group,
        )
        .await
    }

    /// The next configured server in turn, passing over a suspected one (unless every
    /// server is), and whether a round of the list ends with it.
    fn next_round_robin(&self, current: &Current) -> (String, bool) {
        let n = self.inner.servers.len().max(1);
        let mut wrapped = false;
        for _ in 0..n {
            let i = self.inner.next_server.fetch_add(1, Ordering::Relaxed);
            wrapped |= (i + 1).is_multiple_of(n);
            let addr = &self.inner.servers[i % n];
            if !current.suspects(addr) {
                return (addr.clone(), wrapped);
            }
        }
        let i = self.inner.next_server.fetch_add(1, Ordering::Relaxed);
        (self.inner.servers[i % n].clone(), true)
    }

    /// Drops `conn` if it is still the current one (learning its fate); the next try goes
    /// to `next` if given and not suspected.
    async fn abandon(&self, conn: &Arc<Conn>, next: Option<String>) {
        let mut current = self.inner.current.lock().await;
        if current.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            current.conn = None;
            current.learn(conn);
        }
        if let Some(to) = next
            && !current.suspects(&to)
        {
            current.preferred = Some(to);
        }
    }

    /// Whether a redirect to a named leader waits for its try: a shorter retry deadline
    /// ([`Client::with_retry_deadline`]) still gives it that try.
    async fn leader_named(&self) -> bool {
        self.inner.current.lock().await.preferred.is_some()
    }

    /// Whether `addr` fell silent recently (a redirect there would only wait on it).
    async fn suspects(&self, addr: &str) -> bool {
        self.inner.current.lock().await.suspects(addr)
    }

    /// Sends `request` to the leader (or, for `Status` and `ReadLocal`, to whichever node
    /// answers), following redirects and retrying within [`ATTEMPTS_MAX`] tries and
    /// [`REQUEST_DEADLINE`]. A write that may have been applied on some try and then ran
    /// out of retries is `OutcomeUnknown`.
    pub async fn request(&self, request: Request) -> Result<Response, ClientError> {
        let started = Instant::now();
        let deadline = self.inner.retry_deadline;
        // Built only when a try fails: formatting the server list on every request cost
        // the bench client about 1% of its CPU.
        let mut last_error: Option<ClientError> = None;
        let mut maybe_applied = false;
        let mut placed = false;
        let mut unplaced_tries = 0;
        for _ in 0..ATTEMPTS_MAX {
            if started.elapsed() > REQUEST_DEADLINE
                || (started.elapsed() > deadline && !self.leader_named().await)
            {
                break;
            }
            let retry = match self.try_once(&request).await {
                // A tenant placed nowhere yet. A write places it (in the default group)
                // and asks again; placed already, this node has not applied its
                // placement yet. A read places nothing (a tenant placed nowhere holds
                // nothing): it asks again a few times, for a node behind, then is told.
                Ok(Response::Failed(Failure::Unplaced { tenant })) => {
                    let unplaced = || {
                        ClientError::Failed(Failure::Unplaced {
                            tenant: tenant.clone(),
                        })
                    };
                    unplaced_tries += 1;
                    let retry = if !is_write(&request) {
                        if unplaced_tries > UNPLACED_READ_TRIES {
                            return Err(unplaced());
                        }
                        Retry::Pause
                    } else if placed {
                        Retry::Pause
                    } else {
                        match self.place_tenant(&tenant, None).await {
                            Ok(_) => placed = true,
                            // Not this caller's to place (the read role): it is told.
                            Err(e) if !e.is_retryable() => {
                                tracing::debug!("placing {tenant}: {e}");
                                return Err(unplaced());
                            }
                            Err(_) => {}
                        }
                        Retry::Now
                    };
                    last_error = Some(unplaced());
                    retry
                }
                // A tenant another group decides: a request of no session is that group's
                // as much as this one's, and is asked there; a session's stays here.
                Ok(Response::Failed(Failure::WrongGroup { group, .. }))
                    if Some(group) != self.inner.group && sessionless(&request) =>
                {
                    let there = self.in_other_group(group);
                    return Box::pin(there.request(request)).await;
                }
                Ok(response) => return Ok(response),
                // A refused certificate or token: every try would fail the same way.
                Err((e @ (ClientError::Protocol(_) | ClientError::Refused(_)), _)) => {
                    return Err(e);
                }
                Err((e, retry)) => {
                    maybe_applied |= !e.definitely_failed();
                    last_error = Some(e);
                    retry
                }
            };
            if let Retry::Pause = retry {
                tokio::time::sleep(jittered(RETRY_PAUSE)).await;
            }
        }
        let last_error = last_error.unwrap_or_else(|| {
            ClientError::Unreachable(format!("none of {:?} answered", self.inner.servers))
        });
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
                let mut redirect = leader.map(|(_, a)| a).filter(|a| *a != conn.addr);
                if let Some(to) = &redirect
                    && self.suspects(to).await
                {
                    // The node still names the leader that fell silent: it has not yet
                    // noticed. Treat it as an election under way.
                    redirect = None;
                }
                tracing::debug!("{}: not the leader; redirect to {redirect:?}", conn.addr);
                if redirect.is_none() {
                    // No other leader known: an election is likely under way. Pause before
                    // giving the connection up, so the requests sharing it do not all
                    // reconnect meanwhile.
                    tokio::time::sleep(jittered(RETRY_PAUSE)).await;
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
        reply_of(self.request(Request::Write(command)).await?)
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

    /// Asks one node, without redirects or retries (for a given member's status). A node
    /// that does not welcome within [`super::SILENCE_MAX`] is unreachable.
    pub async fn ask_node(addr: &str, request: &Request) -> Result<Response, ClientError> {
        Client::ask_node_with(addr, request, &ClientSecurity::default()).await
    }

    /// [`Client::ask_node`] with TLS and a token.
    pub async fn ask_node_with(
        addr: &str,
        request: &Request,
        security: &ClientSecurity,
    ) -> Result<Response, ClientError> {
        Client::ask_node_within(addr, request, security, CONNECT_TIMEOUT).await
    }

    /// [`Client::ask_node_with`], waiting up to `wait` for the answer: for a request whose
    /// work grows with the state (a status's digest, a snapshot's build and install).
    pub async fn ask_node_within(
        addr: &str,
        request: &Request,
        security: &ClientSecurity,
        wait: Duration,
    ) -> Result<Response, ClientError> {
        Client::ask_node_in_within(addr, request, security, None, wait).await
    }

    /// [`Client::ask_node_with`] on a connection to Raft group `group` of the node (`None`:
    /// its default group): a status of that group, its digest and its leader.
    pub async fn ask_node_in(
        addr: &str,
        request: &Request,
        security: &ClientSecurity,
        group: Option<u64>,
    ) -> Result<Response, ClientError> {
        Client::ask_node_in_within(addr, request, security, group, CONNECT_TIMEOUT).await
    }

    async fn ask_node_in_within(
        addr: &str,
        request: &Request,
        security: &ClientSecurity,
        group: Option<u64>,
        wait: Duration,
    ) -> Result<Response, ClientError> {
        let conn = Conn::open(addr, Feeds::unheard(), security, None, group).await?;
        tokio::time::timeout(wait, conn.call(request))
            .await
            .unwrap_or_else(|_| Err(ClientError::OutcomeUnknown(format!("{addr}: no answer"))))
    }
}

/// The reply in a write's response: every write's answer is unwrapped here, whichever
/// connection it came back on.
pub(super) fn reply_of(response: Response) -> Result<Reply, ClientError> {
    match response {
        Response::Written { reply, .. } => Ok(reply),
        Response::Failed(f) => Err(ClientError::Failed(f)),
        other => Err(ClientError::Protocol(format!(
            "unexpected answer to a write: {other:?}"
        ))),
    }
}

/// Whether `request` belongs to no session: a read, or a write naming none (a definition,
/// a ceiling, a halt, a run's reserve or settlement). Such a request is decided wherever
/// its tenant lives; a session's is decided in the group of the session.
fn sessionless(request: &Request) -> bool {
    match request {
        Request::Write(command) => command.session().is_none(),
        Request::Read(_) | Request::ReadLocal(_) => true,
        _ => false,
    }
}

/// Whether `request` changes state (so an unknown outcome matters).
fn is_write(request: &Request) -> bool {
    matches!(
        request,
        Request::Write(_) | Request::AddNode { .. } | Request::RemoveNode { .. }
    )
}

/// `pause` scaled by a factor in [0.5, 1.5): the mean pause is unchanged (so no failover
/// waits longer on average), but clients that lost their leader at the same instant do not
/// come back in step. The spread comes from the hasher's per-process random keys and the
/// time, so it needs no random-number crate.
pub(super) fn jittered(pause: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    let unit = (h.finish() % 1_000) as f64 / 1_000.0;
    pause.mul_f64(0.5 + unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_to_one_and_a_half_of_the_pause_and_varies() {
        let pause = Duration::from_millis(100);
        let seen: Vec<Duration> = (0..200).map(|_| jittered(pause)).collect();
        assert!(
            seen.iter().all(|d| *d >= pause / 2 && *d < pause * 3 / 2),
            "{seen:?}"
        );
        let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
        assert!(
            distinct.len() > 20,
            "jitter spreads the pauses: {distinct:?}"
        );
    }
}
