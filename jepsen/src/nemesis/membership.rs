//! `membership`: a node removed from the cluster; the heal adds it back.

use serde_json::json;

use super::fault::Fault;
use crate::cluster::Cluster;

/// Removes a node; returns what was done.
pub(super) async fn inject(
    cluster: &mut Cluster,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::RemoveNode(n) => {
            cluster.remove(n).await?;
            json!({"fault": "remove-node", "node": n})
        }
        _ => unreachable!("not a membership fault: {fault:?}"),
    })
}
