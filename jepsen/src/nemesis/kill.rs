//! `kill`: kill -9 of one node, of the leader, of all, or (five nodes) of two at once; the
//! heal restarts them on their data directories as they are.

use serde_json::json;

use super::fault::{Fault, after, leader};
use crate::cluster::Cluster;

/// Injects a kill fault; returns what was done.
pub(super) async fn inject(
    cluster: &mut Cluster,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::Kill(n) => {
            cluster.kill(n);
            json!({"fault": "kill", "node": n})
        }
        Fault::KillLeader => {
            let l = leader(cluster, "kill").await?;
            cluster.kill(l);
            json!({"fault": "kill-leader", "node": l})
        }
        Fault::KillAll => {
            for n in cluster.ids() {
                cluster.kill(n);
            }
            json!({"fault": "kill-all"})
        }
        Fault::KillTwo(nodes) => {
            for n in nodes {
                cluster.kill(n);
            }
            json!({"fault": "kill-two", "nodes": nodes})
        }
        Fault::KillLeaderAnd { with } => {
            let l = leader(cluster, "kill").await?;
            let other = after(cluster, l, with);
            cluster.kill(l);
            cluster.kill(other);
            json!({"fault": "kill-leader-and-one", "node": l, "nodes": [l, other]})
        }
        _ => unreachable!("not a kill fault: {fault:?}"),
    })
}
