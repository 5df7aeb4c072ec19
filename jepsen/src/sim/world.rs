//! The simulated cluster: every node's own code (`weir_server::sim::SimNode`) on the run's
//! network, each with its own in-memory log disk and snapshot directory that survive its
//! crashes.
//!
//! Owns the nodes' lives: start, found, crash (the node stopped whole, then its log disk
//! loses what it had not synced, sometimes tearing a write, and its snapshot files go back
//! to what their fsyncs made durable) and restart on the same disk; and
//! the door the clients write and read through ([`World::propose`], [`World::read`]).
//!
//! Invariants:
//! - A node is in `live` exactly while it runs; a crashed node is marked dead on the
//!   network before anything else, so nothing it sends or answers arrives after.
//! - A node's disk and snapshot files are crashed only after every task of the node has
//!   stopped, so no write of the old incarnation lands on what the new one starts from.
//! - Nothing here draws randomness: the nemesis decides, the world does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use weir_core::machine::{Command, Reply};
use weir_proto::protocol::{Answer, Failure, Query};
use weir_server::raft::network::{PeerRequest, PeerResponse};
use weir_server::security::Principal;
use weir_server::sim::{MemDisk, NodeSpec, SimNode, SnapshotImages, Transport};

use super::links::NodeId;
use super::net::{Boxed, Endpoint, Net};

/// The network the nodes speak over.
pub type PeerNet = Net<PeerRequest, PeerResponse>;

/// How much a node's election timeout may exceed the node's default minimum (300 ms), ms:
/// each node draws its own once, from the seed, inside the default range's width (150 ms),
/// so elections split and tie as often as on real nodes.
pub const ELECTION_SPREAD_MS: u64 = 150;

/// How many entries the nodes apply between snapshots, drawn once a run in this range: a
/// run applies some 600 to 1,000 entries, so every run builds snapshots and purges its log
/// behind them before its faults are over, and crashes and lagging followers meet them
/// (a crash restarts from `snapshot.bin`; a follower behind the purge is sent one).
pub const SNAPSHOT_EVERY: (u64, u64) = (40, 240);

/// How many times a crash yields for the node's in-flight calls to let go of it: each
/// call races the node's end, so one yield is enough; the bound turns a leak into an error.
const LET_GO_YIELDS_MAX: u32 = 10_000;

/// Distinguishes the snapshot directories of runs in one process (a test runs one seed
/// twice).
static RUNS: AtomicU64 = AtomicU64::new(0);

/// What a node's peers are given to reach the others: the run's network.
struct Wire(Arc<PeerNet>);

impl Transport for Wire {
    fn send(&self, from: NodeId, to: NodeId, request: PeerRequest) -> Boxed<Option<PeerResponse>> {
        let net = self.0.clone();
        Box::pin(async move { net.carry(from, to, request).await })
    }
}

/// A running node, and the signal that ends every call into it.
struct Live {
    node: Arc<SimNode>,
    ended: watch::Sender<bool>,
}

impl Live {
    /// The node and a receiver of its end, for one call.
    fn handle(&self) -> (Arc<SimNode>, watch::Receiver<bool>) {
        (self.node.clone(), self.ended.subscribe())
    }
}

/// How a node answers its peers: through the running node, until it ends.
struct Answering {
    node: Arc<SimNode>,
    ended: watch::Receiver<bool>,
}

impl Endpoint<PeerRequest, PeerResponse> for Answering {
    fn answer(&self, request: PeerRequest) -> Boxed<Option<PeerResponse>> {
        let (node, mut ended) = (self.node.clone(), self.ended.clone());
        Box::pin(async move {
            tokio::select! {
                biased;
                answer = node.answer(request) => Some(answer),
                // The node ended: it answers nothing more.
                _ = ended.wait_for(|e| *e) => None,
            }
        })
    }
}

/// The simulated cluster of one run.
pub struct World {
    pub net: Arc<PeerNet>,
    specs: Vec<NodeSpec>,
    disks: BTreeMap<NodeId, MemDisk>,
    /// Each node's snapshot directory lives under here; removed on drop.
    dir: PathBuf,
    /// What a crash leaves of each node's snapshot files.
    images: SnapshotImages,
    live: Mutex<BTreeMap<NodeId, Live>>,
}

impl World {
    /// Starts `rates.len()` nodes (ids from 1), each at its clock rate and with its wall
    /// skew (`wall_skews_ms`, in the same order), with the node's default timings but an
    /// election timeout of its own and a snapshot every [`SNAPSHOT_EVERY`] entries, on a
    /// network drawn from `seed`, and founds the cluster on node 1.
    pub async fn start(seed: u64, rates: &[f64], wall_skews_ms: &[i64]) -> Result<World, String> {
        let mut rng = crate::rng::Rng::new(seed);
        let members: Vec<NodeId> = (1..=rates.len() as u64).collect();
        let snapshot_every = rng.range(SNAPSHOT_EVERY.0, SNAPSHOT_EVERY.1);
        let specs = members
            .iter()
            .zip(rates)
            .enumerate()
            .map(|(i, (id, rate))| {
                let mut spec = NodeSpec::new(*id, members.clone());
                spec.election_timeout_ms += rng.range(0, ELECTION_SPREAD_MS);
                spec.clock_rate = *rate;
                spec.wall_skew_ms = wall_skews_ms.get(i).copied().unwrap_or(0);
                spec.snapshot_every = snapshot_every;
                spec
            })
            .collect();
        let dir = std::env::temp_dir().join(format!(
            "weir-sim-{}-{seed}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let world = World {
            net: Net::new(rng.next_u64()),
            specs,
            disks: members.iter().map(|id| (*id, MemDisk::new())).collect(),
            dir,
            images: SnapshotImages::default(),
            live: Mutex::new(BTreeMap::new()),
        };
        weir_server::simulated::set_file_hook(world.images.hook());
        for id in &members {
            world.run(*id).await?;
        }
        let (first, _) = world.handle(1).ok_or("node 1 did not start")?;
        first.found().await?;
        Ok(world)
    }

    /// The members, in order.
    pub fn members(&self) -> Vec<NodeId> {
        self.specs.iter().map(|s| s.id).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Live>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn handle(&self, id: NodeId) -> Option<(Arc<SimNode>, watch::Receiver<bool>)> {
        self.lock().get(&id).map(Live::handle)
    }

    /// Starts node `id` on its disk and marks it alive on the network.
    async fn run(&self, id: NodeId) -> Result<(), String> {
        let spec = &self.specs[id as usize - 1];
        let dir = self.node_dir(id);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let wire: Arc<dyn Transport> = Arc::new(Wire(self.net.clone()));
        let node = Arc::new(SimNode::start(spec, &self.disks[&id], &dir, wire).await?);
        let live = Live {
            node,
            ended: watch::channel(false).0,
        };
        let (node, ended) = live.handle();
        self.net.attach(id, Arc::new(Answering { node, ended }));
        self.lock().insert(id, live);
        self.net.change(|l| l.set_dead(id, false));
        Ok(())
    }

    /// Node `id`'s snapshot directory.
    fn node_dir(&self, id: NodeId) -> PathBuf {
        self.dir.join(format!("node{id}"))
    }

    /// Whether node `id` runs.
    pub fn is_live(&self, id: NodeId) -> bool {
        self.lock().contains_key(&id)
    }

    /// Crashes node `id`: its tasks stop, then its disk loses every unsynced write (with
    /// `tear`, the oldest one's first bytes survive) and its snapshot files go back to what
    /// their fsyncs made durable. A node already down stays down.
    pub async fn crash(&self, id: NodeId, tear: Option<usize>) -> Result<(), String> {
        self.net.change(|l| l.set_dead(id, true));
        self.net.detach(id);
        let Some(live) = self.lock().remove(&id) else {
            return Ok(());
        };
        live.ended.send_replace(true);
        let mut node = live.node;
        for _ in 0..LET_GO_YIELDS_MAX {
            match Arc::try_unwrap(node) {
                Ok(owned) => {
                    owned.kill().await;
                    self.disks[&id].crash(tear);
                    let dir = self.node_dir(id);
                    return self
                        .images
                        .crash(&dir)
                        .map_err(|e| format!("{}: {e}", dir.display()));
                }
                Err(shared) => {
                    node = shared;
                    tokio::task::yield_now().await;
                }
            }
        }
        Err(format!(
            "node {id}: calls into it still held after its crash"
        ))
    }

    /// Restarts node `id` on its disk, if it is down.
    pub async fn restart(&self, id: NodeId) -> Result<(), String> {
        if self.is_live(id) {
            return Ok(());
        }
        self.run(id).await
    }

    /// Stops every node (the run is over).
    pub async fn stop(&self) -> Result<(), String> {
        for id in self.members() {
            self.crash(id, None).await?;
        }
        Ok(())
    }

    /// The node that a running node says it is, the leader (the lowest such id).
    pub fn leader(&self) -> Option<NodeId> {
        self.lock()
            .iter()
            .find(|(id, live)| live.node.leader() == Some(**id))
            .map(|(id, _)| *id)
    }

    /// Every running node that says it leads: (id, its term, its applied index).
    pub fn leading(&self) -> Vec<(NodeId, u64, Option<u64>)> {
        self.lock()
            .iter()
            .filter(|(id, live)| live.node.leader() == Some(**id))
            .map(|(id, live)| (*id, live.node.term(), live.node.applied_index()))
            .collect()
    }

    /// Every running node's digest: (applied index, digest of the machine's state there).
    pub fn digests(&self) -> BTreeMap<NodeId, (Option<u64>, String)> {
        self.lock()
            .iter()
            .map(|(id, live)| (*id, live.node.digest()))
            .collect()
    }

    /// Every running node's log clock (ms), as its machine has applied it.
    pub fn log_clocks(&self) -> BTreeMap<NodeId, u64> {
        self.lock()
            .iter()
            .map(|(id, live)| (*id, live.node.log_ms()))
            .collect()
    }

    /// A client's write through node `id` (no network: the client carries it there);
    /// `None` when the node is down or went down before it answered.
    pub async fn propose(
        &self,
        id: NodeId,
        principal: &Principal,
        command: Command,
    ) -> Option<Result<(u64, Reply), Failure>> {
        let (node, mut ended) = self.handle(id)?;
        tokio::select! {
            biased;
            answer = node.propose(principal, command) => Some(answer),
            _ = ended.wait_for(|e| *e) => None,
        }
    }

    /// A client's linearizable read through node `id`, as [`World::propose`].
    pub async fn read(&self, id: NodeId, query: Query) -> Option<Result<Answer, Failure>> {
        let (node, mut ended) = self.handle(id)?;
        tokio::select! {
            biased;
            answer = node.read(query) => Some(answer),
            _ = ended.wait_for(|e| *e) => None,
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // A directory left behind costs disk only; nothing reads it again.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
