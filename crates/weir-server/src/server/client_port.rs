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
//! for the ticket answers `Granted` with the same fence. A forwarder that falls behind the
//! event feed says so with `ServerFrame::Resync`, and the client asks again about every
//! ticket it waits for or holds; a push is never dropped without telling the client.
//!
//! The edge ([`super::edge`]) checks every write before it is proposed; one that breaks a
//! bound, or would make the connection follow more than `FOLLOWED_SESSIONS_MAX` sessions,
//! is answered `Failed(BadRequest)` naming the bound, and the connection stays open.
//!
//! Heartbeats: a connection that sends `ClientFrame::Heartbeats` gets a
//! `ServerFrame::Heartbeat` every `HEARTBEAT_PERIOD` ([`heartbeat`]), so the client can tell
//! a node that is silent (stopped) from one that is busy.
//!
//! Before the hello a connection costs the node little (docs/security.md): the first frame may be at
//! most [`HELLO_FRAME_MAX`] bytes (a larger one is refused before its payload is read), the
//! hello is read without the connection's read buffer (allocated once the hello is
//! accepted), and it must come within `HELLO_TIMEOUT`. Every frame's payload is allocated
//! as its bytes arrive ([`wire`]), never at the length it announces.
//!
//! After the hello a connection may be idle between frames as long as it likes, but a frame
//! begun must be complete within `FRAME_READ_TIMEOUT_MS` (10 s), so a half-sent frame
//! cannot pin its bytes for as long as the connection lives; and one principal (one token,
//! or everyone without tokens) holds at most `client_connections_max` connections to the
//! node at once ([`PerPrincipal`]; default `CLIENT_CONNECTIONS_PER_PRINCIPAL_DEFAULT`),
//! one more refused at its hello, naming the bound.
//!
//! Versions: a hello of any version from `PROTOCOL_VERSION_MIN` to `PROTOCOL_VERSION` is
//! welcomed in that version, and the connection speaks it from then on; a request whose
//! answer that version could not decode is refused on it ([`refused_before_5`], and a
//! `PlaceTenant` below 7), a placement failure is told below 7 as a `BadRequest` in the
//! same words (`group_failure_for`), and the connection goes on. A hello of 7 may name the
//! group the connection speaks to (`HelloInGroup`); a group the node does not host is
//! refused before the welcome, naming the groups it hosts.
//!
//! Bad input — an oversized or corrupt frame, undecodable bytes, a wrong version, a request
//! before the hello — is answered with `ServerFrame::Error` naming the problem, and that
//! connection is closed; the node and every other connection go on.
//!
//! Security (G10, docs/security.md): the TLS handshake, if the port has one, comes before the hello. The
//! hello's token makes the connection's [`Principal`]; with tokens configured, a hello
//! without a known token is refused. Every request is checked against the principal's role
//! ([`authorize()`]) before it goes anywhere, and answered `Failure::Forbidden` if refused.
//! When the tokens are reloaded and the principal's token is gone, the connection closes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{BufReader, ReadHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, broadcast, mpsc};

use super::admin;
use super::backup_export;
use super::ctx::Ctx;
use super::edge;
use super::followed::{Followed, Opening};
use super::heartbeat;
use super::reader::answer;
use super::routing;
use crate::accept::accept_loop;
use crate::raft::{GroupId, NodeAddr};
use crate::security::{Principal, Tokens, authorize};
use crate::shutdown::Shutdown;
use weir_core::bounds::{
    FRAME_READ_TIMEOUT_MS, HELLO_FRAME_MAX, NODE_OUTBOX_FRAMES_MAX, READ_BUFFER_BYTES,
};
use weir_core::machine::{Applied, Effect, Event, Reply, SessionId};
use weir_proto::protocol::{
    CLIENT_FRAME_MAX, ClientFrame, Failure, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, Request,
    Response, ServerFrame, refused_before_5,
};
use weir_proto::task::AbortOnDrop;
use weir_proto::tls::Stream;
use weir_proto::wire::{self, WireError};

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests served at once on one connection, at most. Past this the connection's reader
/// stops reading (TCP pushes back on the client) until one finishes.
const IN_FLIGHT_MAX: usize = 4_096;
/// How long a closing connection's writer may take to flush what is queued (the closing
/// `Error` frame included) before it is dropped.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// Live connections per principal, and the bound on them.
pub struct PerPrincipal {
    max: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One counted connection of a principal; uncounted when dropped.
struct Counted {
    of: Arc<PerPrincipal>,
    id: String,
}

impl PerPrincipal {
    pub fn new(max: usize) -> Arc<PerPrincipal> {
        Arc::new(PerPrincipal {
            max,
            open: Mutex::default(),
        })
    }

    /// Counts a connection of `principal`, unless it holds `max` already.
    fn enter(self: &Arc<Self>, principal: &Principal) -> Result<Counted, String> {
        let mut open = crate::lock::lock(&self.open);
        let n = open.entry(principal.id.clone()).or_default();
        if *n >= self.max {
            return Err(format!(
                "this token (role {}) has {} connections open to this node, the bound \
                 (client_connections_max)",
                principal.role, self.max
            ));
        }
        *n += 1;
        Ok(Counted {
            of: self.clone(),
            id: principal.id.clone(),
        })
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut open = crate::lock::lock(&self.of.open);
        if let Some(n) = open.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.id);
            }
        }
    }
}

/// Serves client connections on `listener` until the node shuts down, at most
/// `per_principal_max` at once of one principal.
pub async fn serve_clients(
    listener: TcpListener,
    groups: Arc<GroupCtxs>,
    per_principal_max: usize,
    shutdown: Shutdown,
) {
    let counts = PerPrincipal::new(per_principal_max);
    accept_loop("client", listener, shutdown.watch(), move |stream| {
        connection(stream, groups.clone(), counts.clone())
    })
    .await
}

/// The context of every group the node hosts, by id, and the group a plain hello speaks
/// to (`node::client_group`).
pub struct GroupCtxs {
    pub by_group: BTreeMap<GroupId, Arc<Ctx>>,
    pub default: GroupId,
}

impl GroupCtxs {
    /// The context a hello naming `group` (or none) speaks to, or why there is none.
    fn speaking_to(&self, group: Option<u64>) -> Result<&Arc<Ctx>, String> {
        let id = match group {
            None => self.default,
            Some(g) => GroupId::try_from(g).unwrap_or(GroupId::MAX),
        };
        self.by_group.get(&id).ok_or_else(|| {
            let hosted: Vec<String> = self.by_group.keys().map(|g| g.to_string()).collect();
            format!(
                "group {} is not hosted by this node, which hosts groups {}",
                group.unwrap_or_default(),
                hosted.join(", ")
            )
        })
    }
}

async fn connection(
    tcp: TcpStream,
    groups: Arc<GroupCtxs>,
    counts: Arc<PerPrincipal>,
) -> Result<(), String> {
    let ctx = groups.speaking_to(None)?.clone();
    let _counted = crate::metrics::get().connection();
    let stream = ctx.acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (out, mut outbox) = mpsc::channel::<ServerFrame>(NODE_OUTBOX_FRAMES_MAX);
    // A slot per request being served. The writer gathers answers while two or more slots
    // are taken: the request whose answer woke it has usually given its slot back by then
    // (it drops it right after queueing the answer), so that is "others are still being
    // served", and a lone client's answers go out at once.
    let slots = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    let serving = slots.clone();
    let writer = tokio::spawn(async move {
        let more_coming = move || serving.available_permits() + 1 < IN_FLIGHT_MAX;
        let _ = wire::write_queued(
            &mut wr,
            &mut outbox,
            |f| matches!(f, ServerFrame::Error { .. }),
            Some(more_coming),
        )
        .await;
    });
    let result = serve(&mut rd, &out, &groups, &ctx, &counts, slots).await;
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

/// Serves one connection: its hello, then its requests until it closes or sends bad input.
async fn serve(
    rd: &mut ReadHalf<Stream>,
    out: &mpsc::Sender<ServerFrame>,
    groups: &GroupCtxs,
    ctx: &Arc<Ctx>,
    counts: &Arc<PerPrincipal>,
    slots: Arc<Semaphore>,
) -> Result<(), String> {
    // Every request of the connection is its hello's group's.
    let Some((principal, version, ctx, _counted)) = greet(rd, out, groups, ctx, counts).await?
    else {
        return Ok(());
    };
    let ctx = &ctx;
    // Buffered from here on: the buffer is memory an unauthenticated connection must not
    // cost. The hello was read exactly, so nothing after it is lost.
    let rd = &mut BufReader::with_capacity(READ_BUFFER_BYTES, rd);
    let mut revoked = std::pin::pin!(revocation(ctx.tokens.clone(), principal.clone()));
    let followed = Followed::default();
    let forwarder = tokio::spawn(forward_events(
        ctx.state.subscribe(),
        followed.clone(),
        out.clone(),
    ));
    // The forwarder ends with its connection.
    let _stop_forwarder = AbortOnDrop(forwarder);
    // Started by the client's `Heartbeats` frame; ends with its connection.
    let mut heartbeats: Option<AbortOnDrop> = None;
    loop {
        // Cancelling a half-read frame is harmless here: the connection is closing then.
        let read = tokio::select! {
            r = wire::read_frame_within::<_, ClientFrame>(
                rd,
                CLIENT_FRAME_MAX,
                Some(Duration::from_millis(FRAME_READ_TIMEOUT_MS)),
            ) => r,
            why = &mut revoked => return Err(why),
        };
        let (id, request) = match read {
            Ok(ClientFrame::Request { id, request }) => (id, request),
            Ok(ClientFrame::Hello { .. } | ClientFrame::HelloInGroup { .. }) => {
                return Err("a second hello".into());
            }
            Ok(ClientFrame::Heartbeats) => {
                if heartbeats.is_none() {
                    let beat = heartbeat::send_heartbeats(ctx.clone(), out.clone());
                    heartbeats = Some(AbortOnDrop(tokio::spawn(beat)));
                }
                continue;
            }
            Err(WireError::Closed) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        let admitted = match screen(ctx, &principal, version, &followed, request).await {
            Ok(admitted) => admitted,
            Err(failure) => {
                // Refused before it went anywhere: nothing proposed, the connection goes on.
                let response = Response::Failed(failure);
                if out
                    .send(ServerFrame::Response { id, response })
                    .await
                    .is_err()
                {
                    return Err("writer gone".into());
                }
                continue;
            }
        };
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        let ctx = ctx.clone();
        let out = out.clone();
        let followed = followed.clone();
        tokio::spawn(async move {
            let response = admitted.serve(&ctx, version, &followed).await;
            let _ = out.send(ServerFrame::Response { id, response }).await;
            drop(slot);
        });
    }
}

/// A request past every check of [`screen`], ready to be served.
struct Admitted {
    request: Request,
    /// The place held for the session an `OpenSession` opens.
    opening: Option<Opening>,
    /// The session a `CloseSession` closes.
    closing: Option<SessionId>,
}

impl Admitted {
    /// Serves the request and updates what the connection follows by its answer: the
    /// session an open made, or the one a close ended.
    async fn serve(self, ctx: &Ctx, version: u32, followed: &Followed) -> Response {
        let response = handle(ctx, version, self.request).await;
        if let Response::Written { reply, .. } = &response {
            match (reply, self.opening, self.closing) {
                (Reply::SessionOpened { session, .. }, Some(opening), _) => {
                    followed.opened(opening, *session)
                }
                (_, _, Some(closing)) => followed.unfollow(closing),
                _ => {}
            }
        }
        response
    }
}

/// Every check of a request before it is served, in order: what the connection's protocol
/// `version` can decode ([`refused_before_5`], and a placement below 7), the principal's
/// role ([`authorize()`]), the group its tenant lives in ([`routing::route`]), a write's
/// arguments, its session's owner and an open bound to its principal
/// ([`edge::screen_write`]), and the sessions followed ([`admit`]).
async fn screen(
    ctx: &Ctx,
    principal: &Principal,
    version: u32,
    followed: &Followed,
    request: Request,
) -> Result<Admitted, Failure> {
    if let Some(why) = refused_before_5(version, &request) {
        return Err(Failure::BadRequest(why));
    }
    authorize(&principal.role, &request).map_err(Failure::Forbidden)?;
    if let Request::Read(query) = &request {
        query.check_names().map_err(Failure::BadRequest)?;
    }
    if let Request::PlaceTenant { .. } = &request
        && version < 7
    {
        return Err(Failure::BadRequest(format!(
            "a placement needs client protocol 7; this connection speaks {version}"
        )));
    }
    routing::route(ctx, principal, version, &request).await?;
    let request = match request {
        Request::Write(command) => {
            Request::Write(edge::screen_write(&ctx.raft, &ctx.state, principal, command).await?)
        }
        other => other,
    };
    let opening = admit(followed, &request)?;
    let closing = match &request {
        Request::Write(command) => match command.effect() {
            Effect::Closes { session } => Some(session),
            _ => None,
        },
        _ => None,
    };
    Ok(Admitted {
        request,
        opening,
        closing,
    })
}

/// Resolves, with the reason, once a reload of the tokens has taken `principal`'s away.
async fn revocation(tokens: Arc<Tokens>, principal: Principal) -> String {
    let mut reloads = tokens.reloads();
    loop {
        if reloads.changed().await.is_err() {
            // The node is going away; its shutdown ends this connection.
            std::future::pending::<()>().await;
        }
        if !tokens.still_valid(&principal) {
            return format!("the token (role {}) was revoked", principal.role);
        }
    }
}

/// Reads the hello, authenticates its token, and answers `Welcome` with the version the
/// connection speaks from now on: the client's, from [`PROTOCOL_VERSION_MIN`] up to
/// [`PROTOCOL_VERSION`], counted among its principal's connections, and the context of the
/// group it names (`ctx`, the node's default, if none). A group the node does not host is
/// refused before the welcome. `Ok(None)`: the client closed before saying hello. An error
/// is the reason to close with.
async fn greet(
    rd: &mut ReadHalf<Stream>,
    out: &mpsc::Sender<ServerFrame>,
    groups: &GroupCtxs,
    ctx: &Arc<Ctx>,
    counts: &Arc<PerPrincipal>,
) -> Result<Option<(Principal, u32, Arc<Ctx>, Counted)>, String> {
    let hello = tokio::time::timeout(
        HELLO_TIMEOUT,
        wire::read_frame::<_, ClientFrame>(rd, HELLO_FRAME_MAX),
    )
    .await
    .map_err(|_| format!("no hello within {HELLO_TIMEOUT:?}"))?;
    let (principal, version, group) = match hello {
        Ok(ClientFrame::Hello { version, token })
            if (PROTOCOL_VERSION_MIN..=PROTOCOL_VERSION).contains(&version) =>
        {
            (ctx.tokens.authenticate(token.as_deref())?, version, None)
        }
        Ok(ClientFrame::HelloInGroup {
            version,
            token,
            group,
        }) if (7..=PROTOCOL_VERSION).contains(&version) => (
            ctx.tokens.authenticate(token.as_deref())?,
            version,
            Some(group),
        ),
        Ok(ClientFrame::HelloInGroup { version, .. }) if version < 7 => {
            return Err(format!(
                "a hello naming a group needs protocol 7, not {version}"
            ));
        }
        Ok(ClientFrame::Hello { version, .. } | ClientFrame::HelloInGroup { version, .. }) => {
            return Err(format!(
                "protocol version {version} is not supported (this node speaks \
                 {PROTOCOL_VERSION_MIN} to {PROTOCOL_VERSION})"
            ));
        }
        Ok(ClientFrame::Request { .. } | ClientFrame::Heartbeats) => {
            return Err("request before hello".into());
        }
        Err(WireError::Closed) => return Ok(None),
        Err(WireError::TooLarge { declared, max }) => {
            return Err(format!(
                "a first frame of {declared} bytes is above the bound of {max} before the \
                 hello: send the hello first"
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let ctx = match group {
        None => ctx.clone(),
        Some(_) => groups.speaking_to(group)?.clone(),
    };
    let counted = counts.enter(&principal)?;
    out.send(ServerFrame::Welcome {
        version,
        node: ctx.id,
    })
    .await
    .map_err(|_| "writer gone".to_string())?;
    Ok(Some((principal, version, ctx, counted)))
}

/// The session a write screened by the edge makes this connection follow (followed from
/// now on, whether or not the write is then served). `Some` holds a place for the session
/// an open opens.
fn admit(
    followed: &Followed,
    request: &Request,
) -> Result<Option<Opening>, weir_proto::protocol::Failure> {
    let Request::Write(command) = request else {
        return Ok(None);
    };
    if let Some(session) = command.session() {
        followed.follow(session)?;
    }
    match command.effect() {
        Effect::Opens { .. } => followed.begin_open().map(Some),
        _ => Ok(None),
    }
}

/// Sends the connection every event for the sessions it follows.
pub(super) async fn forward_events(
    mut applied: broadcast::Receiver<Arc<Applied>>,
    followed: Followed,
    out: mpsc::Sender<ServerFrame>,
) {
    use broadcast::error::RecvError;
    loop {
        let entry = match applied.recv().await {
            Ok(e) => e,
            // Missed some: their grants are state, and the client learns them by asking
            // again, so tell it to. Waiting for room in the outbox: this frame must not be
            // lost the way the events were.
            Err(RecvError::Lagged(n)) => {
                crate::metrics::get().pushes_dropped.inc_by(n);
                tracing::warn!("a client connection missed the events of {n} entries; resync");
                let resync = ServerFrame::Resync { missed_entries: n };
                if out.send(resync).await.is_err() {
                    return;
                }
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let mine: Vec<_> = followed.with(|followed| {
            entry
                .events
                .iter()
                .filter(|e| followed.contains(&e.session()))
                .cloned()
                .collect()
        });
        for event in mine {
            // An expired session is followed no more; its last event still goes out.
            if let Event::SessionExpired { session } = &event {
                followed.unfollow(*session);
            }
            if out.send(ServerFrame::Event(event)).await.is_err() {
                return;
            }
        }
    }
}

/// Serves one request: writes through the proposer, linearizable reads through the reader,
/// the rest here or in [`super::admin`].
///
/// Each request runs in a task of its own, and spawning and finishing a task copies its
/// future: the rare administrative arms (whose openraft futures are large) are boxed so
/// that every write's and read's task stays the size of the proposer's future.
async fn handle(ctx: &Ctx, version: u32, request: Request) -> Response {
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
        Request::Status => Response::Status(Box::pin(admin::status(ctx)).await),
        Request::AddNode { .. } | Request::RemoveNode { .. } | Request::BackupBegin
            if ctx.groups > 1 =>
        {
            Response::Failed(admin::one_group_only(ctx.groups))
        }
        Request::AddNode { id, peer, client } => {
            let members = ctx
                .raft
                .metrics()
                .borrow()
                .membership_config
                .nodes()
                .count();
            if let Err(f) = edge::check_add_node(&peer, &client, members) {
                return Response::Failed(f);
            }
            Box::pin(admin::add_node(ctx, id, NodeAddr { peer, client })).await
        }
        Request::RemoveNode { id } => Box::pin(admin::remove_node(ctx, id)).await,
        Request::SnapshotCost => Box::pin(admin::snapshot_cost(ctx)).await,
        Request::BackupBegin => Box::pin(backup_export::begin(ctx)).await,
        Request::BackupChunk { index, offset } => backup_export::chunk(ctx, index, offset),
        Request::PlaceTenant { tenant, group } => {
            Box::pin(routing::place_tenant(ctx, version, tenant, group)).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::machine::{Applied, Event};

    #[tokio::test]
    async fn a_lagging_forwarder_tells_its_client_to_resync() {
        // The event feed holds 2 entries; 5 are applied before the forwarder reads any.
        let (feed, applied) = broadcast::channel(2);
        let followed = Followed::default();
        followed.follow(7).unwrap();
        let (out, mut outbox) = mpsc::channel(16);
        for _ in 0..5 {
            let entry = Applied {
                log_ms: 0,
                replies: vec![],
                events: vec![Event::SessionExpired { session: 7 }],
            };
            feed.send(Arc::new(entry)).unwrap();
        }
        let _forwarder = AbortOnDrop(tokio::spawn(forward_events(applied, followed, out)));
        let first = tokio::time::timeout(Duration::from_secs(5), outbox.recv())
            .await
            .expect("a frame")
            .expect("open");
        assert_eq!(first, ServerFrame::Resync { missed_entries: 3 });
    }
}
