//! `--incident SCHEDULE`: compound incidents against holders with a 3 s TTL (G9).
//!
//! Each run starts a fresh cluster of its own (three nodes; five for the schedules that take
//! two nodes down at once or in a row), defines a hold limit with room for every holder and
//! a work limit that never makes a client wait, and starts `--clients` Rust clients (one
//! session each, `--clients-per-connection` to a connection) and `--python N` Python
//! holders (`incident_holder.py`, one process each, over HTTP). Every one of them holds one
//! permit of the hold limit for the whole run, and acquires and releases work permits in a
//! loop, paced, so that grants go on through the incident. Once all hold, after `--warmup`,
//! the schedule's faults are injected (`Schedule` in `args.rs`):
//!
//! - `kill`: kill -9 of the leader;
//! - `stall`: the leader stopped (SIGSTOP) for [`STALL`], then resumed;
//! - `stall-then-kill`: the leader stopped for [`STALL`] and resumed, then the leader of the
//!   moment killed [`THEN_KILL`] later;
//! - `kill-then-kill` (five nodes): the leader killed; the new leader killed
//!   [`KILL_AGAIN`] after it was first seen (and grants resumed), within one TTL of the
//!   first kill. Killed the moment it is elected, two elections back to back (about 1 s
//!   each) would outlast a 3 s TTL's budget (its belief ends 2.1 s after its last
//!   acknowledged keep-alive was sent) whatever the client does;
//! - `stall-follower-then-kill-leader` (five nodes): a follower, which every client names
//!   first (its entry node), stopped for [`STALL`]; the leader killed [`KILL_AGAIN`] into
//!   it.
//! - `partition-leader`: the leader cut from the other nodes, both ways, for [`STALL`]
//!   (`peer_proxy.rs`: every peer port behind a proxy's front), not from its clients; then
//!   the links heal.
//!
//! For each fault the run measures when a new leader was first seen among the other nodes
//! (`elected_ms`, from the fault; none for a follower's stall, which elects no one) and when
//! the first work grant sent after the fault arrived (`resumed_ms`); the gap is the second
//! less the first (from the fault itself when nothing was elected). [`SETTLE`] after the last
//! fault every holder releases and is asked whether its held permit was ever seen lost (its
//! `lost()` resolving during the run, or `lost_reason()` at the end); a grant whose
//! `lost_reason()` already answered when it arrived counts as arrived lost.
//!
//! Every node killed or stopped is left to the cluster's drop (resumed and killed, its
//! directory removed unless `--keep-dir`). Must never: run against given servers (it
//! kills nodes), or count a loss of a client that was not a holder.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;

use super::args::{BenchArgs, Schedule};
use super::load::TENANT;
use super::peer_proxy::{self, PeerProxies};
use super::spawn;
use crate::output::{EXIT_ERROR, EXIT_OK, Exit, Output};
use weir_client::{AcquireOptions, Client, Session};
use weir_launcher::{LocalCluster, leader_among_with};
use weir_proto::protocol::{Request, Response};
use weir_proto::tls::ClientSecurity;

/// The holders' session TTL: the shortest G9 promises to carry through.
const TTL: Duration = Duration::from_secs(3);
/// How long a stall stops its node: past the TTL, so a holder that waited on the stopped
/// node the whole time would lose its permit.
const STALL: Duration = Duration::from_secs(5);
/// `stall-then-kill`: from the resume to the kill of the leader of the moment.
const THEN_KILL: Duration = Duration::from_secs(3);
/// `kill-then-kill`: the second kill this long after the next leader is first seen;
/// `stall-follower-then-kill-leader`: the kill this long into the stall.
const KILL_AGAIN: Duration = Duration::from_secs(1);
/// After the last fault, before the holders are asked: a TTL and more, so a permit that
/// lapsed during the incident is seen lost.
const SETTLE: Duration = Duration::from_secs(5);
/// Longest wait for a leader, for every holder to hold, for grants to resume.
const WAIT: Duration = Duration::from_secs(30);
/// How often a client takes a work permit (each of 256 clients: about 2,500 grants a
/// second in all), so that grants go on without loading the machine as a throughput run
/// would.
const PACE: Duration = Duration::from_millis(100);
/// How long an election poll waits on one node (a stopped node never answers).
const ASK_WAIT: Duration = Duration::from_millis(300);
/// Faults a schedule has at most.
const FAULTS_MAX: usize = 2;

/// The limit every holder holds one permit of.
const HOLD_LIMIT: &str = "bench-incident-hold";
/// The limit of the work permits, with room for every holder at once.
const WORK_LIMIT: &str = "bench-incident-work";

/// The Python holder (`python -c`).
const PYTHON_HOLDER: &str = include_str!("incident_holder.py");

/// Runs `schedule` `--runs` times and prints the sum; exit 1 when a holder lost a permit or
/// a grant arrived lost.
pub async fn run(args: &BenchArgs, schedule: Schedule, out: &Output) -> Result<Exit, String> {
    let mut runs = vec![];
    for r in 1..=args.runs {
        eprintln!(
            "[bench] incident {} run {r} of {}",
            schedule.name(),
            args.runs
        );
        runs.push(one_run(args, schedule, r).await?);
    }
    let report = IncidentReport::new(args, schedule, runs);
    report.print(out);
    Ok(if report.kept() { EXIT_OK } else { EXIT_ERROR })
}

/// One fault's marks, ns since the run's start (0: none yet).
#[derive(Default)]
struct Marks {
    /// When the fault was injected.
    from_ns: AtomicU64,
    /// The first work grant sent after it, arrived.
    resumed_ns: AtomicU64,
}

/// What the holders of one run share.
struct Shared {
    started: Instant,
    stop: AtomicBool,
    faults: [Marks; FAULTS_MAX],
    holding: AtomicU64,
    grants: AtomicU64,
    arrived_lost: AtomicU64,
    lost_permit: AtomicU64,
    /// Rust sessions that could not open or hold (never counted as holders).
    failed: AtomicU64,
}

impl Shared {
    fn ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// A work grant sent at `sent_ns` arrived now: it marks every fault injected before it
    /// as resumed.
    fn granted(&self, sent_ns: u64) {
        let now = self.ns();
        for f in &self.faults {
            let from = f.from_ns.load(Ordering::Acquire);
            if from != 0 && sent_ns > from {
                let _ = f
                    .resumed_ns
                    .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
            }
        }
    }
}

/// One fault as measured.
#[derive(Serialize, Clone)]
pub struct FaultFigures {
    /// What was done, to which node (`kill leader n2`).
    pub fault: String,
    /// From the start of the incident, ms.
    pub at_ms: f64,
    /// From the fault to the first leader seen among the nodes still up (none: no election
    /// expected, or none seen).
    pub elected_ms: Option<f64>,
    /// From the fault to the first work grant sent after it.
    pub resumed_ms: Option<f64>,
    /// From the election (or the fault, when none was expected) to that grant.
    pub gap_ms: Option<f64>,
}

/// One run of the schedule.
#[derive(Serialize, Clone)]
pub struct RunFigures {
    pub run: u32,
    pub faults: Vec<FaultFigures>,
    /// Rust sessions that held a permit, and of them those that saw it lost.
    pub sessions: u64,
    pub sessions_lost_permit: u64,
    /// Work grants (Rust and Python), and of them those whose loss was already told on
    /// arrival.
    pub grants: u64,
    pub grants_arrived_lost: u64,
    /// Python holders that held, and of them those that saw their permit lost.
    pub python: u64,
    pub python_lost_permit: u64,
}

/// The sum of the runs; `--json` prints it as one object.
#[derive(Serialize)]
pub struct IncidentReport {
    pub schedule: &'static str,
    pub nodes: u64,
    pub clients: usize,
    pub python: u32,
    pub runs: Vec<RunFigures>,
    pub sessions: u64,
    pub sessions_lost_permit: u64,
    pub grants: u64,
    pub grants_arrived_lost: u64,
    pub python_holders: u64,
    pub python_lost_permit: u64,
    /// The longest gap from a fault's election to grants resuming, over every run.
    pub gap_ms_max: Option<f64>,
    /// Faults after which grants never resumed within the wait.
    pub never_resumed: u64,
}

impl IncidentReport {
    fn new(args: &BenchArgs, schedule: Schedule, runs: Vec<RunFigures>) -> IncidentReport {
        let sum = |f: fn(&RunFigures) -> u64| runs.iter().map(f).sum();
        let faults = || runs.iter().flat_map(|r| r.faults.iter());
        IncidentReport {
            schedule: schedule.name(),
            nodes: schedule.nodes(),
            clients: args.clients,
            python: args.python,
            sessions: sum(|r| r.sessions),
            sessions_lost_permit: sum(|r| r.sessions_lost_permit),
            grants: sum(|r| r.grants),
            grants_arrived_lost: sum(|r| r.grants_arrived_lost),
            python_holders: sum(|r| r.python),
            python_lost_permit: sum(|r| r.python_lost_permit),
            gap_ms_max: faults().filter_map(|f| f.gap_ms).reduce(f64::max),
            never_resumed: faults().filter(|f| f.resumed_ms.is_none()).count() as u64,
            runs,
        }
    }

    /// No holder lost a permit, no grant arrived lost, grants resumed after every fault.
    pub fn kept(&self) -> bool {
        self.sessions_lost_permit == 0
            && self.python_lost_permit == 0
            && self.grants_arrived_lost == 0
            && self.never_resumed == 0
    }

    fn print(&self, out: &Output) {
        let value = serde_json::to_value(self).expect("a report serializes");
        out.print(value, || self.text());
    }

    fn text(&self) -> String {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.0} ms"));
        let mut text = format!(
            "incident {} on {} nodes, {} clients and {} Python holders, {} run(s)",
            self.schedule,
            self.nodes,
            self.clients,
            self.python,
            self.runs.len()
        );
        for r in &self.runs {
            text.push_str(&format!(
                "\nrun {}: {} of {} sessions lost a permit, {} of {} grants arrived lost, {} of {} Python holders lost a permit",
                r.run,
                r.sessions_lost_permit,
                r.sessions,
                r.grants_arrived_lost,
                r.grants,
                r.python_lost_permit,
                r.python
            ));
            for f in &r.faults {
                text.push_str(&format!(
                    "\n  {} at {:.1} s: new leader after {}, grants resumed after {}, gap {}",
                    f.fault,
                    f.at_ms / 1000.0,
                    ms(f.elected_ms),
                    ms(f.resumed_ms),
                    ms(f.gap_ms)
                ));
            }
        }
        text.push_str(&format!(
            "\ntotal: {} of {} sessions lost a permit, {} of {} grants arrived already lost, {} of {} Python holders lost a permit; longest gap from an election to grants {}{}",
            self.sessions_lost_permit,
            self.sessions,
            self.grants_arrived_lost,
            self.grants,
            self.python_lost_permit,
            self.python_holders,
            ms(self.gap_ms_max),
            match self.never_resumed {
                0 => String::new(),
                n => format!("; grants never resumed after {n} fault(s)"),
            }
        ));
        text
    }
}

/// One run on a fresh cluster.
async fn one_run(args: &BenchArgs, schedule: Schedule, run: u32) -> Result<RunFigures, String> {
    // `partition-leader`: every peer port behind a front of the proxy's.
    let mut fronts = vec![];
    let mut cluster = spawn::start_with(schedule.nodes(), false, args.keep_dir, |configs| {
        if schedule != Schedule::PartitionLeader {
            return;
        }
        for c in configs {
            if let Ok(listen) = weir_launcher::loopback_addr() {
                fronts.push((c.id, c.peer_addr.clone(), listen.clone()));
                c.peer_listen = Some(listen);
                c.peer_source_ip = Some(peer_proxy::source_ip(c.id));
            }
        }
    })?;
    let proxies = match fronts.is_empty() {
        true => None,
        false => Some(PeerProxies::start(&fronts).await?),
    };
    let servers = cluster.servers();
    let security = cluster.client_security().clone();
    let Some(leader) = leader_among_with(&servers, WAIT, &security).await else {
        return Err(format!("no leader among {servers:?}"));
    };
    let admin = Client::with_security(servers.clone(), security.clone());
    let room = u32::try_from(args.clients + args.python as usize).unwrap_or(u32::MAX);
    for limit in [HOLD_LIMIT, WORK_LIMIT] {
        admin
            .define_limit(TENANT, limit, room, 0.0, None)
            .await
            .map_err(|e| format!("define {limit}: {e}"))?;
    }
    // Every client names one follower first: its entry node, which the last schedule stops.
    let entry = cluster
        .nodes()
        .iter()
        .map(|n| n.id)
        .find(|&id| id != leader)
        .expect("a cluster of three or five has a follower");
    let first = |list: Vec<(u64, String)>| -> Vec<String> {
        let (head, rest): (Vec<_>, Vec<_>) = list.into_iter().partition(|(id, _)| *id == entry);
        head.into_iter().chain(rest).map(|(_, a)| a).collect()
    };
    let client_servers = first(
        cluster
            .nodes()
            .iter()
            .map(|n| (n.id, n.client.clone()))
            .collect(),
    );
    let http_servers = first(
        cluster
            .nodes()
            .iter()
            .map(|n| (n.id, n.config.http_listen.clone()))
            .collect(),
    );
    let shared = Arc::new(Shared {
        started: Instant::now(),
        stop: AtomicBool::new(false),
        faults: Default::default(),
        holding: AtomicU64::new(0),
        grants: AtomicU64::new(0),
        arrived_lost: AtomicU64::new(0),
        lost_permit: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    let rust = start_rust(args, &client_servers, &security, &shared);
    let mut python = vec![];
    for n in 0..args.python {
        python.push(PythonHolder::start(&cluster, n, &http_servers)?);
    }
    let holders = wait_holding(args, &shared, &mut python).await;
    let figures = match holders {
        Ok(()) => {
            tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
            let faults = inject(schedule, &mut cluster, proxies.as_ref(), &shared).await;
            tokio::time::sleep(SETTLE).await;
            faults
        }
        Err(e) => Err(e),
    };
    shared.stop.store(true, Ordering::Relaxed);
    for h in rust {
        let _ = h.await;
    }
    let mut python_lost = 0;
    let mut python_held = 0;
    for p in python {
        let (held, lost) = p.finish(&shared).await;
        python_held += u64::from(held);
        python_lost += u64::from(lost);
    }
    let faults = figures?;
    let holding = shared.holding.load(Ordering::Relaxed);
    Ok(RunFigures {
        run,
        faults,
        sessions: holding - python_held,
        sessions_lost_permit: shared.lost_permit.load(Ordering::Relaxed),
        grants: shared.grants.load(Ordering::Relaxed),
        grants_arrived_lost: shared.arrived_lost.load(Ordering::Relaxed),
        python: python_held,
        python_lost_permit: python_lost,
    })
}

/// Waits (bounded) until every holder holds its permit.
async fn wait_holding(
    args: &BenchArgs,
    shared: &Shared,
    python: &mut [PythonHolder],
) -> Result<(), String> {
    let want = (args.clients + args.python as usize) as u64;
    let deadline = Instant::now() + WAIT;
    while shared.holding.load(Ordering::Relaxed) < want {
        for p in python.iter_mut() {
            p.read_ready(shared).await?;
        }
        if shared.failed.load(Ordering::Relaxed) > 0 {
            return Err("a Rust client could not open its session or hold its permit".into());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} of {want} holders hold a permit after {} s",
                shared.holding.load(Ordering::Relaxed),
                WAIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The schedule's faults; returns each one's figures.
async fn inject(
    schedule: Schedule,
    cluster: &mut LocalCluster,
    proxies: Option<&PeerProxies>,
    shared: &Arc<Shared>,
) -> Result<Vec<FaultFigures>, String> {
    let servers = &cluster.servers();
    let security = &cluster.client_security().clone();
    let t0 = Instant::now();
    let leader = leader_among_with(servers, WAIT, security)
        .await
        .ok_or("no leader to fault")?;
    let mut faults = vec![];
    match schedule {
        Schedule::Kill => {
            let w = Fault::Kill.at(0, leader, cluster, shared, t0);
            faults.push(w.watch(cluster, &[leader], true, shared).await);
        }
        Schedule::Stall => {
            let w = Fault::Stop.at(0, leader, cluster, shared, t0);
            faults.push(w.watch(cluster, &[leader], true, shared).await);
            sleep_until(t0 + STALL).await;
            cluster.resume(leader);
        }
        Schedule::StallThenKill => {
            let w = Fault::Stop.at(0, leader, cluster, shared, t0);
            faults.push(w.watch(cluster, &[leader], true, shared).await);
            sleep_until(t0 + STALL).await;
            cluster.resume(leader);
            sleep_until(t0 + STALL + THEN_KILL).await;
            let second = leader_among_with(servers, WAIT, security)
                .await
                .ok_or("no leader to kill")?;
            let w = Fault::Kill.at(1, second, cluster, shared, t0);
            faults.push(w.watch(cluster, &[second], true, shared).await);
        }
        Schedule::KillThenKill => {
            let w = Fault::Kill.at(0, leader, cluster, shared, t0);
            let first = w.watch(cluster, &[leader], true, shared).await;
            let elected_ms = first.at_ms + first.elected_ms.unwrap_or(0.0);
            faults.push(first);
            sleep_until(t0 + Duration::from_secs_f64(elected_ms / 1e3) + KILL_AGAIN).await;
            let up: Vec<String> = up_servers(cluster, &[leader]);
            let second = leader_among_with(&up, WAIT, security)
                .await
                .ok_or("no second leader to kill")?;
            let w = Fault::Kill.at(1, second, cluster, shared, t0);
            faults.push(w.watch(cluster, &[leader, second], true, shared).await);
        }
        Schedule::StallFollowerThenKillLeader => {
            let entry = cluster
                .nodes()
                .iter()
                .map(|n| n.id)
                .find(|&id| id != leader)
                .expect("a follower");
            let stop = Fault::Stop.at(0, entry, cluster, shared, t0);
            sleep_until(t0 + KILL_AGAIN).await;
            let kill = Fault::Kill.at(1, leader, cluster, shared, t0);
            faults.push(stop.watch(cluster, &[entry], false, shared).await);
            faults.push(kill.watch(cluster, &[entry, leader], true, shared).await);
            sleep_until(t0 + STALL).await;
            cluster.resume(entry);
        }
        Schedule::PartitionLeader => {
            let proxies = proxies.expect("partition-leader's cluster has peer proxies");
            let slot = &shared.faults[0];
            slot.from_ns.store(shared.ns().max(1), Ordering::Release);
            proxies.isolate(leader, schedule.nodes());
            eprintln!("[bench] cut node {leader} from its peers");
            let w = Injected {
                slot: 0,
                what: format!("cut n{leader} from its peers"),
                at: Instant::now(),
                t0,
            };
            // The heal comes on time whether or not grants resumed by then.
            let heal = async {
                sleep_until(t0 + STALL).await;
                proxies.heal();
                eprintln!("[bench] healed node {leader}'s peer links");
            };
            let down = [leader];
            let (figures, ()) = tokio::join!(w.watch(cluster, &down, true, shared), heal);
            faults.push(figures);
        }
    }
    Ok(faults)
}

async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(at.into()).await;
}

/// The client addresses of the nodes not in `down`.
fn up_servers(cluster: &LocalCluster, down: &[u64]) -> Vec<String> {
    cluster
        .nodes()
        .iter()
        .filter(|n| !down.contains(&n.id))
        .map(|n| n.client.clone())
        .collect()
}

/// What a fault does to its node.
#[derive(Clone, Copy)]
enum Fault {
    Kill,
    Stop,
}

/// A fault injected, its marks being filled.
struct Injected {
    slot: usize,
    what: String,
    at: Instant,
    t0: Instant,
}

impl Fault {
    /// Injects the fault on `node` now, as the schedule's fault number `slot`.
    fn at(
        self,
        slot: usize,
        node: u64,
        cluster: &mut LocalCluster,
        shared: &Shared,
        t0: Instant,
    ) -> Injected {
        shared.faults[slot]
            .from_ns
            .store(shared.ns().max(1), Ordering::Release);
        let verb = match self {
            Fault::Kill => {
                cluster.kill(node);
                "kill"
            }
            Fault::Stop => {
                cluster.pause(node);
                "stop"
            }
        };
        eprintln!("[bench] {verb} node {node}");
        Injected {
            slot,
            what: format!("{verb} n{node}"),
            at: Instant::now(),
            t0,
        }
    }
}

impl Injected {
    /// Waits (bounded) for a leader among the nodes not in `down` when `elects`, and for
    /// grants to resume; returns the figures.
    async fn watch(
        self,
        cluster: &LocalCluster,
        down: &[u64],
        elects: bool,
        shared: &Shared,
    ) -> FaultFigures {
        let up = up_servers(cluster, down);
        let elected = match elects {
            true => first_leader(&up, cluster.client_security(), self.at + WAIT).await,
            false => None,
        };
        let marks = &shared.faults[self.slot];
        let deadline = self.at + WAIT;
        while marks.resumed_ns.load(Ordering::Acquire) == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let from = marks.from_ns.load(Ordering::Acquire);
        let resumed = marks.resumed_ns.load(Ordering::Acquire);
        let resumed_ms = (resumed != 0).then(|| (resumed - from) as f64 / 1e6);
        let elected_ms = elected.map(|e| e.duration_since(self.at).as_secs_f64() * 1e3);
        let gap_ms = resumed_ms.map(|r| (r - elected_ms.unwrap_or(0.0)).max(0.0));
        FaultFigures {
            fault: self.what,
            at_ms: self.at.duration_since(self.t0).as_secs_f64() * 1e3,
            elected_ms,
            resumed_ms,
            gap_ms,
        }
    }
}

/// When a node of `up` first called itself leader, asking every 20 ms until `until`.
async fn first_leader(up: &[String], security: &ClientSecurity, until: Instant) -> Option<Instant> {
    while Instant::now() < until {
        for s in up {
            let ask = Client::ask_node_with(s, &Request::Status, security);
            if let Ok(Ok(Response::Status(st))) = tokio::time::timeout(ASK_WAIT, ask).await
                && st.state == "Leader"
            {
                return Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Starts the Rust clients.
fn start_rust(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    shared: &Arc<Shared>,
) -> Vec<JoinHandle<()>> {
    let mut client = Client::with_security(servers.to_vec(), security.clone());
    (0..args.clients)
        .map(|n| {
            if n % args.clients_per_connection == 0 {
                client = Client::with_security(servers.to_vec(), security.clone());
            }
            tokio::spawn(rust_holder(client.clone(), n, shared.clone()))
        })
        .collect()
}

/// One Rust client: its session, its held permit watched the whole run, work permits in a
/// paced loop.
async fn rust_holder(client: Client, n: usize, shared: Arc<Shared>) {
    let session = match Session::open(&client, TTL).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench client {n}: {e}");
            shared.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let held = match session
        .acquire(AcquireOptions::new(TENANT, HOLD_LIMIT))
        .await
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bench client {n}: hold: {e}");
            shared.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    shared.holding.fetch_add(1, Ordering::Relaxed);
    let mut lost = false;
    {
        let work = async {
            // Once the held permit's session is lost, work goes on in a session of its own,
            // so that grants resuming is still seen.
            let mut replacement: Option<Session> = None;
            while !shared.stop.load(Ordering::Relaxed) {
                let sent = shared.ns();
                let current = replacement.as_ref().unwrap_or(&session);
                let acquired = current
                    .acquire(AcquireOptions::new(TENANT, WORK_LIMIT))
                    .await;
                if acquired.is_err()
                    && held.lost_reason().is_some()
                    && let Ok(s) = Session::open(&client, TTL).await
                {
                    replacement = Some(s);
                }
                if let Ok(p) = acquired {
                    shared.granted(sent);
                    shared.grants.fetch_add(1, Ordering::Relaxed);
                    if let Some(why) = p.lost_reason() {
                        eprintln!("bench client {n}: a grant arrived lost: {why}");
                        shared.arrived_lost.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = p.release().await;
                }
                tokio::time::sleep(PACE).await;
            }
        };
        tokio::pin!(work);
        tokio::select! {
            () = &mut work => {}
            why = held.lost() => {
                eprintln!("bench client {n}: held permit lost: {why}");
                lost = true;
                work.await;
            }
        }
    }
    if let Some(why) = held.lost_reason()
        && !lost
    {
        eprintln!("bench client {n}: held permit lost: {why}");
        lost = true;
    }
    if lost {
        shared.lost_permit.fetch_add(1, Ordering::Relaxed);
    }
    let _ = held.release().await;
    let _ = session.close().await;
}

/// One Python holder's process and what it said so far.
struct PythonHolder {
    n: u32,
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    log: PathBuf,
    held: bool,
    lost: bool,
    grants: u64,
    arrived_lost: u64,
}

/// The interpreter: `WEIR_BENCH_PYTHON`, else this checkout's venv (CI's), else `python3`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("WEIR_BENCH_PYTHON") {
        return p.into();
    }
    let venv = PathBuf::from("target/py-venv/bin/python");
    match venv.exists() {
        true => venv,
        false => "python3".into(),
    }
}

impl PythonHolder {
    /// Starts holder `n` reaching the nodes at `http` (entry first); its stderr goes to
    /// `python-holder-N.log` in the cluster's directory.
    fn start(cluster: &LocalCluster, n: u32, http: &[String]) -> Result<PythonHolder, String> {
        let log = cluster.dir().join(format!("python-holder-{n}.log"));
        let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut child = tokio::process::Command::new(python())
            .arg("-c")
            .arg(PYTHON_HOLDER)
            .arg(http.join(","))
            .arg(TENANT)
            .arg(HOLD_LIMIT)
            .arg(WORK_LIMIT)
            .arg(TTL.as_secs_f64().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start the Python holder ({}): {e}",
                    python().display()
                )
            })?;
        let stdout = child.stdout.take().expect("piped");
        Ok(PythonHolder {
            n,
            child,
            lines: BufReader::new(stdout).lines(),
            log,
            held: false,
            lost: false,
            grants: 0,
            arrived_lost: 0,
        })
    }

    /// Takes one line it said.
    fn take(&mut self, line: &str, shared: &Shared) {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "held" => {
                self.held = true;
                shared.holding.fetch_add(1, Ordering::Relaxed);
            }
            "lost" => {
                eprintln!("python holder {}: held permit lost: {rest}", self.n);
                self.lost = true;
            }
            "arrived-lost" => {
                eprintln!("python holder {}: a grant arrived lost: {rest}", self.n);
                self.arrived_lost += 1;
            }
            "done" => {
                let mut it = rest.split(' ').map(|v| v.parse::<u64>().unwrap_or(0));
                self.grants = it.next().unwrap_or(0);
                self.arrived_lost = self.arrived_lost.max(it.next().unwrap_or(0));
            }
            _ => eprintln!("python holder {}: {line}", self.n),
        }
    }

    /// Reads what it said until it holds; an error if it ended before.
    async fn read_ready(&mut self, shared: &Shared) -> Result<(), String> {
        while !self.held {
            let next = tokio::time::timeout(Duration::from_millis(10), self.lines.next_line());
            match next.await {
                Err(_) => return Ok(()),
                Ok(Ok(Some(line))) => self.take(&line, shared),
                Ok(_) => {
                    let tail = std::fs::read_to_string(&self.log).unwrap_or_default();
                    let tail: Vec<&str> = tail.lines().rev().take(5).collect();
                    return Err(format!(
                        "Python holder {} ended before it held a permit (interpreter {}; WEIR_BENCH_PYTHON names one with the client installed): {}",
                        self.n,
                        python().display(),
                        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                    ));
                }
            }
        }
        Ok(())
    }

    /// Closes its stdin, reads what it says until it exits (killed after [`WAIT`]);
    /// returns whether it held and whether it saw its permit lost. Its work grants are
    /// added to the run's.
    async fn finish(mut self, shared: &Shared) -> (bool, bool) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => self.take(&line, shared),
                Ok(_) => break,
                Err(_) => {
                    eprintln!("python holder {}: did not exit; killed", self.n);
                    break;
                }
            }
        }
        let _ = self.child.kill().await;
        shared.grants.fetch_add(self.grants, Ordering::Relaxed);
        shared
            .arrived_lost
            .fetch_add(self.arrived_lost, Ordering::Relaxed);
        (self.held, self.held && self.lost)
    }
}
