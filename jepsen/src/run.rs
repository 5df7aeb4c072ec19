//! One run: start the cluster, the status monitor and the workloads, drive the nemesis's
//! schedule (each heal followed by a convergence probe), heal, probe liveness and
//! convergence, read the final state (limit statuses, every settled period), and judge the
//! history; `verdict.txt` gets the table and the coverage counts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use weir_client::{AcquireOptions, Client, Session};

use crate::checker::{self, Verdict};
use crate::cluster::{Cluster, Net, Setup};
use crate::history::{self, Kind, Recorder};
use crate::nemesis;
use crate::secure::{self, Access};
use crate::workload::{self, LIMITS, TENANT};

/// What to run.
pub struct Plan {
    pub weir: PathBuf,
    pub out: PathBuf,
    pub seed: u64,
    /// Nodes in the cluster (`--nodes`): 3 or 5.
    pub nodes: u64,
    pub duration: Duration,
    pub nemeses: Vec<String>,
    pub net: Net,
    /// TLS on every port and tokens with roles ([`crate::secure`]); the run is checked to
    /// refuse plaintext and tokenless clients at its start.
    pub secure: bool,
    /// The session TTL of the `fenced` workload's processes (`--fenced-ttl-ms`; default
    /// [`workload::TTL`]). The client-pause nemesis pauses past it.
    pub fenced_ttl: Duration,
    /// Entries between snapshots on every node (`--snapshot-every`; 0: the nodes' default).
    pub snapshot_every: u64,
    /// Permit holders running the Python client beside the Rust ones (`--python-holders`);
    /// every node serves HTTP for them.
    pub python: Option<workload::PythonHolders>,
    /// Permit holders running the Go client beside the Rust ones (`--go-holders`); every
    /// node serves HTTP for them.
    pub go: Option<workload::GoHolders>,
    /// Permit holders running the TypeScript client beside the Rust ones (`--ts-holders`);
    /// every node serves HTTP for them.
    pub ts: Option<workload::TsHolders>,
    /// Token-lease holders on the leased rate limits, with a cluster taker beside them on
    /// each (`--lease-holders`).
    pub leases: Option<workload::LeaseHolders>,
    /// Envoy holders calling the nodes' `ShouldRateLimit` on [`crate::setup::RLS_LIMIT`]
    /// (`--rls-holders`); every node serves gRPC for them.
    pub rls: u64,
    /// Every node's `groups` (`--groups`); with 2 or more, every tenant of the run is placed
    /// in the last data group and every client speaks to it ([`secure::run_group`]).
    pub groups: u32,
}

impl Plan {
    /// Client fronts only where a client link fault is asked for (loopback mode).
    fn client_fronts(&self) -> bool {
        matches!(self.net, Net::Loopback)
            && self
                .nemeses
                .iter()
                .any(|k| nemesis::LOOPBACK_ONLY.contains(&k.as_str()))
    }
}

/// The verdicts, in table order.
pub struct Outcome {
    pub rows: Vec<(&'static str, &'static str, Verdict)>,
    pub ops: usize,
    pub fired: Vec<&'static str>,
    /// Leader stalls (`pause`) that fired, which were judged, and the clients not themselves
    /// paused that lost a permit or a waiting session to one ([`checker::stalls::count`]).
    pub stalls: checker::stalls::Tally,
}

impl Outcome {
    pub fn all_valid(&self) -> bool {
        self.rows.iter().all(|(_, _, v)| *v == Verdict::Valid)
    }
}

/// Places every tenant of the run in data group `group` (the last: not the one a plain
/// client speaks to, so every request goes by the placement), and has every client of the
/// run speak to it from here on.
async fn place_tenants(servers: &[String], group: u64) -> Result<(), String> {
    let admin = secure::client(servers.to_vec(), Access::Admin);
    for tenant in crate::setup::TENANTS {
        let placed = tokio::time::timeout(
            Duration::from_secs(60),
            admin.place_tenant(tenant, Some(group)),
        )
        .await
        .map_err(|_| format!("placing {tenant} in group {group}: no answer in 60 s"))?;
        placed.map_err(|e| format!("placing {tenant} in group {group}: {e}"))?;
    }
    secure::set_run_group(group);
    Ok(())
}

pub async fn run(plan: &Plan) -> Result<Outcome, String> {
    std::fs::create_dir_all(&plan.out).map_err(|e| format!("{}: {e}", plan.out.display()))?;
    let history = Recorder::new();
    record_env_clock(&history, plan.nodes);
    let lost_fsync = plan.nemeses.iter().any(|k| k == nemesis::POWER_LOSS);
    let client_fronts = plan.client_fronts();
    let setup = Setup {
        nodes: plan.nodes,
        lost_fsync,
        secure: plan.secure,
        client_fronts,
        http: plan.python.is_some()
            || plan.go.is_some()
            || plan.ts.is_some()
            || plan.leases.as_ref().is_some_and(|l| l.python > 0),
        snapshot_every: plan.snapshot_every,
        grpc: plan.rls > 0,
        groups: plan.groups,
    };
    let mut cluster =
        Cluster::start(&plan.weir, &plan.out, plan.seed, plan.net.clone(), setup).await?;
    if cluster.leader(Duration::from_secs(20)).await.is_none() {
        return Err("the cluster elected no leader".into());
    }
    if let Some(secure) = &cluster.secure {
        crate::secure::check(secure, &cluster.ports(), &history).await;
    }
    let servers = cluster.servers();
    if plan.groups > 1 {
        let group = u64::from(plan.groups);
        place_tenants(&servers, group).await?;
        // The nemesis's "leader" is the leader of the group the tenants live in.
        cluster.set_group(group);
    }
    // Limit definitions are the operator's: the admin role makes them.
    workload::setup(
        &secure::client(servers.clone(), Access::Admin),
        &secure::client(servers.clone(), Access::Admin),
    )
    .await?;
    let monitor = crate::monitor::Monitor::start(&servers, &history, cluster.starts.clone());
    let http: Vec<String> = cluster.ports().into_iter().map(|(_, _, h)| h).collect();
    let grpc = cluster.grpc_ports();
    let workloads = Workloads::start(plan, &servers, &http, &grpc, &history, client_fronts)?;
    let targets = nemesis::Targets {
        client_pause: workloads.client_pause.clone(),
        cut_client: workloads.cut_client.clone(),
        cli_holder: workloads.cli_holder.clone(),
        queued: workload::Queued::new(servers.clone(), history.clone(), plan.seed ^ 400),
    };
    let steps = nemesis::schedule_on(
        plan.nodes,
        plan.seed,
        &plan.nemeses,
        plan.duration.as_millis() as u64,
        plan.fenced_ttl.as_millis() as u64,
    );
    eprintln!(
        "[jepsen] seed {}, {} nodes: {} faults scheduled over {:?}",
        plan.seed,
        plan.nodes,
        steps.len(),
        plan.duration
    );
    let started = Instant::now();
    let fired = nemesis::run(&mut cluster, &targets, &steps, &history).await;
    if let Some(rest) = plan.duration.checked_sub(started.elapsed()) {
        tokio::time::sleep(rest.saturating_sub(Duration::from_secs(2))).await;
    }
    workloads.stop().await;
    // Heal, then probe liveness: each capped limit, once it has room, grants a new waiter.
    let healed_ns = final_heal(&mut cluster, &history).await;
    let probe_client = secure::client(servers.clone(), Access::Tenant(TENANT));
    probe_liveness(&cluster, &probe_client, &history, healed_ns).await;
    workload::keyed::drain(&probe_client, &history).await;
    monitor.stop().await;
    crate::converge::probe(&cluster, &history, true).await;
    // The final reads only read.
    crate::finals::read(&secure::client(servers.clone(), Access::Read), &history).await;
    let logs = cluster.logs();
    drop(cluster);
    // What the node logs say of snapshots, for the coverage counts.
    let (snapshots, _) = checker::snapshots::judge(&logs);
    let mut fact = snapshots.json();
    fact["every"] = plan.snapshot_every.into();
    history.record(history::NEMESIS, Kind::Info, "snapshots", fact);
    let ops = history.ops();
    history::write_jsonl(&plan.out.join("history.jsonl"), &ops).map_err(|e| e.to_string())?;
    std::fs::write(plan.out.join("history.edn"), history::to_edn(&ops))
        .map_err(|e| e.to_string())?;
    let outcome = judge(&ops, &logs, &plan.nemeses, &fired, plan.secure);
    write_verdict(&plan.out, plan, &outcome, &checker::coverage::report(&ops))?;
    Ok(outcome)
}

/// Records a clock rate the harness's environment sets for every node.
///
/// Nodes inherit the harness's environment: a clock rate set there (a planted run's
/// sustained drift, `jepsen/planted.sh`) holds for every node all run long, and the
/// checkers that allow for clock rates must know it.
fn record_env_clock(history: &Recorder, nodes: u64) {
    let Some(rate) = std::env::var("WEIR_TEST_CLOCK_RATE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|r| (0.5..=2.0).contains(r))
    else {
        return;
    };
    // An invoke and its completion, so the history keeps Jepsen's shape.
    history.record(
        history::NEMESIS,
        Kind::Invoke,
        "clock",
        json!({"fault": "env-clocks"}),
    );
    let rates: Vec<serde_json::Value> = (0..nodes).map(|_| json!({"rate": rate})).collect();
    history.record(
        history::NEMESIS,
        Kind::Info,
        "clock",
        json!({"fault": "env-clocks", "nodes": rates}),
    );
}

/// The heal at the end of the schedule, recorded; returns when its completion was recorded.
async fn final_heal(cluster: &mut Cluster, history: &Recorder) -> u64 {
    history.record(
        history::NEMESIS,
        Kind::Invoke,
        "heal",
        json!({"final": true}),
    );
    let healed = cluster.heal().await;
    history.record(
        history::NEMESIS,
        Kind::Info,
        "heal",
        json!({"final": true, "ok": healed.is_ok(), "error": healed.err()}),
    )
}

/// Clients per capped permit limit (`mutex`, `three`).
const PERMIT_CLIENTS: u64 = 10;

/// Of those, how many hold longer than the session TTL.
const LONG_HOLDERS: u64 = 2;

/// Processes taking tokens of the rate limit, each 1 to 3 at a time.
const RATE_TAKERS: u64 = 3;

/// Processes sending requests of several parts on the keyed limits.
const MULTI_CLIENTS: u64 = 3;

/// The workload processes of a run, and how to stop them.
struct Workloads {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The pausable fenced client, on a thread of its own.
    pausable: std::thread::JoinHandle<()>,
    client_pause: Arc<workload::ClientPause>,
    cut_client: Arc<workload::CutClient>,
    /// The CLI holder's handle, when it runs (`client-cut` asked for, loopback mode).
    cli_holder: Option<Arc<workload::CutClient>>,
}

/// Waiters of ordinary addresses behind the cut client, on its limit.
const CUT_WAITERS: u64 = 2;

/// Numbers, seeds and spawns a run's workload processes, keeping their handles.
struct Spawner {
    servers: Vec<String>,
    history: Recorder,
    stop: Arc<AtomicBool>,
    /// The run's seed; each process's is derived from it.
    seed: u64,
    /// The last process number given.
    last: u64,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Spawner {
    /// The next process, seeded `run seed ^ salt`, entering the cluster through `servers`.
    fn next_on(&mut self, servers: Vec<String>, salt: u64) -> workload::Process {
        self.last += 1;
        workload::Process {
            id: self.last,
            servers,
            history: self.history.clone(),
            stop: self.stop.clone(),
            seed: self.seed ^ salt,
        }
    }

    /// The next process, through every node.
    fn next(&mut self, salt: u64) -> workload::Process {
        self.next_on(self.servers.clone(), salt)
    }

    fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(task));
    }

    /// Ten clients on each capped limit; two of each hold longer than the session TTL (on
    /// keep-alives, across faults), the rest briefly.
    fn permit_holders(&mut self) {
        let ttl_ms = workload::TTL.as_millis() as u64;
        let limits = [("mutex", 1u64), ("three", 3)];
        let holders = limits
            .into_iter()
            .flat_map(|(limit, cap)| (0..PERMIT_CLIENTS).map(move |i| (limit, cap, i)));
        for (n, (limit, cap, i)) in holders.enumerate() {
            let hold = if i < LONG_HOLDERS {
                (ttl_ms * 5 / 4, ttl_ms * 3)
            } else {
                (10, 150)
            };
            let p = self.next(n as u64 + 1);
            self.spawn(workload::permits(p, limit, cap, hold));
        }
    }

    /// Rate takers, the ledger, requests of several parts on keyed limits, halts set and cleared under admitters, and `max_running`
    /// raced with reserves.
    fn tenant_workloads(&mut self) {
        for i in 0..RATE_TAKERS {
            let p = self.next(50 + i);
            self.spawn(workload::takes(p));
        }
        for i in 0..2 {
            let p = self.next(100 + i);
            self.spawn(workload::ledger(p));
        }
        for i in 0..MULTI_CLIENTS {
            let p = self.next(60 + i);
            self.spawn(workload::keyed::multi(p));
        }
        let p = self.next(150);
        self.spawn(workload::halter(p));
        for agent in [
            workload::HALT_AGENT,
            workload::HALT_AGENT,
            workload::OTHER_AGENT,
        ] {
            let p = self.next(0);
            self.spawn(workload::admitter(p, agent));
        }
        let (p, w) = (self.next(190), self.next(191));
        self.spawn(workload::halt_queue(p, w));
        let p = self.next(180);
        self.spawn(workload::ceiling_setter(p));
        for i in 0..3 {
            let p = self.next(181 + i);
            self.spawn(workload::ceiling_admitter(p));
        }
    }

    /// A reader through each node, validating others' fences.
    fn readers(&mut self) {
        for (i, server) in self.servers.clone().into_iter().enumerate() {
            let p = self.next_on(vec![server], 170 + i as u64);
            self.spawn(workload::reader(p));
        }
    }

    /// The cut client (its links faultable, loopback mode; `bound` to its address when the
    /// run has client fronts) and the waiters behind it.
    fn cut_client(&mut self, bound: bool) -> Arc<workload::CutClient> {
        let cut_client = Arc::new(workload::CutClient::default());
        let p = self.next(250);
        self.spawn(workload::cut_holder(p, bound, cut_client.clone()));
        for i in 0..CUT_WAITERS {
            let p = self.next(251 + i);
            self.spawn(workload::permits(p, workload::CUT, 1, (10, 150)));
        }
        cut_client
    }

    /// The CLI holder (`weir` is the CLI, its record files go to `out`) and the waiters
    /// behind it, on its limit.
    fn cli_holder(&mut self, weir: &Path, out: &Path) -> Arc<workload::CutClient> {
        let handle = Arc::new(workload::CutClient::default());
        let p = self.next(260);
        let (weir, out) = (weir.to_path_buf(), out.to_path_buf());
        self.spawn(workload::cli_holder(p, weir, out, handle.clone()));
        for i in 0..CUT_WAITERS {
            let p = self.next(261 + i);
            self.spawn(workload::permits(p, workload::CLI_LIMIT, 1, (10, 150)));
        }
        handle
    }

    /// The fenced limit: two ordinary holders, and one the nemesis can pause, on a thread of
    /// its own (returned with its pause handle).
    fn fenced(
        &mut self,
        ttl: Duration,
    ) -> Result<(Arc<workload::ClientPause>, std::thread::JoinHandle<()>), String> {
        let resource = Arc::new(workload::Resource::default());
        let client_pause = Arc::new(workload::ClientPause::default());
        for i in 0..2 {
            let p = self.next(200 + i);
            self.spawn(workload::fenced(p, ttl, resource.clone(), None));
        }
        let p = self.next(300);
        let pausable = workload::spawn_pausable(p, ttl, resource, client_pause.clone())
            .map_err(|e| format!("cannot start the pausable client: {e}"))?;
        Ok((client_pause, pausable))
    }

    /// The Python holders, taking turns on the capped permit limits, each a process of its
    /// own reaching the nodes at `http`; their stderr goes to `out`.
    fn python_holders(&mut self, holders: &workload::PythonHolders, http: &[String], out: &Path) {
        let shared = Arc::new(holders.clone());
        let limits = [("mutex", 1u64), ("three", 3)];
        for i in 0..holders.count {
            let p = self.next(400 + i);
            let log = out.join(format!("python-holder-{}.log", p.id));
            let limit = limits[(i % 2) as usize];
            self.spawn(workload::python_holder(
                p,
                shared.clone(),
                http.to_vec(),
                limit,
                log,
            ));
        }
    }
}

impl Spawner {
    /// The Go holders, as [`Spawner::python_holders`]: taking turns on the capped permit
    /// limits, each a process of its own; their stderr goes to `out`.
    fn go_holders(&mut self, holders: &workload::GoHolders, http: &[String], out: &Path) {
        let shared = Arc::new(holders.clone());
        let limits = [("mutex", 1u64), ("three", 3)];
        for i in 0..holders.count {
            let p = self.next(500 + i);
            let log = out.join(format!("go-holder-{}.log", p.id));
            let limit = limits[(i % 2) as usize];
            self.spawn(workload::go_holder(
                p,
                shared.clone(),
                http.to_vec(),
                limit,
                log,
            ));
        }
    }

    /// The token-lease holders, each on a thread of its own (`bound`: from the cut client's
    /// address, so `client-cut` cuts them too), and two cluster takers on each leased limit.
    fn lease_holders(
        &mut self,
        holders: &workload::LeaseHolders,
        bound: bool,
        http: &[String],
        out: &Path,
    ) -> Result<(), String> {
        for i in 0..holders.python {
            // Holders 1, 2 (`leased`), 3 (`leased-fast`), … of `lease_of`.
            let p = self.next(740 + i);
            let log = out.join(format!("python-lease-holder-{}.log", p.id));
            let task = workload::python_lease_holder(
                p,
                holders.interpreter.clone(),
                i + 1,
                http.to_vec(),
                log,
            );
            self.spawn(task);
        }
        for i in 0..holders.count {
            let p = self.next(700 + i);
            let thread = workload::lease_holder(p, i, bound)
                .map_err(|e| format!("cannot start a lease holder: {e}"))?;
            self.spawn(async move {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            });
        }
        for (i, (limit, per_second, burst)) in workload::LEASED_LIMITS.into_iter().enumerate() {
            for j in 0..2 {
                let p = self.next(720 + 2 * i as u64 + j);
                self.spawn(workload::cluster_taker(p, limit, per_second, burst));
            }
        }
        Ok(())
    }

    /// The Envoy holders, each calling the nodes' `ShouldRateLimit` at `grpc`.
    fn rls_holders(&mut self, count: u64, grpc: &[String]) {
        for i in 0..count {
            let p = self.next(760 + i);
            self.spawn(workload::rls_holder(p, i, grpc.to_vec()));
        }
    }

    /// The TypeScript holders, as [`Spawner::python_holders`].
    fn ts_holders(&mut self, holders: &workload::TsHolders, http: &[String], out: &Path) {
        let shared = Arc::new(holders.clone());
        let limits = [("mutex", 1u64), ("three", 3)];
        for i in 0..holders.count {
            let p = self.next(600 + i);
            let log = out.join(format!("ts-holder-{}.log", p.id));
            let limit = limits[(i % 2) as usize];
            self.spawn(workload::ts_holder(
                p,
                shared.clone(),
                http.to_vec(),
                limit,
                log,
            ));
        }
    }
}

impl Workloads {
    /// Starts every process, each numbered and seeded from the plan's seed.
    /// `client_fronts`: the run has them, so the cut client binds its address.
    fn start(
        plan: &Plan,
        servers: &[String],
        http: &[String],
        grpc: &[String],
        history: &Recorder,
        client_fronts: bool,
    ) -> Result<Workloads, String> {
        let mut spawner = Spawner {
            servers: servers.to_vec(),
            history: history.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            seed: plan.seed,
            last: 0,
            tasks: vec![],
        };
        spawner.permit_holders();
        spawner.tenant_workloads();
        spawner.readers();
        let cut_client = spawner.cut_client(client_fronts);
        let (client_pause, pausable) = spawner.fenced(plan.fenced_ttl)?;
        if let Some(python) = &plan.python {
            spawner.python_holders(python, http, &plan.out);
        }
        if let Some(go) = &plan.go {
            spawner.go_holders(go, http, &plan.out);
        }
        if let Some(ts) = &plan.ts {
            spawner.ts_holders(ts, http, &plan.out);
        }
        if let Some(leases) = &plan.leases {
            spawner.lease_holders(leases, client_fronts, http, &plan.out)?;
        }
        spawner.rls_holders(plan.rls, grpc);
        let cli = client_fronts && plan.nemeses.iter().any(|k| k == "client-cut");
        let cli_holder = cli.then(|| spawner.cli_holder(&plan.weir, &plan.out));
        Ok(Workloads {
            stop: spawner.stop,
            tasks: spawner.tasks,
            pausable,
            client_pause,
            cut_client,
            cli_holder,
        })
    }

    /// Tells every process to stop and waits (bounded) for each.
    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
        }
        let pausable = self.pausable;
        let _ = tokio::time::timeout(
            Duration::from_secs(15),
            tokio::task::spawn_blocking(move || pausable.join()),
        )
        .await;
    }
}

/// After the final heal (recorded at `healed_ns`), probes each capped limit: once it has room, a new waiter
/// must be granted (G7).
async fn probe_liveness(
    cluster: &Cluster,
    probe_client: &Client,
    history: &Recorder,
    healed_ns: u64,
) {
    if cluster.leader(Duration::from_secs(10)).await.is_some() {
        if let Ok(session) = Session::open(probe_client, workload::TTL).await {
            for (limit, _, _, _) in LIMITS.iter().take(2) {
                wait_for_room(probe_client, limit).await;
                let start = Instant::now();
                history.record(0, Kind::Invoke, "probe", json!({"limit": limit}));
                let mut options = AcquireOptions::new(TENANT, limit);
                options.timeout = Some(Duration::from_secs(10));
                match session.acquire(options).await {
                    Ok(p) => {
                        history.record(0, Kind::Ok, "probe", json!({"limit": limit, "latency_ms": start.elapsed().as_millis() as u64, "since_heal_ms": (history.now_ns() - healed_ns) / 1_000_000}));
                        let _ = p.release().await;
                    }
                    Err(e) => {
                        history.record(
                            0,
                            Kind::Fail,
                            "probe",
                            json!({"limit": limit, "error": e.to_string()}),
                        );
                    }
                }
            }
        }
    } else {
        history.record(0, Kind::Invoke, "probe", json!({}));
        history.record(
            0,
            Kind::Fail,
            "probe",
            json!({"error": "no leader after the heal"}),
        );
    }
}

/// Waits (bounded) until `limit` has a free unit: stale sessions of killed clients expire.
async fn wait_for_room(client: &Client, limit: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(s)) = client.limit_status(TENANT, limit).await
            && (s.in_use < s.concurrent as u64)
            && s.waiting == 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The checkers that judge the history alone, in table order: (row, what it holds, check).
type HistoryChecker = (&'static str, &'static str, fn(&[history::Op]) -> Verdict);
const HISTORY_CHECKERS: [HistoryChecker; 15] = [
    (
        "P1 permits",
        "G2: believers never exceed concurrent",
        checker::permits::check,
    ),
    (
        "P2 fences",
        "unique, increasing in real time",
        checker::fences::check,
    ),
    (
        "capacity",
        "G1: held permits within concurrent at every log index",
        checker::capacity::check,
    ),
    (
        "rate",
        "G1: tokens within burst + rate x window",
        checker::rate::check,
    ),
    (
        "log clock",
        "never ahead of real time (frozen at leader changes)",
        checker::clock::check,
    ),
    (
        "fenced",
        "stale holders refused; validation linearizable",
        checker::fenced::check,
    ),
    (
        "linearizable",
        "each capped limit a fenced semaphore (WGL)",
        checker::linearizable::check,
    ),
    (
        "settlement",
        "G3 G5: charged exactly once; conflicts refused",
        checker::settlement::check,
    ),
    (
        "ceilings",
        "G6: no run admitted at max_running",
        checker::ceilings::check,
    ),
    (
        "halts",
        "G6: nothing admitted after a halt",
        checker::halts::check,
    ),
    (
        "liveness",
        "G7: granted soon after the heal",
        checker::liveness::check,
    ),
    (
        "client kill",
        "G7: a killed client's permit moves on within its TTL",
        checker::liveness::check_client_kills,
    ),
    (
        "convergence",
        "G4: every node alive; equal digests at equal applied",
        checker::convergence::check,
    ),
    (
        "coverage",
        "every key case exercised (counts in verdict.txt)",
        checker::coverage::check,
    ),
    (
        "strands",
        "G9: no capped limit starved 30 s while its acquires timed out",
        checker::strands::check,
    ),
];

/// Runs every checker over a history. With `secure` (or a `security` op in the history),
/// the `security` row judges whether the run's ports refused what they must.
pub fn judge(
    ops: &[history::Op],
    logs: &[(String, String)],
    requested: &[String],
    fired: &[&'static str],
    secure: bool,
) -> Outcome {
    let missing: Vec<&String> = requested
        .iter()
        .filter(|k| !fired.contains(&k.as_str()))
        .collect();
    let stalls = checker::stalls::count(ops);
    let nemesis = if missing.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Unknown(format!("requested faults that never fired: {missing:?}"))
    };
    let pairs = match history::check_pairs(ops) {
        Ok(()) => Verdict::Valid,
        Err(e) => Verdict::Unknown(format!("the harness recorded a malformed history: {e}")),
    };
    let mut rows = vec![
        ("nemesis", "every requested fault fired", nemesis),
        (
            "history",
            "every op one invoke, one completion (Knossos' shape)",
            pairs,
        ),
    ];
    rows.extend(
        HISTORY_CHECKERS
            .iter()
            .map(|(name, what, check)| (*name, *what, check(ops))),
    );
    rows.push((
        "panics",
        "no panic in any node log",
        checker::panics::check(logs),
    ));
    // Judged when the nodes log their snapshots (every run since they do; the logs of a
    // recorded run from before have no such line).
    if checker::snapshots::present(logs) {
        rows.push((
            "snapshots",
            "a saved snapshot, or a newer one, loaded at every later start",
            checker::snapshots::judge(logs).1,
        ));
    }
    // Judged when leader stalls were asked for: without them it would only be unknown.
    if requested.iter().any(|k| k == "pause") {
        rows.push((
            "stalls",
            "G9: no unpaused client lost a permit or a waiting session to a leader stall",
            checker::stalls::check(ops),
        ));
    }
    // Judged when a compound kind was asked for (its faults are what it exists for).
    if requested
        .iter()
        .any(|k| nemesis::COMPOUND.contains(&k.as_str()))
    {
        rows.push((
            "kept",
            "G9: no holder lost a permit to faults that kept a quorum up",
            checker::kept::check(ops),
        ));
    }
    // Judged when the history has lease takes (a run with lease holders).
    if checker::leased::present(ops) {
        rows.push((
            "leased",
            "G1 in spend time: cluster grants and local spends within burst + rate x window",
            checker::leased::check(ops),
        ));
    }
    // Judged when the history has keyed requests (every run since the workload exists).
    if checker::keyed::present(ops) {
        rows.push((
            "keyed",
            "G1 per key; a refused request of several parts charges none",
            checker::keyed::check(ops),
        ));
    }
    // Judged when the history has holds recorded as the application saw them (every run
    // since the workloads record them; a recorded history from before has none).
    if checker::told::present(ops) {
        rows.push((
            "told",
            "G2: the application told of a loss soon after the deadline",
            checker::told::check(ops),
        ));
    }
    if checker::python::present(ops) {
        rows.push((
            "python",
            "every Python holder ran and exited cleanly; Python beliefs judged",
            checker::python::check(ops),
        ));
    }
    if checker::python::present_for(ops, "go-holder") {
        rows.push((
            "go",
            "every Go holder ran and exited cleanly; Go beliefs judged",
            checker::python::check_for(ops, "go-holder", "Go"),
        ));
    }
    if checker::python::present_for(ops, "ts-holder") {
        rows.push((
            "typescript",
            "every TypeScript holder ran and exited cleanly; TypeScript beliefs judged",
            checker::python::check_for(ops, "ts-holder", "TypeScript"),
        ));
    }
    if secure || checker::security::present(ops) {
        rows.push((
            "security",
            "TLS and tokens on: plaintext and tokenless clients refused",
            checker::security::check(ops),
        ));
    }
    Outcome {
        rows,
        ops: ops.len(),
        fired: fired.to_vec(),
        stalls,
    }
}

/// The verdict table, as printed and as written to `verdict.txt`.
pub fn table(outcome: &Outcome) -> String {
    let mut out = format!("{:<12} {:<9} {}\n", "checker", "verdict", "detail");
    for (name, what, v) in &outcome.rows {
        let detail = if v.detail().is_empty() {
            what.to_string()
        } else {
            v.detail().to_string()
        };
        out.push_str(&format!("{name:<12} {:<9} {detail}\n", v.label()));
    }
    out
}

fn write_verdict(dir: &Path, plan: &Plan, outcome: &Outcome, coverage: &str) -> Result<(), String> {
    let text = format!(
        "seed {}  nodes {}  net {}  secure {}  snapshot every {}  duration {:?}  nemeses {:?}  faults fired {:?}  ops {}\n\
         {}\n\n{}\n{coverage}",
        plan.seed,
        plan.nodes,
        plan.net.name(),
        if plan.secure {
            "yes (TLS on client, peer and HTTP ports; tokens with roles)"
        } else {
            "no"
        },
        match plan.snapshot_every {
            0 => "10000 (the default)".to_string(),
            n => n.to_string(),
        },
        plan.duration,
        plan.nemeses,
        outcome.fired,
        outcome.ops,
        outcome.stalls.summary(),
        table(outcome)
    );
    std::fs::write(dir.join("verdict.txt"), text).map_err(|e| e.to_string())
}
