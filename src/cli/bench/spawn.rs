//! `--spawn N`: a durable N-node loopback cluster of this very binary, with the default
//! config, in a temporary directory removed afterwards.

use std::time::Duration;

use crate::launcher::LocalCluster;

/// How long a restarted node may take to answer again.
const REJOIN_WAIT: Duration = Duration::from_secs(20);

/// Starts `n` nodes (the caller waits for a leader).
pub fn start(n: u64) -> Result<LocalCluster, String> {
    let weir = std::env::current_exe().map_err(|e| format!("cannot find weir itself: {e}"))?;
    // Warnings only: the bench's own progress lines are what the reader watches.
    let mut cluster = LocalCluster::in_temp_dir(weir, "weir-bench")?.rust_log("warn");
    let configs = cluster.loopback_configs(n)?;
    cluster.add_and_start(configs)?;
    Ok(cluster)
}

/// Starts killed node `id` again and waits (bounded) until it answers.
pub async fn restart(cluster: &mut LocalCluster, id: u64) -> Result<(), String> {
    cluster.start(id)?;
    cluster.answering(id, REJOIN_WAIT).await;
    Ok(())
}
