//! `delay`: every peer link delayed with jitter (the proxy), or peer packets lost, or the
//! bandwidth limited, through the [`Cluster`]'s primitives; the heal lifts them.

use serde_json::json;

use super::fault::Fault;
use crate::cluster::Cluster;

/// Injects a delay, loss or bandwidth fault; returns what was done.
pub(super) async fn inject(
    cluster: &mut Cluster,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::Delay { ms, jitter_ms } => {
            cluster.delay(ms, jitter_ms);
            json!({"fault": "delay", "ms": ms, "jitter_ms": jitter_ms})
        }
        Fault::Loss { percent } => {
            cluster.loss(percent)?;
            json!({"fault": "loss", "percent": percent})
        }
        Fault::Bandwidth { bytes_per_s } => {
            cluster.bandwidth(bytes_per_s)?;
            json!({"fault": "bandwidth", "bytes_per_s": bytes_per_s})
        }
        _ => unreachable!("not a delay fault: {fault:?}"),
    })
}
