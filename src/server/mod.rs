//! The node: opens the data directory, starts Raft on the redb log and the state-machine
//! store, serves the peer and client ports, and stops cleanly on SIGTERM or ctrl-c.
//!
//! Data directory: `node.id` (which node this directory belongs to), `log.redb` (the Raft
//! log), `snapshot.bin` (the latest snapshot). A directory with files but no `node.id`, or
//! with another node's `node.id`, is refused: a node never starts empty over existing data.
//! The directory is created, with its `node.id`, only on a first start; only then does the
//! lowest-id voter initialize the cluster, so starting the configured nodes forms one cluster
//! with no further step and a restarted node simply rejoins.

pub mod client_port;
pub mod proposer;
pub mod reader;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::codec;
use crate::config::Config;
use crate::raft::log_store::LogStore;
use crate::raft::network::{PeerNetwork, serve_peers};
use crate::raft::state_store::{StateStore, write_atomically};
use crate::raft::{NodeAddr, Raft};

/// The identity file's name, frame kind and version.
pub const IDENTITY_FILE: &str = "node.id";
const IDENTITY_MAGIC: [u8; 4] = *b"WNID";
const IDENTITY_VERSION: u16 = 1;

/// Prepares `dir` for node `id`: returns whether this is the node's first start. Refuses a
/// foreign, damaged or unlabelled non-empty directory with a message naming the file.
pub fn prepare_data_dir(dir: &Path, id: u64) -> Result<bool, String> {
    let label = dir.join(IDENTITY_FILE);
    match std::fs::read(&label) {
        Ok(bytes) => {
            let payload = codec::open_frame(&bytes, IDENTITY_MAGIC, IDENTITY_VERSION, 64)
                .map_err(|e| format!("{}: {e}", label.display()))?;
            let owner: u64 =
                codec::decode(payload).map_err(|e| format!("{}: {e}", label.display()))?;
            if owner != id {
                return Err(format!(
                    "{}: this data directory belongs to node {owner}, not node {id}",
                    label.display()
                ));
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.exists() {
                let occupied = std::fs::read_dir(dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?
                    .next()
                    .is_some();
                if occupied {
                    return Err(format!(
                        "{}: missing, but {} holds other files: refusing to start over data that \
                         is not this node's",
                        label.display(),
                        dir.display()
                    ));
                }
            }
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let bytes = codec::seal_frame(IDENTITY_MAGIC, IDENTITY_VERSION, &codec::encode(&id));
            write_atomically(dir, IDENTITY_FILE, &bytes)
                .map_err(|e| format!("{}: {e}", label.display()))?;
            Ok(true)
        }
        Err(e) => Err(format!("{}: {e}", label.display())),
    }
}

/// A running node.
pub struct Node {
    pub raft: Raft,
    pub ctx: Arc<client_port::Ctx>,
    shutdown: watch::Sender<bool>,
}

impl Node {
    /// Starts a node from `config`: binds both ports (failing if either is taken) and
    /// returns once it serves.
    pub async fn start(config: Config) -> Result<Node, String> {
        config.validate()?;
        let dir = &config.data_dir;
        let first_start = prepare_data_dir(dir, config.id)?;
        let log = LogStore::open(&dir.join("log.redb"))?;
        let state = StateStore::open(dir)?;
        let shared = state.shared();
        let raft_config = Arc::new(config.openraft()?);
        let peer_listen = config
            .peer_listen
            .clone()
            .unwrap_or_else(|| config.peer_addr.clone());
        let peer_listener = TcpListener::bind(&peer_listen)
            .await
            .map_err(|e| format!("peer port {peer_listen}: {e}"))?;
        let client_listener = TcpListener::bind(&config.client_addr)
            .await
            .map_err(|e| format!("client port {}: {e}", config.client_addr))?;
        let raft = Raft::new(
            config.id,
            raft_config,
            PeerNetwork::new(config.peer_source_ip),
            log,
            state,
        )
        .await
        .map_err(|e| format!("raft: {e}"))?;
        let (shutdown, watch_rx) = watch::channel(false);
        tokio::spawn(serve_peers(peer_listener, raft.clone(), watch_rx.clone()));
        let voters = config.voters();
        let founder = voters.iter().map(|v| v.id).min() == Some(config.id);
        if first_start && founder {
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
        }
        let proposer = proposer::Proposer::start(
            config.id,
            raft.clone(),
            shared.clone(),
            config.proposer.clone(),
            watch_rx.clone(),
        );
        let reader = reader::Reader::start(raft.clone(), shared.clone(), watch_rx.clone());
        let ctx = Arc::new(client_port::Ctx {
            id: config.id,
            client_addr: config.client_addr.clone(),
            raft: raft.clone(),
            shared,
            proposer,
            reader,
        });
        tokio::spawn(client_port::serve_clients(
            client_listener,
            ctx.clone(),
            watch_rx,
        ));
        tracing::info!(
            "serving clients on {}, peers on {}, data in {}",
            config.client_addr,
            config.peer_addr,
            dir.display()
        );
        Ok(Node {
            raft,
            ctx,
            shutdown,
        })
    }

    /// Stops serving and shuts Raft down.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!("raft shutdown: {e}");
        }
        tracing::info!("stopped");
    }
}

/// Runs a node until SIGTERM or ctrl-c. The handlers are installed before the node starts,
/// so a signal that arrives while it starts is not lost (nor fatal).
pub async fn serve(config: Config) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot watch SIGINT: {e}"))?;
    let node = Node::start(config).await?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
    node.stop().await;
    Ok(())
}
