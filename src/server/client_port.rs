//! The client port: accepts connections, checks the hello, serves requests concurrently and
//! writes their responses as they finish. Writes go to the [`Proposer`], linearizable reads
//! to the [`Reader`], node and cluster requests to [`super::admin`]; the server module doc
//! follows a request through all of them.
//!
//! Each connection has a reader (its connection task), a task per request in flight, a
//! writer task fed by a bounded outbox, and a forwarder task for pushes.
//!
//! Push: a connection follows the sessions it has used (opened, or named in a write), and
//! a forwarder task sends it every event the applied log produces for them. A push that is
//! lost (a slow connection, a reconnect) loses nothing: the grant is state, and asking again
//! for the ticket answers `Granted` with the same fence.
//! Bad input — an oversized or corrupt frame, undecodable bytes, a wrong version, a request
//! before the hello — is answered with `ServerFrame::Error` naming the problem, and that
//! connection is closed; the node and every other connection go on.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::BufReader;
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, broadcast, mpsc, watch};

use super::admin;
use super::proposer::Proposer;
use super::reader::{Reader, answer};
use crate::machine::{Applied, Command, Reply, SessionId};
use crate::protocol::{
    CLIENT_FRAME_MAX, ClientFrame, PROTOCOL_VERSION, Request, Response, ServerFrame,
};
use crate::raft::state_store::AppliedState;
use crate::raft::{NodeAddr, NodeId, Raft};
use crate::task::AbortOnDrop;
use crate::wire::{self, WireError};

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Frames queued for one connection's writer, at most; a client that does not read its
/// responses stalls only itself.
const OUTBOX_MAX: usize = 1_024;
/// Requests served at once on one connection, at most. Past this the connection's reader
/// stops reading (TCP pushes back on the client) until one finishes.
const IN_FLIGHT_MAX: usize = 4_096;
/// Bytes buffered in front of a connection's socket: a frame is then one read, not three.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// How long a closing connection's writer may take to flush what is queued (the closing
/// `Error` frame included) before it is dropped.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// The sessions a connection follows: those it opened or named in a write. Shared by its
/// request tasks (which add to it) and its forwarder (which reads it per applied entry).
type Followed = Arc<Mutex<BTreeSet<SessionId>>>;

/// What a connection needs of the node.
pub struct Ctx {
    pub id: NodeId,
    pub client_addr: String,
    pub raft: Raft,
    /// The applied state: local reads, status, and the event feed for pushes.
    pub state: Arc<AppliedState>,
    pub proposer: Proposer,
    pub reader: Reader,
}

/// Serves client connections on `listener` until `shutdown` turns true.
pub async fn serve_clients(listener: TcpListener, ctx: Arc<Ctx>, shutdown: watch::Receiver<bool>) {
    wire::accept_loop("client", listener, shutdown, move |stream| {
        connection(stream, ctx.clone())
    })
    .await
}

async fn connection(stream: TcpStream, ctx: Arc<Ctx>) -> Result<(), String> {
    let _counted = crate::metrics::get().connection();
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
    let (out, mut outbox) = mpsc::channel::<ServerFrame>(OUTBOX_MAX);
    let writer = tokio::spawn(async move {
        let _ = wire::write_queued(&mut wr, &mut outbox, |f| {
            matches!(f, ServerFrame::Error { .. })
        })
        .await;
    });
    let result = serve(&mut rd, &out, &ctx).await;
    if let Err(reason) = &result {
        let _ = out
            .send(ServerFrame::Error {
                reason: reason.clone(),
            })
            .await;
    }
    drop(out);
    let _ = tokio::time::timeout(FLUSH_TIMEOUT, writer).await;
    result
}

/// Serves one connection after its hello until it closes or sends bad input.
async fn serve(
    rd: &mut BufReader<OwnedReadHalf>,
    out: &mpsc::Sender<ServerFrame>,
    ctx: &Arc<Ctx>,
) -> Result<(), String> {
    if !greet(rd, out, ctx).await? {
        return Ok(());
    }
    let followed = Followed::default();
    let forwarder = tokio::spawn(forward_events(
        ctx.state.subscribe(),
        followed.clone(),
        out.clone(),
    ));
    // The forwarder ends with its connection.
    let _stop_forwarder = AbortOnDrop(forwarder);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    loop {
        let frame = match wire::read_frame::<_, ClientFrame>(rd, CLIENT_FRAME_MAX).await {
            Ok(f) => f,
            Err(WireError::Closed) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        let (id, request) = match frame {
            ClientFrame::Request { id, request } => (id, request),
            ClientFrame::Hello { .. } => return Err("a second hello".into()),
        };
        if let Request::Write(command) = &request
            && let Some(session) = session_of(command)
        {
            follow(&followed, session);
        }
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        let ctx = ctx.clone();
        let out = out.clone();
        let followed = followed.clone();
        tokio::spawn(async move {
            let response = handle(&ctx, request).await;
            if let Response::Written {
                reply: Reply::SessionOpened { session, .. },
                ..
            } = &response
            {
                follow(&followed, *session);
            }
            let _ = out.send(ServerFrame::Response { id, response }).await;
            drop(slot);
        });
    }
}

/// Reads the hello and answers `Welcome`. `Ok(false)`: the client closed before saying
/// hello. An error is the reason to close with.
async fn greet(
    rd: &mut BufReader<OwnedReadHalf>,
    out: &mpsc::Sender<ServerFrame>,
    ctx: &Ctx,
) -> Result<bool, String> {
    let hello = tokio::time::timeout(
        HELLO_TIMEOUT,
        wire::read_frame::<_, ClientFrame>(rd, CLIENT_FRAME_MAX),
    )
    .await
    .map_err(|_| format!("no hello within {HELLO_TIMEOUT:?}"))?;
    match hello {
        Ok(ClientFrame::Hello { version }) if version == PROTOCOL_VERSION => {}
        Ok(ClientFrame::Hello { version }) => {
            return Err(format!(
                "protocol version {version} is not supported (this node speaks {PROTOCOL_VERSION})"
            ));
        }
        Ok(ClientFrame::Request { .. }) => return Err("request before hello".into()),
        Err(WireError::Closed) => return Ok(false),
        Err(e) => return Err(e.to_string()),
    }
    out.send(ServerFrame::Welcome {
        version: PROTOCOL_VERSION,
        node: ctx.id,
    })
    .await
    .map_err(|_| "writer gone".to_string())?;
    Ok(true)
}

/// Adds `session` to what the connection follows.
fn follow(followed: &Followed, session: SessionId) {
    followed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(session);
}

/// The session a write acts for, if any.
fn session_of(command: &Command) -> Option<SessionId> {
    match command {
        Command::KeepAlive { session }
        | Command::CloseSession { session }
        | Command::Release { session, .. } => Some(*session),
        Command::Acquire(a) => Some(a.session),
        _ => None,
    }
}

/// Sends the connection every event for the sessions it follows.
async fn forward_events(
    mut applied: broadcast::Receiver<Arc<Applied>>,
    followed: Followed,
    out: mpsc::Sender<ServerFrame>,
) {
    use broadcast::error::RecvError;
    loop {
        let entry = match applied.recv().await {
            Ok(e) => e,
            // Missed some: their grants are state; the client learns them by asking again.
            Err(RecvError::Lagged(n)) => {
                crate::metrics::get().pushes_dropped.inc_by(n);
                tracing::warn!("a client connection missed the events of {n} entries");
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let mine: Vec<_> = {
            let followed = followed.lock().unwrap_or_else(|p| p.into_inner());
            entry
                .events
                .iter()
                .filter(|e| followed.contains(&e.session()))
                .cloned()
                .collect()
        };
        for event in mine {
            if out.send(ServerFrame::Event(event)).await.is_err() {
                return;
            }
        }
    }
}

/// Serves one request: writes through the proposer, linearizable reads through the reader,
/// the rest here or in [`super::admin`].
async fn handle(ctx: &Ctx, request: Request) -> Response {
    match request {
        Request::Write(command) => match ctx.proposer.propose(command).await {
            Ok((index, reply)) => {
                crate::metrics::get().replied(&reply);
                Response::Written { index, reply }
            }
            Err(f) => Response::Failed(f),
        },
        Request::Read(query) => match ctx.reader.read(query).await {
            Ok(a) => Response::Read(a),
            Err(f) => Response::Failed(f),
        },
        Request::ReadLocal(query) => Response::Read(answer(&ctx.state.lock().machine, &query)),
        Request::Status => Response::Status(admin::status(ctx)),
        Request::AddNode { id, peer, client } => {
            admin::add_node(ctx, id, NodeAddr { peer, client }).await
        }
        Request::RemoveNode { id } => admin::remove_node(ctx, id).await,
        Request::SnapshotCost => admin::snapshot_cost(ctx),
    }
}
