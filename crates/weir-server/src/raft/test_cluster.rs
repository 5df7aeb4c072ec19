//! Tests only: openraft nodes in one process, on Weir's own stores and peer answers
//! ([`answer`], so the stand-in sees what it would on a real peer port), over an in-process
//! network ([`super::in_process`]) whose links a test cuts and heals. Timings are short
//! (heartbeat 50 ms, election 150-300 ms); every wait is bounded by [`PATIENCE`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::in_process::{Carried, Dialer, Transport};
use super::log_store::LogStore;
use super::network::{PeerRequest, PeerResponse, answer};
use super::stand_in::StandIn;
use super::state_store::{AppliedState, StateStore};
use super::{NodeAddr, NodeId, Raft};
use crate::shutdown::{ShutdownSender, shutdown_channel};
use weir_core::machine::{Batch, Leadership};

/// Every wait of these tests: far above anything here takes on a quiet machine.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A node as its peers reach it, with the sending end of its stand-in's shutdown signal
/// (kept as long as the network, so the backstop runs until the Raft core ends).
type Reached = (Raft, Arc<StandIn>, Arc<ShutdownSender>);

#[derive(Clone, Default)]
pub struct Net {
    nodes: Arc<Mutex<BTreeMap<NodeId, Reached>>>,
    /// Cut links, as (lower id, higher id): nothing crosses them either way.
    cut: Arc<Mutex<BTreeSet<(NodeId, NodeId)>>>,
}

impl Net {
    /// Cuts the link between `a` and `b`, both ways.
    pub fn cut(&self, a: NodeId, b: NodeId) {
        self.cut.lock().unwrap().insert((a.min(b), a.max(b)));
    }

    /// Heals the link between `a` and `b`.
    pub fn heal(&self, a: NodeId, b: NodeId) {
        self.cut.lock().unwrap().remove(&(a.min(b), a.max(b)));
    }

    /// Lets node `id` stand for election by its timers, openraft's and the stand-in's
    /// backstop, or not (`on`). A stand-in answering a refused candidate still stands.
    pub fn elect(&self, id: NodeId, on: bool) {
        let (raft, stand_in, _) = self.nodes.lock().unwrap()[&id].clone();
        raft.runtime_config().elect(on);
        stand_in.set_backstop(on);
    }

    /// Lets node `id`'s backstop start elections, or not (`on`), leaving openraft's timer
    /// as it is.
    pub fn backstop(&self, id: NodeId, on: bool) {
        self.nodes.lock().unwrap()[&id].1.set_backstop(on);
    }

    fn is_cut(&self, a: NodeId, b: NodeId) -> bool {
        self.cut.lock().unwrap().contains(&(a.min(b), a.max(b)))
    }

    /// Delivers `request` from `from` to `to` and its answer back, unless their link is
    /// cut at either crossing.
    async fn deliver(
        &self,
        from: NodeId,
        to: NodeId,
        request: PeerRequest,
    ) -> Option<PeerResponse> {
        if self.is_cut(from, to) {
            return None;
        }
        let (raft, stand_in, _) = self.nodes.lock().unwrap().get(&to).cloned()?;
        let response = answer(&raft, &stand_in, request).await;
        (!self.is_cut(from, to)).then_some(response)
    }
}

impl Transport for Net {
    fn send(&self, from: NodeId, to: NodeId, request: PeerRequest) -> Carried {
        let net = self.clone();
        Box::pin(async move { net.deliver(from, to, request).await })
    }
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A fresh directory named after `tag` and this process.
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("weir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts node `id` on `net`, its stores under `dir`: its Raft handle and applied state.
pub async fn start(net: &Net, dir: &std::path::Path, id: NodeId) -> (Raft, Arc<AppliedState>) {
    let config = openraft::Config {
        cluster_name: "in-process test".into(),
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        ..openraft::Config::default()
    }
    .validate()
    .unwrap();
    let dir = dir.join(id.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let store = StateStore::open(&dir).unwrap();
    let state = store.state();
    let raft = Raft::new(
        id,
        Arc::new(config.clone()),
        Dialer {
            from: id,
            net: Arc::new(net.clone()),
        },
        LogStore::open(&dir.join("log")).unwrap(),
        store,
    )
    .await
    .unwrap();
    let (shutdown, watch) = shutdown_channel();
    let stand_in = StandIn::start(raft.clone(), &config, watch);
    net.nodes
        .lock()
        .unwrap()
        .insert(id, (raft.clone(), stand_in, Arc::new(shutdown)));
    (raft, state)
}

/// Starts nodes 1 to `n` on `net` and makes node 1 found the cluster: it leads once this
/// returns. The other nodes do not stand by their timers, openraft's or the backstop (each
/// test says when they may, with [`Net::elect`]).
pub async fn found(
    net: &Net,
    dir: &std::path::Path,
    n: NodeId,
) -> BTreeMap<NodeId, (Raft, Arc<AppliedState>)> {
    let mut nodes = BTreeMap::new();
    for id in 1..=n {
        let node = start(net, dir, id).await;
        if id != 1 {
            net.elect(id, false);
        }
        nodes.insert(id, node);
    }
    let members: BTreeMap<NodeId, NodeAddr> = (1..=n).map(|id| (id, NodeAddr::default())).collect();
    nodes[&1].0.initialize(members).await.unwrap();
    for (raft, _) in nodes.values() {
        raft.wait(Some(PATIENCE))
            .metrics(|m| m.current_leader == Some(1), "node 1 leads")
            .await
            .unwrap();
    }
    nodes
}

/// Appends one (empty) batch through `leader` and waits for its commit.
pub async fn write(leader: &Raft, id: NodeId, clock_ms: u64) {
    let term = leader.metrics().borrow().current_term;
    let batch = Batch {
        leadership: Leadership {
            term,
            node: id,
            incarnation: 1,
        },
        clock_ms,
        wall_ms: 0,
        commands: vec![],
    };
    tokio::time::timeout(PATIENCE, leader.client_write(batch))
        .await
        .expect("a write commits")
        .expect("the leader takes writes");
}

pub fn last_log_index(raft: &Raft) -> Option<u64> {
    raft.metrics().borrow().last_log_index
}
