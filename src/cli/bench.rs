//! `weir bench`: load the cluster with a workload and report throughput and latency.
//!
//! Workloads: `acquire-release` (each client acquires a permit of one of `--limits` limits
//! of `--concurrency` and releases it; each is one operation), `rate-take` (takes of a rate
//! limit that holds nothing), `reserve-settle` (reserve a run, then settle it releasing the
//! slot), `mixed` (a rotation of the three), and `scale` (builds the scale point — 10,000
//! sessions, 100,000 held permits, 1,000 limits — and reports node memory and snapshot
//! costs). Latencies go into an HDR histogram (µs, 3 significant digits); a progress line
//! is printed every second to stderr.
//!
//! `--spawn N` starts a durable N-node cluster on loopback with the default config in a
//! temporary directory, and removes it afterwards. `--failover K` (with `--spawn`) kills the
//! leader with SIGKILL K times during the run, measures from each kill to the first
//! operation sent after it that succeeds, restarts the node, and at the end checks that no
//! acknowledged operation was lost.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use serde_json::json;

use super::{EXIT_ERROR, EXIT_OK, EXIT_USAGE, Exit, Output};
use crate::client::{AcquireOptions, Client, Session};
use crate::machine::{Acquire, Change, Command, Priority, Reply, Settle};
use crate::protocol::{Request, Response};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    AcquireRelease,
    RateTake,
    ReserveSettle,
    Mixed,
    Scale,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::AcquireRelease => "acquire-release",
            Workload::RateTake => "rate-take",
            Workload::ReserveSettle => "reserve-settle",
            Workload::Mixed => "mixed",
            Workload::Scale => "scale",
        }
    }
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Start an N-node durable loopback cluster for the run (and remove it after).
    #[arg(long)]
    pub spawn: Option<u64>,
    #[arg(long, value_enum, default_value = "acquire-release")]
    pub workload: Workload,
    /// Concurrent clients, each with its own session.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Limits the clients spread over.
    #[arg(long, default_value_t = 100)]
    pub limits: u32,
    /// `concurrent` of each limit.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
    /// Clients sharing one connection.
    #[arg(long, default_value_t = 16)]
    pub clients_per_connection: usize,
    /// Kill the leader this many times during the run (needs --spawn).
    #[arg(long, default_value_t = 0)]
    pub failover: u32,
}

/// A cluster started by the bench.
struct Spawned {
    dir: PathBuf,
    nodes: Vec<(u64, String, PathBuf, Option<Child>)>,
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Spawned {
    fn start(n: u64) -> Result<Spawned, String> {
        let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut addrs = vec![];
        for id in 1..=n {
            let port = |_| free_port().map_err(|e| format!("no free port: {e}"));
            addrs.push((
                id,
                format!("127.0.0.1:{}", port(0)?),
                format!("127.0.0.1:{}", port(1)?),
            ));
        }
        let peers: String = addrs
            .iter()
            .map(|(id, client, peer)| {
                format!("[[peers]]\nid = {id}\npeer = \"{peer}\"\nclient = \"{client}\"\n\n")
            })
            .collect();
        let mut spawned = Spawned {
            dir: dir.clone(),
            nodes: vec![],
        };
        for (id, client, peer) in addrs {
            let config = dir.join(format!("node{id}.toml"));
            let text = format!(
                "id = {id}\ndata_dir = \"{}\"\nclient_addr = \"{client}\"\npeer_addr = \"{peer}\"\n\n{peers}",
                dir.join(format!("data{id}")).display()
            );
            std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
            spawned.nodes.push((id, client, config, None));
        }
        for id in 1..=n {
            spawned.run(id)?;
        }
        Ok(spawned)
    }

    fn run(&mut self, id: u64) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find weir itself: {e}"))?;
        let node = &mut self.nodes[(id - 1) as usize];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node{id}.log")))
            .map_err(|e| e.to_string())?;
        let child = std::process::Command::new(exe)
            .args(["serve", "--config"])
            .arg(&node.2)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start node {id}: {e}"))?;
        node.3 = Some(child);
        Ok(())
    }

    fn kill(&mut self, id: u64) {
        if let Some(mut c) = self.nodes[(id - 1) as usize].3.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn servers(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.1.clone()).collect()
    }

    fn addr(&self, id: u64) -> String {
        self.nodes[(id - 1) as usize].1.clone()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        for id in 1..=self.nodes.len() as u64 {
            self.kill(id);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The leader's id, as any reachable node reports it, waiting at most `within`.
async fn find_leader(servers: &[String], within: Duration) -> Option<u64> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        for s in servers {
            if let Ok(Response::Status(st)) = Client::ask_node(s, &Request::Status).await
                && st.state == "Leader"
            {
                return Some(st.id);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// What all clients share during a run.
struct Shared {
    started: Instant,
    measuring: AtomicBool,
    stop: AtomicBool,
    ops: AtomicU64,
    errors: AtomicU64,
    histogram: Mutex<Histogram<u64>>,
    /// A kill in progress (ns since `started`), and the first success sent after it.
    kill_ns: AtomicU64,
    recovered_ns: AtomicU64,
    /// Settles acknowledged as new, and settles whose outcome is unknown.
    settled: AtomicU64,
    settle_unknown: AtomicU64,
}

impl Shared {
    fn ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn record(&self, hist: &mut Histogram<u64>, sent_ns: u64, ok: bool) {
        let done = self.ns();
        if ok {
            let kill = self.kill_ns.load(Ordering::Acquire);
            if kill != 0 && sent_ns > kill {
                let _ = self.recovered_ns.compare_exchange(
                    0,
                    done,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
        }
        if !self.measuring.load(Ordering::Relaxed) {
            return;
        }
        if ok {
            self.ops.fetch_add(1, Ordering::Relaxed);
            let _ = hist.record(((done - sent_ns) / 1_000).max(1));
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// One client's loop.
async fn client_loop(client: Client, n: usize, args: Arc<BenchArgsLite>, shared: Arc<Shared>) {
    let mut hist = histogram();
    let session = match Session::open(&client, Duration::from_secs(10)).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench client {n}: {e}");
            shared.errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let mut i: u64 = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        i += 1;
        let kind = match args.workload {
            Workload::Mixed => [
                Workload::AcquireRelease,
                Workload::RateTake,
                Workload::ReserveSettle,
            ][(i % 3) as usize],
            w => w,
        };
        match kind {
            Workload::AcquireRelease => {
                let limit = format!("bench-{}", (n as u64 * 7919 + i) % args.limits as u64);
                let sent = shared.ns();
                match session.acquire(AcquireOptions::new("bench", &limit)).await {
                    Ok(permit) => {
                        shared.record(&mut hist, sent, true);
                        let sent = shared.ns();
                        let ok = permit.release().await.is_ok();
                        shared.record(&mut hist, sent, ok);
                    }
                    Err(_) => shared.record(&mut hist, sent, false),
                }
            }
            Workload::RateTake => {
                let sent = shared.ns();
                let ok = session
                    .acquire(AcquireOptions::new("bench", "bench-rate"))
                    .await
                    .is_ok();
                shared.record(&mut hist, sent, ok);
            }
            Workload::ReserveSettle => {
                let run = format!("c{n}-r{i}");
                let sent = shared.ns();
                let ok = matches!(
                    client.reserve("bench", &run, None, Some("bench")).await,
                    Ok(Reply::Admitted)
                );
                shared.record(&mut hist, sent, ok);
                let settle = Settle {
                    tenant: "bench".into(),
                    run,
                    epoch: 1,
                    period: Some("bench".into()),
                    tokens: 1,
                    minor_units: 1,
                    release_slot: true,
                };
                let sent = shared.ns();
                match client.settle(settle).await {
                    Ok(Reply::Settled { duplicate: false }) => {
                        shared.settled.fetch_add(1, Ordering::Relaxed);
                        shared.record(&mut hist, sent, true);
                    }
                    Ok(Reply::Settled { duplicate: true }) => shared.record(&mut hist, sent, true),
                    Err(e) if !e.definitely_failed() => {
                        shared.settle_unknown.fetch_add(1, Ordering::Relaxed);
                        shared.record(&mut hist, sent, false);
                    }
                    _ => shared.record(&mut hist, sent, false),
                }
            }
            Workload::Mixed | Workload::Scale => unreachable!("not a per-client workload"),
        }
    }
    let _ = session.close().await;
    shared
        .histogram
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .add(&hist)
        .expect("same bounds");
}

/// The parts of the arguments the clients need.
struct BenchArgsLite {
    workload: Workload,
    limits: u32,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

pub fn run(args: &BenchArgs, servers: &[String], out: &Output) -> Exit {
    if args.clients == 0 || args.limits == 0 || args.clients_per_connection == 0 {
        eprintln!("weir bench: --clients, --limits and --clients-per-connection must be positive");
        return EXIT_USAGE;
    }
    if args.failover > 0 && args.spawn.is_none() {
        eprintln!("weir bench: --failover needs --spawn (the bench kills the nodes it started)");
        return EXIT_USAGE;
    }
    if !(args.duration > 0.0
        && args.duration < 86_400.0
        && args.warmup >= 0.0
        && args.warmup < 3_600.0)
    {
        eprintln!("weir bench: --duration must be in (0, 86400) and --warmup in [0, 3600) seconds");
        return EXIT_USAGE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir bench: {e}");
            return EXIT_ERROR;
        }
    };
    runtime.block_on(async {
        let mut spawned = match args.spawn {
            Some(n) => match Spawned::start(n) {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("weir bench: {e}");
                    return EXIT_ERROR;
                }
            },
            None => None,
        };
        let servers = spawned
            .as_ref()
            .map_or_else(|| servers.to_vec(), Spawned::servers);
        if find_leader(&servers, Duration::from_secs(20))
            .await
            .is_none()
        {
            eprintln!("weir bench: no leader among {servers:?}");
            return EXIT_ERROR;
        }
        if args.workload == Workload::Scale {
            return scale(&servers, out).await;
        }
        match load(args, &servers, spawned.as_mut(), out).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("weir bench: {e}");
                EXIT_ERROR
            }
        }
    })
}

async fn load(
    args: &BenchArgs,
    servers: &[String],
    mut spawned: Option<&mut Spawned>,
    out: &Output,
) -> Result<Exit, String> {
    let admin = Client::new(servers.to_vec());
    // Define the limits the workload uses (idempotent).
    for l in 0..args.limits {
        admin
            .define_limit("bench", &format!("bench-{l}"), args.concurrency, 0.0, None)
            .await
            .map_err(|e| format!("define: {e}"))?;
    }
    admin
        .define_limit("bench", "bench-rate", 0, 1e9, Some(1_000_000_000))
        .await
        .map_err(|e| e.to_string())?;
    admin
        .set_tenant("bench", Change::Clear, Change::Clear, Change::Clear)
        .await
        .map_err(|e| e.to_string())?;
    let shared = Arc::new(Shared {
        started: Instant::now(),
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        ops: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        histogram: Mutex::new(histogram()),
        kill_ns: AtomicU64::new(0),
        recovered_ns: AtomicU64::new(0),
        settled: AtomicU64::new(0),
        settle_unknown: AtomicU64::new(0),
    });
    let lite = Arc::new(BenchArgsLite {
        workload: args.workload,
        limits: args.limits,
    });
    let spent_before = admin
        .spent("bench", "bench")
        .await
        .map_err(|e| e.to_string())?;
    let mut tasks = vec![];
    let mut client = Client::new(servers.to_vec());
    for n in 0..args.clients {
        if n % args.clients_per_connection == 0 {
            client = Client::new(servers.to_vec());
        }
        tasks.push(tokio::spawn(client_loop(
            client.clone(),
            n,
            lite.clone(),
            shared.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    shared.measuring.store(true, Ordering::Relaxed);
    let measure_start = Instant::now();
    let duration = Duration::from_secs_f64(args.duration);
    let mut recoveries: Vec<u64> = vec![];
    let kill_every = duration / (args.failover + 1);
    let mut next_kill = measure_start + kill_every;
    let mut kills = 0;
    let mut last_ops = 0;
    let mut last_tick = Instant::now();
    // The run lasts its duration, and longer if the kills asked for have not all happened.
    while measure_start.elapsed() < duration || (spawned.is_some() && kills < args.failover) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if last_tick.elapsed() >= Duration::from_secs(1) {
            let ops = shared.ops.load(Ordering::Relaxed);
            eprintln!(
                "[bench] {:>5.1}s  {:>9} ops  {:>9.0} ops/s  errors {}",
                measure_start.elapsed().as_secs_f64(),
                ops,
                (ops - last_ops) as f64 / last_tick.elapsed().as_secs_f64(),
                shared.errors.load(Ordering::Relaxed)
            );
            last_ops = ops;
            last_tick = Instant::now();
        }
        if let Some(cluster) = spawned.as_deref_mut()
            && kills < args.failover
            && Instant::now() >= next_kill
        {
            let Some(leader) = find_leader(servers, Duration::from_secs(10)).await else {
                return Err("no leader to kill".into());
            };
            shared.recovered_ns.store(0, Ordering::Release);
            shared.kill_ns.store(shared.ns(), Ordering::Release);
            let kill_ns = shared.ns();
            cluster.kill(leader);
            kills += 1;
            eprintln!("[bench] killed the leader, node {leader}");
            let wait_until = Instant::now() + Duration::from_secs(20);
            while shared.recovered_ns.load(Ordering::Acquire) == 0 && Instant::now() < wait_until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let recovered = shared.recovered_ns.load(Ordering::Acquire);
            shared.kill_ns.store(0, Ordering::Release);
            if recovered == 0 {
                return Err("grants did not resume within 20 s of the kill".into());
            }
            let took_us = (recovered - kill_ns) / 1_000;
            eprintln!(
                "[bench] grants resumed {:.1} ms after the kill",
                ms(took_us)
            );
            recoveries.push(took_us);
            cluster.run(leader)?;
            let addr = cluster.addr(leader);
            let rejoin = Instant::now() + Duration::from_secs(20);
            while Client::ask_node(&addr, &Request::Status).await.is_err()
                && Instant::now() < rejoin
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            next_kill = Instant::now() + kill_every;
        }
    }
    let elapsed = measure_start.elapsed();
    shared.measuring.store(false, Ordering::Relaxed);
    shared.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    // Verify nothing acknowledged was lost: every permit released, the spend accounted.
    let mut verified = true;
    for l in 0..args.limits {
        let status = admin
            .limit_status("bench", &format!("bench-{l}"))
            .await
            .map_err(|e| e.to_string())?;
        if let Some(s) = status
            && (s.max_in_use > args.concurrency as u64)
        {
            eprintln!(
                "[bench] VIOLATION: {} held {} of {}",
                s.name, s.max_in_use, args.concurrency
            );
            verified = false;
        }
    }
    let spent = admin
        .spent("bench", "bench")
        .await
        .map_err(|e| e.to_string())?;
    let charged = spent.tokens - spent_before.tokens;
    let acked = shared.settled.load(Ordering::Relaxed);
    let unknown = shared.settle_unknown.load(Ordering::Relaxed);
    if charged < acked || charged > acked + unknown {
        eprintln!(
            "[bench] VIOLATION: {charged} settled tokens charged, {acked} acknowledged, {unknown} unknown"
        );
        verified = false;
    }
    let hist = shared
        .histogram
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let ops = shared.ops.load(Ordering::Relaxed);
    let errors = shared.errors.load(Ordering::Relaxed);
    let ops_per_s = ops as f64 / elapsed.as_secs_f64();
    recoveries.sort();
    let failover = (!recoveries.is_empty()).then(|| {
        json!({"kills": recoveries.len(), "p50_ms": ms(recoveries[recoveries.len() / 2]),
               "max_ms": ms(*recoveries.last().expect("non-empty"))})
    });
    let value = json!({
        "workload": args.workload.name(), "clients": args.clients, "ops": ops, "ops_per_s": ops_per_s.round(),
        "p50_ms": ms(hist.value_at_quantile(0.5)), "p99_ms": ms(hist.value_at_quantile(0.99)),
        "p999_ms": ms(hist.value_at_quantile(0.999)), "max_ms": ms(hist.max()), "errors": errors,
        "duration_s": elapsed.as_secs_f64(), "failover": failover, "verified": verified,
    });
    out.print(value, || {
        let mut text = format!(
            "{} with {} clients: {ops} ops in {:.1} s = {ops_per_s:.0} ops/s, {errors} errors\n\
             latency ms: p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
            args.workload.name(),
            args.clients,
            elapsed.as_secs_f64(),
            ms(hist.value_at_quantile(0.5)),
            ms(hist.value_at_quantile(0.99)),
            ms(hist.value_at_quantile(0.999)),
            ms(hist.max()),
        );
        if !recoveries.is_empty() {
            text.push_str(&format!(
                "\nfailover: {} kills, grants resumed after p50 {:.1} ms, max {:.1} ms",
                recoveries.len(),
                ms(recoveries[recoveries.len() / 2]),
                ms(*recoveries.last().expect("non-empty"))
            ));
        }
        text.push_str(if verified {
            "\nverified: nothing acknowledged was lost"
        } else {
            "\nVIOLATION found (see above)"
        });
        text
    });
    Ok(if verified { EXIT_OK } else { EXIT_ERROR })
}

/// The scale point: 10,000 sessions, 100,000 held permits over 1,000 limits.
async fn scale(servers: &[String], out: &Output) -> Exit {
    const SESSIONS: u64 = 10_000;
    const PERMITS_PER_SESSION: u64 = 10;
    const LIMITS: u64 = 1_000;
    let started = Instant::now();
    let clients: Vec<Client> = (0..16).map(|_| Client::new(servers.to_vec())).collect();
    let run = async {
        for l in 0..LIMITS {
            clients[0]
                .define_limit("scale", &format!("scale-{l}"), 1_000, 0.0, None)
                .await
                .map_err(|e| e.to_string())?;
        }
        eprintln!("[bench] {LIMITS} limits defined");
        let sessions: Arc<Mutex<Vec<u64>>> = Arc::default();
        let mut tasks = vec![];
        for (c, client) in clients.iter().enumerate() {
            let client = client.clone();
            let sessions = sessions.clone();
            tasks.push(tokio::spawn(async move {
                for s in 0..SESSIONS / 16 + 1 {
                    if (s * 16 + c as u64) >= SESSIONS {
                        break;
                    }
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
                            tenant: "scale".into(),
                            limit: format!(
                                "scale-{}",
                                (session * PERMITS_PER_SESSION + p) % LIMITS
                            ),
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
        Ok::<usize, String>(sessions.lock().unwrap_or_else(|p| p.into_inner()).len())
    };
    let opened = match run.await {
        Ok(n) => n,
        Err(e) => {
            eprintln!("weir bench: {e}");
            return EXIT_ERROR;
        }
    };
    let built_in = started.elapsed();
    let mut nodes = vec![];
    for s in servers {
        let status = match Client::ask_node(s, &Request::Status).await {
            Ok(Response::Status(st)) => st,
            _ => continue,
        };
        let cost = match Client::ask_node(s, &Request::SnapshotCost).await {
            Ok(Response::SnapshotCost(c)) => Some(c),
            _ => None,
        };
        nodes.push(json!({
            "id": status.id, "state": status.state, "rss_mib": status.rss_kib.map(|k| k as f64 / 1024.0),
            "sessions": status.sessions, "snapshot_bytes": cost.as_ref().map(|c| c.bytes),
            "snapshot_build_ms": cost.as_ref().map(|c| ms(c.build_us)),
            "snapshot_install_ms": cost.as_ref().map(|c| ms(c.install_us)),
        }));
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
    EXIT_OK
}
