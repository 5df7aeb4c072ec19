//! `client-kill`: a client as a process of its own (`weir acquire crash --hold`, the CLI)
//! holds the one unit of `crash`, a waiter queues behind it, and the client is killed -9:
//! its lease must lapse and the permit move on to the waiter (the liveness checker pairs
//! each kill with its waiter through the kill's number).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::Cluster;
use crate::history::{Kind, Recorder};

/// Process numbers of the waiters behind killed clients: this plus the kill's number, so a
/// waiter still releasing when the next kill's waiter asks is another process.
const CRASH_WAITER: u64 = 30_000;

/// Client kills so far in this process (numbers each kill and its waiter).
static KILLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether the `crash` limit's status satisfies `ready` within 10 s (polled every 20 ms).
async fn crash_limit_within(
    client: &weir_client::Client,
    ready: impl Fn(&weir_core::machine::LimitStatus) -> bool,
) -> bool {
    use crate::workload::{CRASH, TENANT};
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() <= deadline {
        if let Ok(Some(s)) = client.limit_status(TENANT, CRASH).await
            && ready(&s)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The waiter behind client kill number `kill`: queues on `crash` (waiting up to 20 s) and
/// records its `acquire` with `behind_kill` and `kill`; releases what it gets.
async fn wait_behind_kill(client: weir_client::Client, kill: u64, history: Recorder) {
    use crate::workload::{CRASH, TENANT};
    let process = CRASH_WAITER + kill;
    let Ok(session) = weir_client::Session::open(&client, crate::workload::TTL).await else {
        return;
    };
    let mut options = weir_client::AcquireOptions::new(TENANT, CRASH);
    options.timeout = Some(Duration::from_secs(20));
    let v = json!({"limit": CRASH, "behind_kill": true, "kill": kill});
    match crate::workload::acquire_as(process, &session, options, v, &history).await {
        Ok(p) => {
            crate::workload::release_recorded(process, p, &history).await;
        }
        Err((_, v)) => {
            history.record(process, Kind::Fail, "acquire", v);
        }
    }
    let _ = session.close().await;
}

/// The client-kill fault: spawns `weir acquire crash --hold`, waits (bounded) until the
/// cluster counts its unit in use, queues a waiter behind it (a task that records its
/// `acquire` with `behind_kill`), and kills the client -9.
pub(super) async fn kill_client(
    cluster: &Cluster,
    history: &Recorder,
) -> Result<serde_json::Value, String> {
    use crate::workload::{CRASH, TENANT};
    let servers = cluster.servers();
    let access = crate::secure::Access::Tenant(TENANT);
    let client = crate::secure::client(servers.clone(), access);
    let mut command = tokio::process::Command::new(cluster.weir());
    command
        .args([
            "acquire",
            CRASH,
            "--hold",
            "600",
            "--tenant",
            TENANT,
            "--servers",
        ])
        .arg(servers.join(","));
    // A secure run: TLS against the run's CA, and the tenant's token through `--token`'s
    // environment variable (kept off the command line other processes can read).
    if let Some(secure) = &cluster.secure {
        command.arg("--ca").arg(&secure.ca);
        if let Some(token) = secure.token(access) {
            command.env("WEIR_TOKEN", token);
        }
    }
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start a client process: {e}"))?;
    if !crash_limit_within(&client, |s| s.in_use >= 1).await {
        let _ = child.kill().await;
        return Err("the client process never held its permit".into());
    }
    let pid = child.id();
    // Which kill this is: the waiter's ops carry it, so the checker pairs each kill with
    // its own waiter (the process number is the same for every one).
    let kill = KILLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    tokio::spawn(wait_behind_kill(client.clone(), kill, history.clone()));
    // Kill the holder only once the cluster counts the waiter queued behind it: after a
    // fixed sleep a loaded machine can open the waiter's session after the kill, and the
    // "queued behind a killed client" case is never set up. An expiry must serve a ticket
    // that is already waiting.
    if !crash_limit_within(&client, |s| s.waiting >= 1).await {
        let _ = child.kill().await;
        return Err("the waiter never queued behind the client process".into());
    }
    let _ = child.kill().await;
    let killed_ns = history.now_ns();
    Ok(json!({"fault": "kill-client", "pid": pid, "killed_ns": killed_ns, "kill": kill}))
}
