//! The convergence probe (G4, and "every node alive"): after every heal and at
//! the end of a run, every node must be alive and answering, and the replicas must meet —
//! reach a common applied index — with equal digests there.
//!
//! The probe asks all nodes at once, over and over, for at most its bound:
//! - `target` is the largest `applied` of the first round: the replicas have met once every
//!   node has applied at least that far (mid-run the workloads keep writing, so equal
//!   indexes are caught only by chance; reaching the heal's index is what catching up means);
//! - at the end (the workloads stopped) the probe also waits for a round in which every node
//!   reports the same `applied` (`equal_at`);
//! - whenever two nodes report digests of the same index (`digest_applied`), they are compared.
//!
//! It records one `converge` fact; `checker/convergence.rs` judges it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::Cluster;
use crate::history::{Kind, NEMESIS, Recorder};
use crate::monitor;

/// How long replicas may take to meet after a mid-run heal: a restarted or re-added node
/// replays or installs a snapshot of a few seconds of writes; far less than this.
pub const MID_RUN_BOUND: Duration = Duration::from_secs(10);

/// How long they may take at the end, with the workloads stopped.
pub const FINAL_BOUND: Duration = Duration::from_secs(20);

/// Probes the cluster and records a `converge` fact; returns whether it converged.
pub async fn probe(cluster: &Cluster, history: &Recorder, last: bool) -> bool {
    let bound = if last { FINAL_BOUND } else { MID_RUN_BOUND };
    let started = Instant::now();
    let dead = cluster.dead();
    let servers = cluster.servers();
    let mut target = None;
    let mut latest: BTreeMap<u64, u64> = BTreeMap::new();
    let mut compared = 0u64;
    let mut mismatch = None;
    let mut equal_at = None;
    let mut caught_up = false;
    while started.elapsed() < bound {
        let asks: Vec<_> = servers
            .iter()
            .map(|a| {
                let a = a.clone();
                tokio::spawn(async move { monitor::ask(&a).await })
            })
            .collect();
        let mut round = vec![];
        for a in asks {
            if let Ok(Some(s)) = a.await {
                round.push(s);
            }
        }
        for s in &round {
            latest.insert(s.id, s.applied);
        }
        if round.len() == servers.len() {
            let max = round.iter().map(|s| s.applied).max().unwrap_or(0);
            let target = *target.get_or_insert(max);
            for (i, a) in round.iter().enumerate() {
                for b in &round[i + 1..] {
                    // A digest is of `digest_applied` (the node caches it per index and may
                    // report one a few entries behind `applied`): compare like with like.
                    if a.digest_applied == b.digest_applied {
                        compared += 1;
                        if a.digest != b.digest && mismatch.is_none() {
                            mismatch = Some(
                                json!({"applied": a.digest_applied, "nodes": [a.id, b.id], "digests": [a.digest, b.digest]}),
                            );
                        }
                    }
                }
            }
            caught_up = round.iter().all(|s| s.applied >= target);
            if round.iter().all(|s| s.applied == round[0].applied) {
                equal_at = Some(round[0].applied);
            }
            if caught_up && (!last || equal_at.is_some()) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let silent: Vec<u64> = (1..=servers.len() as u64)
        .filter(|id| !latest.contains_key(id))
        .collect();
    let converged = dead.is_empty()
        && silent.is_empty()
        && mismatch.is_none()
        && caught_up
        && (!last || equal_at.is_some());
    history.record(
        NEMESIS,
        Kind::Info,
        "converge",
        json!({
            "final": last, "converged": converged, "dead": dead, "silent": silent,
            "target": target, "applied": latest.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>(),
            "caught_up": caught_up, "equal_at": equal_at, "compared": compared,
            "mismatch": mismatch, "waited_ms": started.elapsed().as_millis() as u64,
        }),
    );
    converged
}
