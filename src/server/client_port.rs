//! The client port: accepts connections, checks the hello, serves requests concurrently and
//! writes their responses as they finish.
//!
//! Each connection has a reader (this task) and a writer task fed by a bounded channel.
//!
//! Push: a connection follows the sessions it has used (opened, or named in a write), and
//! a forwarder task sends it every event the applied log produces for them. A push that is
//! lost (a slow connection, a reconnect) loses nothing: the grant is state, and asking again
//! for the ticket answers `Granted` with the same fence.
//! Bad input — an oversized or corrupt frame, undecodable bytes, a wrong version, a request
//! before the hello — is answered with `ServerFrame::Error` naming the problem, and that
//! connection is closed; the node and every other connection go on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::ChangeMembers;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use super::proposer::{Proposer, write_failure};
use super::reader::{Reader, answer};
use crate::machine::{Command, Reply, SessionId};
use crate::protocol::{
    CLIENT_FRAME_MAX, ClientFrame, Failure, Member, NodeStatus, PROTOCOL_VERSION, Request,
    Response, ServerFrame,
};
use crate::raft::state_store::Shared;
use crate::raft::{NodeAddr, NodeId, Raft};
use crate::task::AbortOnDrop;
use crate::wire::{self, WireError};

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Frames queued for one connection's writer, at most; a client that does not read its
/// responses stalls only itself.
const OUTBOX_MAX: usize = 1_024;
/// Requests served at once on one connection, at most.
const IN_FLIGHT_MAX: usize = 4_096;

/// What a connection needs of the node.
pub struct Ctx {
    pub id: NodeId,
    pub client_addr: String,
    pub raft: Raft,
    pub shared: Arc<Shared>,
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
    let (rd, mut wr) = stream.into_split();
    // Buffered: a frame is then one read from the socket, not three.
    let mut rd = tokio::io::BufReader::with_capacity(64 * 1024, rd);
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
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    result
}

async fn serve(
    rd: &mut tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    out: &mpsc::Sender<ServerFrame>,
    ctx: &Arc<Ctx>,
) -> Result<(), String> {
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
        Err(WireError::Closed) => return Ok(()),
        Err(e) => return Err(e.to_string()),
    }
    out.send(ServerFrame::Welcome {
        version: PROTOCOL_VERSION,
        node: ctx.id,
    })
    .await
    .map_err(|_| "writer gone".to_string())?;
    let followed: Arc<std::sync::Mutex<BTreeSet<SessionId>>> = Arc::default();
    let forwarder = tokio::spawn(forward_events(
        ctx.shared.subscribe(),
        followed.clone(),
        out.clone(),
    ));
    // The forwarder ends with its connection.
    let _stop_forwarder = AbortOnDrop(forwarder);
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT_MAX));
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
            followed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(session);
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
                followed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(*session);
            }
            let _ = out.send(ServerFrame::Response { id, response }).await;
            drop(slot);
        });
    }
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
    mut applied: tokio::sync::broadcast::Receiver<Arc<crate::machine::Applied>>,
    followed: Arc<std::sync::Mutex<BTreeSet<SessionId>>>,
    out: mpsc::Sender<ServerFrame>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let entry = match applied.recv().await {
            Ok(e) => e,
            // Missed some: their grants are state; the client learns them by asking again.
            Err(RecvError::Lagged(n)) => {
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

/// Serves one request.
pub async fn handle(ctx: &Ctx, request: Request) -> Response {
    match request {
        Request::Write(command) => match ctx.proposer.propose(command).await {
            Ok((index, reply)) => Response::Written { index, reply },
            Err(f) => Response::Failed(f),
        },
        Request::Read(query) => match ctx.reader.read(query).await {
            Ok(a) => Response::Read(a),
            Err(f) => Response::Failed(f),
        },
        Request::ReadLocal(query) => Response::Read(answer(&ctx.shared.lock().machine, &query)),
        Request::Status => Response::Status(status(ctx)),
        Request::AddNode { id, peer, client } => {
            let node = NodeAddr { peer, client };
            if let Err(e) = ctx.raft.add_learner(id, node, true).await {
                return Response::Failed(write_failure(&ctx.raft, e));
            }
            match ctx
                .raft
                .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                .await
            {
                Ok(_) => Response::MembershipChanged,
                Err(e) => Response::Failed(write_failure(&ctx.raft, e)),
            }
        }
        Request::SnapshotCost => {
            // Encode under the lock (as the snapshot builder does), decode outside it.
            let (applied, bytes, build) = {
                let state = ctx.shared.lock();
                let started = std::time::Instant::now();
                let bytes = state.machine.snapshot();
                (state.machine.applied_index(), bytes, started.elapsed())
            };
            let started = std::time::Instant::now();
            let restored = crate::machine::Machine::restore(&bytes);
            let install = started.elapsed();
            match restored {
                Ok(_) => Response::SnapshotCost(crate::protocol::SnapshotCost {
                    applied,
                    bytes: bytes.len() as u64,
                    build_us: build.as_micros() as u64,
                    install_us: install.as_micros() as u64,
                }),
                Err(e) => {
                    Response::Failed(Failure::Unavailable(format!("own snapshot refused: {e}")))
                }
            }
        }
        Request::RemoveNode { id } => {
            match ctx
                .raft
                .change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
                .await
            {
                Ok(_) => Response::MembershipChanged,
                Err(e) => Response::Failed(write_failure(&ctx.raft, e)),
            }
        }
    }
}

/// This node's status: Raft metrics and the applied state's digest.
pub fn status(ctx: &Ctx) -> NodeStatus {
    let m = ctx.raft.metrics().borrow().clone();
    let (applied, digest, log_ms, sessions) = {
        let state = ctx.shared.lock();
        (
            state.machine.applied_index(),
            state.machine.digest(),
            state.machine.now_ms(),
            state.machine.session_count() as u64,
        )
    };
    let voters: BTreeSet<u64> = m.membership_config.voter_ids().collect();
    let matched: BTreeMap<u64, Option<u64>> = m
        .replication
        .as_ref()
        .map(|r| r.iter().map(|(id, l)| (*id, l.map(|l| l.index))).collect())
        .unwrap_or_default();
    let members = m
        .membership_config
        .nodes()
        .map(|(id, n)| Member {
            id: *id,
            peer: n.peer.clone(),
            client: n.client.clone(),
            voter: voters.contains(id),
            matched: matched.get(id).copied().flatten(),
        })
        .collect();
    NodeStatus {
        id: ctx.id,
        addr: ctx.client_addr.clone(),
        state: format!("{:?}", m.state),
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index.unwrap_or(0),
        snapshot_index: m.snapshot.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
        applied,
        digest,
        log_ms,
        sessions,
        rss_kib: rss_kib(),
        members,
    }
}

/// This process's resident set size, from /proc (Linux).
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl From<Failure> for Response {
    fn from(f: Failure) -> Self {
        Response::Failed(f)
    }
}
