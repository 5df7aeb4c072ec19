//! Many Raft groups on a few simulated processes, under the bench's permit cycle, with a
//! model of the processes' CPU: what more groups buy, measured in simulated time.
//!
//! The shape ([`Shape`]): `processes` node processes with `cores` cores each; `groups` data
//! groups of `replicas` voters, group `g`'s voters the processes `g, g+s, g+2s, …` (mod the
//! count, `s` the processes over the replicas: a placement that spreads replicas evenly),
//! its first voter founding it with the shortest election timeout, so leaders start spread
//! one a process. Tenants are placed statically, `tenants_per_group` a group (tenant
//! `i` in group `i mod groups + 1`), each with one limit of `capacity` permits; every client
//! works one tenant, routing to its group's leader as the placement says (the design's
//! static placement, docs/design.md "Many groups"). With `move_every_ms`, a mover moves a
//! tenant to the next group every so often through the measured window by the design's
//! four steps (freeze in the source, adopt in the destination, the frozen state dropped;
//! the placement is the driver's table), and clients follow a `Moved` answer: an acquire
//! to the group it names, a release there with its ticket's session (which moved too).
//!
//! The CPU model. Every replica of a group applies every command, one at a time (the
//! machine is one task): `apply_us` a command, on one core of its process, serially per
//! replica. The leader also spends `leader_us` a command (client I/O, batching, the log
//! writer, replication), on any core of its process. A core is a permit of the process's
//! semaphore held for the work's simulated time, so groups on one process compete for its
//! cores, and a group's throughput is bounded by its serial apply. The default costs are
//! the real cluster's, measured on this repository's 2-core machine (`docs/benchmarks.md`,
//! "Five nodes": 3 nodes at 256 clients, 6a875c4): the leader 7.4–7.6 µs an operation, a
//! follower 3.8–3.9 µs; rounded, 4 µs of apply on every replica and 4 µs more on the leader.
//! Nothing else costs simulated time but the network's delays (0 or 1 ms each way: tokio's
//! clock counts whole milliseconds) and the log's simulated fsyncs (one tick).
//!
//! Each process keeps one log for the replicas it hosts, on one simulated disk, as a node
//! of several groups does (`raft::wal`: one writer, one fsync for every group's jobs); a
//! killed process's disk loses what was not synced, with the oldest pending write torn.
//!
//! G1 per limit, as the clients were told: a client counts a permit from the moment a grant
//! reaches it until it sends the release; [`Report::over_capacity`] names every moment a
//! limit's count passed its capacity.
//!
//! Invariants:
//! - A run is a function of its shape and seed: it runs on one simulated thread
//!   ([`crate::simulated`]), and everything it draws comes from the seed.
//! - Every wait is bounded in simulated time (a client's retries, the leader waits).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::EntryPayload;

use super::{MemDisk, NodeSpec, PeerRequest, SEGMENT_BYTES, SimNode, Transport, runtime};
use crate::raft::in_process::Carried;
use crate::raft::log_store::LogStore;
use crate::raft::{GroupId, NodeId};
use crate::security::Principal;
use weir_core::machine::{Acquire, Command, Priority, Refusal, Reply};

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Shape {
    pub processes: u64,
    pub cores: usize,
    pub groups: u64,
    pub replicas: u64,
    /// Closed-loop clients of each group (so the offered load grows with the groups).
    pub clients_per_group: usize,
    pub tenants_per_group: usize,
    /// Permits of each tenant's limit.
    pub capacity: u32,
    /// Simulated seconds measured, after `warmup_s`.
    pub seconds: f64,
    pub warmup_s: f64,
    /// CPU µs a command costs the leader beyond its apply.
    pub leader_us: u64,
    /// CPU µs a command's apply costs each replica, serially.
    pub apply_us: u64,
    /// Kill process 1 (every replica it hosts, its disks torn) halfway through the measured
    /// window, and restart it a second later.
    pub kill: bool,
    /// Move a tenant to the next group every this many simulated ms through the measured
    /// window (`None`: no moves), by the four steps of docs/design.md "Moving a tenant", the
    /// placement the driver's own table.
    pub move_every_ms: Option<u64>,
    /// How long a client holds a permit before it releases it, ms: longer than a move
    /// takes, a permit is held across it.
    pub hold_ms: u64,
    pub seed: u64,
}

impl Shape {
    /// `groups` groups of 3 on `processes` processes of `cores` cores, 1,024 clients a
    /// group, the measured costs (module doc), 1 s measured after 0.3 s.
    pub fn new(processes: u64, cores: usize, groups: u64) -> Shape {
        Shape {
            processes,
            cores,
            groups,
            replicas: 3,
            clients_per_group: 1_024,
            tenants_per_group: 64,
            capacity: 8,
            seconds: 1.0,
            warmup_s: 0.3,
            leader_us: 4,
            apply_us: 4,
            kill: false,
            move_every_ms: None,
            hold_ms: 1,
            seed: 1,
        }
    }

    /// Group `group`'s voters, its leader-to-be first: processes a stride apart, the stride
    /// the processes over the replicas, so the groups' replicas spread evenly (each process
    /// hosts at most one until the groups take every stride, and the first voters, the
    /// leaders, are one a process).
    fn members(&self, group: u64) -> Vec<NodeId> {
        let stride = (self.processes / self.replicas).max(1);
        (0..self.replicas)
            .map(|k| (group - 1 + k * stride) % self.processes + 1)
            .collect()
    }

    fn group_of(&self, tenant: usize) -> u64 {
        tenant as u64 % self.groups + 1
    }
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Commands answered (acquires and releases) in the measured window.
    pub ops: u64,
    pub ops_per_s: f64,
    /// Each group's share of `ops`.
    pub per_group: BTreeMap<u64, u64>,
    /// Each process's busy core-seconds in the measured window, over the window's seconds
    /// and its cores (work is charged when it is taken on, so a backlog can count a little
    /// past 1).
    pub cpu_busy: BTreeMap<NodeId, f64>,
    /// Each moment a limit's permits held as the clients were told passed its capacity.
    pub over_capacity: Vec<String>,
    /// Commands answered with an error (not leader, unknown outcome) and retried.
    pub retried: u64,
    /// Tenants moved (adopted in their new group).
    pub moved: u64,
}

/// One process's CPU: when each of its cores is next free, and the core-time spent, both
/// as simulated time since the run began.
struct Cpu {
    free_at: Mutex<Vec<Duration>>,
    busy: Mutex<Duration>,
}

struct World {
    shape: Shape,
    /// When the run began: the origin of every `free_at`.
    started: tokio::time::Instant,
    nodes: Mutex<BTreeMap<(u64, NodeId), Arc<SimNode>>>,
    dead: Mutex<BTreeSet<NodeId>>,
    cpu: BTreeMap<NodeId, Cpu>,
    /// When each replica's apply is next free: it applies one command at a time.
    apply: BTreeMap<(u64, NodeId), Mutex<Duration>>,
    /// Where each tenant is placed: the driver's table (the metadata group's, in the
    /// design). Clients read it only when they open; they learn of a move by `Moved`.
    placement: Mutex<BTreeMap<usize, u64>>,
}

/// Work shorter than this waits for nothing: tokio's clock counts whole milliseconds, so
/// the model keeps the cores' time itself and makes a caller wait only once its work ends
/// a tick or more from now (a saturated core's backlog).
const TICK: Duration = Duration::from_millis(1);

impl World {
    fn node(&self, group: u64, id: NodeId) -> Option<Arc<SimNode>> {
        if self.dead.lock().unwrap().contains(&id) {
            return None;
        }
        self.nodes.lock().unwrap().get(&(group, id)).cloned()
    }

    /// Spends `work` of CPU on process `id`: on its core free soonest, after `serial` (if
    /// any) is free, and waits until it ends when that is a tick or more away.
    async fn spend(&self, id: NodeId, serial: Option<&Mutex<Duration>>, work: Duration) {
        if work.is_zero() {
            return;
        }
        let now = self.started.elapsed();
        let end = {
            let cpu = &self.cpu[&id];
            let mut serial = serial.map(|s| s.lock().unwrap());
            let ready = now.max(serial.as_deref().copied().unwrap_or_default());
            let mut cores = cpu.free_at.lock().unwrap();
            // The core on which the work can start soonest, given when its replica's serial
            // apply is free (a core free earlier would only idle until then).
            let (core, start) = cores
                .iter()
                .map(|free_at| ready.max(*free_at))
                .enumerate()
                .min_by_key(|(_, start)| *start)
                .expect("a process has a core");
            let end = start + work;
            cores[core] = end;
            if let Some(serial) = serial.as_deref_mut() {
                *serial = end;
            }
            *cpu.busy.lock().unwrap() += work;
            end
        };
        if end >= now + TICK {
            tokio::time::sleep_until(self.started + end).await;
        }
    }

    async fn apply(&self, group: u64, id: NodeId, commands: u64) {
        let work = Duration::from_micros(self.shape.apply_us * commands);
        self.spend(id, self.apply.get(&(group, id)), work).await;
    }
}

/// A delay of 0 or 1 ms each way (tokio's clock counts whole milliseconds), drawn from the
/// seed: a rack's network, rounded.
fn delay() -> Duration {
    let r = crate::simulated::random().expect("a simulation draws from its seed");
    Duration::from_millis(r % 2)
}

/// Group `group`'s network: its peer requests between its replicas, each follower's apply
/// of what an append carries charged to its process before it answers.
struct GroupNet {
    group: u64,
    world: Arc<World>,
}

impl Transport for GroupNet {
    fn send(&self, from: NodeId, to: NodeId, request: PeerRequest) -> Carried {
        let (group, world) = (self.group, self.world.clone());
        Box::pin(async move {
            tokio::time::sleep(delay()).await;
            world.node(group, from)?;
            let node = world.node(group, to)?;
            if let PeerRequest::AppendEntries(append) = &request {
                let commands: u64 = append
                    .entries
                    .iter()
                    .map(|e| match &e.payload {
                        EntryPayload::Normal(batch) => batch.commands.len() as u64,
                        _ => 0,
                    })
                    .sum();
                world.apply(group, to, commands).await;
            }
            let response = node.answer(request).await;
            tokio::time::sleep(delay()).await;
            world.node(group, from)?;
            Some(response)
        })
    }
}

/// Starts process `id`'s replicas (`groups`, each a group it hosts) on the one log they
/// share on its disk.
async fn start(
    world: &Arc<World>,
    root: &Path,
    disks: &BTreeMap<NodeId, MemDisk>,
    id: NodeId,
    groups: &[u64],
) {
    let hosted: Vec<GroupId> = groups
        .iter()
        .map(|g| GroupId::try_from(*g).expect("a simulated group id fits a group id"))
        .collect();
    let mut logs = LogStore::open_shared_disk(Box::new(disks[&id].bound()), SEGMENT_BYTES, &hosted)
        .expect("a simulated process's log opens");
    for (group, hosted) in groups.iter().zip(&hosted) {
        let log = logs.remove(hosted).expect("a store per hosted group");
        start_replica(world, root, log, *group, id).await;
    }
}

async fn start_replica(world: &Arc<World>, root: &Path, log: LogStore, group: u64, id: NodeId) {
    let members = world.shape.members(group);
    let mut spec = NodeSpec::new(id, members.clone());
    let rank = members.iter().position(|m| *m == id).expect("a member") as u64;
    spec.election_timeout_ms = 300 + 60 * rank;
    let dir = root.join(format!("g{group}")).join(id.to_string());
    let net = Arc::new(GroupNet {
        group,
        world: world.clone(),
    });
    let node = SimNode::start_on(&spec, log, &dir, net)
        .await
        .expect("a simulated node starts");
    world
        .nodes
        .lock()
        .unwrap()
        .insert((group, id), Arc::new(node));
}

/// The groups each process hosts, by process.
fn hosted_by(places: &[(u64, NodeId)]) -> BTreeMap<NodeId, Vec<u64>> {
    let mut by: BTreeMap<NodeId, Vec<u64>> = BTreeMap::new();
    for (group, id) in places {
        by.entry(*id).or_default().push(*group);
    }
    by
}

/// Sends `command` to group `group`'s leader, following its members' word on who leads;
/// `None` when no leader answered within 5 s of simulated time.
async fn propose(
    world: &World,
    group: u64,
    command: Command,
    retried: &Mutex<u64>,
) -> Option<Reply> {
    let members = world.shape.members(group);
    let mut to = members[0];
    for attempt in 0..500 {
        if let Some(node) = world.node(group, to) {
            world
                .spend(to, None, Duration::from_micros(world.shape.leader_us))
                .await;
            world.apply(group, to, 1).await;
            match node.propose(&Principal::anonymous(), command.clone()).await {
                Ok((_, reply)) => return Some(reply),
                Err(_) => *retried.lock().unwrap() += 1,
            }
            if let Some(leader) = node.leader().filter(|l| *l != to) {
                to = leader;
                continue;
            }
        }
        to = members[(attempt + 1) % members.len()];
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Held permits per tenant's limit, as the clients were told, and every time one passed
/// its capacity.
#[derive(Default)]
struct Held {
    now: BTreeMap<usize, u32>,
    over: Vec<String>,
}

impl Held {
    fn granted(&mut self, tenant: usize, capacity: u32, at: Duration) {
        let n = self.now.entry(tenant).or_default();
        *n += 1;
        if *n > capacity {
            self.over
                .push(format!("t{tenant}: {n} held of {capacity} at {:?}", at));
        }
    }

    fn releasing(&mut self, tenant: usize) {
        if let Some(n) = self.now.get_mut(&tenant) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Runs `shape` on a simulated thread of its own, its nodes' snapshots under `root`.
pub fn run(shape: &Shape, root: &Path) -> Result<Report, String> {
    let rt = runtime(shape.seed).map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(simulate(shape.clone(), root))
}

async fn simulate(shape: Shape, root: &Path) -> Result<Report, String> {
    let _sim = crate::simulated::enter(shape.seed);
    let started = tokio::time::Instant::now();
    let ids: Vec<NodeId> = (1..=shape.processes).collect();
    let places: Vec<(u64, NodeId)> = (1..=shape.groups)
        .flat_map(|g| shape.members(g).into_iter().map(move |id| (g, id)))
        .collect();
    let world = Arc::new(World {
        started,
        cpu: ids
            .iter()
            .map(|id| {
                let cpu = Cpu {
                    free_at: Mutex::new(vec![Duration::ZERO; shape.cores]),
                    busy: Mutex::new(Duration::ZERO),
                };
                (*id, cpu)
            })
            .collect(),
        apply: places.iter().map(|p| (*p, Mutex::default())).collect(),
        nodes: Mutex::default(),
        dead: Mutex::default(),
        placement: Mutex::new(
            (0..shape.groups as usize * shape.tenants_per_group)
                .map(|t| (t, shape.group_of(t)))
                .collect(),
        ),
        shape: shape.clone(),
    });
    let hosted = hosted_by(&places);
    let disks: BTreeMap<_, _> = hosted.keys().map(|id| (*id, MemDisk::new())).collect();
    for (id, groups) in &hosted {
        start(&world, root, &disks, *id, groups).await;
    }
    for group in 1..=shape.groups {
        let founder = shape.members(group)[0];
        world.node(group, founder).expect("started").found().await?;
    }
    let retried = Arc::new(Mutex::new(0u64));
    let held = Arc::new(Mutex::new(Held::default()));
    let tenants = shape.groups as usize * shape.tenants_per_group;
    // Each group defines its tenants' limits, the groups side by side.
    let mut defines = tokio::task::JoinSet::new();
    for group in 1..=shape.groups {
        let (world, retried) = (world.clone(), retried.clone());
        let tenants: Vec<usize> = (0..tenants)
            .filter(|t| shape.group_of(*t) == group)
            .collect();
        let capacity = shape.capacity;
        defines.spawn(async move {
            for tenant in tenants {
                let define = Command::DefineLimit {
                    tenant: format!("t{tenant}"),
                    name: "l".into(),
                    concurrent: capacity,
                    per_second: 0.0,
                    burst: None,
                };
                propose(&world, group, define, &retried).await?;
            }
            Some(())
        });
    }
    while let Some(defined) = defines.join_next().await {
        defined
            .map_err(|e| format!("defining the limits: {e}"))?
            .ok_or("no leader to define the limits")?;
    }
    let measure_from = started.elapsed() + Duration::from_secs_f64(shape.warmup_s);
    let measure_to = measure_from + Duration::from_secs_f64(shape.seconds);
    let counted: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..shape.clients_per_group * shape.groups as usize {
        let tenant = c % tenants;
        let group = shape.group_of(tenant);
        let (world, retried, held, counted) = (
            world.clone(),
            retried.clone(),
            held.clone(),
            counted.clone(),
        );
        let (capacity, hold_ms) = (shape.capacity, shape.hold_ms);
        clients.spawn(async move {
            let count = |group: u64, n: u64| {
                let at = started.elapsed();
                if at >= measure_from && at < measure_to {
                    *counted.lock().unwrap().entry(group).or_default() += n;
                }
            };
            // One session in each group the client works in, opened with a nonce drawn
            // from the seed, so no two clients' sessions share an id across groups.
            let mut sessions: BTreeMap<u64, u64> = BTreeMap::new();
            let mut group = group;
            let mut ticket = 0;
            while started.elapsed() < measure_to {
                let session = match sessions.get(&group) {
                    Some(s) => *s,
                    None => {
                        let open = Command::OpenSessionFor {
                            ttl_ms: 600_000,
                            owner: None,
                            nonce: crate::simulated::random().expect("a simulation draws"),
                        };
                        let Some(Reply::SessionOpened { session, .. }) =
                            propose(&world, group, open, &retried).await
                        else {
                            return;
                        };
                        sessions.insert(group, session);
                        session
                    }
                };
                ticket += 1;
                let acquire = Command::Acquire(Acquire {
                    session,
                    ticket,
                    tenant: format!("t{tenant}"),
                    limit: "l".into(),
                    units: 1,
                    priority: Priority::default(),
                    agent: None,
                    wait: false,
                });
                let Some(reply) = propose(&world, group, acquire, &retried).await else {
                    continue;
                };
                count(group, 1);
                if let Reply::Refused(Refusal::Moved { to, .. }) = reply {
                    group = to;
                    continue;
                }
                if !matches!(reply, Reply::Granted { .. }) {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    continue;
                }
                held.lock()
                    .unwrap()
                    .granted(tenant, capacity, started.elapsed());
                tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                held.lock().unwrap().releasing(tenant);
                // The release follows the tenant: a `Moved` answer names where it went
                // with the ticket (and its session). Bounded: a tenant moves at most once
                // a move period.
                for _ in 0..4 {
                    let release = Command::Release { session, ticket };
                    match propose(&world, group, release, &retried).await {
                        Some(Reply::Refused(Refusal::Moved { to, .. })) => group = to,
                        Some(_) => {
                            count(group, 1);
                            break;
                        }
                        None => break,
                    }
                }
            }
        });
    }
    // Each process's core-time spent by the window's start and end.
    let spent_by = |world: &World| -> BTreeMap<NodeId, Duration> {
        world
            .cpu
            .iter()
            .map(|(id, cpu)| (*id, *cpu.busy.lock().unwrap()))
            .collect()
    };
    let window = {
        let world = world.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(started + measure_from).await;
            let from = spent_by(&world);
            tokio::time::sleep_until(started + measure_to).await;
            (from, spent_by(&world))
        })
    };
    let mover = shape.move_every_ms.map(|every| {
        let (world, retried) = (world.clone(), retried.clone());
        tokio::spawn(async move {
            let mut moved = 0u64;
            tokio::time::sleep_until(started + measure_from).await;
            while started.elapsed() + Duration::from_millis(every) < measure_to {
                tokio::time::sleep(Duration::from_millis(every)).await;
                let r = crate::simulated::random().expect("a simulation draws");
                let tenant = (r % tenants as u64) as usize;
                if move_tenant(&world, tenant, &retried).await {
                    moved += 1;
                }
            }
            moved
        })
    });
    if shape.kill {
        let kill_at = measure_from + Duration::from_secs_f64(shape.seconds / 2.0);
        tokio::time::sleep(kill_at.saturating_sub(started.elapsed())).await;
        world.dead.lock().unwrap().insert(1);
        let killed: Vec<_> = places.iter().filter(|(_, id)| *id == 1).copied().collect();
        for place in &killed {
            let node = world.nodes.lock().unwrap().remove(place).expect("running");
            node.kill().await;
        }
        disks[&1].crash(Some(5));
        tokio::time::sleep(Duration::from_secs(1)).await;
        world.dead.lock().unwrap().remove(&1);
        start(&world, root, &disks, 1, &hosted[&1]).await;
    }
    while clients.join_next().await.is_some() {}
    let moved = match mover {
        Some(m) => m.await.map_err(|e| format!("the mover: {e}"))?,
        None => 0,
    };
    let nodes: Vec<_> = std::mem::take(&mut *world.nodes.lock().unwrap())
        .into_values()
        .collect();
    for node in nodes {
        node.kill().await;
    }
    let per_group = counted.lock().unwrap().clone();
    let ops = per_group.values().sum();
    let (from, to) = window
        .await
        .map_err(|e| format!("measuring the CPU: {e}"))?;
    let cpu_busy = to
        .iter()
        .map(|(id, busy)| {
            let spent = busy.saturating_sub(from[id]).as_secs_f64();
            (*id, spent / shape.seconds / shape.cores as f64)
        })
        .collect();
    let over_capacity = std::mem::take(&mut held.lock().unwrap().over);
    let retried = *retried.lock().unwrap();
    Ok(Report {
        ops,
        ops_per_s: ops as f64 / shape.seconds,
        per_group,
        cpu_busy,
        over_capacity,
        retried,
        moved,
    })
}

/// The encoded frozen value of `tenant` on a live replica of `group` that froze it, if any.
fn frozen_bytes(world: &World, group: u64, tenant: &str) -> Option<Vec<u8>> {
    world.shape.members(group).into_iter().find_map(|id| {
        let node = world.node(group, id)?;
        let state = node.state().lock();
        state.machine.frozen_tenant(tenant).map(|f| f.encode())
    })
}

/// Moves `tenant` to the group after its own by the four steps: placement moving (the
/// driver's table keeps the old group until the adopt), freeze in the source, adopt in the
/// destination, placement placed and the frozen state dropped. `false` when a step found
/// no leader in time (the tenant then stays frozen in its source, answering `Moved`, and
/// the next move of it resumes: a freeze of a frozen tenant answers `Moved`).
async fn move_tenant(world: &World, tenant: usize, retried: &Mutex<u64>) -> bool {
    let name = format!("t{tenant}");
    let from = world.placement.lock().unwrap()[&tenant];
    let to = from % world.shape.groups + 1;
    if to == from {
        return false;
    }
    let freeze = Command::FreezeTenant {
        tenant: name.clone(),
        to,
    };
    let to = match propose(world, from, freeze, retried).await {
        Some(Reply::Done) => to,
        Some(Reply::Refused(Refusal::Moved { to, .. })) => to,
        _ => return false,
    };
    // The leader that answered applied the freeze; a replica that has it answers.
    let mut bytes = None;
    for _ in 0..100 {
        bytes = frozen_bytes(world, from, &name);
        if bytes.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let Some(frozen) = bytes else {
        return false;
    };
    let adopt = Command::AdoptTenant {
        tenant: name.clone(),
        frozen,
    };
    match propose(world, to, adopt, retried).await {
        Some(Reply::Done) => {}
        // A retried adopt that was applied the first time finds the tenant there.
        Some(Reply::Refused(Refusal::Invalid(why))) if why.contains("has state here already") => {}
        _ => return false,
    }
    world.placement.lock().unwrap().insert(tenant, to);
    let drop = Command::DropFrozen { tenant: name };
    propose(world, from, drop, retried).await;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::test_cluster::TempDir;

    fn small(groups: u64) -> Shape {
        Shape {
            clients_per_group: 48,
            tenants_per_group: 4,
            capacity: 4,
            seconds: 0.3,
            warmup_s: 0.2,
            ..Shape::new(6, 2, groups)
        }
    }

    fn run_in(tag: &str, shape: &Shape) -> Report {
        let dir = TempDir::new(tag);
        run(shape, &dir.0).unwrap()
    }

    #[test]
    fn a_second_group_doubles_what_latency_bounds_and_no_limit_is_over_granted() {
        let one = run_in("sim-groups-1", &small(1));
        let two = run_in("sim-groups-2", &small(2));
        assert!(one.ops > 0, "{one:?}");
        assert_eq!(two.per_group.len(), 2, "both groups decide: {two:?}");
        assert!(
            two.ops as f64 > 1.6 * one.ops as f64,
            "two groups of independent tenants do nearly twice one's work: {one:?} {two:?}"
        );
        assert!(
            one.over_capacity.is_empty() && two.over_capacity.is_empty(),
            "{one:?} {two:?}"
        );
    }

    #[test]
    fn a_run_is_a_function_of_its_seed() {
        let shape = Shape {
            seconds: 0.1,
            ..small(2)
        };
        let a = run_in("sim-groups-seed-a", &shape);
        let b = run_in("sim-groups-seed-b", &shape);
        assert_eq!(a, b);
    }

    #[test]
    fn a_killed_process_costs_no_grant_and_every_group_goes_on() {
        // Four clients a tenant on two permits: the check has something to see.
        let shape = Shape {
            kill: true,
            seconds: 3.0,
            clients_per_group: 16,
            capacity: 2,
            ..small(3)
        };
        let r = run_in("sim-groups-kill", &shape);
        assert!(r.over_capacity.is_empty(), "{r:?}");
        assert_eq!(r.per_group.len(), 3, "{r:?}");
        assert!(r.retried > 0, "the kill cost some commands a retry: {r:?}");
    }

    #[test]
    fn tenants_moved_between_groups_under_a_kill_are_never_over_granted() {
        // Four clients a tenant on two permits held 30 ms (across a move), a tenant moved
        // every 20 ms.
        let shape = Shape {
            hold_ms: 30,
            kill: true,
            seconds: 2.0,
            clients_per_group: 16,
            capacity: 2,
            move_every_ms: Some(20),
            ..small(3)
        };
        let r = run_in("sim-groups-moves", &shape);
        assert!(r.over_capacity.is_empty(), "{r:?}");
        assert!(r.moved >= 20, "tenants moved: {r:?}");
        assert_eq!(r.per_group.len(), 3, "{r:?}");
    }

    #[test]
    fn the_placement_spreads_replicas_and_leaders_evenly() {
        let hosted = |shape: &Shape| {
            let mut replicas: BTreeMap<NodeId, u64> = BTreeMap::new();
            let mut leaders: BTreeMap<NodeId, u64> = BTreeMap::new();
            for g in 1..=shape.groups {
                let members = shape.members(g);
                assert_eq!(
                    members.iter().collect::<BTreeSet<_>>().len(),
                    3,
                    "{members:?}"
                );
                *leaders.entry(members[0]).or_default() += 1;
                for m in members {
                    *replicas.entry(m).or_default() += 1;
                }
            }
            (replicas, leaders)
        };
        let (replicas, leaders) = hosted(&Shape::new(16, 1, 5));
        assert_eq!((replicas.len(), replicas.values().max()), (15, Some(&1)));
        assert_eq!(leaders.len(), 5);
        let (replicas, leaders) = hosted(&Shape::new(16, 1, 16));
        assert!(replicas.values().all(|n| *n == 3), "{replicas:?}");
        assert!(leaders.values().all(|n| *n == 1), "{leaders:?}");
    }

    #[test]
    fn held_permits_past_the_capacity_are_named() {
        let mut held = Held::default();
        held.granted(3, 2, Duration::from_millis(5));
        held.granted(3, 2, Duration::from_millis(6));
        assert!(held.over.is_empty());
        held.granted(3, 2, Duration::from_millis(7));
        held.releasing(3);
        held.granted(3, 2, Duration::from_millis(8));
        assert_eq!(
            held.over,
            vec!["t3: 3 held of 2 at 7ms", "t3: 3 held of 2 at 8ms"]
        );
    }
}
