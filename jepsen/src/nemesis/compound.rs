//! The compound kinds ([`super::fault::COMPOUND`]): two faults within one session TTL, a
//! quorum up throughout, injected in sequence by one call. `stall-then-kill` stops the
//! leader, resumes it after its stall and kills the leader of the moment after a pause;
//! `kill-then-kill` (five nodes) kills the leader, then the next one a while after it is
//! seen (time to take the holders' keep-alives: a leader killed the moment it is elected
//! leaves two elections back to back, longer than a 3 s TTL's budget whatever the client
//! does);
//! `stall-entry-then-kill-leader` (five nodes) stops the clients' entry node and kills the
//! leader while it is stopped, then resumes the entry node. The step's heal restarts what
//! was killed (and resumes what is still stopped).
//!
//! What was done, to which node and when (ms after the first fault), is returned for the
//! history's record of the fault. A step that finds no leader to act on fails the fault (as
//! every nemesis does: the history records it failed); a node it stopped is resumed first.

use std::time::{Duration, Instant};

use serde_json::json;

use super::fault::{Fault, leader};
use crate::cluster::Cluster;

/// Injects a compound fault; returns what was done.
pub(super) async fn inject(
    cluster: &mut Cluster,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    let t0 = Instant::now();
    let at = || t0.elapsed().as_millis() as u64;
    Ok(match *fault {
        Fault::StallThenKill { stall_ms, then_ms } => {
            let first = leader(cluster, "stall").await?;
            cluster.pause(first);
            tokio::time::sleep(Duration::from_millis(stall_ms)).await;
            cluster.resume(first);
            let resumed_ms = at();
            tokio::time::sleep(Duration::from_millis(then_ms)).await;
            let second = leader(cluster, "kill").await?;
            cluster.kill(second);
            json!({"fault": "stall-then-kill", "stopped": first, "resumed_ms": resumed_ms,
                   "killed": second, "killed_ms": at()})
        }
        Fault::KillThenKill { after_ms } => {
            let first = leader(cluster, "kill").await?;
            cluster.kill(first);
            leader(cluster, "kill again").await?;
            let elected_ms = at();
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            let second = leader(cluster, "kill again").await?;
            cluster.kill(second);
            json!({"fault": "kill-then-kill", "killed": [first, second],
                   "elected_ms": elected_ms, "killed_ms": at()})
        }
        Fault::StallEntryThenKillLeader { stall_ms, after_ms } => {
            let l = leader(cluster, "kill").await?;
            let entry = cluster.ids().find(|&id| id != l).expect("five nodes");
            cluster.pause(entry);
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            let now = match leader(cluster, "kill").await {
                Ok(now) => now,
                Err(e) => {
                    cluster.resume(entry);
                    return Err(e);
                }
            };
            cluster.kill(now);
            let killed_ms = at();
            tokio::time::sleep(Duration::from_millis(stall_ms.saturating_sub(after_ms))).await;
            cluster.resume(entry);
            json!({"fault": "stall-entry-then-kill-leader", "stopped": entry, "killed": now,
                   "killed_ms": killed_ms, "resumed_ms": at()})
        }
        _ => unreachable!("not a compound fault: {fault:?}"),
    })
}
