//! `client-cut` and `client-delay` (loopback mode): faults of the pinned cut client's links
//! through the client fronts. The cut client (and the CLI holder, when it runs) is pinned
//! to a permit of `cut` before the fault, and let go at the heal ([`let_go`]).

use std::time::{Duration, Instant};

use serde_json::json;

use super::fault::{Fault, Targets, leader};
use crate::client_front::{CLI_CLIENT_IP, CUT_CLIENT_IP, ClientLink};
use crate::cluster::Cluster;
use crate::workload::CutClient;

/// How long the cut client's replies are delayed before its requests are dropped too
/// (`client-delay`): the delay builds up at half of real time (twice its length), then a
/// few keep-alives (every TTL/5) are acknowledged under the whole delay.
fn delay_phase_ms(ms: u64) -> u64 {
    2 * ms + 1_500
}

/// Pins the cut client and waits (bounded) until it holds a permit under the pin; its fence.
async fn pinned(cut: &CutClient) -> Result<u64, String> {
    cut.pin();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(fence) = cut.holding() {
            return Ok(fence);
        }
        if Instant::now() > deadline {
            cut.let_go();
            return Err("the cut client was granted no permit to hold".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The CLI holder's fence once it holds a pinned permit, if it runs and is granted one
/// within [`pinned`]'s bound (else the cut goes on without it).
async fn cli_pinned(targets: &Targets) -> Option<u64> {
    pinned(targets.cli_holder.as_deref()?).await.ok()
}

/// Ends the pinned holds of the cut client and the CLI holder.
pub(super) fn let_go(targets: &Targets) {
    targets.cut_client.let_go();
    if let Some(cli) = &targets.cli_holder {
        cli.let_go();
    }
}

/// Injects a fault of the cut client's links; returns what was done.
pub(super) async fn inject(
    cluster: &mut Cluster,
    targets: &Targets,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::CutClientFromLeader => {
            let fence = pinned(&targets.cut_client).await?;
            let cli = cli_pinned(targets).await;
            let l = leader(cluster, "cut the client from")
                .await
                .inspect_err(|_| let_go(targets))?;
            cluster.client_link(CUT_CLIENT_IP, l, ClientLink::Cut)?;
            if cli.is_some() {
                cluster.client_link(CLI_CLIENT_IP, l, ClientLink::Cut)?;
            }
            json!({"fault": "client-cut", "node": l, "fence": fence, "cli_fence": cli})
        }
        Fault::DelayClient { ms } => {
            let fence = pinned(&targets.cut_client).await?;
            let delayed = |drop_requests| ClientLink::DelayReplies { ms, drop_requests };
            for n in cluster.ids() {
                cluster.client_link(CUT_CLIENT_IP, n, delayed(false))?;
            }
            tokio::time::sleep(Duration::from_millis(delay_phase_ms(ms))).await;
            if targets.cut_client.holding() != Some(fence) {
                return Err(format!(
                    "the cut client lost its permit (fence {fence}) while only its replies were delayed"
                ));
            }
            for n in cluster.ids() {
                cluster.client_link(CUT_CLIENT_IP, n, delayed(true))?;
            }
            json!({"fault": "client-delay", "ms": ms, "fence": fence, "delayed_ms": delay_phase_ms(ms)})
        }
        _ => unreachable!("not a client link fault: {fault:?}"),
    })
}
