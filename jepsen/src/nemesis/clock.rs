//! `clock`: a rolling restart giving each node a proposer clock rate and a wall-clock
//! skew; the heal restarts them on true clocks. Wall time must decide nothing, so a skew
//! never stays within a TTL: it may reach [`WALL_SKEW_MS_MAX`].

use serde_json::json;

use super::fault::Fault;
use crate::cluster::Cluster;

/// The largest wall-clock skew the clock nemesis gives a node: an hour either way, far past
/// any TTL, so a decision taken on wall time would show.
pub const WALL_SKEW_MS_MAX: u64 = 3_600_000;

/// Injects skewed clocks, one node at a time; returns what was done.
pub(super) async fn inject(
    cluster: &mut Cluster,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::Clocks(ref clocks) => {
            for (i, (wall_skew_ms, rate)) in clocks.iter().enumerate() {
                let clock = crate::cluster::Clock {
                    wall_skew_ms: *wall_skew_ms,
                    rate: *rate as f64 / 1_000.0,
                };
                cluster
                    .restart_with_clock(i as u64 + 1, Some(clock))
                    .await?;
            }
            json!({"fault": "clocks", "nodes": clocks.iter().map(|(w, r)| json!({"wall_skew_ms": w, "rate": *r as f64 / 1_000.0})).collect::<Vec<_>>()})
        }
        _ => unreachable!("not a clock fault: {fault:?}"),
    })
}
