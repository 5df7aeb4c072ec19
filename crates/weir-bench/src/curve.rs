//! `--curve DIR`: the cost curve. Three sweeps, each point measured like a single run:
//!
//! - clients 1 … 4,096 on `acquire-release` over 100 limits (each limit's cap, 1,024, leaves
//!   room for every client, so no acquire waits): throughput, p50, p99, the largest node RSS;
//! - limits 10 … 100,000 at 256 clients: the same figures;
//! - sessions 1,000 … 100,000, ten held permits each (up to 1,000,000), on a fresh
//!   cluster per point: each node's RSS and snapshot build and install time;
//! - the keyed point: one keyed limit with every live key the bounds allow
//!   (`keyed_point.rs`), on a fresh cluster: RSS, snapshot build and install time, and the
//!   bytes of one live key.
//!
//! The load sweeps run on the `--spawn` cluster, one after the other, with the run's
//! `--duration` and `--warmup`; each scale point starts its own cluster (a state is only
//! ever added to) and removes it after. Everything goes to `DIR/curve.json` and is drawn
//! into `DIR/curve-*.svg`.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::args::BenchArgs;
use super::keyed_point;
use super::report::load_average;
use super::scale::{self, Point};
use super::svg::{Series, line_chart};
use super::{load, spawn};
use crate::output::{EXIT_OK, Exit, Output};
use weir_launcher::leader_among_with;
use weir_proto::tls::ClientSecurity;

/// The client counts of the first sweep.
const CLIENTS: [usize; 7] = [1, 4, 16, 64, 256, 1_024, 4_096];
/// The limit counts of the second sweep.
const LIMITS: [u32; 5] = [10, 100, 1_000, 10_000, 100_000];
/// Clients of the limits sweep.
const LIMITS_CLIENTS: usize = 256;
/// Limits of the clients sweep.
const CLIENTS_LIMITS: u32 = 100;
/// Each limit's cap in the load sweeps: room for every client of the largest point in
/// whichever limit it picks (4,096 clients over 100 limits, 256 over 10), so no acquire
/// waits for a release; one cap for every point, since they share the limits.
const CONCURRENCY: u32 = 1_024;
/// Session counts of the scale sweep, and the permits each holds.
const SESSIONS: [u64; 3] = [1_000, 10_000, 100_000];
const PERMITS_PER_SESSION: u64 = 10;
/// Limits of the scale sweep.
const SCALE_LIMITS: u64 = 1_000;
/// Clients building a scale point: enough that the proposer batches.
const SCALE_BUILDERS: u64 = 256;

/// One point of a load sweep.
#[derive(Serialize)]
struct LoadPoint {
    clients: usize,
    limits: u32,
    ops_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    /// The largest RSS among the nodes after the point.
    rss_mib_max: f64,
}

/// One point of the scale sweep: the largest figure among the nodes.
#[derive(Serialize)]
struct ScalePoint {
    sessions: u64,
    permits: u64,
    rss_mib_max: f64,
    snapshot_bytes: u64,
    snapshot_build_ms_max: f64,
    snapshot_install_ms_max: f64,
    setup_s: f64,
}

#[derive(Serialize)]
struct Curve {
    duration_s: f64,
    clients: Vec<LoadPoint>,
    limits: Vec<LoadPoint>,
    scale: Vec<ScalePoint>,
    /// The keyed point's figures, as `--workload keyed-scale` prints them.
    keyed: serde_json::Value,
    load_average: [f64; 3],
}

/// The largest value of `key` among the nodes of a figures object.
fn max_of(figures: &serde_json::Value, key: &str) -> f64 {
    figures["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n[key].as_f64())
        .fold(0.0, f64::max)
}

/// The largest RSS among `servers`, MiB.
async fn rss_mib_max(servers: &[String], security: &ClientSecurity) -> f64 {
    let mut max: f64 = 0.0;
    for s in servers {
        if let Some(n) = scale::node_figures(s, security).await {
            max = max.max(n["rss_mib"].as_f64().unwrap_or(0.0));
        }
    }
    max
}

/// One load point on `servers` with `clients` clients over `limits` limits.
async fn load_point(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    clients: usize,
    limits: u32,
) -> Result<LoadPoint, String> {
    let mut point_args = args.clone();
    point_args.clients = clients;
    point_args.limits = limits;
    point_args.concurrency = CONCURRENCY;
    eprintln!("[bench] curve: {clients} clients, {limits} limits");
    let r = load::measure_load(&point_args, servers, security, None).await?;
    if !r.verified {
        return Err(format!(
            "{clients} clients, {limits} limits: VIOLATION found"
        ));
    }
    Ok(LoadPoint {
        clients,
        limits,
        ops_per_s: r.ops_per_s,
        p50_ms: r.p50_ms,
        p99_ms: r.p99_ms,
        errors: r.errors,
        rss_mib_max: rss_mib_max(servers, security).await,
    })
}

/// One scale point on a fresh cluster of `n` nodes.
async fn scale_point(n: u64, sessions: u64) -> Result<ScalePoint, String> {
    eprintln!("[bench] curve: {sessions} sessions on a fresh cluster");
    let cluster = spawn::start(n, false, false)?;
    let servers = cluster.servers();
    if leader_among_with(&servers, Duration::from_secs(20), cluster.client_security())
        .await
        .is_none()
    {
        return Err(format!("no leader among {servers:?}"));
    }
    let figures = scale::build(
        &servers,
        cluster.client_security(),
        Point {
            sessions,
            permits_per_session: PERMITS_PER_SESSION,
            limits: SCALE_LIMITS,
            builders: SCALE_BUILDERS,
        },
    )
    .await?;
    Ok(ScalePoint {
        sessions: figures["sessions"].as_u64().unwrap_or(0),
        permits: figures["permits"].as_u64().unwrap_or(0),
        rss_mib_max: max_of(&figures, "rss_mib"),
        snapshot_bytes: max_of(&figures, "snapshot_bytes") as u64,
        snapshot_build_ms_max: max_of(&figures, "snapshot_build_ms"),
        snapshot_install_ms_max: max_of(&figures, "snapshot_install_ms"),
        setup_s: figures["setup_s"].as_f64().unwrap_or(0.0),
    })
}

/// The keyed point on a fresh cluster of `n` nodes.
async fn keyed_point_on_a_fresh_cluster(n: u64) -> Result<serde_json::Value, String> {
    eprintln!(
        "[bench] curve: {} live keys on a fresh cluster",
        keyed_point::KEYS
    );
    let cluster = spawn::start(n, false, false)?;
    let servers = cluster.servers();
    if leader_among_with(&servers, Duration::from_secs(20), cluster.client_security())
        .await
        .is_none()
    {
        return Err(format!("no leader among {servers:?}"));
    }
    keyed_point::build(&servers, cluster.client_security(), keyed_point::KEYS).await
}

/// Runs the three sweeps and the keyed point, writes `dir/curve.json` and the charts, prints the JSON.
pub async fn run(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    dir: &Path,
    out: &Output,
) -> Result<Exit, String> {
    let n = args.spawn.ok_or("--curve needs --spawn")?;
    let mut curve = Curve {
        duration_s: args.duration,
        clients: vec![],
        limits: vec![],
        scale: vec![],
        keyed: serde_json::Value::Null,
        load_average: [0.0; 3],
    };
    for c in CLIENTS {
        curve
            .clients
            .push(load_point(args, servers, security, c, CLIENTS_LIMITS).await?);
    }
    for l in LIMITS {
        curve
            .limits
            .push(load_point(args, servers, security, LIMITS_CLIENTS, l).await?);
    }
    for s in SESSIONS {
        curve.scale.push(scale_point(n, s).await?);
    }
    curve.keyed = keyed_point_on_a_fresh_cluster(n).await?;
    curve.load_average = load_average();
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(&curve).expect("a curve serializes");
    write(dir, "curve.json", &json)?;
    draw(dir, &curve)?;
    let value = serde_json::to_value(&curve).expect("a curve serializes");
    out.print(value, || {
        format!(
            "curve written to {}: curve.json and curve-*.svg",
            dir.display()
        )
    });
    Ok(EXIT_OK)
}

fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The charts: throughput, latency and RSS against clients and limits; RSS and snapshot
/// times against held permits.
fn draw(dir: &Path, c: &Curve) -> Result<(), String> {
    let load = |name: &str,
                points: &[LoadPoint],
                x: fn(&LoadPoint) -> f64,
                y: fn(&LoadPoint) -> f64| Series {
        name: name.into(),
        points: points.iter().map(|p| (x(p), y(p))).collect(),
    };
    let latency = |points: &[LoadPoint], x: fn(&LoadPoint) -> f64| {
        vec![
            load("p50", points, x, |p| p.p50_ms),
            load("p99", points, x, |p| p.p99_ms),
        ]
    };
    let by_clients = |p: &LoadPoint| p.clients as f64;
    let by_limits = |p: &LoadPoint| f64::from(p.limits);
    let permits = |name: &str, y: fn(&ScalePoint) -> f64| Series {
        name: name.into(),
        points: c.scale.iter().map(|p| (p.permits as f64, y(p))).collect(),
    };
    let d = c.duration_s;
    // Each chart: its file, title, axis labels and series.
    let charts = [
        (
            "curve-clients-throughput.svg",
            format!("acquire-release, 3 durable nodes, 100 limits ({d} s a point)"),
            "clients",
            "operations/s",
            vec![load("ops/s", &c.clients, by_clients, |p| p.ops_per_s)],
        ),
        (
            "curve-clients-latency.svg",
            "latency against clients".into(),
            "clients",
            "ms",
            latency(&c.clients, by_clients),
        ),
        (
            "curve-limits.svg",
            "256 clients against the number of limits".into(),
            "limits",
            "operations/s",
            vec![load("ops/s", &c.limits, by_limits, |p| p.ops_per_s)],
        ),
        (
            "curve-limits-latency.svg",
            "latency against the number of limits, 256 clients".into(),
            "limits",
            "ms",
            latency(&c.limits, by_limits),
        ),
        (
            "curve-scale-rss.svg",
            "node RSS against held permits (10 a session)".into(),
            "held permits",
            "MiB",
            vec![permits("largest node RSS", |p| p.rss_mib_max)],
        ),
        (
            "curve-scale-snapshot.svg",
            "snapshot build and install against held permits".into(),
            "held permits",
            "ms",
            vec![
                permits("build (encode)", |p| p.snapshot_build_ms_max),
                permits("install (decode + check)", |p| p.snapshot_install_ms_max),
            ],
        ),
    ];
    for (file, title, x_label, y_label, series) in charts {
        write(dir, file, &line_chart(&title, x_label, y_label, &series))?;
    }
    Ok(())
}
