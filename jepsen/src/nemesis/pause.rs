//! `pause`: SIGSTOP of the leader past the election timeout and the session TTL (the
//! schedule holds it that long); the heal sends SIGCONT.

use serde_json::json;

use super::fault::{Fault, leader};
use crate::cluster::Cluster;

/// Injects a leader pause; returns what was done.
pub(super) async fn inject(
    cluster: &mut Cluster,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::PauseLeader { ms } => {
            let l = leader(cluster, "pause").await?;
            cluster.pause(l);
            json!({"fault": "pause-leader", "node": l, "ms": ms})
        }
        _ => unreachable!("not a pause fault: {fault:?}"),
    })
}
