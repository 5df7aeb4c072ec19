//! `--spawn N`: a durable N-node loopback cluster of this very binary, with the default
//! config, in a temporary directory removed afterwards.

use std::time::Duration;

use weir_launcher::LocalCluster;

/// How long a restarted node may take to answer again.
const REJOIN_WAIT: Duration = Duration::from_secs(20);

/// Starts `n` nodes (the caller waits for a leader); with `tls`, each with development
/// certificates and one admin token, which the returned cluster's client security holds.
/// With `keep`, the directory outlives the run and the nodes log at `info`.
pub fn start(n: u64, tls: bool, keep: bool) -> Result<LocalCluster, String> {
    start_with(n, tls, keep, |_| {})
}

/// [`start`], with `edit` changing the nodes' configs before they start.
pub fn start_with(
    n: u64,
    tls: bool,
    keep: bool,
    edit: impl FnOnce(&mut [weir_server::config::Config]),
) -> Result<LocalCluster, String> {
    let weir = std::env::current_exe().map_err(|e| format!("cannot find weir itself: {e}"))?;
    let mut cluster = LocalCluster::in_temp_dir(weir, "weir-bench")?;
    if keep {
        cluster = cluster.rust_log("info,openraft=info");
        cluster.keep_dir();
        eprintln!(
            "[bench] the cluster's directory, kept after the run: {}",
            cluster.dir().display()
        );
    } else {
        // Warnings only: the bench's own progress lines are what the reader watches.
        cluster = cluster.rust_log("warn");
    }
    let mut configs = cluster.loopback_configs(n)?;
    // Envoy's rate-limit service on every node, for `--workload rls`.
    for c in &mut configs {
        c.grpc_listen = weir_launcher::loopback_addr()?;
    }
    if tls {
        let certs = cluster.dir().join("certs");
        weir_server::security::certs::init(&certs, n)?;
        let secret = format!("bench-{:016x}", weir_server::security::random_u64()?);
        for c in &mut configs {
            c.tls = Some(weir_server::config::TlsFiles {
                cert: certs.join(format!("node{}.pem", c.id)),
                key: certs.join(format!("node{}.key", c.id)),
                ca: certs.join("ca.pem"),
            });
            c.tokens = vec![weir_server::config::TokenEntry {
                sha256: weir_server::security::hash_token(&secret),
                role: "admin".into(),
            }];
        }
        let security =
            weir_proto::tls::ClientSecurity::new(Some(&certs.join("ca.pem")), Some(secret))?;
        cluster = cluster.security(security);
    }
    edit(&mut configs);
    cluster.add_and_start(configs)?;
    Ok(cluster)
}

/// Starts killed node `id` again and waits (bounded) until it answers.
pub async fn restart(cluster: &mut LocalCluster, id: u64) -> Result<(), String> {
    cluster.start(id)?;
    cluster.answering(id, REJOIN_WAIT).await;
    Ok(())
}
