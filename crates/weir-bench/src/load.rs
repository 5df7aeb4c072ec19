//! The load workloads: clients in a loop of operations for the warm-up and the measured
//! duration, the leader killed `--failover` times and stopped `--stall` times meanwhile
//! (kills first), and a check at the end that
//! nothing acknowledged was lost (no limit ever over its cap, every acknowledged settle
//! charged, none charged twice).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::task::JoinHandle;

use super::args::{BenchArgs, Workload};
use super::cpu::CpuClock;
use super::report::{LeaseReport, LoadReport, Recorder, histogram, ms};
use super::spawn;
use super::spend_check::worst_window;
use super::zipf::{Sampler, Zipf};
use crate::output::{EXIT_ERROR, EXIT_OK, Exit, Output};
use weir_client::{AcquireOptions, Client, LeaseFigures, LeaseOptions, Leased, Session};
use weir_core::machine::{Change, Definition, Part, Reply, Settle, Spend};
use weir_launcher::{LocalCluster, leader_among_with};
use weir_proto::tls::ClientSecurity;

/// The tenant, and the budget period, every workload works in.
pub(super) const TENANT: &str = "bench";
const PERIOD: &str = "bench";
/// The rate limit of `rate-take`: a rate no run reaches, so no take waits.
const RATE_LIMIT: &str = "bench-rate";

/// The keyed rate limit of `keyed-take`, its keys (`k0`…), drawn Zipf-distributed with
/// exponent [`ZIPF_S`]. A key refills one token a second from a burst no run empties, so a
/// key lives (differs from a fresh one) for a second per token taken from it: the live
/// set is the keys taken from lately, created and dropped as the run goes.
const KEYED_LIMIT: &str = "bench-keyed";
const KEYS: usize = 100_000;
const ZIPF_S: f64 = 1.1;
/// Live keys allowed: every key at once, far within `bounds::KEYS_LIVE_MAX`.
const KEYED_KEYS_MAX: u32 = KEYS as u32;
/// The three limits of `multi`: a tenant-wide rate, a per-model rate keyed by one of
/// [`MODELS`] models, and a global rate; none is ever short of tokens.
const MULTI_TENANT: &str = "bench-multi-tenant";
const MULTI_MODEL: &str = "bench-multi-model";
const MULTI_GLOBAL: &str = "bench-multi-global";
const MODELS: u64 = 16;

/// The rate limit of `leased-take`: every client leases a share of it and takes from its
/// share locally. Its rate is `--lease-rate` (by default one 256 clients taking locally
/// far exceed, so the bound binds), its burst a tenth of that.
const LEASED_LIMIT: &str = "bench-leased";
/// `leased-take --lease-keys N`: the keyed limit, `--lease-rate` per key; a client leases a
/// key once it has seen it [`LEASE_AFTER`] times (counts kept for at most [`SEEN_MAX`]
/// keys, halved when full, so rare keys fall out), at most [`LEASES_PER_CLIENT`] keys.
const LEASED_KEYED_LIMIT: &str = "bench-leased-keyed";
const LEASE_AFTER: u32 = 8;
const SEEN_MAX: usize = 4_096;
const LEASES_PER_CLIENT: usize = 32;
/// With `--lease-keys`: the spend-time check covers the keys of the hottest ranks, those
/// the clients lease.
const KEYS_CHECKED: usize = 16;
/// `leased-take`: a client yields to the others after this many takes.
const LOCAL_RUN: u64 = 64;

/// `leased-take`'s limit: its rate (per key with `--lease-keys`) and burst.
fn leased_rate_and_burst(args: &BenchArgs) -> (f64, u64) {
    (args.lease_rate, ((args.lease_rate / 10.0) as u64).max(1))
}

/// The spend-time series of `leased-take`: one for the limit, or one per key checked.
fn leased_series(args: &BenchArgs) -> usize {
    match args.lease_keys {
        0 => 1,
        keys => KEYS_CHECKED.min(keys as usize),
    }
}

/// How long to wait for grants to resume after a kill before calling the run failed.
const RECOVERY_WAIT: Duration = Duration::from_secs(20);
/// How long a `--stall` stops the leader: longer than [`STALL_TTL`], so a session that
/// waited on the stopped node the whole time would lose its permits.
const STALL: Duration = Duration::from_secs(4);
/// The sessions' TTL with `--stall`: the shortest the spec promises to carry through (G9).
const STALL_TTL: Duration = Duration::from_secs(3);
/// The sessions' TTL otherwise.
pub(super) const SESSION_TTL: Duration = Duration::from_secs(10);
/// The limit each `--stall` session holds one permit of for the whole run.
const HOLD_LIMIT: &str = "bench-hold";

/// The limit of `acquire-release` number `l`.
pub(super) fn limit_name(l: u64) -> String {
    format!("bench-{l}")
}

/// Runs a load workload against `servers` and prints its report; `spawned` is the cluster
/// to kill leaders of.
pub async fn run(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    spawned: Option<&mut LocalCluster>,
    out: &Output,
) -> Result<Exit, String> {
    let report = measure_load(args, servers, security, spawned).await?;
    report.print(out);
    Ok(if report.verified { EXIT_OK } else { EXIT_ERROR })
}

/// Runs a load workload against `servers` and returns its report.
pub async fn measure_load(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    spawned: Option<&mut LocalCluster>,
) -> Result<LoadReport, String> {
    let admin = Client::with_security(servers.to_vec(), security.clone());
    let groups = GroupTenants::place(args, servers, security).await?;
    for (tenant, group_admin) in &groups.extra {
        define_limits_in(group_admin, args, tenant).await?;
    }
    define_limits(&admin, args).await?;
    let spent_before = admin
        .spent(TENANT, PERIOD)
        .await
        .map_err(|e| e.to_string())?;
    let recorder = Arc::new(Recorder::new());
    if args.workload == Workload::LeasedTake {
        // Every ms of the run and a minute more (a slow stop), counted.
        let ms = ((args.warmup + args.duration) * 1000.0) as usize + 60_000;
        let _ = recorder.spends.set(
            (0..leased_series(args))
                .map(|_| {
                    (0..ms)
                        .map(|_| std::sync::atomic::AtomicU64::new(0))
                        .collect()
                })
                .collect(),
        );
    }
    let clients = start_clients_in(args, servers, security, &recorder, &groups);
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    // CPU only over a window without incidents: a killed or stopped node is no figure.
    let cpu = match &spawned {
        Some(cluster) if args.failover == 0 && args.stall == 0 => {
            CpuClock::start(&node_pids(cluster))
        }
        _ => None,
    };
    recorder.measuring.store(true, Ordering::Relaxed);
    let (elapsed, recoveries_us, stalls_us) =
        measure(args, servers, security, spawned, &recorder).await?;
    recorder.measuring.store(false, Ordering::Relaxed);
    let cpu = cpu.and_then(|c| c.stop(recorder.ops.load(Ordering::Relaxed)));
    recorder.stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    let mut verified = verify(&admin, args, &recorder, &spent_before).await?;
    for (tenant, group_admin) in &groups.extra {
        verified &= verify_caps(group_admin, args, tenant).await?;
    }
    let lease = (args.workload == Workload::LeasedTake).then(|| verify_spend_time(args, &recorder));
    if let Some(l) = &lease {
        verified &= l.worst_window_over_bound <= 0.0;
    }
    let mut report = LoadReport::new(args, &recorder, elapsed, recoveries_us, stalls_us, verified);
    report.cpu = cpu;
    report.lease = lease;
    Ok(report)
}

/// The running nodes of `cluster`, named `n<id>`, with their process ids.
pub(super) fn node_pids(cluster: &LocalCluster) -> Vec<(String, u32)> {
    cluster
        .nodes()
        .iter()
        .filter_map(|n| cluster.pid(n.id).map(|pid| (format!("n{}", n.id), pid)))
        .collect()
}

/// Concurrent admin requests when defining or checking every limit: a curve point has up
/// to 100,000 limits, one at a time would take minutes.
const ADMIN_PARALLEL: u64 = 32;

/// Runs `f(admin, l)` for every limit number `l` below `limits`, `ADMIN_PARALLEL` at a time;
/// returns whether every call returned true.
async fn each_limit<F, Fut>(admin: &Client, limits: u32, f: F) -> Result<bool, String>
where
    F: Fn(Client, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, String>> + Send,
{
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..ADMIN_PARALLEL {
        let (admin, f) = (admin.clone(), f.clone());
        workers.spawn(async move {
            let mut all = true;
            let mut l = w;
            while l < u64::from(limits) {
                all &= f(admin.clone(), l).await?;
                l += ADMIN_PARALLEL;
            }
            Ok::<bool, String>(all)
        });
    }
    let mut all = true;
    while let Some(r) = workers.join_next().await {
        all &= r.map_err(|e| e.to_string())??;
    }
    Ok(all)
}

/// `--groups N` of 2 or more: tenant `bench-g<G>` placed in each data group G, each with a
/// client of its group. Group 1's clients use [`TENANT`] (placed in group 1 as any
/// unplaced tenant is), so the figures of one group are those of the same run without
/// `--groups`; groups 2 to N add a tenant each, in `extra`.
pub(super) struct GroupTenants {
    /// How many groups the clients spread over.
    groups: u32,
    /// (tenant, a client of its group) for groups 2 to N, in group order.
    extra: Vec<(String, Client)>,
}

impl GroupTenants {
    /// Places the tenants of `--groups` (nothing with one group).
    async fn place(
        args: &BenchArgs,
        servers: &[String],
        security: &ClientSecurity,
    ) -> Result<GroupTenants, String> {
        let admin = Client::with_security(servers.to_vec(), security.clone());
        let mut extra = Vec::new();
        if args.groups > 1 {
            let placed = admin.place_tenant(TENANT, Some(1)).await;
            placed.map_err(|e| format!("placing {TENANT} in group 1: {e}"))?;
        }
        for g in 2..=u64::from(args.groups) {
            let tenant = format!("{TENANT}-g{g}");
            let placed = admin.place_tenant(&tenant, Some(g)).await;
            placed.map_err(|e| format!("placing {tenant} in group {g}: {e}"))?;
            let client = Client::with_security(servers.to_vec(), security.clone()).in_group(g);
            extra.push((tenant, client));
        }
        Ok(GroupTenants {
            groups: args.groups,
            extra,
        })
    }

    /// The tenant client `n` works in and the group it speaks to (`None`: the default).
    fn of_client(&self, n: usize) -> (String, Option<u64>) {
        match n as u64 % u64::from(self.groups) {
            0 => (TENANT.to_owned(), None),
            g => (format!("{TENANT}-g{}", g + 1), Some(g + 1)),
        }
    }
}

/// Defines the limits the workloads use and clears the tenant's ceilings (idempotent).
pub(super) async fn define_limits(admin: &Client, args: &BenchArgs) -> Result<(), String> {
    define_limits_in(admin, args, TENANT).await?;
    if args.stall > 0 {
        let room = u32::try_from(args.clients).unwrap_or(u32::MAX);
        admin
            .define_limit(TENANT, HOLD_LIMIT, room, 0.0, None)
            .await
            .map_err(|e| format!("define: {e}"))?;
    }
    admin
        .set_tenant(TENANT, Change::Clear, Change::Clear, Change::Clear)
        .await
        .map_err(|e| e.to_string())?;
    let (lease_rate, lease_burst) = leased_rate_and_burst(args);
    match args.workload {
        Workload::LeasedTake if args.lease_keys > 0 => {
            let definition = Definition {
                tenant: TENANT.into(),
                name: LEASED_KEYED_LIMIT.into(),
                concurrent: 0,
                per_second: lease_rate,
                burst: Some(lease_burst),
                keyed: true,
                keys_max: Some(args.lease_keys),
                shadow: false,
            };
            match admin.define(definition).await {
                Ok(Reply::Done) => Ok(()),
                Ok(other) => Err(format!("define {LEASED_KEYED_LIMIT}: {other:?}")),
                Err(e) => Err(format!("define {LEASED_KEYED_LIMIT}: {e}")),
            }
        }
        Workload::LeasedTake => admin
            .define_limit(TENANT, LEASED_LIMIT, 0, lease_rate, Some(lease_burst))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Workload::KeyedTake => define_rate(admin, KEYED_LIMIT, Some(KEYED_KEYS_MAX)).await,
        Workload::Multi => {
            define_rate(admin, MULTI_TENANT, None).await?;
            define_rate(admin, MULTI_MODEL, Some(MODELS as u32)).await?;
            define_rate(admin, MULTI_GLOBAL, None).await
        }
        _ => Ok(()),
    }
}

/// Defines tenant `tenant`'s limits of `acquire-release` (`--limits` of them) and the rate
/// limit of `rate-take`, through `admin` (a client of the tenant's group).
async fn define_limits_in(admin: &Client, args: &BenchArgs, tenant: &str) -> Result<(), String> {
    let concurrency = args.concurrency;
    let owned = tenant.to_owned();
    each_limit(admin, args.limits, move |admin, l| {
        let tenant = owned.clone();
        async move {
            admin
                .define_limit(&tenant, &limit_name(l), concurrency, 0.0, None)
                .await
                .map(|_| true)
                .map_err(|e| format!("define: {e}"))
        }
    })
    .await?;
    admin
        .define_limit(tenant, RATE_LIMIT, 0, 1e9, Some(1_000_000_000))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Defines rate limit `name` of `keyed-take` or `multi`: one token a second from a burst of
/// a billion, per key when `keys_max` is given.
pub(super) async fn define_rate(
    admin: &Client,
    name: &str,
    keys_max: Option<u32>,
) -> Result<(), String> {
    let definition = Definition {
        tenant: TENANT.into(),
        name: name.into(),
        concurrent: 0,
        per_second: 1.0,
        burst: Some(1_000_000_000),
        keyed: keys_max.is_some(),
        keys_max,
        shadow: false,
    };
    match admin.define(definition).await {
        Ok(Reply::Done) => Ok(()),
        Ok(other) => Err(format!("define {name}: {other:?}")),
        Err(e) => Err(format!("define {name}: {e}")),
    }
}

/// Starts `--clients` client loops, client n in the tenant and group `groups` gives it; the
/// clients of one group share connections, `--clients-per-connection` to each.
fn start_clients_in(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    recorder: &Arc<Recorder>,
    groups: &GroupTenants,
) -> Vec<JoinHandle<()>> {
    let connect = |group: Option<u64>| {
        let client = Client::with_security(servers.to_vec(), security.clone());
        match group {
            Some(g) => client.in_group(g),
            None => client,
        }
    };
    let mut clients: HashMap<Option<u64>, (Client, usize)> = HashMap::new();
    let zipf = match args.workload {
        Workload::KeyedTake => Zipf::new(KEYS, ZIPF_S),
        Workload::LeasedTake if args.lease_keys > 0 => Zipf::new(args.lease_keys as usize, ZIPF_S),
        _ => Zipf::new(1, ZIPF_S),
    };
    // Each client asks for its fair share of what leases may hold (three quarters of the
    // rate and burst): asking for the whole limit, the first holders would take it all and
    // the others would ask the cluster per take until the renewals even the shares out.
    let (rate, burst) = leased_rate_and_burst(args);
    let holders = args.clients as f64;
    let lease_rate = rate * 0.75 / holders;
    let lease_burst = ((burst as f64 * 0.75 / holders) as u64).max(1);
    (0..args.clients)
        .map(|n| {
            let (tenant, group) = groups.of_client(n);
            let (client, sharing) = clients.entry(group).or_insert_with(|| (connect(group), 0));
            if *sharing == args.clients_per_connection {
                *client = connect(group);
                *sharing = 0;
            }
            *sharing += 1;
            let bench = BenchClient {
                client: client.clone(),
                tenant,
                n: n / groups.groups as usize,
                workload: args.workload,
                limits: args.limits,
                recorder: recorder.clone(),
                hold: args.stall > 0,
                lost_permit: AtomicBool::new(false),
                lease_rate,
                lease_burst,
                lease_keys: args.lease_keys,
            };
            tokio::spawn(bench.run(zipf.sampler(n as u64)))
        })
        .collect()
}

/// The measured part: lasts its duration, and longer if the kills and stalls asked for
/// have not all happened. Returns how long it measured and the recovery time of each kill
/// and of each stall, µs.
async fn measure(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    mut spawned: Option<&mut LocalCluster>,
    recorder: &Recorder,
) -> Result<(Duration, Vec<u64>, Vec<u64>), String> {
    let start = Instant::now();
    let duration = Duration::from_secs_f64(args.duration);
    let incidents = (args.failover + args.stall) as usize;
    let every = duration / (args.failover + args.stall + 1);
    let mut next = start + every;
    let (mut recoveries_us, mut stalls_us) = (vec![], vec![]);
    let mut progress = Progress::new();
    let done = |r: &Vec<u64>, s: &Vec<u64>| r.len() + s.len();
    while start.elapsed() < duration
        || (spawned.is_some() && done(&recoveries_us, &stalls_us) < incidents)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        progress.tick(start, recorder);
        if let Some(cluster) = spawned.as_deref_mut()
            && done(&recoveries_us, &stalls_us) < incidents
            && Instant::now() >= next
        {
            let (incident, took_us) = if recoveries_us.len() < args.failover as usize {
                (Incident::Kill, &mut recoveries_us)
            } else {
                (Incident::Stall, &mut stalls_us)
            };
            took_us.push(disrupt_the_leader(incident, cluster, servers, security, recorder).await?);
            next = Instant::now() + every;
        }
    }
    Ok((start.elapsed(), recoveries_us, stalls_us))
}

/// The once-a-second progress line on stderr.
struct Progress {
    last_ops: u64,
    last_tick: Instant,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            last_ops: 0,
            last_tick: Instant::now(),
        }
    }

    fn tick(&mut self, start: Instant, recorder: &Recorder) {
        if self.last_tick.elapsed() < Duration::from_secs(1) {
            return;
        }
        let ops = recorder.ops.load(Ordering::Relaxed);
        eprintln!(
            "[bench] {:>5.1}s  {:>9} ops  {:>9.0} ops/s  errors {}",
            start.elapsed().as_secs_f64(),
            ops,
            (ops - self.last_ops) as f64 / self.last_tick.elapsed().as_secs_f64(),
            recorder.errors.load(Ordering::Relaxed)
        );
        self.last_ops = ops;
        self.last_tick = Instant::now();
    }
}

/// What the bench does to the leader during a run: `--failover` kills it, `--stall` stops it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Incident {
    /// SIGKILL; the node is restarted once grants resume.
    Kill,
    /// SIGSTOP for [`STALL`], then SIGCONT (on every path).
    Stall,
}

impl Incident {
    /// The incident's name in messages.
    fn name(self) -> &'static str {
        match self {
            Incident::Kill => "kill",
            Incident::Stall => "stop",
        }
    }
}

/// Kills or stops the leader, waits for the first success of an operation sent after it,
/// and undoes it (a killed node restarted, a stopped one resumed once [`STALL`] has
/// passed); returns the time from the incident to that success, µs.
pub(super) async fn disrupt_the_leader(
    incident: Incident,
    cluster: &mut LocalCluster,
    servers: &[String],
    security: &ClientSecurity,
    recorder: &Recorder,
) -> Result<u64, String> {
    let what = incident.name();
    let Some(leader) = leader_among_with(servers, Duration::from_secs(10), security).await else {
        return Err(format!("no leader to {what}"));
    };
    recorder.recovered_ns.store(0, Ordering::Release);
    recorder.kill_ns.store(recorder.ns(), Ordering::Release);
    let from_ns = recorder.ns();
    let from = Instant::now();
    match incident {
        Incident::Kill => {
            cluster.kill(leader);
            eprintln!("[bench] killed the leader, node {leader}");
        }
        Incident::Stall => {
            cluster.pause(leader);
            eprintln!("[bench] stopped the leader, node {leader} (SIGSTOP)");
        }
    }
    let wait_until = from + RECOVERY_WAIT;
    while recorder.recovered_ns.load(Ordering::Acquire) == 0 && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let recovered = recorder.recovered_ns.load(Ordering::Acquire);
    recorder.kill_ns.store(0, Ordering::Release);
    if incident == Incident::Stall {
        tokio::time::sleep(STALL.saturating_sub(from.elapsed())).await;
        cluster.resume(leader);
        eprintln!("[bench] resumed node {leader} (SIGCONT)");
    }
    if recovered == 0 {
        return Err(format!("grants did not resume within 20 s of the {what}"));
    }
    let took_us = (recovered - from_ns) / 1_000;
    eprintln!(
        "[bench] grants resumed {:.1} ms after the {what}",
        ms(took_us)
    );
    if incident == Incident::Kill {
        spawn::restart(cluster, leader).await?;
    }
    Ok(took_us)
}

/// Whether nothing acknowledged was lost: no limit ever held more than its cap, and the
/// tokens charged lie between the settles acknowledged and those plus the unknown ones.
async fn verify(
    admin: &Client,
    args: &BenchArgs,
    recorder: &Recorder,
    spent_before: &Spend,
) -> Result<bool, String> {
    let mut verified = verify_caps(admin, args, TENANT).await?;
    let spent = admin
        .spent(TENANT, PERIOD)
        .await
        .map_err(|e| e.to_string())?;
    let charged = spent.tokens - spent_before.tokens;
    let acked = recorder.settled.load(Ordering::Relaxed);
    let unknown = recorder.settle_unknown.load(Ordering::Relaxed);
    if charged < acked || charged > acked + unknown {
        eprintln!(
            "[bench] VIOLATION: {charged} settled tokens charged, {acked} acknowledged, {unknown} unknown"
        );
        verified = false;
    }
    Ok(verified)
}

/// Whether no limit of tenant `tenant` (read through `admin`, a client of its group) ever
/// held more than its cap.
async fn verify_caps(admin: &Client, args: &BenchArgs, tenant: &str) -> Result<bool, String> {
    let concurrency = args.concurrency;
    let owned = tenant.to_owned();
    each_limit(admin, args.limits, move |admin, l| {
        let tenant = owned.clone();
        async move {
            let status = admin
                .limit_status(&tenant, &limit_name(l))
                .await
                .map_err(|e| e.to_string())?;
            if let Some(s) = status
                && (s.max_in_use > concurrency as u64)
            {
                eprintln!(
                    "[bench] VIOLATION: {tenant}/{} held {} of {}",
                    s.name, s.max_in_use, concurrency
                );
                return Ok(false);
            }
            Ok(true)
        }
    })
    .await
}

/// One bench client: its own session, operations in a loop until told to stop.
struct BenchClient {
    client: Client,
    /// The tenant it works in: [`TENANT`], or with `--groups` its group's.
    tenant: String,
    /// Its number, which spreads the clients over the limits.
    n: usize,
    workload: Workload,
    limits: u32,
    recorder: Arc<Recorder>,
    /// `--stall`: hold one permit of [`HOLD_LIMIT`] for the whole run.
    hold: bool,
    /// One of this session's permits was seen lost.
    lost_permit: AtomicBool,
    /// `leased-take`: what a lease asks (rate, cap), and `--lease-keys`.
    lease_rate: f64,
    lease_burst: u64,
    lease_keys: u32,
}

/// A client's leases of `leased-take --lease-keys`: how often it saw each key lately, and
/// the keys it leases.
#[derive(Default)]
struct KeyedLeases {
    seen: HashMap<usize, u32>,
    leases: HashMap<usize, Leased>,
}

impl KeyedLeases {
    /// Counts a sighting of the key of `rank`; whether it is now seen often enough to lease
    /// (and this client may lease one more).
    fn seen_often(&mut self, rank: usize) -> bool {
        if self.leases.len() >= LEASES_PER_CLIENT || self.leases.contains_key(&rank) {
            return false;
        }
        if self.seen.len() >= SEEN_MAX {
            // Halve every count: keys seen once or not lately fall out.
            self.seen.retain(|_, n| *n > 1);
            self.seen.values_mut().for_each(|n| *n /= 2);
        }
        let n = self.seen.entry(rank).or_insert(0);
        *n += 1;
        *n >= LEASE_AFTER
    }
}

impl BenchClient {
    /// The loop; `keys` draws the keys of `keyed-take`.
    async fn run(self, mut keys: Sampler) {
        let mut hist = histogram();
        let ttl = if self.hold { STALL_TTL } else { SESSION_TTL };
        let session = match Session::open(&self.client, ttl).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("bench client {}: {e}", self.n);
                self.recorder.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        self.recorder.sessions.fetch_add(1, Ordering::Relaxed);
        let held = match self.hold {
            true => match session
                .acquire(AcquireOptions::new(TENANT, HOLD_LIMIT))
                .await
            {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("bench client {}: hold: {e}", self.n);
                    self.lost_permit.store(true, Ordering::Relaxed);
                    None
                }
            },
            false => None,
        };
        let lease = match self.workload {
            Workload::LeasedTake if self.lease_keys == 0 => {
                let options =
                    LeaseOptions::new(TENANT, LEASED_LIMIT, self.lease_rate, self.lease_burst);
                match session.lease(options).await {
                    Ok(lease) => Some(lease),
                    Err(e) => {
                        eprintln!("bench client {}: lease: {e}", self.n);
                        self.recorder.errors.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                }
            }
            _ => None,
        };
        let mut keyed = KeyedLeases::default();
        let mut i: u64 = 0;
        {
            let work = async {
                while !self.recorder.stop.load(Ordering::Relaxed) {
                    i += 1;
                    if self.workload == Workload::LeasedTake && i.is_multiple_of(LOCAL_RUN) {
                        // A take decided locally never awaits: without this, a client would
                        // keep its worker thread from the others, the keep-alives and the
                        // run's own clock.
                        tokio::task::yield_now().await;
                    }
                    let kind = match self.workload {
                        Workload::Mixed => [
                            Workload::AcquireRelease,
                            Workload::RateTake,
                            Workload::ReserveSettle,
                        ][(i % 3) as usize],
                        w => w,
                    };
                    match kind {
                        Workload::AcquireRelease => {
                            self.acquire_release(&session, i, &mut hist).await
                        }
                        Workload::RateTake => self.rate_take(&session, &mut hist).await,
                        Workload::ReserveSettle => self.reserve_settle(i, &mut hist).await,
                        Workload::KeyedTake => {
                            let key = format!("k{}", keys.next_rank());
                            self.take(&session, keyed_take(&key), &mut hist).await
                        }
                        Workload::Multi => {
                            let take = multi_take(self.n as u64 + i);
                            self.take(&session, take, &mut hist).await
                        }
                        Workload::LeasedTake if self.lease_keys > 0 => {
                            let rank = keys.next_rank();
                            self.leased_keyed_take(&session, rank, &mut keyed, &mut hist)
                                .await
                        }
                        Workload::LeasedTake => match &lease {
                            Some(lease) => self.leased_take(lease, &mut hist).await,
                            None => break,
                        },
                        Workload::Mixed
                        | Workload::Scale
                        | Workload::KeyedScale
                        | Workload::KeyedChurn
                        | Workload::Rls => {
                            unreachable!("not a per-client workload")
                        }
                    }
                }
            };
            tokio::pin!(work);
            // The held permit is watched the whole run: a belief that lapsed and was renewed
            // later (a keep-alive acknowledged after the deadline) is a lost permit too, though
            // `lost_reason` at the end would no longer show it.
            match &held {
                Some(p) => tokio::select! {
                    () = &mut work => {}
                    why = p.lost() => {
                        eprintln!("bench client {}: held permit lost: {why}", self.n);
                        self.lost_permit.store(true, Ordering::Relaxed);
                        work.await;
                    }
                },
                None => work.await,
            }
        }
        if let Some(p) = held {
            if let Some(why) = p.lost_reason() {
                eprintln!("bench client {}: held permit lost: {why}", self.n);
                self.lost_permit.store(true, Ordering::Relaxed);
            }
            let _ = p.release().await;
        }
        if self.lost_permit.load(Ordering::Relaxed) {
            self.recorder
                .sessions_lost_permit
                .fetch_add(1, Ordering::Relaxed);
        }
        for lease in lease.into_iter().chain(keyed.leases.into_values()) {
            self.count_lease(lease.figures());
            let _ = lease.end().await;
        }
        let _ = session.close().await;
        self.recorder.merge(&hist);
    }

    /// The commands a lease cost, counted when it ends: its requests (the end's too) and
    /// the takes it asked of the cluster.
    fn count_lease(&self, f: LeaseFigures) {
        let r = &self.recorder;
        r.lease_requests
            .fetch_add(f.requests + 1, Ordering::Relaxed);
        r.cluster_asks.fetch_add(f.asked, Ordering::Relaxed);
        r.cluster_refused.fetch_add(f.refused, Ordering::Relaxed);
        r.quiet_refusals.fetch_add(f.quiet, Ordering::Relaxed);
    }

    /// One take of the leased limit: from the lease's local bucket when it has the token,
    /// else from the cluster; its spend is counted in the ms it was decided.
    async fn leased_take(&self, lease: &Leased, hist: &mut Histogram<u64>) {
        let sent = self.recorder.ns();
        let local = lease.try_take(1);
        let taken = if local { Ok(true) } else { lease.take(1).await };
        self.leased_outcome(Some(0), sent, local, taken.map_err(|e| e.to_string()), hist)
            .await
    }

    /// One take of `leased-take --lease-keys`: of the key of `rank`, from this client's
    /// lease of it (opened once the key is seen often), else asked of the cluster.
    async fn leased_keyed_take(
        &self,
        session: &Session,
        rank: usize,
        keyed: &mut KeyedLeases,
        hist: &mut Histogram<u64>,
    ) {
        let key = format!("k{rank}");
        if keyed.seen_often(rank) {
            let options = LeaseOptions::new(
                TENANT,
                LEASED_KEYED_LIMIT,
                self.lease_rate,
                self.lease_burst,
            )
            .key(&key);
            match session.lease(options).await {
                Ok(lease) => {
                    keyed.seen.remove(&rank);
                    keyed.leases.insert(rank, lease);
                }
                Err(e) => {
                    let sent = self.recorder.ns();
                    self.recorder.record_result(hist, sent, &Err::<(), _>(e));
                }
            }
        }
        let series = (rank < KEYS_CHECKED).then_some(rank);
        let sent = self.recorder.ns();
        let (local, taken) = match keyed.leases.get(&rank) {
            Some(lease) => match lease.try_take(1) {
                true => (true, Ok(true)),
                false => (false, lease.take(1).await.map_err(|e| e.to_string())),
            },
            None => {
                self.recorder.cluster_asks.fetch_add(1, Ordering::Relaxed);
                let mut take = keyed_take_of(LEASED_KEYED_LIMIT, &key);
                take.wait = false;
                let taken = session.take_leased(take).await;
                (false, taken.map_err(|e| e.to_string()))
            }
        };
        self.leased_outcome(series, sent, local, taken, hist).await
    }

    /// Counts a take of `leased-take` sent at `sent`: granted in spend series `series`
    /// (locally: in the ms it was decided; by the cluster: its span from `sent` to its
    /// answer), or refused, or failed.
    async fn leased_outcome(
        &self,
        series: Option<usize>,
        sent: u64,
        local: bool,
        taken: Result<bool, String>,
        hist: &mut Histogram<u64>,
    ) {
        let now = self.recorder.ns();
        match taken {
            Ok(true) => {
                match (self.recorder.spends.get(), series) {
                    (Some(spends), Some(series)) if local => {
                        let spends = &spends[series];
                        let ms = (now / 1_000_000) as usize;
                        spends[ms.min(spends.len() - 1)].fetch_add(1, Ordering::Relaxed);
                    }
                    (Some(_), Some(series)) => {
                        let span = (
                            series as u16,
                            (sent / 1_000_000) as u32,
                            (now / 1_000_000) as u32,
                        );
                        let spans = &self.recorder.cluster_spends;
                        spans.lock().unwrap_or_else(|p| p.into_inner()).push(span);
                    }
                    _ => {}
                }
                let counter = match local {
                    true => &self.recorder.local_takes,
                    false => &self.recorder.cluster_takes,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                self.recorder.record(hist, sent, true);
            }
            // No token here nor in the cluster's bucket: the limit is at its rate, which is
            // what the run is for; let the others run.
            Ok(false) => tokio::task::yield_now().await,
            Err(e) => self.recorder.record_result(hist, sent, &Err::<bool, _>(e)),
        }
    }

    /// Acquire a permit of one of the limits, then release it: two operations.
    async fn acquire_release(&self, session: &Session, i: u64, hist: &mut Histogram<u64>) {
        let limit = limit_name((self.n as u64 * 7919 + i) % u64::from(self.limits));
        let sent = self.recorder.ns();
        match session
            .acquire(AcquireOptions::new(&self.tenant, &limit))
            .await
        {
            Ok(permit) => {
                self.recorder.record(hist, sent, true);
                if permit.lost_reason().is_some() {
                    self.lost_permit.store(true, Ordering::Relaxed);
                }
                let sent = self.recorder.ns();
                let released = permit.release().await;
                self.recorder.record_result(hist, sent, &released);
            }
            acquired @ Err(_) => self.recorder.record_result(hist, sent, &acquired),
        }
    }

    /// One take of the rate limit.
    async fn rate_take(&self, session: &Session, hist: &mut Histogram<u64>) {
        self.take(session, AcquireOptions::new(&self.tenant, RATE_LIMIT), hist)
            .await
    }

    /// One take (of limits that hold nothing): one operation, one entry. The grant is
    /// consumed, as a user's take is: a dropped permit would send a release in the
    /// background, a second entry that frees nothing.
    async fn take(&self, session: &Session, options: AcquireOptions, hist: &mut Histogram<u64>) {
        let sent = self.recorder.ns();
        let taken = session.acquire(options).await.map(|p| p.consume());
        self.recorder.record_result(hist, sent, &taken);
    }

    /// Reserve a run, then settle it releasing the slot: two operations; settles are
    /// counted for the final check.
    async fn reserve_settle(&self, i: u64, hist: &mut Histogram<u64>) {
        let run = format!("c{}-r{i}", self.n);
        let sent = self.recorder.ns();
        let ok = matches!(
            self.client.reserve(TENANT, &run, None, Some(PERIOD)).await,
            Ok(Reply::Admitted)
        );
        self.recorder.record(hist, sent, ok);
        let settle = Settle {
            tenant: TENANT.into(),
            run,
            epoch: 1,
            period: Some(PERIOD.into()),
            tokens: 1,
            minor_units: 1,
            release_slot: true,
        };
        let sent = self.recorder.ns();
        match self.client.settle(settle).await {
            Ok(Reply::Settled { duplicate: false }) => {
                self.recorder.settled.fetch_add(1, Ordering::Relaxed);
                self.recorder.record(hist, sent, true);
            }
            Ok(Reply::Settled { duplicate: true }) => self.recorder.record(hist, sent, true),
            Err(e) if !e.definitely_failed() => {
                self.recorder.settle_unknown.fetch_add(1, Ordering::Relaxed);
                self.recorder.record(hist, sent, false);
            }
            _ => self.recorder.record(hist, sent, false),
        }
    }
}

/// A take of one token of keyed limit `limit`, from `key`.
pub(super) fn keyed_take_of(limit: &str, key: &str) -> AcquireOptions {
    let mut options = AcquireOptions::new(TENANT, limit);
    options.key = Some(key.to_owned());
    options
}

/// A take of one token of `keyed-take`'s limit, from `key`.
fn keyed_take(key: &str) -> AcquireOptions {
    keyed_take_of(KEYED_LIMIT, key)
}

/// A take of `multi`: one token of the tenant's rate, of model `i % MODELS`'s, and of the
/// global one, in one request.
fn multi_take(i: u64) -> AcquireOptions {
    let mut options = AcquireOptions::new(TENANT, MULTI_TENANT);
    options.parts = vec![
        Part {
            limit: MULTI_MODEL.into(),
            key: Some(format!("m{}", i % MODELS)),
            units: 1,
        },
        Part {
            limit: MULTI_GLOBAL.into(),
            key: None,
            units: 1,
        },
    ];
    options
}

/// `leased-take`'s check of G1 in spend time (`spend_check`), for the limit or each key
/// checked. Prints the figures.
fn verify_spend_time(args: &BenchArgs, recorder: &Recorder) -> LeaseReport {
    let (rate, burst) = leased_rate_and_burst(args);
    let spans = std::mem::take(
        &mut *recorder
            .cluster_spends
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    );
    let worst = recorder
        .spends
        .get()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(series, local)| {
            let local: Vec<u64> = local.iter().map(|n| n.load(Ordering::Relaxed)).collect();
            let cluster: Vec<(u32, u32)> = spans
                .iter()
                .filter(|(s, _, _)| *s as usize == series)
                .map(|&(_, sent, at)| (sent, at))
                .collect();
            worst_window(&local, &cluster, rate / 1000.0, burst as f64)
        })
        .fold(f64::NEG_INFINITY, f64::max);
    let local = recorder.local_takes.load(Ordering::Relaxed);
    let cluster = recorder.cluster_takes.load(Ordering::Relaxed);
    let asks = recorder.cluster_asks.load(Ordering::Relaxed);
    let requests = recorder.lease_requests.load(Ordering::Relaxed);
    let per_1k = (asks + requests) as f64 * 1000.0 / (local + cluster).max(1) as f64;
    eprintln!(
        "[bench] leased-take: {local} takes decided locally, {cluster} by the cluster ({asks} \
         asked), {requests} lease requests: {per_1k:.2} commands per 1,000 takes; spend-time \
         check: the worst window is {:.0} tokens {} its bound",
        worst.abs(),
        if worst > 0.0 { "OVER" } else { "under" }
    );
    if worst > 0.0 {
        eprintln!("[bench] VIOLATION: tokens spent over burst + rate × window");
    }
    LeaseReport {
        rate_per_s: rate,
        burst,
        keys: args.lease_keys,
        keys_checked: match args.lease_keys {
            0 => 0,
            _ => leased_series(args),
        },
        local_takes: local,
        cluster_takes: cluster,
        cluster_asks: asks,
        lease_requests: requests,
        cluster_refused: recorder.cluster_refused.load(Ordering::Relaxed),
        quiet_refusals: recorder.quiet_refusals.load(Ordering::Relaxed),
        commands_per_1k_takes: per_1k,
        worst_window_over_bound: worst,
    }
}
