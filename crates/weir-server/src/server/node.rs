//! A running node: opens the data directory, starts Raft on the log and the
//! state-machine store, starts the front doors it is given ([`super::front`]), the proposer
//! and the reader, serves the peer and client ports, and stops cleanly on SIGTERM or ctrl-c.
//!
//! Invariants:
//! - Its ports and the front doors' are bound before Raft starts: a taken port fails the
//!   start, and nothing is served half-way.
//! - Only the lowest-id configured voter initializes the cluster, and only while Raft says it
//!   is not initialized (`Raft::is_initialized`: no vote, no log, no membership on disk).
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
use super::ctx::Ctx;
use super::data_dir::prepare_data_dir;
use super::front::{Doors, FrontDoors};
use super::local_write::LocalWriter;
use super::proposer::Proposer;
use super::reader::Reader;
use crate::config::Config;
use crate::raft::cluster_identity::{ClusterId, ClusterIdentity};
use crate::raft::log_store::LogStore;
use crate::raft::network::{Me, PeerGroup, PeerNetwork, PeerServer, serve_peers};
use crate::raft::stand_in::StandIn;
use crate::raft::state_store::StateStore;
use crate::raft::{NodeAddr, Raft, SOLE_GROUP};
use crate::security::{Acceptor, TokenTable, Tokens, tls};
use crate::shutdown::{Shutdown, ShutdownSender, shutdown_channel};
use weir_proto::tls::{Connector, client_config};

/// A running node.
pub struct Node {
    pub raft: Raft,
    /// The tokens its client port accepts; [`Node::reload_tokens`] replaces them.
    tokens: Arc<Tokens>,
    /// Begun once, by [`Node::stop`]; every spawned task watches it.
    shutdown: ShutdownSender,
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
        let storage = open_storage(dir, config.raft.log_segment_bytes).await?;
        let state = storage.store.state();
        let startup_last = storage.startup_last;
        let security = Security::from_config(&config)?;
        let (peer_listener, client_listener) = bind_ports(&config).await?;
        let http_listener = bind_http(&config).await?;
        let grpc_listener = bind_grpc(&config).await?;
        let (shutdown_sender, shutdown) = shutdown_channel();
        let raft = start_raft(
            &config,
            storage,
            &security,
            peer_listener,
            &identity,
            &shutdown,
        )
        .await?;
        let tokens = Arc::new(Tokens::new(TokenTable::new(&config.tokens)?));
        let proposer = Proposer::start(
            config.id,
            raft.clone(),
            state.clone(),
            config.proposer.clone(),
            shutdown.clone(),
        );
        front.start(
            &config,
            Doors {
                http: http_listener,
                grpc: grpc_listener,
                client_acceptor: security.client_acceptor.clone(),
                internal_connector: security.internal_connector.clone(),
                tokens: tokens.clone(),
                state: state.clone(),
                raft: raft.clone(),
                writer: LocalWriter {
                    proposer: proposer.clone(),
                    state: state.clone(),
                    raft: raft.clone(),
                },
                shutdown: shutdown.clone(),
            },
        )?;
        let ctx = Ctx {
            id: config.id,
            client_addr: config.client_addr.clone(),
            raft: raft.clone(),
            proposer,
            reader: Reader::start(raft.clone(), state.clone(), startup_last, shutdown.clone()),
            state,
            acceptor: security.client_acceptor.clone(),
            tokens: tokens.clone(),
            digest: Default::default(),
            snapshot_cost: Default::default(),
            snapshot_cost_next: Default::default(),
            identity,
            backup: Default::default(),
        };
        tokio::spawn(client_port::serve_clients(
            client_listener,
            Arc::new(ctx),
            config.client_connections_max,
            shutdown,
        ));
        log_serving(&config);
        Ok(Node {
            raft,
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

    /// Returns once Raft has stopped on its own, with why: its core quit on an error (a
    /// storage error, a violated invariant), or its task ended (a panic). Never returns
    /// while Raft runs; after [`Node::stop`] it is not asked.
    pub async fn raft_stopped(&self) -> String {
        let mut metrics = self.raft.metrics();
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

    /// Stops serving and shuts Raft down.
    pub async fn stop(self) {
        self.shutdown.begin();
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!("raft shutdown: {e}");
        }
        tracing::info!("stopped");
    }
}

/// Starts Raft on `storage`, serves its peers on `peer_listener` (with the stand-in), and
/// founds the cluster if Raft is not initialized and this node is the founder. A node with
/// Raft state but no recorded cluster identity is given [`ClusterId::UNRECORDED`] before
/// it serves peers (`raft::cluster_identity`).
async fn start_raft(
    config: &Config,
    storage: Storage,
    security: &Security,
    peer_listener: TcpListener,
    identity: &Arc<ClusterIdentity>,
    shutdown: &Shutdown,
) -> Result<Raft, String> {
    let raft_config = Arc::new(config.openraft()?);
    let me = Arc::new(Me {
        id: config.id,
        identity: identity.clone(),
        peer_addr: config.peer_addr.clone(),
    });
    let raft = Raft::new(
        config.id,
        raft_config.clone(),
        PeerNetwork::new(config.peer_source_ip, security.peer_connector.clone(), me),
        storage.log,
        storage.store,
    )
    .await
    .map_err(|e| format!("raft: {e}"))?;
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| format!("raft: {e}"))?;
    if initialized {
        identity.record(ClusterId::UNRECORDED)?;
    }
    let group = PeerGroup {
        raft: raft.clone(),
        stand_in: StandIn::start(raft.clone(), &raft_config, shutdown.clone()),
    };
    let server = PeerServer {
        acceptor: security.peer_acceptor.clone(),
        groups: Arc::new(BTreeMap::from([(SOLE_GROUP, group)])),
        identity: identity.clone(),
    };
    tokio::spawn(serve_peers(peer_listener, server, shutdown.clone()));
    if !initialized {
        found_cluster(config, &raft, identity).await?;
    }
    Ok(raft)
}

/// Opens the log and the state store in `dir`.
async fn open_storage(dir: &std::path::Path, segment_bytes: u64) -> Result<Storage, String> {
    let mut log = LogStore::open_sized(&dir.join("log"), segment_bytes)?;
    let startup_last = {
        use openraft::storage::RaftLogStorage;
        log.get_log_state()
            .await
            .map_err(|e| format!("log: {e}"))?
            .last_log_id
            .map(|id| id.index)
    };
    let store = StateStore::open(dir)?;
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
