//! A small simulated cluster: it forms, decides, survives a crash of a node's disk, and
//! replays exactly from its seed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::raft::in_process::Carried;
use weir_core::machine::Reply;

/// Seeded delays of 1 to 4 ms each way; a dead node's messages are lost.
#[derive(Default)]
struct Net {
    nodes: Mutex<BTreeMap<NodeId, Arc<SimNode>>>,
    dead: Mutex<BTreeSet<NodeId>>,
}

impl Net {
    fn delay() -> Duration {
        let r = crate::simulated::random().expect("a simulation draws from its seed");
        Duration::from_micros(1_000 + r % 3_000)
    }

    fn reachable(&self, id: NodeId) -> Option<Arc<SimNode>> {
        if self.dead.lock().unwrap().contains(&id) {
            return None;
        }
        self.nodes.lock().unwrap().get(&id).cloned()
    }
}

struct Shared(Arc<Net>);

impl Transport for Shared {
    fn send(&self, from: NodeId, to: NodeId, request: PeerRequest) -> Carried {
        let net = self.0.clone();
        Box::pin(async move {
            tokio::time::sleep(Net::delay()).await;
            net.reachable(from)?;
            let response = net.reachable(to)?.answer(request).await;
            tokio::time::sleep(Net::delay()).await;
            net.reachable(from)?;
            Some(response)
        })
    }
}

/// Waits (simulated time, at most 30 s) until some node of `ids` leads and every one of them
/// knows it.
async fn leader(net: &Net, ids: &[NodeId]) -> NodeId {
    for _ in 0..3_000 {
        let nodes: Vec<_> = ids.iter().filter_map(|id| net.reachable(*id)).collect();
        let seen: BTreeSet<_> = nodes.iter().map(|n| n.leader()).collect();
        if let [Some(l)] = seen.into_iter().collect::<Vec<_>>()[..] {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no leader within 30 s of simulated time");
}

async fn start(net: &Arc<Net>, root: &Path, disks: &BTreeMap<NodeId, MemDisk>, id: NodeId) {
    let mut spec = NodeSpec::new(id, vec![1, 2, 3]);
    spec.election_timeout_ms = 300 + 40 * id;
    let dir = root.join(id.to_string());
    let node = SimNode::start(&spec, &disks[&id], &dir, Arc::new(Shared(net.clone())))
        .await
        .unwrap();
    net.nodes.lock().unwrap().insert(id, Arc::new(node));
    net.dead.lock().unwrap().remove(&id);
}

/// One run: form, open sessions, crash a follower's disk (torn), restart it, and record
/// what happened with the simulated time of each step.
fn run(seed: u64, root: &Path) -> Vec<String> {
    let rt = runtime(seed).unwrap();
    rt.block_on(async {
        let _sim = crate::simulated::enter(seed);
        let started = tokio::time::Instant::now();
        let at = || started.elapsed().as_micros();
        let mut trace = vec![];
        let net = Arc::new(Net::default());
        let disks: BTreeMap<NodeId, MemDisk> = (1..=3).map(|id| (id, MemDisk::new())).collect();
        for id in 1..=3 {
            start(&net, root, &disks, id).await;
        }
        net.reachable(1).unwrap().found().await.unwrap();
        let l = leader(&net, &[1, 2, 3]).await;
        trace.push(format!("{} leader {l}", at()));
        for _ in 0..20 {
            let node = net.reachable(l).unwrap();
            let (index, reply) = node
                .propose(
                    &Principal::anonymous(),
                    Command::OpenSession { ttl_ms: 5_000 },
                )
                .await
                .unwrap();
            let Reply::SessionOpened { session, .. } = reply else {
                panic!("an open answers SessionOpened, not {reply:?}");
            };
            trace.push(format!("{} opened {session} at {index}", at()));
        }
        let victim = if l == 3 { 2 } else { 3 };
        net.dead.lock().unwrap().insert(victim);
        let node = net.nodes.lock().unwrap().remove(&victim).unwrap();
        node.kill().await;
        disks[&victim].crash(Some(7));
        trace.push(format!("{} killed {victim}", at()));
        let node = net.reachable(l).unwrap();
        let (index, _) = node
            .propose(
                &Principal::anonymous(),
                Command::OpenSession { ttl_ms: 5_000 },
            )
            .await
            .unwrap();
        trace.push(format!(
            "{} opened one more at {index} with {victim} down",
            at()
        ));
        start(&net, root, &disks, victim).await;
        for _ in 0..3_000 {
            let digests: BTreeSet<_> = (1..=3)
                .map(|id| net.reachable(id).unwrap().digest())
                .collect();
            if digests.len() == 1 && digests.iter().next().unwrap().0 >= Some(index) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for id in 1..=3 {
            let (applied, digest) = net.reachable(id).unwrap().digest();
            trace.push(format!(
                "{} node {id} applied {applied:?} digest {digest}",
                at()
            ));
        }
        let nodes: Vec<_> = std::mem::take(&mut *net.nodes.lock().unwrap())
            .into_values()
            .collect();
        for node in nodes {
            node.kill().await;
        }
        trace
    })
}

fn temp(tag: &str) -> crate::raft::test_cluster::TempDir {
    crate::raft::test_cluster::TempDir::new(tag)
}

#[test]
fn a_cluster_forms_decides_and_a_crashed_node_catches_up() {
    let dir = temp("sim-catch-up");
    let trace = run(11, &dir.0);
    let finals: Vec<_> = trace.iter().filter(|l| l.contains(" digest ")).collect();
    assert_eq!(finals.len(), 3, "{trace:#?}");
    let digest = |l: &str| l.rsplit_once(" applied ").unwrap().1.to_string();
    assert!(
        finals.iter().all(|l| digest(l) == digest(finals[0])),
        "every node ends at the same index and digest: {trace:#?}"
    );
    let opened: BTreeSet<_> = trace.iter().filter(|l| l.contains(" opened ")).collect();
    assert_eq!(opened.len(), 21, "{trace:#?}");
}

#[test]
fn a_seed_replays_exactly_and_another_seed_differs() {
    let (a, b, c) = (
        temp("sim-replay-a"),
        temp("sim-replay-b"),
        temp("sim-replay-c"),
    );
    let first = run(5, &a.0);
    let again = run(5, &b.0);
    assert_eq!(first, again, "the same seed, the same run");
    let other = run(6, &c.0);
    assert_ne!(first, other, "another seed, another run");
}

#[test]
fn a_node_outside_a_simulation_refuses_to_start() {
    let dir = temp("sim-outside");
    let rt = runtime(1).unwrap();
    let err = rt
        .block_on(SimNode::start(
            &NodeSpec::new(1, vec![1]),
            &MemDisk::new(),
            &dir.0,
            Arc::new(Shared(Arc::default())),
        ))
        .err()
        .expect("refused");
    assert!(err.contains("only inside a simulation"), "{err}");
}
