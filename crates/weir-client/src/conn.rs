//! [`Conn`]: one live connection to one node, multiplexing many requests.
//!
//! A connection is a hello/welcome handshake (then `Heartbeats`, asking the node for a
//! heartbeat every `HEARTBEAT_PERIOD`), then three tasks: a writer that coalesces queued
//! request frames into one write, a reader that routes each response to the caller waiting
//! on its id (responses come back in any order) and fans pushed events out to the client's
//! subscribers, and a watchdog. All end with the `Conn` ([`AbortOnDrop`]).
//!
//! The connection dies, and every waiting caller learns its outcome is unknown (its sender
//! is dropped), when:
//! - the reader stops (the node closed the stream, a broken frame);
//! - the watchdog finds that *nothing* — no response, event or heartbeat — arrived for
//!   [`SILENCE_MAX`]: the node is stopped or frozen (a busy node still sends heartbeats);
//! - a heartbeat from a node that led on this connection names another leader: it was
//!   deposed, and the connection's [`Fate`] names where to go.
//!
//! The [`Client`](super::Client) then opens another, reading the fate to avoid the silent
//! node or to go to the named leader. A `Conn` never reconnects, redirects or retries: that
//! is the client's job. A `Resync` frame (the node dropped pushes for this connection) bumps
//! the client's generation, so every session asks again about its tickets.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{BufReader, ReadHalf, WriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::error::ClientError;
use weir_core::bounds::{CLIENT_OUTBOX_FRAMES_MAX, READ_BUFFER_BYTES};
use weir_core::machine::Event;
use weir_proto::protocol::{
    CLIENT_FRAME_MAX, ClientFrame, HEARTBEAT_PERIOD, PROTOCOL_VERSION, Request, Response,
    ServerFrame,
};
use weir_proto::task::AbortOnDrop;
use weir_proto::tls::{ClientSecurity, Stream};
use weir_proto::wire;

/// Longest a TCP connect may take (a refused one fails at once; this bounds an unrouted
/// address).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a connection may hear nothing from its node before it is declared dead; also
/// the longest a welcome may take. Five heartbeat periods: a node that is busy (an election,
/// a slow disk) still sends heartbeats, so only a stopped or frozen one stays silent this
/// long. Short enough that a session with the shortest TTL the CLI uses (3 s) learns of a
/// stopped leader and moves before its belief deadline (TTL − margin after its last
/// keep-alive).
pub const SILENCE_MAX: Duration = Duration::from_millis(1_000);
/// How often the watchdog looks at the time of the last frame: a fraction of the bound, so
/// a silent node is found within `SILENCE_MAX + SILENCE_CHECK`.
const SILENCE_CHECK: Duration = Duration::from_millis(100);
/// Longest one try waits for its response. The node answers a write within its commit
/// timeout (10 s) at worst.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(12);

const _: () = assert!(
    SILENCE_MAX.as_millis() >= 4 * HEARTBEAT_PERIOD.as_millis(),
    "the silence bound must allow several late heartbeats"
);

/// The callers waiting for a response, by request id.
type WaiterMap = BTreeMap<u64, oneshot::Sender<Response>>;

/// Where the client's pushes go: events to its subscribers, and a bump of its generation
/// when pushes may have been lost (a `Resync`).
#[derive(Clone)]
pub(super) struct Feeds {
    pub(super) events: broadcast::Sender<Event>,
    pub(super) generation: Arc<watch::Sender<u64>>,
}

impl Feeds {
    /// Feeds nobody listens to (a one-off connection).
    pub(super) fn unheard() -> Feeds {
        Feeds {
            events: broadcast::channel(1).0,
            generation: Arc::new(watch::channel(0).0),
        }
    }
}

/// Why a connection died, when it was not simply closed: what the client should do next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Fate {
    /// Nothing arrived for [`SILENCE_MAX`]: avoid this node for a while.
    pub(super) silent: bool,
    /// The node was deposed and named this leader's client address: go there.
    pub(super) redirect: Option<String>,
}

/// What the reader, the watchdog and the [`Conn`] share.
struct Link {
    /// A std mutex: held only to insert or remove one entry, never across an await.
    waiters: Mutex<WaiterMap>,
    /// `false` once the connection is dead (reader stopped, silence, deposed node).
    alive: AtomicBool,
    /// When the connection opened; `last_heard_ms` counts from here.
    epoch: Instant,
    /// Milliseconds after `epoch` of the last frame read.
    last_heard_ms: AtomicU64,
    fate: Mutex<Fate>,
}

impl Link {
    fn waiters(&self) -> std::sync::MutexGuard<'_, WaiterMap> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the connection dead with `fate`, failing every waiting caller (their outcome
    /// is unknown). The first fate wins.
    fn kill(&self, fate: Fate) {
        if self.alive.swap(false, Ordering::AcqRel) {
            *self.fate.lock().unwrap_or_else(|p| p.into_inner()) = fate;
        }
        // Dropping the waiters' senders tells every caller the outcome is unknown.
        self.waiters().clear();
    }

    fn heard(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_heard_ms.store(ms, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_heard_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

/// One live connection: a writer task (coalescing queued requests into one write), a
/// reader task that routes responses and events, and a watchdog for silence.
pub(super) struct Conn {
    /// The node's client address, for error texts and to tell a redirect to itself.
    pub(super) addr: String,
    outbox: mpsc::Sender<ClientFrame>,
    link: Arc<Link>,
    /// The id of the next request; ids are unique per connection, starting at 1.
    next_id: AtomicU64,
    _reader: AbortOnDrop,
    _writer: AbortOnDrop,
    _watchdog: AbortOnDrop,
}

impl Conn {
    /// Connects to `addr` (from `local_ip`, if given: [`super::Client::with_local_addr`]),
    /// says hello (naming `group`, if given: [`super::Client::in_group`]), asks for heartbeats, and starts the reader, writer and watchdog. Pushes go
    /// to `feeds`.
    pub(super) async fn open(
        addr: &str,
        feeds: Feeds,
        security: &ClientSecurity,
        local_ip: Option<IpAddr>,
        group: Option<u64>,
    ) -> Result<Conn, ClientError> {
        let (stream, node) = handshake(addr, security, local_ip, group).await?;
        let (rd, wr) = tokio::io::split(stream);
        let link = Arc::new(Link {
            waiters: Mutex::default(),
            alive: AtomicBool::new(true),
            epoch: Instant::now(),
            last_heard_ms: AtomicU64::new(0),
            fate: Mutex::default(),
        });
        let reader = tokio::spawn(read_frames(
            BufReader::with_capacity(READ_BUFFER_BYTES, rd),
            link.clone(),
            feeds,
            node,
            addr.to_owned(),
        ));
        let watchdog = tokio::spawn(watch_silence(link.clone(), addr.to_owned()));
        let (outbox, queue) = mpsc::channel(CLIENT_OUTBOX_FRAMES_MAX);
        let writer = tokio::spawn(write_frames(wr, queue));
        Ok(Conn {
            addr: addr.to_owned(),
            outbox,
            link,
            next_id: AtomicU64::new(1),
            _reader: AbortOnDrop(reader),
            _writer: AbortOnDrop(writer),
            _watchdog: AbortOnDrop(watchdog),
        })
    }

    /// Whether the connection is still usable (not closed, silent or deposed).
    pub(super) fn is_alive(&self) -> bool {
        self.link.alive.load(Ordering::Acquire)
    }

    /// Gives the connection up as silent (a hedge found the leader elsewhere): every
    /// caller waiting on it fails at once and is retried on the next connection.
    pub(super) fn give_up(&self) {
        self.link.kill(Fate {
            silent: true,
            redirect: None,
        });
    }

    /// Gives the connection up because the leader is at `to` (its node's own Raft said so,
    /// or a peer's did): every request waiting on it fails as "deposed" and is retried at
    /// once, there. The node is not suspected: it is alive, only not the leader.
    pub(super) fn redirect(&self, to: String) {
        self.link.kill(Fate {
            silent: false,
            redirect: Some(to),
        });
    }

    /// Why the connection died, if it died of silence or a deposed node.
    pub(super) fn fate(&self) -> Fate {
        self.link
            .fate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sends `request` and waits for its response, at most [`RESPONSE_TIMEOUT`]. Every
    /// error is `OutcomeUnknown`: the request may have reached the node.
    pub(super) async fn call(&self, request: &Request) -> Result<Response, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if !self.is_alive() {
            return Err(self.lost());
        }
        self.link.waiters().insert(id, tx);
        // The watchdog may have killed the connection between the check and the insert;
        // its `clear` then ran before the insert, so fail this caller here.
        if !self.is_alive() {
            self.link.waiters().remove(&id);
            return Err(self.lost());
        }
        let frame = ClientFrame::Request {
            id,
            request: request.clone(),
        };
        if self.outbox.send(frame).await.is_err() {
            self.link.waiters().remove(&id);
            return Err(self.lost());
        }
        match tokio::time::timeout(RESPONSE_TIMEOUT, rx).await {
            Ok(Ok(response)) => Ok(response),
            // The sender was dropped: the connection ended.
            Ok(Err(_)) => Err(self.lost()),
            Err(_) => {
                self.link.waiters().remove(&id);
                Err(ClientError::OutcomeUnknown(format!(
                    "{}: no answer within {RESPONSE_TIMEOUT:?}",
                    self.addr
                )))
            }
        }
    }

    fn lost(&self) -> ClientError {
        let fate = self.fate();
        let why = if fate.silent {
            format!("silent for {SILENCE_MAX:?}")
        } else if let Some(to) = fate.redirect {
            format!("deposed, the leader is at {to}")
        } else {
            "connection lost".to_owned()
        };
        ClientError::OutcomeUnknown(format!("{}: {why}", self.addr))
    }
}

/// A TCP connect to `addr`; from `local_ip` (any port) when given, else from wherever the
/// kernel's routing picks. Of the addresses `addr` resolves to, the first of `local_ip`'s
/// family is dialed (a v4 source cannot reach a v6 address).
pub(super) async fn dial(addr: &str, local_ip: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(ip) = local_ip else {
        return TcpStream::connect(addr).await;
    };
    let target: SocketAddr = tokio::net::lookup_host(addr)
        .await?
        .find(|a| a.is_ipv4() == ip.is_ipv4())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::AddrNotAvailable,
                format!("no address of {addr} is reachable from {ip}"),
            )
        })?;
    let socket = if ip.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(ip, 0))?;
    socket.connect(target).await
}

/// Connects to `addr`, exchanges hello and welcome (within [`SILENCE_MAX`]: a stopped
/// process's socket still accepts, but never welcomes), and asks for heartbeats. Returns
/// the stream and the node's id. A node that cannot be reached is `Unreachable`; one that
/// answers anything but a welcome broke the protocol.
async fn handshake(
    addr: &str,
    security: &ClientSecurity,
    local_ip: Option<IpAddr>,
    group: Option<u64>,
) -> Result<(Stream, u64), ClientError> {
    let unreachable = |e: &dyn std::fmt::Display| ClientError::Unreachable(format!("{addr}: {e}"));
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, dial(addr, local_ip))
        .await
        .map_err(|_| unreachable(&format!("no connect within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| unreachable(&e))?;
    // Requests are small and latency-bound; Nagle's delay would only slow them.
    let _ = tcp.set_nodelay(true);
    // The TLS handshake is inside the welcome's time bound too: a stopped process's socket
    // accepts the connect but never answers the handshake.
    let welcome = async {
        let mut stream = match security.connector.connect(tcp, addr).await {
            Ok(s) => s,
            // A refused certificate: trying again would fail the same way.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(ClientError::Protocol(format!("{addr}: {e}")));
            }
            Err(e) => return Err(unreachable(&e)),
        };
        let hello = match group {
            None => ClientFrame::Hello {
                version: PROTOCOL_VERSION,
                token: security.token.clone(),
            },
            Some(group) => ClientFrame::HelloInGroup {
                version: PROTOCOL_VERSION,
                token: security.token.clone(),
                group,
            },
        };
        wire::write_frame(&mut stream, &hello)
            .await
            .map_err(|e| unreachable(&e))?;
        let node = match wire::read_frame::<_, ServerFrame>(&mut stream, CLIENT_FRAME_MAX).await {
            Ok(ServerFrame::Welcome { node, .. }) => node,
            Ok(ServerFrame::Error { reason }) => {
                return Err(ClientError::Refused(format!("{addr}: {reason}")));
            }
            // A TLS port closes a plaintext hello (after an alert, which reads as a short or
            // garbled frame): say what is likely.
            Err(e) if !security.connector.is_tls() => {
                return Err(unreachable(&format!(
                    "{e} (if the node serves TLS, pass --ca with the cluster's CA \
                     certificate, or set WEIR_CA)"
                )));
            }
            Ok(other) => {
                return Err(ClientError::Protocol(format!(
                    "{addr}: expected a welcome, got {other:?}"
                )));
            }
            Err(e) => return Err(unreachable(&e)),
        };
        wire::write_frame(&mut stream, &ClientFrame::Heartbeats)
            .await
            .map_err(|e| unreachable(&e))?;
        Ok((stream, node))
    };
    tokio::time::timeout(SILENCE_MAX, welcome)
        .await
        .unwrap_or_else(|_| Err(unreachable(&format!("no welcome within {SILENCE_MAX:?}"))))
}

/// The reader task: routes responses to their waiters and events to the feeds until the
/// stream ends or the connection dies, then fails every waiter and marks it dead.
async fn read_frames(
    mut rd: BufReader<ReadHalf<Stream>>,
    link: Arc<Link>,
    feeds: Feeds,
    node: u64,
    from: String,
) {
    // Whether a heartbeat on this connection named its own node as the leader.
    let mut led = false;
    loop {
        let frame = wire::read_frame::<_, ServerFrame>(&mut rd, CLIENT_FRAME_MAX).await;
        if !link.alive.load(Ordering::Acquire) {
            // Killed by the watchdog or a deposal: what it says now is not listened to.
            return;
        }
        link.heard();
        match frame {
            Ok(ServerFrame::Response { id, response }) => {
                let waiter = link.waiters().remove(&id);
                // No waiter: the caller timed out and gave up on it.
                if let Some(w) = waiter {
                    let _ = w.send(response);
                }
            }
            Ok(ServerFrame::Event(event)) => {
                // No subscriber is not an error: nobody is watching for grants.
                let _ = feeds.events.send(event);
            }
            Ok(ServerFrame::Heartbeat { leader, .. }) => match leader {
                Some((id, _)) if id == node => led = true,
                Some((_, addr)) if led => {
                    tracing::info!("{from} was deposed; the leader is at {addr}");
                    link.kill(Fate {
                        silent: false,
                        redirect: Some(addr),
                    });
                    return;
                }
                _ => {}
            },
            Ok(ServerFrame::Resync { missed_entries }) => {
                tracing::debug!("{from} missed the events of {missed_entries} entries");
                feeds.generation.send_modify(|g| *g += 1);
            }
            Ok(ServerFrame::Error { reason }) => {
                tracing::warn!("{from} closed the connection: {reason}");
                break;
            }
            Ok(ServerFrame::Welcome { .. }) | Err(_) => break,
        }
    }
    link.kill(Fate::default());
}

/// The watchdog task: kills the connection once nothing arrived for [`SILENCE_MAX`].
async fn watch_silence(link: Arc<Link>, from: String) {
    while link.alive.load(Ordering::Acquire) {
        tokio::time::sleep(SILENCE_CHECK).await;
        if link.silent_for() > SILENCE_MAX {
            tracing::info!("{from} sent nothing for {SILENCE_MAX:?}; giving it up");
            link.kill(Fate {
                silent: true,
                redirect: None,
            });
            return;
        }
    }
}

/// The writer task: writes queued frames, coalescing whatever is queued into one write,
/// until the stream breaks or the `Conn` (the queue's sender) is dropped.
async fn write_frames(mut wr: WriteHalf<Stream>, mut queue: mpsc::Receiver<ClientFrame>) {
    let _ = wire::write_queued(&mut wr, &mut queue, |_| false, None::<fn() -> bool>).await;
}
