//! [`Conn`]: one live connection to one node, multiplexing many requests.
//!
//! A connection is a hello/welcome handshake, then two tasks: a writer that coalesces
//! queued request frames into one write, and a reader that routes each response to the
//! caller waiting on its id (responses come back in any order) and fans pushed events out
//! to the client's subscribers. Both tasks end with the `Conn` ([`AbortOnDrop`]).
//!
//! When the reader stops (the node closed the stream, a broken frame), it drops every
//! waiter's sender — each waiting caller learns its outcome is unknown — and marks the
//! connection dead so the [`Client`](super::Client) opens another. A `Conn` never
//! reconnects, redirects or retries: that is the client's job.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{BufReader, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::ClientError;
use crate::machine::Event;
use crate::protocol::{
    CLIENT_FRAME_MAX, ClientFrame, PROTOCOL_VERSION, Request, Response, ServerFrame,
};
use crate::security::{ClientSecurity, Stream};
use crate::task::AbortOnDrop;
use crate::wire;

/// Longest a connect plus hello may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest one try waits for its response. The node answers a write within its commit
/// timeout (10 s) at worst.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(12);
/// Frames queued for one connection's writer task, at most.
const OUTBOX_MAX: usize = 4_096;
/// Read buffer of one connection: large enough that a burst of pushed events and
/// responses is read in few system calls.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// The callers waiting for a response, by request id. A std mutex: it is held only to
/// insert or remove one entry, never across an await.
type Waiters = Arc<Mutex<BTreeMap<u64, oneshot::Sender<Response>>>>;

/// One live connection: a writer task (coalescing queued requests into one write), and a
/// reader task that routes responses and events.
pub(super) struct Conn {
    /// The node's client address, for error texts and to tell a redirect to itself.
    pub(super) addr: String,
    outbox: mpsc::Sender<ClientFrame>,
    waiters: Waiters,
    /// The id of the next request; ids are unique per connection, starting at 1.
    next_id: AtomicU64,
    /// `false` once the reader has stopped.
    alive: watch::Receiver<bool>,
    _reader: AbortOnDrop,
    _writer: AbortOnDrop,
}

impl Conn {
    /// Connects to `addr` (over TLS if `security` says so), says hello with its token, and
    /// starts the reader and writer. Pushed events go to `events`.
    pub(super) async fn open(
        addr: &str,
        events: broadcast::Sender<Event>,
        security: &ClientSecurity,
    ) -> Result<Conn, ClientError> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, handshake(addr, security))
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Unreachable(format!(
                    "{addr}: no welcome within {CONNECT_TIMEOUT:?}"
                )))
            })?;
        let (rd, wr) = tokio::io::split(stream);
        let waiters: Waiters = Arc::default();
        let (alive_tx, alive) = watch::channel(true);
        let reader = tokio::spawn(read_frames(
            BufReader::with_capacity(READ_BUFFER_BYTES, rd),
            waiters.clone(),
            events,
            alive_tx,
            addr.to_owned(),
        ));
        let (outbox, queue) = mpsc::channel(OUTBOX_MAX);
        let writer = tokio::spawn(write_frames(wr, queue));
        Ok(Conn {
            addr: addr.to_owned(),
            outbox,
            waiters,
            next_id: AtomicU64::new(1),
            alive,
            _reader: AbortOnDrop(reader),
            _writer: AbortOnDrop(writer),
        })
    }

    /// Whether the reader is still running (the node has not closed the stream).
    pub(super) fn is_alive(&self) -> bool {
        *self.alive.borrow()
    }

    /// Sends `request` and waits for its response, at most [`RESPONSE_TIMEOUT`]. Every
    /// error is `OutcomeUnknown`: the request may have reached the node.
    pub(super) async fn call(&self, request: &Request) -> Result<Response, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiters().insert(id, tx);
        let frame = ClientFrame::Request {
            id,
            request: request.clone(),
        };
        if self.outbox.send(frame).await.is_err() {
            self.waiters().remove(&id);
            return Err(self.lost());
        }
        match tokio::time::timeout(RESPONSE_TIMEOUT, rx).await {
            Ok(Ok(response)) => Ok(response),
            // The reader dropped the sender: the connection ended.
            Ok(Err(_)) => Err(self.lost()),
            Err(_) => {
                self.waiters().remove(&id);
                Err(ClientError::OutcomeUnknown(format!(
                    "{}: no answer within {RESPONSE_TIMEOUT:?}",
                    self.addr
                )))
            }
        }
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, oneshot::Sender<Response>>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lost(&self) -> ClientError {
        ClientError::OutcomeUnknown(format!("{}: connection lost", self.addr))
    }
}

/// Connects to `addr` and exchanges hello and welcome. A node that cannot be reached is
/// `Unreachable`; one whose certificate is refused, or that answers anything but a welcome
/// (a refused token, say), is a `Protocol` error: trying again would fail the same way.
async fn handshake(addr: &str, security: &ClientSecurity) -> Result<Stream, ClientError> {
    let unreachable = |e: &dyn std::fmt::Display| ClientError::Unreachable(format!("{addr}: {e}"));
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| unreachable(&e))?;
    // Requests are small and latency-bound; Nagle's delay would only slow them.
    let _ = tcp.set_nodelay(true);
    let mut stream = match security.connector.connect(tcp, addr).await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(ClientError::Protocol(e.to_string()));
        }
        Err(e) => return Err(unreachable(&e)),
    };
    let hello = ClientFrame::Hello {
        version: PROTOCOL_VERSION,
        token: security.token.clone(),
    };
    wire::write_frame(&mut stream, &hello)
        .await
        .map_err(|e| unreachable(&e))?;
    match wire::read_frame::<_, ServerFrame>(&mut stream, CLIENT_FRAME_MAX).await {
        Ok(ServerFrame::Welcome { .. }) => Ok(stream),
        Ok(ServerFrame::Error { reason }) => {
            Err(ClientError::Protocol(format!("{addr}: {reason}")))
        }
        Ok(other) => Err(ClientError::Protocol(format!(
            "{addr}: expected a welcome, got {other:?}"
        ))),
        Err(e) => Err(unreachable(&e)),
    }
}

/// The reader task: routes responses to their waiters and events to `events` until the
/// stream ends, then fails every waiter and marks the connection dead.
async fn read_frames(
    mut rd: BufReader<ReadHalf<Stream>>,
    waiters: Waiters,
    events: broadcast::Sender<Event>,
    alive: watch::Sender<bool>,
    from: String,
) {
    loop {
        match wire::read_frame::<_, ServerFrame>(&mut rd, CLIENT_FRAME_MAX).await {
            Ok(ServerFrame::Response { id, response }) => {
                let waiter = waiters
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                // No waiter: the caller timed out and gave up on it.
                if let Some(w) = waiter {
                    let _ = w.send(response);
                }
            }
            Ok(ServerFrame::Event(event)) => {
                // No subscriber is not an error: nobody is watching for grants.
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
    waiters.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let _ = alive.send(false);
}

/// The writer task: writes queued frames, coalescing whatever is queued into one write,
/// until the stream breaks or the `Conn` (the queue's sender) is dropped.
async fn write_frames(mut wr: WriteHalf<Stream>, mut queue: mpsc::Receiver<ClientFrame>) {
    let _ = wire::write_queued(&mut wr, &mut queue, |_| false).await;
}
