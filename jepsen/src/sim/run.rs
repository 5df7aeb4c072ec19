//! One simulated run: a seed's cluster, clients and nemesis on a fresh deterministic
//! runtime, to its end and its verdicts.
//!
//! Owns the run's phases: start the nodes (found on node 1), define the limits, run the
//! permit clients, the ledgers, the halter with its admitters and queued rounds, the
//! requests of several parts, the token-lease holder with its cluster takers, the
//! trespasser, and the nemesis for the workload's time beside a monitor (digests, log
//! clocks), stop the processes, heal everything, play the client-kill scene and one more
//! trespass on the healed cluster, read what every settlement key was charged, drain every
//! keyed bucket key named, let the cluster settle (bounded) and record the finals as the
//! harness does (a `converge` fact: every node's digest at one applied index), then judge
//! the history with the harness's own checkers.
//!
//! Invariants:
//! - Everything the run decides comes from its seed: the schedule, the clients' seeds and
//!   the network's fates are drawn from one generator in a fixed order, the runtime is
//!   `weir_server::sim::runtime(seed)` (one thread, paused time, tokio's own draws seeded) and the nodes' own draws come
//!   from `weir_server::simulated::enter(seed)`. So a replay of a seed gives the same
//!   trace.
//! - Every wait is bounded in simulated time.
//! - A panic in any of the run's tasks (a node's included) fails it (`panics`).
//! - A run fails when a checker says invalid, when a checker expected to judge could not,
//!   or on a harness error; an unknown from a checker not expected to judge is reported only.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_core::machine::{Command, Reply};

use super::behind;
use super::client::{CLIENT_ENDPOINT_BASE, ClientSpec, Door, Holders, permits};
use super::halts::{self, HALTS_BASE};
use super::keyed::{self, KEYED_BASE};
use super::leased::{self, LEASED_BASE};
use super::ledger::{self, LEDGER_BASE};
use super::links::NodeId;
use super::nemesis;
use super::panics;
use super::schedule;
use super::trespass::{self, TRESPASS_BASE, Trespasser};
use super::world::World;
use crate::checker::{self, Verdict};
use crate::history::{Kind, NEMESIS, Op, Recorder};
use crate::monitor::LogClockSamples;
use crate::rng::Rng;
use crate::setup::{CRASH, HALT_LIMIT, HALT_LIMIT_CAP, HALT_QUEUE, HALT_TENANT, TENANT};

/// The limits the clients work on: (name, concurrent), each with four clients, so a cap of
/// one and a cap of three are both pressed.
pub const LIMITS: [(&str, u64); 2] = [("mutex", 1), ("three", 3)];
/// Clients per limit: more than the larger cap.
pub const CLIENTS_PER_LIMIT: usize = 4;
/// The limits the other processes work on: (tenant, name, concurrent): the client-kill
/// scene's, the admitters' and the queued rounds'.
const OTHER_LIMITS: [(&str, &str, u32); 3] = [
    (TENANT, CRASH, 1),
    (HALT_TENANT, HALT_LIMIT, HALT_LIMIT_CAP),
    (HALT_TENANT, HALT_QUEUE, 1),
];
/// Ledger processes (each with its racer).
const LEDGERS: u64 = 1;
/// Processes sending requests of several parts (two, so they collide on keys).
const MULTIS: u64 = 2;
/// Simulated time of load and faults in a run, ms: long enough for a few faults with
/// quiet between them (a fault lasts up to 4 s), short enough that 1,000 seeds of a debug
/// build take CI under 10 minutes on 2 cores.
pub const WORKLOAD_MS_DEFAULT: u64 = 8_000;
/// How often the monitor compares the nodes' digests, ms.
const MONITOR_EVERY_MS: u64 = 250;
/// How long the clients get to finish their permit after the stop.
const CLIENT_END_MAX: Duration = Duration::from_secs(20);
/// How long the cluster may take to settle at the end (the settling stops as soon as every
/// node is at one applied index): longer than every abandoned session's TTL (the longest,
/// the trespasser's), so that their expiries and the ticks they keep up are over well
/// before it.
const SETTLE_MAX: Duration = Duration::from_millis(trespass::SESSION_TTL_MS + 5_000);
/// How much simulated time a run may take beyond its workload: the start (defining the
/// limits may wait for the first leader, 100 tries), the clients' end, the settling, and
/// room. A run past it is a harness error, never a hang.
const RUN_SLACK: Duration = Duration::from_secs(120);
/// Tries at defining the limits (one each 100 ms) while the first leader is elected.
const DEFINE_TRIES_MAX: u32 = 100;

/// What a run is asked for.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// 3 or 5.
    pub nodes: usize,
    /// Simulated time of load and faults, ms.
    pub workload_ms: u64,
    /// A planted bug in the simulator's own recording, the negative control of its
    /// checking path: every client records a refused acquire as granted (and holds it), so
    /// P1 must find more believers than the cap.
    pub refusals_recorded_as_grants: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            nodes: 3,
            workload_ms: WORKLOAD_MS_DEFAULT,
            refusals_recorded_as_grants: false,
        }
    }
}

/// One checker's verdict in a run.
#[derive(Clone, Debug)]
pub struct Judged {
    pub checker: &'static str,
    pub verdict: Verdict,
    /// Whether every run gives it something to judge (then unknown fails the run).
    pub expected: bool,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub seed: u64,
    pub verdicts: Vec<Judged>,
    /// A harness error (the run could not be carried out).
    pub error: Option<String>,
    /// Every op, then every node's final digest, one line each.
    pub trace: Vec<String>,
    /// Simulated time the run took, ns.
    pub sim_ns: u64,
}

impl Outcome {
    /// The checkers (or `harness`) that fail the run; empty when it passed.
    pub fn failures(&self) -> Vec<String> {
        let mut failed: Vec<String> = self
            .verdicts
            .iter()
            .filter(|j| match &j.verdict {
                Verdict::Invalid(_) => true,
                Verdict::Unknown(_) => j.expected,
                Verdict::Valid => false,
            })
            .map(|j| j.checker.to_string())
            .collect();
        if self.error.is_some() {
            failed.push("harness".into());
        }
        failed
    }
}

/// Runs seed `seed` on a fresh deterministic runtime.
pub fn run_seed(seed: u64, config: Config) -> Outcome {
    let runtime = match weir_server::sim::runtime(seed) {
        Ok(runtime) => runtime,
        Err(e) => {
            return Outcome {
                seed,
                verdicts: vec![],
                error: Some(format!("no runtime: {e}")),
                trace: vec![],
                sim_ns: 0,
            };
        }
    };
    panics::count();
    panics::reset_first();
    let (before, _) = panics::seen();
    let mut outcome = runtime.block_on(async {
        let _simulated = weir_server::simulated::enter(seed);
        simulate(seed, config).await
    });
    runtime.shutdown_background();
    let (after, first) = panics::seen();
    outcome.verdicts.push(Judged {
        checker: "panics",
        verdict: match after - before {
            0 => Verdict::Valid,
            n => Verdict::Invalid(format!(
                "{n} panics in the run's tasks, the first: {}",
                first.unwrap_or_default()
            )),
        },
        expected: true,
    });
    outcome
}

/// The checkers a run is judged by: (name, checker, expected to judge).
type Checker = (&'static str, fn(&[Op]) -> Verdict, bool);

fn pairs(ops: &[Op]) -> Verdict {
    match crate::history::check_pairs(ops) {
        Ok(()) => Verdict::Valid,
        Err(e) => Verdict::Invalid(e),
    }
}

/// Every checker that applies to a simulated run. Capacity reads the cluster's own
/// high-water mark (`LimitStatus`), which the simulator does not read: it judges what it
/// can and says unknown for the rest, so it is not expected to judge.
pub const CHECKERS: [Checker; 17] = [
    ("pairs", pairs, true),
    ("P1 permits", checker::permits::check, true),
    ("P2 fences", checker::fences::check, true),
    ("told", checker::told::check, true),
    ("capacity", checker::capacity::check, false),
    ("convergence", checker::convergence::check, true),
    ("log clock", checker::clock::check, true),
    ("settlement", checker::settlement::check, true),
    ("halts", checker::halts::check, false),
    ("client kill", checker::liveness::check_client_kills, true),
    ("keyed", checker::keyed::check, true),
    ("leased", checker::leased::check, true),
    ("stalls", checker::stalls::check, false),
    ("linearizable", checker::linearizable::check, true),
    ("strands", checker::strands::check, true),
    ("kept", checker::kept::check, false),
    ("security", checker::security::check, true),
];

/// Judges `ops` by every checker.
pub fn judge(ops: &[Op]) -> Vec<Judged> {
    CHECKERS
        .iter()
        .map(|(checker, check, expected)| Judged {
            checker,
            verdict: check(ops),
            expected: *expected,
        })
        .collect()
}

async fn simulate(seed: u64, config: Config) -> Outcome {
    let history = Recorder::new();
    let mut outcome = Outcome {
        seed,
        verdicts: vec![],
        error: None,
        trace: vec![],
        sim_ns: 0,
    };
    let run_max = Duration::from_millis(config.workload_ms) + RUN_SLACK;
    let finals = match tokio::time::timeout(run_max, carry_out(seed, config, &history)).await {
        Ok(Ok(finals)) => finals,
        Ok(Err(e)) => {
            outcome.error = Some(e);
            BTreeMap::new()
        }
        Err(_) => {
            outcome.error = Some(format!(
                "the run did not end within {} simulated s",
                run_max.as_secs()
            ));
            BTreeMap::new()
        }
    };
    let ops = history.ops();
    outcome.verdicts = judge(&ops);
    outcome.trace = ops
        .iter()
        .map(|op| serde_json::to_string(op).unwrap_or_else(|e| format!("unprintable op: {e}")))
        .collect();
    for (node, (applied, digest)) in finals {
        outcome.trace.push(format!(
            "final node {node} applied {applied:?} digest {digest}"
        ));
    }
    outcome.sim_ns = history.now_ns();
    outcome
}

/// The run's phases; returns every node's final digest.
async fn carry_out(
    seed: u64,
    config: Config,
    history: &Recorder,
) -> Result<BTreeMap<NodeId, (Option<u64>, String)>, String> {
    let mut rng = Rng::new(seed);
    let clients = LIMITS.len() * CLIENTS_PER_LIMIT;
    let plan = schedule::draw(seed, &mut rng, config.nodes, clients, config.workload_ms);
    let world =
        Arc::new(World::start(rng.next_u64(), &plan.node_rates, &plan.node_wall_skews_ms).await?);
    define(&Door::new(world.clone(), CLIENT_ENDPOINT_BASE)).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let holders = Holders::default();
    let mut tasks = vec![];
    for (i, rate) in plan.client_rates.iter().enumerate() {
        let (limit, cap) = LIMITS[i / CLIENTS_PER_LIMIT];
        let spec = ClientSpec {
            process: i as u64 + 1,
            limit,
            cap,
            rate: *rate,
            seed: rng.next_u64(),
            refusals_recorded_as_grants: config.refusals_recorded_as_grants,
        };
        // Every other permit client speaks to a node's HTTP door, as the harness's
        // Python holders do.
        let door = Door::new(world.clone(), spec.endpoint());
        let door = if i % 2 == 1 {
            door.through_http()
        } else {
            door
        };
        let holders = holders.clone();
        tasks.push(tokio::spawn(permits(
            spec,
            door,
            history.clone(),
            stop.clone(),
            holders,
        )));
    }
    tasks.extend(others(&world, &mut rng, history, &stop));
    let trespasser = Trespasser::new(
        TRESPASS_BASE,
        Door::new(world.clone(), CLIENT_ENDPOINT_BASE + TRESPASS_BASE),
        Door::new(world.clone(), CLIENT_ENDPOINT_BASE + TRESPASS_BASE + 1),
        history.clone(),
    );
    let run = trespass::trespass(trespasser.clone(), rng.next_u64(), stop.clone());
    tasks.push(tokio::spawn(run));
    let monitor = tokio::spawn(monitor(world.clone(), history.clone()));
    let nemesis = tokio::spawn(nemesis::run(world.clone(), plan, history.clone(), holders));
    tokio::time::sleep(Duration::from_millis(config.workload_ms)).await;
    // The schedule fits in the workload's time, so the nemesis is done or healing.
    nemesis
        .await
        .map_err(|e| format!("the nemesis failed: {e}"))?;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout(CLIENT_END_MAX, task).await.is_err() {
            abort.abort();
        }
    }
    monitor.abort();
    history.record(NEMESIS, Kind::Invoke, "heal", json!({}));
    let healed = nemesis::heal(&world).await;
    history.record(
        NEMESIS,
        Kind::Info,
        "heal",
        json!({"ok": healed.is_ok(), "error": healed.as_ref().err()}),
    );
    healed?;
    let door = |process| Door::new(world.clone(), CLIENT_ENDPOINT_BASE + process);
    behind::scene(
        door(behind::BEHIND_BASE),
        door(behind::BEHIND_BASE + 1),
        history,
    )
    .await?;
    trespasser.round(rng.next_u64()).await;
    trespasser.finish();
    ledger::final_reads(&door(LEDGER_BASE - 1), history).await;
    keyed::drain(&door(KEYED_BASE - 1), history).await;
    let finals = settle(&world, history).await;
    world.stop().await?;
    Ok(finals)
}

/// The processes beside the permit clients, each with a door of its own: the ledgers, the
/// halter, two admitters (the halted agent and another), the requests of several parts,
/// the token-lease holder and its cluster takers, and the queued rounds.
fn others(
    world: &Arc<World>,
    rng: &mut Rng,
    history: &Recorder,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let door = |process| Door::new(world.clone(), CLIENT_ENDPOINT_BASE + process);
    let mut tasks = vec![];
    for i in 0..LEDGERS {
        let process = LEDGER_BASE + i;
        let run = ledger::ledger(
            process,
            rng.next_u64(),
            door(process),
            history.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(run));
    }
    let halter = HALTS_BASE;
    let run = halts::halter(
        halter,
        rng.next_u64(),
        door(halter),
        history.clone(),
        stop.clone(),
    );
    tasks.push(tokio::spawn(run));
    for (i, agent) in [crate::setup::HALT_AGENT, "b"].into_iter().enumerate() {
        let process = HALTS_BASE + 1 + i as u64;
        let (seed, door) = (rng.next_u64(), door(process));
        let run = halts::admitter(process, agent, seed, door, history.clone(), stop.clone());
        tasks.push(tokio::spawn(run));
    }
    for i in 0..MULTIS {
        let process = KEYED_BASE + i;
        let run = keyed::multi(
            process,
            rng.next_u64(),
            door(process),
            history.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(run));
    }
    let run = leased::holder(
        LEASED_BASE,
        rng.next_u64(),
        door(LEASED_BASE),
        history.clone(),
        stop.clone(),
    );
    tasks.push(tokio::spawn(run));
    for i in 1..=leased::TAKERS {
        let process = LEASED_BASE + i;
        let run = leased::taker(
            process,
            rng.next_u64(),
            door(process),
            history.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(run));
    }
    let rounds = HALTS_BASE + 3;
    let run = halts::halt_queue(
        rounds,
        rng.next_u64(),
        door(rounds),
        history.clone(),
        stop.clone(),
    );
    tasks.push(tokio::spawn(run));
    tasks
}

/// Defines the limits, trying while the first leader is elected.
async fn define(door: &Door) -> Result<(), String> {
    let permits = LIMITS.map(|(name, concurrent)| (TENANT, name, concurrent as u32, 0.0, None));
    let others =
        OTHER_LIMITS.map(|(tenant, name, concurrent)| (tenant, name, concurrent, 0.0, None));
    let (name, per_second, burst) = leased::LIMIT;
    let leased = (TENANT, name, 0, per_second, Some(burst));
    for (tenant, name, concurrent, per_second, burst) in
        permits.into_iter().chain(others).chain([leased])
    {
        let command = Command::DefineLimit {
            tenant: tenant.into(),
            name: name.into(),
            concurrent,
            per_second,
            burst,
        };
        let mut defined = false;
        for _ in 0..DEFINE_TRIES_MAX {
            if let Ok((_, Reply::Done)) = door.write(command.clone()).await {
                defined = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !defined {
            return Err(format!("limit {name} could not be defined: no leader"));
        }
    }
    let keyed = Command::ApplyLimits {
        tenant: TENANT.into(),
        definitions: crate::workload::keyed::definitions().to_vec(),
        prune: false,
    };
    match door.write(keyed).await {
        Ok((_, Reply::Refused(r))) => Err(format!("the keyed limits were refused: {r:?}")),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("the keyed limits could not be defined: {e}")),
    }
}

/// Compares the running nodes' digests every [`MONITOR_EVERY_MS`]: two at one applied
/// index with different digests are recorded (`digest-mismatch`), and how many pairs were
/// compared (`monitor`), as the harness's monitor does. Reads every running node's log
/// clock at the same ticks and records the `log-clock` facts the harness's monitor would
/// ([`LogClockSamples`]), for the log-clock checker, and each leader the first tick it
/// leads a term (`leader`, as the harness's status monitor records it), for the checkers of
/// stalls and of the leaders' clock rates (`leased`).
async fn monitor(world: Arc<World>, history: Recorder) {
    let mut clock = LogClockSamples::default();
    let mut leaders: BTreeMap<u64, NodeId> = BTreeMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(MONITOR_EVERY_MS)).await;
        for (node, log_ms) in world.log_clocks() {
            clock.observe(&history, node, log_ms);
        }
        for (node, term, applied) in world.leading() {
            if leaders.insert(term, node) != Some(node) {
                history.record(
                    NEMESIS,
                    Kind::Info,
                    "leader",
                    json!({"node": node, "term": term, "applied": applied}),
                );
            }
        }
        let digests = world.digests();
        let (compared, mismatch) = compare(&digests);
        if let Some((a, b)) = mismatch {
            history.record(
                NEMESIS,
                Kind::Info,
                "digest-mismatch",
                json!({"nodes": [a, b], "digests": shown(&digests)}),
            );
        }
        if compared > 0 {
            history.record(
                NEMESIS,
                Kind::Info,
                "monitor",
                json!({"compared": compared}),
            );
        }
    }
}

/// The pairs of nodes at one applied index, and the first such pair whose digests differ.
fn compare(digests: &BTreeMap<NodeId, (Option<u64>, String)>) -> (u64, Option<(NodeId, NodeId)>) {
    let mut compared = 0;
    let mut mismatch = None;
    for (a, (ia, da)) in digests {
        for (b, (ib, db)) in digests.range(a + 1..) {
            if ia.is_some() && ia == ib {
                compared += 1;
                if da != db && mismatch.is_none() {
                    mismatch = Some((*a, *b));
                }
            }
        }
    }
    (compared, mismatch)
}

fn shown(digests: &BTreeMap<NodeId, (Option<u64>, String)>) -> serde_json::Value {
    digests
        .iter()
        .map(|(n, (i, d))| (n.to_string(), json!([i, d])))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Waits (at most [`SETTLE_MAX`]) for every node to reach one applied index, and records
/// the final `converge` fact: converged when they did with one digest. Returns the
/// digests last seen.
async fn settle(world: &World, history: &Recorder) -> BTreeMap<NodeId, (Option<u64>, String)> {
    let started = history.now_ns();
    let members = world.members().len();
    let mut digests = world.digests();
    for _ in 0..SETTLE_MAX.as_millis() / 100 {
        digests = world.digests();
        let first = digests.values().next().map(|(i, _)| *i);
        let one_index = digests.len() == members
            && first.flatten().is_some()
            && digests.values().all(|(i, _)| Some(*i) == first);
        if one_index {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (compared, mismatch) = compare(&digests);
    let equal_at = digests.values().next().and_then(|(i, _)| *i);
    let converged = compared as usize == members * (members - 1) / 2 && mismatch.is_none();
    history.record(
        NEMESIS,
        Kind::Info,
        "converge",
        json!({"final": true, "converged": converged, "compared": compared,
            "applied": shown(&digests), "equal_at": equal_at,
            "waited_ms": (history.now_ns() - started) / 1_000_000}),
    );
    digests
}
