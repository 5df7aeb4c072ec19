//! `power-loss`: kill -9 of one node, of the leader, of all, or (five nodes) of two at once,
//! and every write its data directory had not fsynced dropped (the lost-fsync layer,
//! [`crate::lazyfs`]); the heal restarts it on what it had made durable. Nodes that go
//! down together are all down before any loses its writes.

use serde_json::json;

use super::fault::{Fault, after, leader};
use crate::cluster::Cluster;

/// Injects a power loss; returns what was done.
pub(super) async fn inject(
    cluster: &mut Cluster,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::PowerLoss(n) => {
            let lost = cluster.power_loss(n)?;
            json!({"fault": "power-loss", "node": n, "lost": lost})
        }
        Fault::PowerLossLeader => {
            let l = leader(cluster, "power off").await?;
            let lost = cluster.power_loss(l)?;
            json!({"fault": "power-loss-leader", "node": l, "lost": lost})
        }
        Fault::PowerLossAll => {
            // All down before any loses its writes: a whole-cluster outage.
            for n in cluster.ids() {
                cluster.kill(n);
            }
            let mut lost = vec![];
            for n in cluster.ids() {
                lost.push(cluster.power_loss(n)?);
            }
            json!({"fault": "power-loss-all", "lost": lost})
        }
        Fault::PowerLossTwo(nodes) => {
            // Both down before either loses its writes.
            for n in nodes {
                cluster.kill(n);
            }
            let mut lost = vec![];
            for n in nodes {
                lost.push(cluster.power_loss(n)?);
            }
            json!({"fault": "power-loss-two", "nodes": nodes, "lost": lost})
        }
        Fault::PowerLossLeaderAnd { with } => {
            let l = leader(cluster, "power off").await?;
            let nodes = [l, after(cluster, l, with)];
            for n in nodes {
                cluster.kill(n);
            }
            let mut lost = vec![];
            for n in nodes {
                lost.push(cluster.power_loss(n)?);
            }
            json!({"fault": "power-loss-leader-and-one", "node": l, "nodes": nodes, "lost": lost})
        }
        _ => unreachable!("not a power-loss fault: {fault:?}"),
    })
}
