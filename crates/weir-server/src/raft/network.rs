//! The peer transport: Raft RPCs over TCP, one request and one response per frame
//! ([`weir_proto::wire`]), on pooled connections.
//!
//! The client side ([`PeerNetwork`]) keeps idle connections per target and reuses them:
//! openraft asks for a client on every heartbeat and every linearizable read, so dialing per
//! call would cost a handshake each time. Every call is bounded by openraft's deadline for
//! it; a connection that failed or timed out is dropped, never returned to the pool.
//!
//! A pooled connection can die while it sits idle: a follower's connections to the other
//! follower are used only in elections, and that peer may have been killed and restarted
//! since. A call whose pooled connection fails (a write or read error, not its deadline)
//! drops every idle connection to that peer (they share its fate) and is made once more on
//! a newly dialed one, inside the same deadline. Raft's RPCs may be repeated: a vote
//! request or an AppendEntries that arrives twice is answered from the state the first
//! left, and a snapshot chunk that arrives twice is refused as out of place, after which
//! openraft sends the snapshot again from its start (as it does after any network error).
//! Without the retry the call is lost: openraft asks each voter once per election, so one
//! dead pooled connection cost a failover a second election round (seen in a kept
//! `--failover` run, in `docs/benchmarks.md`, "Failover").
//!
//! A new connection is dialed (TCP connect and TLS handshake) in a task of its own, bounded
//! by [`DIAL_TIMEOUT`] rather than by the call's deadline, at most one per peer at a time:
//! a heartbeat's deadline (100 ms) can be shorter than a handshake on a loaded node or over
//! a long round trip, and a handshake cancelled with its call would start over with the
//! next, none ever finishing (seen in the partition harness with TLS on: after a heal, no
//! peer could reconnect and no leader was elected). A dial that finishes after its call
//! gave up goes to the pool for the next call.
//!
//! With TLS configured both sides are mutual TLS ([`crate::security::tls`]): a connection
//! whose certificate does not chain to the cluster CA fails its handshake, before any frame,
//! so no vote, AppendEntries or snapshot from outside the cluster reaches Raft.
//!
//! Every connection then opens with a hello ([`PeerHello`]): the dialer's peer protocol
//! version ([`PEER_PROTOCOL_VERSION`]), node id and cluster identity
//! ([`super::cluster_identity`]), then its address ([`PeerAnnounce`], below); the listener
//! answers [`PeerWelcome::Welcome`] only when both are its own (a node without an identity
//! adopts the dialer's) and the address is the one it knows for that id, else
//! [`PeerWelcome::Refused`] naming both versions, identities or addresses, and closes. A first
//! frame that is not a hello (garbage, or a node of peer protocol 1) gets no answer: the
//! connection is closed and the reason, naming both versions, logged. So a node
//! of the cluster a backup was taken from can neither vote in nor append to the cluster
//! restored from it, even with certificates from the same CA.
//!
//! # One node id, one process
//!
//! A data directory carries a node's id, its vote and its log; a copy of it (a VM clone, a
//! copied volume, a restore beside a running original) started elsewhere would be a second
//! voter with the same id: it campaigns in the terms its copy of the vote allows, and a
//! higher term from it deposes the leader while the real node sits as a candidate. A
//! random instance key drawn at first start would not tell them apart (the copy has the
//! same file), and a key drawn at every start could not tell a copy from a restart. What
//! does tell them apart is where they are: the membership, agreed through the log, lists
//! each member's peer address, and the other members reach the real node there.
//!
//! So after its hello the dialer announces its own `peer_addr` ([`PeerAnnounce`]), and the
//! listener accepts a member's id only from the address its membership lists for it
//! ([`known_at`]); a process that names a member's id at another address is refused at
//! the hello (the refusal names both addresses, logged on both sides). Nothing of it
//! reaches Raft: none of its votes is counted, none of its terms is seen, and the real
//! node, which nobody dialed at the copy's address, is not disturbed. A restart on the same
//! data directory and config announces the same address and is welcomed; a cluster
//! restored from a backup keeps the members' addresses from the backup's membership, and
//! its nodes announce them; a node not (yet) in the listener's membership, a member being
//! added, is not judged by address. What this does not catch: a copy started with the
//! original's very address (on another host behind the same name), which the network
//! itself cannot route to both; and a member that moves must be removed and added again
//! at its new address, as before.
//!
//! Refusals are logged at WARN at most once per [`REFUSAL_LOG_EVERY`] each, with a count:
//! a refused peer (a copy, or a node of another cluster) dials again on every heartbeat.
//!
//! # Groups
//!
//! A node process may host several Raft groups on its one peer port. Every request names
//! its group ([`PeerFrame`]); each group's Raft has its own [`PeerNetwork`]
//! ([`PeerNetwork::for_group`]), and all of them share one pool of connections per peer
//! node, one dial at a time per peer, and one record of peer health: a connection carries
//! frames of any group, one exchange at a time. A node of one group hosts group
//! [`super::SOLE_GROUP`].
//!
//! The server side ([`serve_peers`]) reads a frame, hands its request to the Raft of the
//! group it names ([`answer`], which also tells that group's [`super::stand_in`] what it
//! saw), and writes the answer ([`PeerAnswer::Answered`]). A frame for a group this node
//! does not host is answered [`PeerAnswer::NoSuchGroup`], naming the groups it hosts
//! (logged like a refusal), and the connection serves on: the caller's RPC fails with that
//! reason. Garbage, an oversized length or a bad checksum closes that connection with a
//! logged reason and touches nothing else.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};

use super::cluster_identity::{ClusterId, ClusterIdentity};
use super::peer_health::PeerHealth;
use super::stand_in::StandIn;
use super::{GroupId, NodeAddr, NodeId, Raft, TypeConfig};
use crate::accept::accept_loop;
use crate::security::Acceptor;
use crate::shutdown::Shutdown;
use weir_proto::tls::{Connector, Stream};
use weir_proto::wire::{self, WireError};

/// Largest peer frame, in bytes: see [`weir_core::bounds::PEER_FRAME_MAX`], whose doc says why
/// every AppendEntries and snapshot chunk fits.
pub use weir_core::bounds::PEER_FRAME_MAX;

/// Idle connections kept per peer.
const POOL_IDLE_MAX: usize = 8;

/// Longest a dial (TCP connect and TLS handshake) may take, whatever its call's deadline.
/// A dial stuck in a silent partition holds up the calls to that peer after the heal for
/// at most this long, so it is short: the client's own bound for its handshake and welcome
/// ([`weir_client::SILENCE_MAX`]), far above a handshake's few milliseconds on a quiet machine.
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);

/// The peer protocol's version. 1: no hello, a connection's first frame is a request.
/// 2: every connection opens with a [`PeerHello`] answered by a [`PeerWelcome`].
/// 3: the frames are those of 2, but the log they carry may hold `Command::KeepAliveAcked`,
/// and the machine remembers a waiting request refused at once and forgets finished
/// tickets below a session's acknowledged mark: a node of 2 could not decode such a log,
/// or would decide its re-asked tickets otherwise.
/// 4: the hello is followed by a [`PeerAnnounce`], the dialer's own peer address, which
/// the listener holds against the address its membership knows for the dialer's id; and
/// the machine refuses a name or key with a control, bidirectional or zero-width
/// character (`weir_core::machine::name_rule`), which 3 applied.
/// 5: the frames of 4, but the log may hold `ReturnTokens`, `DefineOverride` and
/// `LeaseTokens` (tokens given back, Envoy's overrides, token leases), and the machine's
/// buckets refill at the rate not leased out.
/// 6: every request names the Raft group it is for ([`PeerFrame`]) and every answer is a
/// [`PeerAnswer`]: a node hosts several groups on one peer port.
/// 7: the frames of 6, but the log may hold `PlaceTenant` (the metadata group's
/// placements), and a node of several groups decides a tenant only in the group it is
/// placed in.
///
/// The version stands for what the nodes of one cluster must share: the frames, and what
/// an entry of the log means (the commands it may hold and how the machine decides them).
/// It is raised with either, so that nodes that would apply one log differently refuse
/// each other at the hello (naming both versions) instead of diverging.
pub const PEER_PROTOCOL_VERSION: u32 = 7;

/// The first four bytes of every hello: a frame of peer protocol 1 (a [`PeerRequest`])
/// never decodes with them, so a node of that version is told apart from damage.
pub const PEER_HELLO_MAGIC: [u8; 4] = *b"WPHI";

/// Longest a listener waits for a connection's hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The first frame the dialer sends on a peer connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerHello {
    /// [`PEER_HELLO_MAGIC`].
    pub magic: [u8; 4],
    /// The dialer's [`PEER_PROTOCOL_VERSION`].
    pub version: u32,
    /// The dialer's node id.
    pub from: NodeId,
    /// The dialer's cluster identity.
    pub cluster: [u8; 16],
}

/// The second frame the dialer sends, right after its [`PeerHello`] (peer protocol 4 on):
/// the address its peers reach it at (its `peer_addr`, as the membership lists it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerAnnounce {
    pub peer_addr: String,
}

/// Largest [`PeerAnnounce`] frame, in bytes: an address of at most
/// [`weir_core::bounds::ADDR_BYTES_MAX`] bytes and its length.
const ANNOUNCE_FRAME_MAX: u32 = 1024;

/// The same refusal is logged at most once in this long (with how many were not): a
/// refused peer dials again on every heartbeat and election, hundreds of times a second.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// The listener's answer to a [`PeerHello`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerWelcome {
    /// Same version, same cluster: requests may follow.
    Welcome { version: u32, cluster: [u8; 16] },
    /// Another version or another cluster; the listener closes the connection.
    Refused { reason: String },
}

/// A Raft RPC.
#[derive(Serialize, Deserialize)]
pub enum PeerRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
}

/// The answer to a [`PeerRequest`], of the same kind.
#[derive(Serialize, Deserialize)]
pub enum PeerResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
}

/// A request as it crosses the peer port (peer protocol 6 on): the group whose Raft is to
/// answer it, and the RPC.
#[derive(Serialize, Deserialize)]
pub struct PeerFrame {
    pub group: GroupId,
    pub request: PeerRequest,
}

/// [`PeerFrame`] as the dialer writes it, borrowing the request (a call whose pooled
/// connection died sends it again): the same bytes.
#[derive(Serialize)]
struct PeerFrameRef<'a> {
    group: GroupId,
    request: &'a PeerRequest,
}

/// The answer to a [`PeerFrame`], as it crosses the peer port.
#[derive(Serialize, Deserialize)]
pub enum PeerAnswer {
    /// The group's Raft answered (boxed: an answer is far larger than a refusal; the bytes
    /// on the wire are the response's own).
    Answered(Box<PeerResponse>),
    /// This node hosts no group `group`; `hosted` are those it does. The connection stays
    /// open: a later frame may name a hosted group.
    NoSuchGroup {
        group: GroupId,
        hosted: Vec<GroupId>,
    },
}

/// A pooled connection, buffered for reading (requests and responses alternate, so the
/// buffer is empty whenever the connection is idle).
type Pooled = tokio::io::BufReader<Stream>;

type Pools = Arc<Mutex<BTreeMap<NodeId, Vec<Pooled>>>>;

/// Per peer, held while a dial to it is under way: one dial at a time, and calls that
/// need a connection meanwhile wait for it (within their deadlines) instead of failing
/// at once, which openraft would retry at once, in a busy loop.
type Dialing = Arc<Mutex<BTreeMap<NodeId, Arc<tokio::sync::Mutex<()>>>>>;

/// The client side of one group: hands openraft a [`PeerClient`] per target, sharing the
/// pools with every other group of the node ([`PeerNetwork::for_group`]).
#[derive(Clone)]
pub struct PeerNetwork {
    /// The group whose Raft this network carries; every frame names it.
    group: GroupId,
    pools: Pools,
    dialing: Dialing,
    /// Local address outgoing connections are bound to, if configured.
    source_ip: Option<std::net::IpAddr>,
    /// Mutual TLS to peers, or plaintext.
    connector: Connector,
    /// Who this node is, for the hello: its id and its cluster.
    me: Arc<Me>,
    /// Which peers answer, logged once per change ([`super::peer_health`]).
    health: PeerHealth,
}

/// What a dialer's hello says about it.
pub struct Me {
    pub id: NodeId,
    pub identity: Arc<ClusterIdentity>,
    /// This node's `peer_addr`, announced after every hello.
    pub peer_addr: String,
}

impl PeerNetwork {
    pub fn new(
        source_ip: Option<std::net::IpAddr>,
        connector: Connector,
        me: Arc<Me>,
    ) -> PeerNetwork {
        PeerNetwork {
            group: super::SOLE_GROUP,
            pools: Pools::default(),
            dialing: Dialing::default(),
            source_ip,
            connector,
            me,
            health: PeerHealth::default(),
        }
    }

    /// The network of `group`: its frames name that group, and its calls share this
    /// network's connections, dials and peer health (one pool per peer node, whatever the
    /// group).
    pub fn for_group(&self, group: GroupId) -> PeerNetwork {
        PeerNetwork {
            group,
            ..self.clone()
        }
    }
}

/// Calls to one peer.
#[derive(Clone)]
pub struct PeerClient {
    group: GroupId,
    target: NodeId,
    addr: String,
    pools: Pools,
    dialing: Dialing,
    source_ip: Option<std::net::IpAddr>,
    connector: Connector,
    me: Arc<Me>,
    health: PeerHealth,
}

/// How a call failed, before openraft's error types are chosen.
enum CallError {
    /// Could not connect: openraft backs off before retrying.
    Unreachable(std::io::Error),
    /// Connected, but the exchange failed or took too long.
    Network(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(io) => io.fmt(f),
            CallError::Network(why) => f.write_str(why),
        }
    }
}

#[derive(Debug)]
struct Reason(String);

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Reason {}

impl PeerClient {
    /// Dials the peer, from the configured source address if there is one.
    async fn connect(&self) -> std::io::Result<TcpStream> {
        let Some(ip) = self.source_ip else {
            return TcpStream::connect(&self.addr).await;
        };
        let target = tokio::net::lookup_host(&self.addr)
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{} resolves to nothing", self.addr)))?;
        let socket = if ip.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.bind(std::net::SocketAddr::new(ip, 0))?;
        socket.connect(target).await
    }

    fn idle(&self) -> Option<Pooled> {
        crate::lock::lock(&self.pools).get_mut(&self.target)?.pop()
    }

    /// A new connection, dialed in a task of its own (see the module doc): waits for it
    /// until the caller's deadline drops this future; the task pools a connection that
    /// arrives later. While another dial to this peer is under way, waits for that one
    /// first, and takes its connection if it went to the pool.
    async fn dial(&self) -> Result<Pooled, CallError> {
        let lock = crate::lock::lock(&self.dialing)
            .entry(self.target)
            .or_default()
            .clone();
        let dialing = lock.lock_owned().await;
        if let Some(c) = self.idle() {
            return Ok(c);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            let dialed = match tokio::time::timeout(DIAL_TIMEOUT, me.dial_now()).await {
                Ok(d) => d,
                Err(_) => Err(CallError::Network(format!(
                    "no connection to node {} within {DIAL_TIMEOUT:?}",
                    me.target
                ))),
            };
            if let Err(Ok(conn)) = tx.send(dialed) {
                // Its call gave up waiting: the next call gets it.
                me.give_back(conn);
            }
            // Released only now, so a call that waited finds the connection pooled.
            drop(dialing);
        });
        rx.await.unwrap_or_else(|_| {
            Err(CallError::Network(format!(
                "the dial to node {} ended without a result",
                self.target
            )))
        })
    }

    /// TCP connect, handshake and hello.
    async fn dial_now(&self) -> Result<Pooled, CallError> {
        let c = self.connect().await.map_err(CallError::Unreachable)?;
        c.set_nodelay(true)
            .map_err(|e| CallError::Network(e.to_string()))?;
        let c = self
            .connector
            .connect(c, &self.addr)
            .await
            .map_err(|e| CallError::Network(e.to_string()))?;
        let mut conn = tokio::io::BufReader::with_capacity(256 * 1024, c);
        self.hello(&mut conn).await?;
        Ok(conn)
    }

    /// Says hello on a new connection and reads the welcome; a refusal is logged as a
    /// warning (it names both versions or both identities) and fails the call.
    async fn hello(&self, conn: &mut Pooled) -> Result<(), CallError> {
        let Some(cluster) = self.me.identity.get() else {
            return Err(CallError::Network(
                "this node has no cluster identity yet: it speaks to peers only once \
                 it has founded, joined or been restored into a cluster"
                    .into(),
            ));
        };
        let hello = PeerHello {
            magic: PEER_HELLO_MAGIC,
            version: PEER_PROTOCOL_VERSION,
            from: self.me.id,
            cluster: cluster.0,
        };
        let network = |e: WireError| CallError::Network(e.to_string());
        wire::write_frame(conn.get_mut(), &hello)
            .await
            .map_err(network)?;
        let announce = PeerAnnounce {
            peer_addr: self.me.peer_addr.clone(),
        };
        wire::write_frame(conn.get_mut(), &announce)
            .await
            .map_err(network)?;
        match wire::read_frame(conn, PEER_FRAME_MAX)
            .await
            .map_err(network)?
        {
            PeerWelcome::Welcome { .. } => Ok(()),
            PeerWelcome::Refused { reason } => {
                let why = format!(
                    "node {} at {} refused this node: {reason}",
                    self.target, self.addr
                );
                log_refusal(&why);
                crate::lock::lock(&REFUSED_BY).insert(self.addr.clone(), reason);
                // As unreachable: openraft backs off before it dials again, rather than
                // retrying (and logging) at once, thousands of times a second.
                Err(CallError::Unreachable(std::io::Error::other(why)))
            }
        }
    }

    /// Drops every idle connection to this peer. Connections pooled after this are newer
    /// than the failure that called for it.
    fn forget_idle(&self) {
        crate::lock::lock(&self.pools).remove(&self.target);
    }

    fn give_back(&self, conn: Pooled) {
        let mut pools = crate::lock::lock(&self.pools);
        let pool = pools.entry(self.target).or_default();
        if pool.len() < POOL_IDLE_MAX {
            pool.push(conn);
        }
    }

    async fn call(&self, request: PeerRequest, ttl: Duration) -> Result<PeerResponse, CallError> {
        let exchange = async {
            if let Some(conn) = self.idle() {
                match self.exchange(conn, &request).await {
                    Ok(done) => return Ok(done),
                    // The connection may have died while it sat in the pool (the peer
                    // restarted since), and so then did every other idle one to that
                    // peer: they go, and the call is made once more on a new one.
                    Err(e) => {
                        tracing::debug!(
                            target = self.target,
                            "a pooled connection failed ({e}); dialing a new one"
                        );
                        self.forget_idle();
                    }
                }
            }
            let conn = self.dial().await?;
            self.exchange(conn, &request).await
        };
        match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok((conn, response))) => {
                self.give_back(conn);
                Ok(response)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(CallError::Network(format!(
                "no answer from node {} within {ttl:?}",
                self.target
            ))),
        }
    }

    /// Writes `request` on `conn` and reads its response.
    async fn exchange(
        &self,
        mut conn: Pooled,
        request: &PeerRequest,
    ) -> Result<(Pooled, PeerResponse), CallError> {
        let frame = PeerFrameRef {
            group: self.group,
            request,
        };
        wire::write_frame(conn.get_mut(), &frame)
            .await
            .map_err(|e| CallError::Network(e.to_string()))?;
        let answer: PeerAnswer = wire::read_frame(&mut conn, PEER_FRAME_MAX)
            .await
            .map_err(|e| CallError::Network(e.to_string()))?;
        match answer {
            PeerAnswer::Answered(response) => Ok((conn, *response)),
            // The connection stays good for other groups: pooled again, the call failed.
            PeerAnswer::NoSuchGroup { group, hosted } => {
                self.give_back(conn);
                Err(CallError::Network(no_such_group(
                    self.target,
                    group,
                    &hosted,
                )))
            }
        }
    }

    fn rpc_error<E: std::error::Error>(&self, e: CallError) -> RPCError<NodeId, NodeAddr, E> {
        match e {
            CallError::Unreachable(io) => RPCError::Unreachable(Unreachable::new(&io)),
            CallError::Network(why) => RPCError::Network(NetworkError::new(&Reason(why))),
        }
    }

    fn mismatch<E: std::error::Error>(&self) -> RPCError<NodeId, NodeAddr, E> {
        RPCError::Network(NetworkError::new(&Reason(format!(
            "node {} answered with the wrong kind of response",
            self.target
        ))))
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> PeerClient {
        PeerClient {
            group: self.group,
            target,
            addr: node.peer.clone(),
            pools: self.pools.clone(),
            dialing: self.dialing.clone(),
            source_ip: self.source_ip,
            connector: self.connector.clone(),
            me: self.me.clone(),
            health: self.health.clone(),
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        self.rpc(PeerRequest::AppendEntries(rpc), option, |r| match r {
            PeerResponse::AppendEntries(r) => Some(r),
            _ => None,
        })
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddr, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let (done, vote, id) = (rpc.done, rpc.vote, rpc.meta.snapshot_id.clone());
        let answer = self
            .rpc(PeerRequest::InstallSnapshot(rpc), option, |r| match r {
                PeerResponse::InstallSnapshot(r) => Some(r),
                _ => None,
            })
            .await;
        // The last chunk, answered under the sender's own vote: the follower installed it
        // (a higher vote in the answer is a refusal).
        if done && answer.as_ref().is_ok_and(|r| r.vote == vote) {
            tracing::info!("{SNAPSHOT_SENT} to node {}: {id}", self.target);
        }
        answer
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        self.rpc(PeerRequest::Vote(rpc), option, |r| match r {
            PeerResponse::Vote(r) => Some(r),
            _ => None,
        })
        .await
    }
}

impl PeerClient {
    /// Sends `request` within `option`'s deadline and takes the answer `expect` picks out of
    /// the response (`None`: the wrong kind), with every error as openraft's.
    async fn rpc<R, E: std::error::Error>(
        &mut self,
        request: PeerRequest,
        option: RPCOption,
        expect: fn(PeerResponse) -> Option<Result<R, E>>,
    ) -> Result<R, RPCError<NodeId, NodeAddr, E>> {
        let answer = self.call(request, option.hard_ttl()).await;
        match &answer {
            Ok(_) => self.health.answered(self.target),
            Err(e) => {
                let refused = matches!(e, CallError::Unreachable(io)
                    if io.kind() == std::io::ErrorKind::ConnectionRefused);
                self.health.failed(self.target, e, refused);
            }
        }
        match answer {
            Ok(response) => match expect(response) {
                Some(answer) => answer.map_err(|e| RemoteError::new(self.target, e).into()),
                None => Err(self.mismatch()),
            },
            Err(e) => Err(self.rpc_error(e)),
        }
    }
}

/// Logged by a leader when a follower took the last chunk of a snapshot, then the
/// follower and the snapshot's id (read by the partition harness).
pub const SNAPSHOT_SENT: &str = "snapshot sent";

/// Why node `target` did not answer a frame for `group`: it hosts only `hosted`.
fn no_such_group(target: NodeId, group: GroupId, hosted: &[GroupId]) -> String {
    format!("node {target} hosts no Raft group {group} (it hosts groups {hosted:?})")
}

/// One group as the peer port reaches it.
#[derive(Clone)]
pub struct PeerGroup {
    pub raft: Raft,
    pub stand_in: Arc<StandIn>,
}

/// What the peer port's connections share.
#[derive(Clone)]
pub struct PeerServer {
    pub acceptor: Acceptor,
    /// Every group this node hosts, by id; a frame is answered by its group's Raft. Not
    /// empty: the lowest group's membership judges a dialer's address ([`known_at`]), the
    /// same in every group while every node is a voter of every group.
    pub groups: Arc<BTreeMap<GroupId, PeerGroup>>,
    pub identity: Arc<ClusterIdentity>,
}

/// Serves Raft RPCs from peers on `listener` until the node shuts down; each connection
/// first passes the acceptor's handshake (mutual TLS, or none), then the hello.
pub async fn serve_peers(listener: TcpListener, server: PeerServer, shutdown: Shutdown) {
    accept_loop("peer", listener, shutdown.watch(), move |stream| {
        peer_connection(stream, server.clone())
    })
    .await
}

async fn peer_connection(tcp: TcpStream, server: PeerServer) -> Result<(), WireError> {
    let PeerServer {
        acceptor,
        groups,
        identity,
    } = server;
    let Some(lowest) = groups.values().next() else {
        return Err(WireError::Decode("this node hosts no Raft group".into()));
    };
    let stream = acceptor.accept(tcp).await?;
    let mut stream = tokio::io::BufReader::with_capacity(256 * 1024, stream);
    let hello: Result<PeerHello, WireError> =
        tokio::time::timeout(HELLO_TIMEOUT, wire::read_frame(&mut stream, PEER_FRAME_MAX))
            .await
            .map_err(|_| WireError::Decode(format!("no peer hello within {HELLO_TIMEOUT:?}")))?;
    // Only a hello is answered: a first frame that is not one (garbage, or a node of peer
    // protocol 1, which could not read the answer) is refused by closing, with the reason
    // logged here.
    let hello = match hello {
        Err(WireError::Closed) => return Ok(()),
        // A frame that is damage (too long, a bad checksum) is refused as any other.
        Err(e) if !matches!(e, WireError::Decode(_)) => return Err(e),
        h => h,
    };
    let is_hello = matches!(&hello, Ok(h) if h.magic == PEER_HELLO_MAGIC);
    let from = hello.as_ref().map(|h| h.from).ok();
    let mut welcome = welcome(hello, &identity);
    if let (PeerWelcome::Welcome { .. }, Some(from)) = (&welcome, from) {
        // A hello of this version is followed by the dialer's address.
        let announce: PeerAnnounce = tokio::time::timeout(
            HELLO_TIMEOUT,
            wire::read_frame(&mut stream, ANNOUNCE_FRAME_MAX),
        )
        .await
        .map_err(|_| WireError::Decode(format!("no peer address within {HELLO_TIMEOUT:?}")))??;
        if let Err(reason) = known_at(&lowest.raft, from, &announce.peer_addr) {
            welcome = PeerWelcome::Refused { reason };
        }
    }
    if is_hello {
        wire::write_frame(stream.get_mut(), &welcome).await?;
    }
    if let PeerWelcome::Refused { reason } = welcome {
        log_refusal(&format!("refused a peer: {reason}"));
        return Err(WireError::Decode(reason));
    }
    loop {
        let frame: PeerFrame = match wire::read_frame(&mut stream, PEER_FRAME_MAX).await {
            Ok(r) => r,
            Err(WireError::Closed) => return Ok(()),
            Err(e) => return Err(e),
        };
        let reply = match groups.get(&frame.group) {
            Some(g) => {
                PeerAnswer::Answered(Box::new(answer(&g.raft, &g.stand_in, frame.request).await))
            }
            None => {
                let hosted: Vec<GroupId> = groups.keys().copied().collect();
                log_refusal(&format!(
                    "a peer asked for Raft group {}, which this node does not host (it \
                     hosts groups {hosted:?}): answered so",
                    frame.group
                ));
                PeerAnswer::NoSuchGroup {
                    group: frame.group,
                    hosted,
                }
            }
        };
        wire::write_frame(stream.get_mut(), &reply).await?;
    }
}

/// Whether node `from`, announcing `peer_addr`, is where this node's membership knows it:
/// a member is accepted only from its own address, so a second process with its id (a
/// copy of its data directory started elsewhere) is refused and the member is untouched.
/// A node the membership does not list is not judged here.
pub fn known_at(raft: &Raft, from: NodeId, peer_addr: &str) -> Result<(), String> {
    let known = raft
        .metrics()
        .borrow()
        .membership_config
        .nodes()
        .find(|(id, _)| **id == from)
        .map(|(_, n)| n.peer.clone());
    match known {
        Some(known) if known != peer_addr => Err(format!(
            "a process at {peer_addr} says it is node {from}, but this cluster knows node \
             {from} at {known}: refused, so that one node id is one voter (a copy of node \
             {from}'s data directory started elsewhere?)"
        )),
        _ => Ok(()),
    }
}

/// The last refusal each peer address answered this node's hello with (a node of another
/// cluster, of another version, or one that knows this node elsewhere): what
/// `cluster add` names when the node it adds never catches up. One entry per address
/// dialed, so it stays as small as the membership and the addresses tried.
static REFUSED_BY: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// Why the peer at `addr` last refused this node's hello, if it did.
pub fn refused_by(addr: &str) -> Option<String> {
    crate::lock::lock(&REFUSED_BY).get(addr).cloned()
}

/// Logs a refusal at WARN, each distinct one at most once per [`REFUSAL_LOG_EVERY`], with
/// how many times it was seen since (a refused peer dials again and again).
fn log_refusal(reason: &str) {
    static SEEN: Mutex<BTreeMap<String, (std::time::Instant, u64)>> = Mutex::new(BTreeMap::new());
    let now = std::time::Instant::now();
    let mut seen = crate::lock::lock(&SEEN);
    // Distinct refusals are few (one per refused peer); the map is cleared if it grows.
    if seen.len() >= 64 && !seen.contains_key(reason) {
        seen.clear();
    }
    match seen.get_mut(reason) {
        Some((last, more)) if now.duration_since(*last) < REFUSAL_LOG_EVERY => *more += 1,
        Some((last, more)) => {
            tracing::warn!("{reason} ({} more times in {REFUSAL_LOG_EVERY:?})", *more);
            *last = now;
            *more = 0;
        }
        None => {
            tracing::warn!("{reason}");
            seen.insert(reason.to_owned(), (now, 0));
        }
    }
}

/// The answer to a connection's first frame: welcome only a hello of this version from a
/// node of this node's cluster (adopting it when this node has none).
pub fn welcome(hello: Result<PeerHello, WireError>, identity: &ClusterIdentity) -> PeerWelcome {
    let refused = |reason: String| PeerWelcome::Refused { reason };
    let hello = match hello {
        Ok(h) if h.magic == PEER_HELLO_MAGIC => h,
        Ok(_) | Err(WireError::Decode(_)) => {
            return refused(format!(
                "the first frame is not a peer hello: a node of peer protocol version 1 \
                 (which sends none)? this node speaks peer protocol version \
                 {PEER_PROTOCOL_VERSION}"
            ));
        }
        Err(e) => return refused(format!("no peer hello: {e}")),
    };
    if hello.version != PEER_PROTOCOL_VERSION {
        return refused(format!(
            "node {} speaks peer protocol version {}; this node speaks version \
             {PEER_PROTOCOL_VERSION}",
            hello.from, hello.version
        ));
    }
    match identity.admit(ClusterId(hello.cluster), hello.from) {
        Ok(own) => PeerWelcome::Welcome {
            version: PEER_PROTOCOL_VERSION,
            cluster: own.0,
        },
        Err(reason) => refused(reason),
    }
}

/// Hands a peer's `request` to the local Raft and returns its answer, telling `stand_in`
/// what it needs to know: a leader's AppendEntries or snapshot chunk accepted, a vote
/// answered.
pub async fn answer(raft: &Raft, stand_in: &Arc<StandIn>, request: PeerRequest) -> PeerResponse {
    match request {
        PeerRequest::AppendEntries(rpc) => {
            let result = raft.append_entries(rpc).await;
            // Success or a log conflict: either way the sender leads this node's term.
            if result
                .as_ref()
                .is_ok_and(|r| !matches!(r, AppendEntriesResponse::HigherVote(_)))
            {
                stand_in.heard_leader();
            }
            PeerResponse::AppendEntries(result)
        }
        PeerRequest::Vote(rpc) => {
            let result = raft.vote(rpc.clone()).await;
            if let Ok(response) = &result {
                stand_in.answered(&rpc, response);
            }
            PeerResponse::Vote(result)
        }
        PeerRequest::InstallSnapshot(rpc) => {
            let vote = rpc.vote;
            let result = raft.install_snapshot(rpc).await;
            // Counted only when the answer carries the sender's vote: a node whose vote is
            // above answers with its own, and a chunk before the last answers with the vote
            // read before it was taken (the backstop reads openraft's own record anyway).
            if result.as_ref().is_ok_and(|r| r.vote == vote) {
                stand_in.heard_leader();
            }
            PeerResponse::InstallSnapshot(result)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::TlsFiles;
    use crate::security::certs::{DevCa, Validity};
    use crate::security::tls;

    /// How long the test peer waits before its handshake: longer than [`TTL`], as a loaded
    /// node or a long round trip makes it.
    const SLOW: Duration = Duration::from_millis(300);

    /// The calls' deadline: a heartbeat's.
    const TTL: Duration = Duration::from_millis(100);

    /// A client of node 2 at `addr`, with pools of its own.
    fn client_of(addr: String, connector: Connector) -> PeerClient {
        PeerClient {
            group: 0,
            target: 2,
            addr,
            pools: Pools::default(),
            dialing: Dialing::default(),
            source_ip: None,
            connector,
            me: Arc::new(Me {
                id: 1,
                identity: Arc::new(ClusterIdentity::fixed(
                    std::path::Path::new("/nonexistent"),
                    Some(TEST_CLUSTER),
                )),
                peer_addr: "127.0.0.1:1".into(),
            }),
            health: PeerHealth::default(),
        }
    }

    /// The cluster the test peers and clients are in.
    const TEST_CLUSTER: ClusterId = ClusterId([3; 16]);

    /// Reads the hello on a test peer's connection and welcomes it.
    async fn welcome_hello<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        stream: &mut tokio::io::BufReader<S>,
    ) -> bool {
        let identity =
            ClusterIdentity::fixed(std::path::Path::new("/nonexistent"), Some(TEST_CLUSTER));
        let answer = welcome(wire::read_frame(stream, PEER_FRAME_MAX).await, &identity);
        let ok = matches!(answer, PeerWelcome::Welcome { .. });
        let announced: Result<PeerAnnounce, _> = wire::read_frame(stream, PEER_FRAME_MAX).await;
        let ok = ok && announced.is_ok();
        wire::write_frame(stream.get_mut(), &answer).await.is_ok() && ok
    }

    /// How many idle connections `client` pools to node 2.
    fn idle(client: &PeerClient) -> usize {
        client.pools.lock().unwrap().get(&2).map_or(0, Vec::len)
    }

    /// A peer that answers one vote per connection, granting it 100 ms after it arrived
    /// (so that calls made together each need a connection of their own), then closes the
    /// connection (as a peer killed and restarted after the answer does). Returns its
    /// address and the count of connections it accepted.
    async fn one_answer_per_connection() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let Ok(stream) = Acceptor::plain().accept(tcp).await else {
                        return;
                    };
                    let mut stream = tokio::io::BufReader::new(stream);
                    if !welcome_hello(&mut stream).await {
                        return;
                    }
                    if let Ok(PeerFrame {
                        request: PeerRequest::Vote(v),
                        ..
                    }) = wire::read_frame(&mut stream, PEER_FRAME_MAX).await
                    {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let granted = PeerAnswer::Answered(Box::new(PeerResponse::Vote(Ok(
                            VoteResponse::new(v.vote, None, true),
                        ))));
                        let _ = wire::write_frame(stream.get_mut(), &granted).await;
                    }
                    // Dropped here: the client's pooled connection is now dead.
                });
            }
        });
        (addr, accepted)
    }

    #[tokio::test]
    async fn a_pooled_connection_that_died_idle_costs_no_call() {
        let (addr, accepted) = one_answer_per_connection().await;
        let client = client_of(addr, Connector::plain());
        for term in 1..=3 {
            let vote = PeerRequest::Vote(VoteRequest::new(openraft::Vote::new(term, 1), None));
            match client.call(vote, Duration::from_secs(5)).await {
                Ok(PeerResponse::Vote(Ok(r))) => {
                    assert!(r.vote_granted);
                    assert_eq!(r.vote, openraft::Vote::new(term, 1));
                }
                Ok(_) => panic!("term {term}: answered with another kind of response"),
                Err(e) => panic!("term {term}: the call failed: {e}"),
            }
            // Each call found the connection the last one pooled closed by the peer.
            assert_eq!(idle(&client), 1, "the connection that answered is pooled");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn every_idle_connection_to_a_peer_goes_when_one_of_them_failed() {
        let (addr, accepted) = one_answer_per_connection().await;
        let client = client_of(addr, Connector::plain());
        let vote = |term| PeerRequest::Vote(VoteRequest::new(openraft::Vote::new(term, 1), None));
        let granted = |r: Result<PeerResponse, CallError>| match r {
            Ok(PeerResponse::Vote(Ok(r))) => r.vote_granted,
            _ => false,
        };
        // Two calls at once: each dials its own connection, and both are pooled after.
        let (a, b) = tokio::join!(
            client.call(vote(1), Duration::from_secs(5)),
            client.call(vote(1), Duration::from_secs(5))
        );
        assert!(granted(a) && granted(b));
        assert_eq!(idle(&client), 2);
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Both are dead now; the retry must not take the second from the pool.
        assert!(granted(client.call(vote(2), Duration::from_secs(5)).await));
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(
            idle(&client),
            1,
            "only the connection that answered is pooled"
        );
    }

    /// The vote `raft` holds, as (term, voted for).
    fn vote_of(raft: &Raft) -> (u64, Option<NodeId>) {
        let vote = raft.metrics().borrow().vote;
        (vote.leader_id().term, vote.leader_id().voted_for())
    }

    /// A peer port serving groups 1 and 2 (each its own Raft, not initialized, so a vote
    /// request is answered and nothing else happens), and node 1's clients of node 2's
    /// port for groups 1, 2 and 9, sharing one network.
    #[tokio::test]
    async fn each_frame_is_answered_by_its_groups_raft_and_an_unknown_group_is_named() {
        use crate::raft::test_cluster::{Net, TempDir, start};
        let dir = TempDir::new("peer-groups");
        let mut groups = BTreeMap::new();
        for g in [1, 2] {
            let (raft, _) = start(&Net::default(), &dir.0.join(g.to_string()), 2).await;
            let (_stop, watch) = crate::shutdown::shutdown_channel();
            let config = openraft::Config::default().validate().unwrap();
            let stand_in = StandIn::start(raft.clone(), &config, watch);
            groups.insert(g, PeerGroup { raft, stand_in });
        }
        let rafts: BTreeMap<GroupId, Raft> =
            groups.iter().map(|(g, p)| (*g, p.raft.clone())).collect();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (_shutdown, watch) = crate::shutdown::shutdown_channel();
        let server = PeerServer {
            acceptor: Acceptor::plain(),
            groups: Arc::new(groups),
            identity: Arc::new(ClusterIdentity::fixed(
                std::path::Path::new("/nonexistent"),
                Some(TEST_CLUSTER),
            )),
        };
        tokio::spawn(serve_peers(listener, server, watch));
        let node_1 = client_of(addr, Connector::plain());
        let of_group = |group| PeerClient {
            group,
            ..node_1.clone()
        };
        let vote = |term| PeerRequest::Vote(VoteRequest::new(openraft::Vote::new(term, 1), None));
        let granted = |r: Result<PeerResponse, CallError>| match r {
            Ok(PeerResponse::Vote(Ok(r))) => r.vote_granted,
            Ok(_) => panic!("answered with another kind of response"),
            Err(e) => panic!("the call failed: {e}"),
        };
        let call = |group, term| {
            let client = of_group(group);
            async move { client.call(vote(term), Duration::from_secs(5)).await }
        };
        assert!(granted(call(1, 5).await));
        assert_eq!(vote_of(&rafts[&1]), (5, Some(1)));
        assert_eq!(vote_of(&rafts[&2]).0, 0, "group 2 saw group 1's vote");
        assert!(granted(call(2, 3).await));
        assert_eq!(vote_of(&rafts[&2]), (3, Some(1)));
        assert_eq!(vote_of(&rafts[&1]), (5, Some(1)));
        assert_eq!(
            idle(&node_1),
            1,
            "both groups' calls used one pooled connection"
        );

        match call(9, 7).await {
            Err(CallError::Network(why)) => {
                assert_eq!(why, "node 2 hosts no Raft group 9 (it hosts groups [1, 2])")
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("group 9 was answered"),
        }
        // The connection that carried the refusal stays open and is pooled again.
        assert_eq!(idle(&node_1), 1);
        assert!(granted(call(1, 6).await));
        assert_eq!(vote_of(&rafts[&1]), (6, Some(1)));
        assert_eq!(idle(&node_1), 1);
    }

    #[tokio::test]
    async fn a_handshake_slower_than_the_call_deadline_still_yields_a_connection() {
        let dir = std::env::temp_dir().join(format!("weir-peer-dial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = DevCa::new("test CA").unwrap();
        let node = ca.issue("node", Validity::Current).unwrap();
        let files = TlsFiles {
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
            ca: dir.join("ca.pem"),
        };
        std::fs::write(&files.cert, &node.cert_pem).unwrap();
        std::fs::write(&files.key, &node.key_pem).unwrap();
        std::fs::write(&files.ca, ca.cert_pem()).unwrap();
        let acceptor = Acceptor::tls(tls::peer_server_config(&files).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(SLOW).await;
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut stream = tokio::io::BufReader::new(stream);
                    if !welcome_hello(&mut stream).await {
                        return;
                    }
                    while let Ok(PeerFrame {
                        request: PeerRequest::Vote(v),
                        ..
                    }) = wire::read_frame(&mut stream, PEER_FRAME_MAX).await
                    {
                        let granted = PeerAnswer::Answered(Box::new(PeerResponse::Vote(Ok(
                            VoteResponse::new(v.vote, None, true),
                        ))));
                        if wire::write_frame(stream.get_mut(), &granted).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let client = client_of(
            addr.to_string(),
            Connector::tls(tls::peer_client_config(&files).unwrap()),
        );
        let mut answered = 0;
        for _ in 0..40 {
            let vote = PeerRequest::Vote(VoteRequest::new(openraft::Vote::new(1, 1), None));
            if let Ok(PeerResponse::Vote(Ok(r))) = client.call(vote, TTL).await {
                assert!(r.vote_granted);
                answered += 1;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every call alone gives up before the handshake ends; the connections their dials
        // made serve the calls after them.
        assert!(
            answered > 0,
            "no call was answered: every handshake was cancelled"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
