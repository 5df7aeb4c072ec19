//! `--workload scale`: builds the scale point — 10,000 sessions holding 100,000 permits over
//! 1,000 limits — and reports each node's memory and snapshot costs there.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

use super::super::{EXIT_OK, Exit, Output};
use super::report::ms;
use crate::client::Client;
use crate::machine::{Acquire, Command, Priority, Reply};
use crate::protocol::{Request, Response};
use crate::security::ClientSecurity;

const TENANT: &str = "scale";
const SESSIONS: u64 = 10_000;
const PERMITS_PER_SESSION: u64 = 10;
const LIMITS: u64 = 1_000;
/// Clients (connections) building the point in parallel.
const BUILDERS: u64 = 16;

fn limit_name(l: u64) -> String {
    format!("scale-{l}")
}

/// Builds the point and prints the figures.
/// With `security`'s TLS and token (an admin's: status and snapshot figures need it).
pub async fn run(
    servers: &[String],
    security: &ClientSecurity,
    out: &Output,
) -> Result<Exit, String> {
    let started = Instant::now();
    let clients: Vec<Client> = (0..BUILDERS)
        .map(|_| Client::with_security(servers.to_vec(), security.clone()))
        .collect();
    for l in 0..LIMITS {
        clients[0]
            .define_limit(TENANT, &limit_name(l), 1_000, 0.0, None)
            .await
            .map_err(|e| e.to_string())?;
    }
    eprintln!("[bench] {LIMITS} limits defined");
    let opened = open_sessions(&clients).await?;
    let built_in = started.elapsed();
    let mut nodes = vec![];
    for s in servers {
        nodes.extend(node_figures(s, security).await);
    }
    let value = json!({"workload": "scale", "sessions": opened, "permits": opened as u64 * PERMITS_PER_SESSION,
                       "limits": LIMITS, "setup_s": built_in.as_secs_f64(), "nodes": nodes});
    out.print(value.clone(), || {
        let mut text = format!(
            "scale point: {opened} sessions, {} held permits, {LIMITS} limits (built in {:.1} s)",
            opened as u64 * PERMITS_PER_SESSION,
            built_in.as_secs_f64()
        );
        for n in value["nodes"].as_array().into_iter().flatten() {
            text.push_str(&format!(
                "\nnode {} ({}): RSS {:.1} MiB, snapshot {} bytes, build {:.1} ms, install {:.1} ms",
                n["id"], n["state"].as_str().unwrap_or("?"), n["rss_mib"].as_f64().unwrap_or(0.0),
                n["snapshot_bytes"], n["snapshot_build_ms"].as_f64().unwrap_or(0.0),
                n["snapshot_install_ms"].as_f64().unwrap_or(0.0)
            ));
        }
        text
    });
    Ok(EXIT_OK)
}

/// Opens the sessions, each holding its permits, spread over the clients; returns how
/// many were opened.
async fn open_sessions(clients: &[Client]) -> Result<usize, String> {
    let sessions: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut tasks = vec![];
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        let sessions = sessions.clone();
        tasks.push(tokio::spawn(async move {
            for s in 0..SESSIONS / BUILDERS + 1 {
                if (s * BUILDERS + c as u64) >= SESSIONS {
                    break;
                }
                let session = open_holding(&client).await?;
                sessions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(session);
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(sessions.lock().unwrap_or_else(|p| p.into_inner()).len())
}

/// Opens one session of the longest TTL and acquires its permits; returns its id.
async fn open_holding(client: &Client) -> Result<u64, String> {
    let session = match client
        .write(Command::OpenSession {
            ttl_ms: crate::bounds::SESSION_TTL_MS_MAX,
        })
        .await
    {
        Ok(Reply::SessionOpened { session, .. }) => session,
        other => return Err(format!("open session: {other:?}")),
    };
    for p in 0..PERMITS_PER_SESSION {
        let acquire = Command::Acquire(Acquire {
            session,
            ticket: p + 1,
            tenant: TENANT.into(),
            // Session ids are random (not 1, 2, 3…): spread by the id's remainder, which
            // is uniform, so about 100 permits land on each limit, far under its cap.
            limit: limit_name((session % LIMITS + p) % LIMITS),
            units: 1,
            priority: Priority::default(),
            agent: None,
            wait: false,
        });
        match client.write(acquire).await {
            Ok(Reply::Granted { .. }) => {}
            other => return Err(format!("acquire: {other:?}")),
        }
    }
    Ok(session)
}

/// One node's memory and snapshot figures, if it answers.
async fn node_figures(addr: &str, security: &ClientSecurity) -> Option<serde_json::Value> {
    let status = match Client::ask_node_with(addr, &Request::Status, security).await {
        Ok(Response::Status(st)) => st,
        _ => return None,
    };
    let cost = match Client::ask_node_with(addr, &Request::SnapshotCost, security).await {
        Ok(Response::SnapshotCost(c)) => Some(c),
        _ => None,
    };
    Some(json!({
        "id": status.id, "state": status.state, "rss_mib": status.rss_kib.map(|k| k as f64 / 1024.0),
        "sessions": status.sessions, "snapshot_bytes": cost.as_ref().map(|c| c.bytes),
        "snapshot_build_ms": cost.as_ref().map(|c| ms(c.build_us)),
        "snapshot_install_ms": cost.as_ref().map(|c| ms(c.install_us)),
    }))
}
