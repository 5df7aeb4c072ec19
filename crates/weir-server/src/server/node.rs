//! A running node: opens the data directory, starts Raft on the log and the
//! state-machine store, starts the front doors it is given ([`super::front`]), the proposer
//! and the reader, serves the peer and client ports, and stops cleanly on SIGTERM or ctrl-c.
//!
//! A node hosts one Raft group, or with `groups = N` the metadata group and N data groups
//! ([`super::groups_dir`]), each with its own log, state store, Raft, stand-in, proposer
//! and reader, all on the one peer port. The client port serves every group, each
//! connection the one its hello names ([`super::client_port::GroupCtxs`]), requests routed
//! by tenant ([`super::routing`]); the front doors are given every data group
//! ([`super::front::Doors`]: the default one, [`client_group`], for requests that name
//! none), their writes routed the same way.
//!
//! Invariants:
//! - Its ports and the front doors' are bound before Raft starts: a taken port fails the
//!   start, and nothing is served half-way.
//! - Only the lowest-id configured voter initializes the cluster (each group of it), and only
//!   while that group's Raft says it is not initialized (`Raft::is_initialized`: no vote, no log, no membership on disk).
//!   This is decided from Raft's own state, not from "first start" of the data directory: a
//!   first start that failed after labelling the directory (a taken port, bad openraft
//!   settings) must still found the cluster on the next start. Every other start joins what
//!   is on disk or what the leader sends.
//! - A node whose Raft stops on its own (a storage error, a panic in Raft's core) exits with
//!   an error naming why: it cannot order anything again, and a process that still accepts
//!   connections but answers nothing would hide the failure from whatever supervises it.
//!   Restarted, it recovers from its data directory.
//! - Every long-lived task the node spawns holds the one [`crate::shutdown::Shutdown`] and
//!   ends when it begins (or its sender is dropped, as when a start fails half-way); a
//!   stand-in's election task ends after its rounds (at most three election timeouts).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::client_port;
use super::client_port::GroupCtxs;
use super::ctx::{Ctx, Metadata};
use super::data_dir::prepare_data_dir;
use super::front::{DoorGroup, Doors, FrontDoors};
use super::groups_dir::{group_dirs, shared_log_dir};
use super::local_write::LocalWriter;
use super::proposer::{Proposer, SharedSlots};
use super::reader::Reader;
use crate::config::Config;
use crate::raft::cluster_identity::{ClusterId, ClusterIdentity};
use crate::raft::log_store::LogStore;
use crate::raft::network::{Me, PeerGroup, PeerNetwork, PeerServer, serve_peers};
use crate::raft::stand_in::StandIn;
use crate::raft::state_store::AppliedState;
use crate::raft::state_store::StateStore;
use crate::raft::{GroupId, NodeAddr, Raft, SOLE_GROUP};
use crate::security::{Acceptor, TokenTable, Tokens, tls};
use crate::shutdown::{Shutdown, ShutdownSender, shutdown_channel};
use weir_proto::tls::{Connector, client_config};

/// A running node.
pub struct Node {
    /// The Raft of the group the client port serves ([`client_group`]).
    pub raft: Raft,
    /// Every group the node hosts, by id ([`super::groups_dir`]): one for a node of one group.
    pub groups: BTreeMap<GroupId, Hosted>,
    /// The tokens its client port accepts; [`Node::reload_tokens`] replaces them.
    tokens: Arc<Tokens>,
    /// Begun once, by [`Node::stop`]; every spawned task watches it.
    shutdown: ShutdownSender,
}

/// One group the node hosts, started: its own Raft, applied state, proposer and reader
/// (its stand-in runs beside its Raft, held by the peer port).
#[derive(Clone)]
pub struct Hosted {
    pub raft: Raft,
    pub state: Arc<AppliedState>,
    pub proposer: Proposer,
    pub reader: Reader,
}

/// The group a plain hello speaks to, and the front doors serve: the one group of a node of
/// one group; data group 1 (the default data group) of a node of several.
pub fn client_group(groups: u32) -> GroupId {
    if groups == 1 { SOLE_GROUP } else { 1 }
}

/// The log and the state store, opened, and what a restart's reads wait for.
struct Storage {
    log: LogStore,
    store: StateStore,
    /// The last index in the log at start: reads wait for it to be applied (`reader`).
    startup_last: Option<u64>,
}

impl Node {
    /// Starts a node from `config`: binds its ports and the front doors' (failing if any is
    /// taken), starts Raft, then the `front` doors, and returns once it serves.
    pub async fn start(config: Config, front: &dyn FrontDoors) -> Result<Node, String> {
        config.validate()?;
        let dir = &config.data_dir;
        // Whether this is the directory's first start does not decide initialization: Raft's
        // own state does (module doc).
        let _first_start = prepare_data_dir(dir, config.id)?;
        let identity = Arc::new(ClusterIdentity::open(dir)?);
        let mut opened = Vec::new();
        let dirs = group_dirs(dir, config.groups)?;
        let mut logs = open_logs(dir, &dirs, &config)?;
        for (group, group_dir) in dirs {
            let named = (config.groups > 1).then_some(group);
            let log = logs
                .remove(&group)
                .ok_or_else(|| format!("group {group} has no log"))?;
            let storage = open_storage(&group_dir, named, log)
                .await
                .map_err(|e| in_group(config.groups, group, e))?;
            opened.push((group, storage));
        }
        let security = Security::from_config(&config)?;
        let (peer_listener, client_listener) = bind_ports(&config).await?;
        let http_listener = bind_http(&config).await?;
        let grpc_listener = bind_grpc(&config).await?;
        let (shutdown_sender, shutdown) = shutdown_channel();
        let mut applied = BTreeMap::new();
        for (group, storage) in &opened {
            applied.insert(*group, (storage.store.state(), storage.startup_last));
        }
        let rafts = start_rafts(
            &config,
            opened,
            &security,
            peer_listener,
            &identity,
            &shutdown,
        )
        .await?;
        // The data groups' proposers share the node's in-flight slots (proposer module doc);
        // the metadata group's rare writes take none.
        let shared = (config.groups > 1).then(|| SharedSlots::new(config.proposer.in_flight_max));
        let mut groups = BTreeMap::new();
        for (group, raft) in rafts {
            let Some((state, startup_last)) = applied.remove(&group) else {
                return Err(format!("group {group} has a Raft but was not opened"));
            };
            let hosted = Hosted {
                proposer: Proposer::start(
                    config.id,
                    raft.clone(),
                    state.clone(),
                    config.proposer.clone(),
                    shared.clone().filter(|_| group != SOLE_GROUP),
                    shutdown.clone(),
                ),
                reader: Reader::start(raft.clone(), state.clone(), startup_last, shutdown.clone()),
                raft,
                state,
            };
            groups.insert(group, hosted);
        }
        // On a node of several groups, every group's connections and front doors route by the metadata
        // group's placements (`routing`).
        let metadata = (config.groups > 1).then(|| {
            let meta = &groups[&SOLE_GROUP];
            Metadata {
                raft: meta.raft.clone(),
                state: meta.state.clone(),
                proposer: meta.proposer.clone(),
                default_state: groups[&client_group(config.groups)].state.clone(),
            }
        });
        let tokens = Arc::new(Tokens::new(TokenTable::new(&config.tokens)?));
        // The front doors reach every data group (the metadata group is the nodes' own).
        let door_groups = groups
            .iter()
            .filter(|(group, _)| config.groups == 1 || **group != SOLE_GROUP)
            .map(|(group, hosted)| {
                let door = DoorGroup {
                    state: hosted.state.clone(),
                    raft: hosted.raft.clone(),
                    writer: LocalWriter {
                        proposer: hosted.proposer.clone(),
                        state: hosted.state.clone(),
                        raft: hosted.raft.clone(),
                        group: *group,
                        metadata: metadata.clone(),
                    },
                };
                (*group, door)
            })
            .collect();
        front.start(
            &config,
            Doors {
                http: http_listener,
                grpc: grpc_listener,
                client_acceptor: security.client_acceptor.clone(),
                internal_connector: security.internal_connector.clone(),
                tokens: tokens.clone(),
                groups: door_groups,
                default_group: client_group(config.groups),
                placements: metadata.as_ref().map(|m| m.state.clone()),
                shutdown: shutdown.clone(),
            },
        )?;
        let identity = &identity;
        let ctx_of = |group: GroupId, hosted: &Hosted| Ctx {
            id: config.id,
            client_addr: config.client_addr.clone(),
            group,
            metadata: metadata.clone(),
            raft: hosted.raft.clone(),
            proposer: hosted.proposer.clone(),
            reader: hosted.reader.clone(),
            state: hosted.state.clone(),
            groups: config.groups,
            acceptor: security.client_acceptor.clone(),
            tokens: tokens.clone(),
            digest: Default::default(),
            snapshot_cost: Default::default(),
            snapshot_cost_next: Default::default(),
            identity: identity.clone(),
            backup: Default::default(),
        };
        let ctxs = GroupCtxs {
            by_group: groups
                .iter()
                .map(|(&g, hosted)| (g, Arc::new(ctx_of(g, hosted))))
                .collect(),
            default: client_group(config.groups),
        };
        tokio::spawn(client_port::serve_clients(
            client_listener,
            Arc::new(ctxs),
            config.client_connections_max,
            shutdown,
        ));
        log_serving(&config);
        Ok(Node {
            raft: groups[&client_group(config.groups)].raft.clone(),
            groups,
            tokens,
            shutdown: shutdown_sender,
        })
    }

    /// Replaces the accepted tokens with those of `config` (a re-read config file); open
    /// connections whose token is gone close. A config without tokens, on a node that has
    /// some, is refused unless it sets `reload_may_turn_auth_off` ([`Tokens::reload`]).
    pub fn reload_tokens(&self, config: &Config) -> Result<usize, String> {
        let table = TokenTable::new(&config.tokens)?;
        self.tokens.reload(table, config.reload_may_turn_auth_off)?;
        Ok(config.tokens.len())
    }

    /// Returns once the Raft of any group has stopped on its own, with why (and which group,
    /// on a node of several): its core quit on an error (a storage error, a violated
    /// invariant), or its task ended (a panic). Never returns while every Raft runs; after
    /// [`Node::stop`] it is not asked.
    pub async fn raft_stopped(&self) -> String {
        let mut watching = tokio::task::JoinSet::new();
        let several = self.groups.len() > 1;
        for (group, hosted) in &self.groups {
            let (group, raft) = (*group, hosted.raft.clone());
            watching.spawn(async move {
                let why = one_raft_stopped(&raft).await;
                if several {
                    format!("group {group}: {why}")
                } else {
                    why
                }
            });
        }
        match watching.join_next().await {
            Some(Ok(why)) => why,
            Some(Err(e)) => format!("the task watching Raft ended: {e}"),
            None => "this node hosts no Raft group".into(),
        }
    }

    /// Stops serving and shuts every group's Raft down.
    pub async fn stop(self) {
        self.shutdown.begin();
        for (group, hosted) in &self.groups {
            if let Err(e) = hosted.raft.shutdown().await {
                tracing::warn!("raft shutdown (group {group}): {e}");
            }
        }
        tracing::info!("stopped");
    }
}

/// Returns once `raft` has stopped on its own, with why (see [`Node::raft_stopped`]).
async fn one_raft_stopped(raft: &Raft) -> String {
    let mut metrics = raft.metrics();
    loop {
        if let Err(fatal) = &metrics.borrow().running_state {
            return fatal.to_string();
        }
        // An error here: the metrics' sender is gone, so Raft's core task has ended (a
        // panic drops it without setting `running_state`).
        if metrics.changed().await.is_err() {
            return "Raft's core task ended (a panic: see above)".into();
        }
    }
}

/// Names the group in `error` on a node of several groups.
fn in_group(groups: u32, group: GroupId, error: String) -> String {
    if groups == 1 {
        error
    } else {
        format!("group {group}: {error}")
    }
}

/// Starts a Raft for each opened group, each on its own group's peer network (all sharing
/// one pool of connections), serves them all on `peer_listener` (each with its stand-in),
/// and founds every group whose Raft is not initialized if this node is the founder. A node
/// with Raft state but no recorded cluster identity is given [`ClusterId::UNRECORDED`]
/// before it serves peers (`raft::cluster_identity`).
async fn start_rafts(
    config: &Config,
    opened: Vec<(GroupId, Storage)>,
    security: &Security,
    peer_listener: TcpListener,
    identity: &Arc<ClusterIdentity>,
    shutdown: &Shutdown,
) -> Result<BTreeMap<GroupId, Raft>, String> {
    let raft_config = Arc::new(config.openraft()?);
    let me = Arc::new(Me {
        id: config.id,
        identity: identity.clone(),
        peer_addr: config.peer_addr.clone(),
    });
    let network = PeerNetwork::new(config.peer_source_ip, security.peer_connector.clone(), me);
    let mut rafts = BTreeMap::new();
    let mut peers = BTreeMap::new();
    let mut unfounded = Vec::new();
    for (group, storage) in opened {
        let raft = Raft::new(
            config.id,
            raft_config.clone(),
            network.for_group(group),
            storage.log,
            storage.store,
        )
        .await
        .map_err(|e| in_group(config.groups, group, format!("raft: {e}")))?;
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| in_group(config.groups, group, format!("raft: {e}")))?;
        if initialized {
            identity.record(ClusterId::UNRECORDED)?;
        } else {
            unfounded.push(group);
        }
        let stand_in = StandIn::start(raft.clone(), &raft_config, shutdown.clone());
        peers.insert(
            group,
            PeerGroup {
                raft: raft.clone(),
                stand_in,
            },
        );
        rafts.insert(group, raft);
    }
    let server = PeerServer {
        acceptor: security.peer_acceptor.clone(),
        groups: Arc::new(peers),
        identity: identity.clone(),
    };
    tokio::spawn(serve_peers(peer_listener, server, shutdown.clone()));
    for group in unfounded {
        found_cluster(config, &rafts[&group], identity).await?;
    }
    Ok(rafts)
}

/// Opens the logs of the groups in `dirs` (each group and its directory): a node of one
/// group keeps its log in its directory's `log/`; a node of several, one log for all of
/// them in `groups/log/` ([`super::groups_dir`]), adopting any group's log kept apart.
fn open_logs(
    dir: &std::path::Path,
    dirs: &[(GroupId, std::path::PathBuf)],
    config: &Config,
) -> Result<BTreeMap<GroupId, LogStore>, String> {
    let segment_bytes = config.raft.log_segment_bytes;
    if config.groups == 1 {
        let mut logs = BTreeMap::new();
        for (group, group_dir) in dirs {
            let log = LogStore::open_sized(&group_dir.join("log"), segment_bytes)
                .map_err(|e| in_group(config.groups, *group, e))?;
            logs.insert(*group, log);
        }
        return Ok(logs);
    }
    let groups: Vec<GroupId> = dirs.iter().map(|(g, _)| *g).collect();
    LogStore::open_shared(&shared_log_dir(dir), segment_bytes, &groups, dirs)
}

/// Opens the state store in `dir` over the group's opened `log`.
async fn open_storage(
    dir: &std::path::Path,
    group: Option<GroupId>,
    mut log: LogStore,
) -> Result<Storage, String> {
    let startup_last = {
        use openraft::storage::RaftLogStorage;
        log.get_log_state()
            .await
            .map_err(|e| format!("log: {e}"))?
            .last_log_id
            .map(|id| id.index)
    };
    let store = StateStore::open_in(dir, group)?;
    Ok(Storage {
        log,
        store,
        startup_last,
    })
}

/// Says where the node serves and how it is secured: plaintext and an open port are
/// warnings.
fn log_serving(config: &Config) {
    tracing::info!(
        "serving clients on {}, peers on {}, data in {}",
        config.client_addr,
        config.peer_addr,
        config.data_dir.display()
    );
    match &config.tls {
        Some(_) => tracing::info!("TLS on: client and HTTP ports TLS, peer port mutual TLS"),
        None => tracing::warn!(
            "no [tls] configured: serving PLAINTEXT (allowed on loopback addresses only, \
             or with insecure = true)"
        ),
    }
    if config.tokens.is_empty() {
        tracing::warn!("no tokens configured: every client connection may do everything");
    } else {
        tracing::info!(
            "{} token(s) accepted on the client port",
            config.tokens.len()
        );
    }
}

/// The node's TLS ends, from its config: plaintext everywhere without `[tls]`.
struct Security {
    /// The client port's, and the HTTP port's.
    client_acceptor: Acceptor,
    peer_acceptor: Acceptor,
    peer_connector: Connector,
    /// The front doors' internal clients' way into the client port: verified against `ca`.
    internal_connector: Connector,
}

impl Security {
    fn from_config(config: &Config) -> Result<Security, String> {
        let Some(files) = &config.tls else {
            return Ok(Security {
                client_acceptor: Acceptor::plain(),
                peer_acceptor: Acceptor::plain(),
                peer_connector: Connector::plain(),
                internal_connector: Connector::plain(),
            });
        };
        Ok(Security {
            client_acceptor: Acceptor::tls(tls::server_config(files)?),
            peer_acceptor: Acceptor::tls(tls::peer_server_config(files)?),
            peer_connector: Connector::tls(tls::peer_client_config(files)?),
            internal_connector: Connector::tls(client_config(&files.ca)?),
        })
    }
}

/// Binds the peer port (on `peer_listen` if set, else `peer_addr`) and the client port (on
/// `client_listen` if set, else `client_addr`).
async fn bind_ports(config: &Config) -> Result<(TcpListener, TcpListener), String> {
    let peer = bind("peer", config.peer_listen.as_ref(), &config.peer_addr).await?;
    let client = bind("client", config.client_listen.as_ref(), &config.client_addr).await?;
    Ok((peer, client))
}

/// Binds the `port` port on `listen` if set, else on its advertised `addr`.
async fn bind(port: &str, listen: Option<&String>, addr: &str) -> Result<TcpListener, String> {
    let listen = listen.map_or(addr, String::as_str);
    TcpListener::bind(listen)
        .await
        .map_err(|e| format!("{port} port {listen}: {e}"))
}

/// Binds the HTTP port, unless `http_listen` is empty.
async fn bind_http(config: &Config) -> Result<Option<TcpListener>, String> {
    if config.http_listen.is_empty() {
        return Ok(None);
    }
    TcpListener::bind(&config.http_listen)
        .await
        .map(Some)
        .map_err(|e| format!("http port {}: {e}", config.http_listen))
}

/// Binds the gRPC port, unless `grpc_listen` is empty.
async fn bind_grpc(config: &Config) -> Result<Option<TcpListener>, String> {
    if config.grpc_listen.is_empty() {
        return Ok(None);
    }
    TcpListener::bind(&config.grpc_listen)
        .await
        .map(Some)
        .map_err(|e| format!("grpc port {}: {e}", config.grpc_listen))
}

/// On a start of an uninitialized Raft, the founder (the lowest-id configured voter) draws
/// the cluster's identity (unless one is recorded) and initializes the cluster with every
/// configured voter; any other node does nothing and waits to be contacted, adopting the
/// identity of the first peer that says hello.
async fn found_cluster(
    config: &Config,
    raft: &Raft,
    identity: &ClusterIdentity,
) -> Result<(), String> {
    let voters = config.voters();
    let founder = voters.iter().map(|v| v.id).min() == Some(config.id);
    if !founder {
        return Ok(());
    }
    let cluster = identity.record(ClusterId::random()?)?;
    tracing::info!("cluster identity {cluster}");
    let members: BTreeMap<u64, NodeAddr> = voters
        .iter()
        .map(|v| {
            (
                v.id,
                NodeAddr {
                    peer: v.peer.clone(),
                    client: v.client.clone(),
                },
            )
        })
        .collect();
    match raft.initialize(members).await {
        Ok(()) => tracing::info!("formed a cluster of {} voters", voters.len()),
        Err(e) => tracing::warn!("initialize: {e}"),
    }
    Ok(())
}

/// Runs a node until SIGTERM or ctrl-c, or until its Raft stops on its own (an error: the
/// node cannot serve again until restarted); on SIGHUP re-reads the tokens from
/// `config_path` (if the node was started from a file). The handlers are installed before
/// the node starts, so a signal that arrives while it starts is not lost (nor fatal).
pub async fn serve(
    config: Config,
    config_path: Option<std::path::PathBuf>,
    front: &dyn FrontDoors,
) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot watch SIGINT: {e}"))?;
    let mut hup = signal(SignalKind::hangup()).map_err(|e| format!("cannot watch SIGHUP: {e}"))?;
    let node = Node::start(config, front).await?;
    let mut stopped = None;
    loop {
        tokio::select! {
            _ = term.recv() => {
                tracing::info!("SIGTERM received, shutting down");
                break;
            }
            _ = int.recv() => {
                tracing::info!("SIGINT received, shutting down");
                break;
            }
            _ = hup.recv() => reload(&node, config_path.as_deref()),
            why = node.raft_stopped() => {
                stopped = Some(why);
                break;
            }
        }
    }
    node.stop().await;
    match stopped {
        Some(why) => Err(format!("{RAFT_STOPPED}: {why}")),
        None => Ok(()),
    }
}

/// The start of the error a node exits with when its Raft stopped on its own.
pub const RAFT_STOPPED: &str =
    "Raft stopped on its own; the node exits (restarted, it recovers from its data directory)";

/// SIGHUP: re-reads the config file and replaces the tokens; a file that no longer loads
/// keeps the old tokens (logged), so a typo does not lock everyone out.
fn reload(node: &Node, config_path: Option<&std::path::Path>) {
    let Some(path) = config_path else {
        tracing::warn!(
            "SIGHUP received, but the node runs without a config file: nothing to reload"
        );
        return;
    };
    match Config::load(path).and_then(|c| node.reload_tokens(&c)) {
        Ok(0) => tracing::warn!(
            "SIGHUP: reloaded {} with no tokens (reload_may_turn_auth_off = true): \
             authentication is OFF, every connection may do everything",
            path.display()
        ),
        Ok(n) => tracing::info!("SIGHUP: reloaded {n} token(s) from {}", path.display()),
        Err(e) => tracing::error!("SIGHUP: tokens not reloaded, keeping the old ones: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::test_cluster::{PATIENCE, TempDir};
    use weir_core::machine::Command;

    /// Front doors that serve nothing (the configs here bind no HTTP or gRPC port).
    struct NoDoors;

    impl FrontDoors for NoDoors {
        fn start(&self, _: &Config, _: Doors) -> Result<(), String> {
            Ok(())
        }
    }

    /// A free loopback address (bound, then released for the node to bind).
    fn loopback() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    /// Configs of three nodes with `groups` groups, their data under `dir`.
    fn configs(dir: &std::path::Path, groups: u32) -> Vec<Config> {
        let voters: Vec<crate::config::Peer> = (1..=3)
            .map(|id| crate::config::Peer {
                id,
                peer: loopback(),
                client: loopback(),
            })
            .collect();
        voters
            .iter()
            .map(|v| Config {
                id: v.id,
                data_dir: dir.join(format!("node{}", v.id)),
                client_addr: v.client.clone(),
                peer_addr: v.peer.clone(),
                peers: voters.clone(),
                http_listen: String::new(),
                groups,
                ..Config::default()
            })
            .collect()
    }

    /// Waits until group `group` has a leader that every node in `nodes` knows, with all
    /// three voters; returns the leader's id.
    async fn led(nodes: &BTreeMap<u64, Node>, group: GroupId) -> u64 {
        let mut leader = None;
        for node in nodes.values() {
            let raft = &node.groups[&group].raft;
            let metrics = raft
                .wait(Some(PATIENCE))
                .metrics(
                    |m| {
                        m.current_leader.is_some()
                            && m.membership_config.membership().voter_ids().count() == 3
                    },
                    "a leader of three voters",
                )
                .await
                .unwrap_or_else(|e| panic!("group {group}: {e}"));
            leader.get_or_insert(metrics.current_leader.unwrap());
        }
        leader.unwrap()
    }

    fn define(tenant: &str) -> Command {
        Command::DefineLimit {
            tenant: tenant.into(),
            name: "l".into(),
            concurrent: 1,
            per_second: 0.0,
            burst: None,
        }
    }

    /// Waits until `hosted` has applied a limit of `tenant`.
    async fn applied(hosted: &Hosted, tenant: &str) {
        for _ in 0..400 {
            if hosted.state.lock().machine.has_limit(tenant, "l") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{tenant}'s limit was never applied");
    }

    use std::time::Duration;
    use weir_proto::protocol::{
        ClientFrame, Failure, PROTOCOL_VERSION, Request, Response, ServerFrame,
    };
    use weir_proto::wire;

    /// Sends `request` to the client port at `addr` on a new connection; its response.
    async fn ask(addr: &str, request: Request) -> Response {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut stream = tokio::io::BufReader::new(tcp);
        let hello = ClientFrame::Hello {
            version: PROTOCOL_VERSION,
            token: None,
        };
        wire::write_frame(stream.get_mut(), &hello).await.unwrap();
        let frame = ClientFrame::Request { id: 1, request };
        wire::write_frame(stream.get_mut(), &frame).await.unwrap();
        for _ in 0..10 {
            match wire::read_frame(&mut stream, 1 << 20).await.unwrap() {
                ServerFrame::Response { response, .. } => return response,
                _ => continue,
            }
        }
        panic!("no response in ten frames");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_nodes_of_two_groups_elect_each_group_keep_them_apart_and_recover_them() {
        let dir = TempDir::new("node-groups");
        let configs = configs(&dir.0, 2);
        let mut nodes = BTreeMap::new();
        for c in &configs {
            nodes.insert(c.id, Node::start(c.clone(), &NoDoors).await.unwrap());
        }
        for node in nodes.values() {
            assert_eq!(node.groups.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
            assert!(node.raft.metrics().borrow().id == node.groups[&1].raft.metrics().borrow().id);
        }
        for group in [0, 1, 2] {
            led(&nodes, group).await;
        }
        // Tenant a written in group 1, tenant b in group 2, each through its leader.
        for (group, tenant) in [(1, "a"), (2, "b")] {
            let leader = led(&nodes, group).await;
            let (_, reply) = nodes[&leader].groups[&group]
                .proposer
                .propose(define(tenant))
                .await
                .unwrap();
            assert_eq!(reply, weir_core::machine::Reply::Done);
        }
        for node in nodes.values() {
            applied(&node.groups[&1], "a").await;
            applied(&node.groups[&2], "b").await;
            let machine = |g: GroupId| node.groups[&g].state.lock().machine.clone();
            assert!(
                !machine(1).has_limit("b", "l"),
                "group 1 holds group 2's tenant"
            );
            assert!(
                !machine(2).has_limit("a", "l"),
                "group 2 holds group 1's tenant"
            );
            assert!(!machine(0).has_limit("a", "l") && !machine(0).has_limit("b", "l"));
        }
        let groups = configs[2].data_dir.join("groups");
        assert!(groups.join("log").is_dir(), "the shared log is missing");
        for g in 0..=2 {
            let own = groups.join(g.to_string()).join("log");
            assert!(!own.exists(), "{} exists", own.display());
        }
        assert!(!configs[2].data_dir.join("log").exists());

        // Membership changes and backups are refused on the client port, naming why.
        for request in [
            Request::RemoveNode { id: 3 },
            Request::AddNode {
                id: 4,
                peer: loopback(),
                client: loopback(),
            },
            Request::BackupBegin,
        ] {
            assert_eq!(
                ask(&configs[0].client_addr, request).await,
                Response::Failed(Failure::BadRequest(
                    "this node hosts groups = 2: its groups' voters are the configured ones \
                     (nodes are not added or removed), and a backup is of a node of one group"
                        .into()
                ))
            );
        }

        // Node 3 stopped and started again: both data groups come back from its disk.
        nodes.remove(&3).unwrap().stop().await;
        let again = Node::start(configs[2].clone(), &NoDoors).await.unwrap();
        applied(&again.groups[&1], "a").await;
        applied(&again.groups[&2], "b").await;
        again.stop().await;

        // Started with another count of groups, it is refused naming both.
        let more = Config {
            groups: 3,
            ..configs[2].clone()
        };
        let err = Node::start(more, &NoDoors).await.err().unwrap();
        assert!(
            err.contains(
                "this data directory holds groups {0, 1, 2}, but the config says groups = 3"
            ),
            "{err}"
        );
        for (_, node) in nodes {
            node.stop().await;
        }
    }
}
