//! `--workload scale`: builds the scale point — 10,000 sessions holding 100,000 permits over
//! 1,000 limits — and reports each node's memory and snapshot costs there. `--curve` builds
//! other points with [`build`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::report::ms;
use crate::output::{EXIT_OK, Exit, Output};
use weir_client::Client;
use weir_core::machine::{Acquire, Command, Priority, Reply};
use weir_proto::protocol::{Request, Response};
use weir_proto::tls::ClientSecurity;

const TENANT: &str = "scale";

/// A state to build: sessions, each holding permits spread over limits.
#[derive(Clone, Copy, Debug)]
pub struct Point {
    pub sessions: u64,
    pub permits_per_session: u64,
    pub limits: u64,
    /// Clients (connections) building the point in parallel.
    pub builders: u64,
}

/// `--workload scale`'s point.
const POINT: Point = Point {
    sessions: 10_000,
    permits_per_session: 10,
    limits: 1_000,
    builders: 16,
};

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
    let value = build(servers, security, POINT).await?;
    out.print(value.clone(), || {
        let mut text = format!(
            "scale point: {} sessions, {} held permits, {} limits (built in {:.1} s)",
            value["sessions"],
            value["permits"],
            value["limits"],
            value["setup_s"].as_f64().unwrap_or(0.0)
        );
        for n in value["nodes"].as_array().into_iter().flatten() {
            text.push('\n');
            text.push_str(&node_line(n));
        }
        text
    });
    Ok(EXIT_OK)
}

/// Builds `point` on `servers` and returns the figures: what was built, how long it took,
/// and each node's memory and snapshot costs.
pub async fn build(
    servers: &[String],
    security: &ClientSecurity,
    point: Point,
) -> Result<serde_json::Value, String> {
    let started = Instant::now();
    let clients: Vec<Client> = (0..point.builders.max(1))
        .map(|_| Client::with_security(servers.to_vec(), security.clone()))
        .collect();
    // Every permit fits: session ids do not spread permits evenly, so each limit's cap is
    // twice its share of the permits, and at least 1,000 (what `--workload scale` used).
    let permits = point.sessions * point.permits_per_session;
    let share = permits.div_ceil(point.limits.max(1));
    let concurrent = u32::try_from((2 * share + 16).max(1_000))
        .map_err(|_| "too many permits a limit".to_string())?;
    let mut defined = tokio::task::JoinSet::new();
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        let builders = clients.len() as u64;
        defined.spawn(async move {
            let mut l = c as u64;
            while l < point.limits {
                client
                    .define_limit(TENANT, &limit_name(l), concurrent, 0.0, None)
                    .await
                    .map_err(|e| e.to_string())?;
                l += builders;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(r) = defined.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    eprintln!("[bench] {} limits defined", point.limits);
    let opened = open_sessions(&clients, point).await?;
    let built_in = started.elapsed();
    let mut nodes = vec![];
    for s in servers {
        nodes.extend(node_figures(s, security).await);
    }
    Ok(
        json!({"workload": "scale", "sessions": opened, "permits": opened as u64 * point.permits_per_session,
               "limits": point.limits, "setup_s": built_in.as_secs_f64(), "nodes": nodes}),
    )
}

/// Opens the sessions, each holding its permits, spread over the clients; returns how
/// many were opened.
async fn open_sessions(clients: &[Client], point: Point) -> Result<usize, String> {
    let sessions: Arc<Mutex<Vec<u64>>> = Arc::default();
    let builders = clients.len() as u64;
    let mut tasks = vec![];
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        let sessions = sessions.clone();
        tasks.push(tokio::spawn(async move {
            for s in 0..point.sessions / builders + 1 {
                if (s * builders + c as u64) >= point.sessions {
                    break;
                }
                let session = open_holding(&client, point).await?;
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
async fn open_holding(client: &Client, point: Point) -> Result<u64, String> {
    let session = match client
        .write(Command::OpenSession {
            ttl_ms: weir_core::bounds::SESSION_TTL_MS_MAX,
        })
        .await
    {
        Ok(Reply::SessionOpened { session, .. }) => session,
        other => return Err(format!("open session: {other:?}")),
    };
    for p in 0..point.permits_per_session {
        let acquire = Command::Acquire(Acquire {
            session,
            ticket: p + 1,
            tenant: TENANT.into(),
            // Session ids are random (not 1, 2, 3…): spread by the id's remainder, which
            // is uniform, so each limit gets about its share.
            limit: limit_name((session % point.limits + p) % point.limits),
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

/// One node's figures as a line of text (those of [`node_figures`]), with the cost of one
/// live key where the figures carry it (the keyed point's).
pub fn node_line(n: &serde_json::Value) -> String {
    let per_key = |figure: &str, unit: &str| match n.get(figure) {
        Some(v) if !v.is_null() => format!(" ({v} {unit})"),
        _ => String::new(),
    };
    format!(
        "node {} ({}): RSS {:.1} MiB{}, snapshot {} bytes{}, build {:.1} ms, install {:.1} ms",
        n["id"],
        n["state"].as_str().unwrap_or("?"),
        n["rss_mib"].as_f64().unwrap_or(0.0),
        per_key("rss_bytes_per_key", "bytes a live key"),
        n["snapshot_bytes"],
        per_key("snapshot_bytes_per_key", "a key"),
        n["snapshot_build_ms"].as_f64().unwrap_or(0.0),
        n["snapshot_install_ms"].as_f64().unwrap_or(0.0)
    )
}

/// How long a node may take to answer a figure: its status digests the whole state and its
/// snapshot cost builds and installs a snapshot, seconds at a million live keys.
const FIGURES_WAIT: Duration = Duration::from_secs(120);

/// One node's memory and snapshot figures, if it answers.
pub async fn node_figures(addr: &str, security: &ClientSecurity) -> Option<serde_json::Value> {
    let ask = |request| Client::ask_node_within(addr, request, security, FIGURES_WAIT);
    let status = match ask(&Request::Status).await {
        Ok(Response::Status(st)) => st,
        other => {
            eprintln!("[bench] node at {addr} gave no status: {other:?}");
            return None;
        }
    };
    let cost = match ask(&Request::SnapshotCost).await {
        Ok(Response::SnapshotCost(c)) => Some(c),
        other => {
            eprintln!("[bench] node at {addr} gave no snapshot cost: {other:?}");
            None
        }
    };
    Some(json!({
        "id": status.id, "state": status.state, "rss_mib": status.rss_kib.map(|k| k as f64 / 1024.0),
        "sessions": status.sessions, "snapshot_bytes": cost.as_ref().map(|c| c.bytes),
        "snapshot_build_ms": cost.as_ref().map(|c| ms(c.build_us)),
        "snapshot_install_ms": cost.as_ref().map(|c| ms(c.install_us)),
    }))
}
