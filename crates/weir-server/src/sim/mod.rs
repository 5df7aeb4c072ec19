//! One node as the deterministic simulator runs it: the node's own Raft glue, machine,
//! proposer, reader and stand-in, with its log on a simulated disk ([`MemDisk`]) and its
//! peers reached through a simulated network ([`Transport`]), on a current-thread runtime
//! whose clock is paused ([`runtime`]).
//!
//! What is the node's own code here: openraft with Weir's log store (the WAL and its
//! writer) and state store (the machine, snapshots, their files), the stand-in's backstop
//! elections, the proposer with its stamper and ticks, the linearizable reader, and the
//! edge's checks on a client's write (its arguments, its session's owner). What is not: the client and peer ports (TCP, TLS,
//! frames, the hello) and the front doors; a simulated client calls [`SimNode::propose`]
//! where the client port would, and the simulation's [`Transport`] carries peer requests to
//! [`SimNode::answer`] where the peer port would.
//!
//! Determinism: [`runtime`] turns this thread's simulation switch on
//! ([`crate::simulated`]), so the node's file work runs inline, its log writer is a task,
//! its system clock, incarnation and random draws come from the seed, and its log clock is
//! tokio's paused clock at the rate [`NodeSpec::clock_rate`]. Each node draws its election
//! timeout once, from its spec (openraft's own draw is pinned to it: its range is one
//! millisecond wide). With the transport's own draws seeded, and tokio's (the runtime's
//! seed, [`runtime`]), a run replays exactly.
//!
//! Invariants:
//! - A killed node ([`SimNode::kill`]) decides nothing more: its Raft core, proposer, reader
//!   and stand-in have ended when `kill` returns. Its log writer may run a few queued jobs
//!   after (log readers hold its queue), but its disk is bound to the generation it opened
//!   ([`MemDisk::bound`]), so once the simulation crashes the disk those jobs touch nothing.
//!   The simulation drops the node's messages before calling `kill` and crashes its disk
//!   after.
//! - A node restarted on the same [`MemDisk`] and directory recovers what was durable:
//!   its log from the disk's durable images, its machine from `snapshot.bin`. Snapshot files
//!   are real files in the node's directory; what a power loss leaves of them is kept by
//!   [`SnapshotImages`] from the steps the node tells it, and put back when the simulation
//!   crashes the node.

mod disk;
pub mod groups;
mod snapshot_images;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::RaftLogStorage;

pub use crate::raft::in_process::Transport;
pub use disk::MemDisk;
pub use snapshot_images::SnapshotImages;

use crate::config::{ProposerConfig, RaftConfig};
use crate::raft::log_store::LogStore;
use crate::raft::network::{PeerRequest, PeerResponse, answer};
use crate::raft::stand_in::StandIn;
use crate::raft::state_store::{AppliedState, StateStore};
use crate::raft::{NodeAddr, NodeId, Raft};
use crate::security::Principal;
use crate::server::edge;
use crate::server::proposer::{Outcome, Proposer};
use crate::server::reader::Reader;
use crate::shutdown::{ShutdownSender, shutdown_channel};
use weir_core::machine::Command;
use weir_proto::protocol::{Answer, Failure, Query};

/// A simulated node's log segments: small, so a run begins and removes segments often.
pub const SEGMENT_BYTES: u64 = crate::config::LOG_SEGMENT_BYTES_MIN;

/// What a simulated node is: its id, the cluster's members, its timings and clocks.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub id: NodeId,
    /// Every voter of the cluster, this node included.
    pub members: Vec<NodeId>,
    pub heartbeat_ms: u64,
    /// This node's election timeout (openraft's range is pinned to it).
    pub election_timeout_ms: u64,
    /// How fast this node's proposer clock runs: 1.0 is true time.
    pub clock_rate: f64,
    /// How far this node's wall stamps are off the simulated system clock, ms (wall time
    /// decides nothing, so any skew must leave a run's outcome as it was).
    pub wall_skew_ms: i64,
    /// A snapshot after this many entries (small, so runs build and install them).
    pub snapshot_every: u64,
}

impl NodeSpec {
    /// Node `id` of `members`, with the node's default timings, true clocks and a snapshot
    /// every 500 entries.
    pub fn new(id: NodeId, members: Vec<NodeId>) -> NodeSpec {
        let raft = RaftConfig::default();
        NodeSpec {
            id,
            members,
            heartbeat_ms: raft.heartbeat_ms,
            election_timeout_ms: raft.election_timeout_ms_min,
            clock_rate: 1.0,
            wall_skew_ms: 0,
            snapshot_every: 500,
        }
    }

    fn openraft(&self) -> Result<openraft::Config, String> {
        let defaults = RaftConfig::default();
        let raft = RaftConfig {
            heartbeat_ms: self.heartbeat_ms,
            election_timeout_ms_min: self.election_timeout_ms,
            election_timeout_ms_max: self.election_timeout_ms + 1,
            snapshot_logs_since_last: self.snapshot_every,
            max_in_snapshot_log_to_keep: self.snapshot_every / 5,
            purge_batch_size: (self.snapshot_every / 10).max(1),
            log_segment_bytes: SEGMENT_BYTES,
            ..defaults
        };
        crate::config::Config {
            raft,
            ..crate::config::Config::default()
        }
        .openraft()
    }
}

/// Whether this build seeds tokio's own random draws ([`runtime`]): built with
/// `--cfg tokio_unstable`. Without it a run is still judged, but its replay may differ.
pub const REPLAY_EXACT: bool = cfg!(tokio_unstable);

/// A current-thread runtime with tokio's clock paused (time moves only when every task
/// waits, to the next timer), for one simulated run of `seed`. Enter the switch with
/// [`crate::simulated::enter`] inside it, on the thread that drives it.
///
/// tokio's own random choices (which ready branch an unbiased `select!` takes first:
/// openraft's core loop and its replication backoff use one) are drawn from `seed` too,
/// where tokio's unstable API is on (`--cfg tokio_unstable`, the workspace's
/// `.cargo/config.toml`); without it they are tokio's own random draws and a replay can
/// diverge at the first instant two of a `select!`'s branches are ready at once.
pub fn runtime(seed: u64) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    #[cfg(not(tokio_unstable))]
    let _ = seed;
    builder.build()
}

/// One running simulated node.
pub struct SimNode {
    id: NodeId,
    members: Vec<NodeId>,
    raft: Raft,
    stand_in: Arc<StandIn>,
    state: Arc<AppliedState>,
    proposer: Proposer,
    reader: Reader,
    shutdown: ShutdownSender,
}

impl SimNode {
    /// Starts node `spec.id` with its log on `disk` and its snapshot in `dir` (created if
    /// missing), reaching its peers through `net`. Call it inside a simulation.
    pub async fn start(
        spec: &NodeSpec,
        disk: &MemDisk,
        dir: &Path,
        net: Arc<dyn Transport>,
    ) -> Result<SimNode, String> {
        if !crate::simulated::on() {
            return Err(
                "a simulated node starts only inside a simulation (simulated::enter)".into(),
            );
        }
        let log = LogStore::open_disk(Box::new(disk.bound()), SEGMENT_BYTES)?;
        SimNode::start_on(spec, log, dir, net).await
    }

    /// [`SimNode::start`] on a log already opened: one group's store of a log a simulated
    /// process's groups share ([`LogStore::open_shared_disk`]).
    pub async fn start_on(
        spec: &NodeSpec,
        mut log: LogStore,
        dir: &Path,
        net: Arc<dyn Transport>,
    ) -> Result<SimNode, String> {
        if !crate::simulated::on() {
            return Err(
                "a simulated node starts only inside a simulation (simulated::enter)".into(),
            );
        }
        crate::simulated::set_clock_rate(spec.id, spec.clock_rate);
        crate::simulated::set_wall_skew(spec.id, spec.wall_skew_ms);
        let config = Arc::new(spec.openraft()?);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let startup_last = log
            .get_log_state()
            .await
            .map_err(|e| format!("log: {e}"))?
            .last_log_id
            .map(|id| id.index);
        let store = StateStore::open(dir)?;
        let state = store.state();
        let dialer = crate::raft::in_process::Dialer { from: spec.id, net };
        let raft = Raft::new(spec.id, config.clone(), dialer, log, store)
            .await
            .map_err(|e| format!("raft: {e}"))?;
        let (shutdown, watch) = shutdown_channel();
        let stand_in = StandIn::start(raft.clone(), &config, watch.clone());
        let proposer = Proposer::start(
            spec.id,
            raft.clone(),
            state.clone(),
            ProposerConfig::default(),
            None,
            watch.clone(),
        );
        let reader = Reader::start(raft.clone(), state.clone(), startup_last, watch);
        Ok(SimNode {
            id: spec.id,
            members: spec.members.clone(),
            raft,
            stand_in,
            state,
            proposer,
            reader,
            shutdown,
        })
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Founds the cluster of this node's members (one node, once, on a fresh cluster).
    pub async fn found(&self) -> Result<(), String> {
        let members: BTreeMap<NodeId, NodeAddr> = self
            .members
            .iter()
            .map(|id| (*id, NodeAddr::default()))
            .collect();
        self.raft
            .initialize(members)
            .await
            .map_err(|e| format!("initialize: {e}"))
    }

    /// Answers a peer's request, as the peer port would.
    pub async fn answer(&self, request: PeerRequest) -> PeerResponse {
        answer(&self.raft, &self.stand_in, request).await
    }

    /// A write of `principal`'s, checked as the client port checks it (the arguments, the
    /// session's owner; an open is bound to the principal and draws its session id from the
    /// seed), through the proposer.
    pub async fn propose(&self, principal: &Principal, command: Command) -> Outcome {
        let command = edge::screen_write(&self.raft, &self.state, principal, command).await?;
        self.proposer.propose(command).await
    }

    /// A client's linearizable read.
    pub async fn read(&self, query: Query) -> Result<Answer, Failure> {
        self.reader.read(query).await
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// This node's current term.
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// The index of the last entry this node applied.
    pub fn applied_index(&self) -> Option<u64> {
        self.state.lock().last_applied.map(|id| id.index)
    }

    /// The applied index and the machine's digest there: replicas at the same index have
    /// the same digest.
    pub fn digest(&self) -> (Option<u64>, String) {
        let applier = self.state.lock();
        (
            applier.last_applied.map(|id| id.index),
            applier.machine.digest(),
        )
    }

    /// The log clock of the state this node applied (ms): the time its machine decides
    /// leases and refills by, as the node's status reports it.
    pub fn log_ms(&self) -> u64 {
        self.state.lock().machine.now_ms()
    }

    /// The node's applied state (the machine behind its lock, and its event feed).
    pub fn state(&self) -> &Arc<AppliedState> {
        &self.state
    }

    /// Stops the node as a crash would (module doc): nothing is flushed on purpose, and
    /// whatever the log writer had not settled is the disk's to lose ([`MemDisk::crash`]).
    /// Callers that share the node (an `Arc`) may kill it while others still hold it.
    pub async fn kill(&self) {
        self.shutdown.begin();
        // openraft's shutdown ends the core and with it the replication tasks and the
        // stores (the log writer's queue closes, and its task ends).
        let _ = self.raft.shutdown().await;
    }
}

#[cfg(test)]
mod tests;
