//! The simulated clients: permit processes doing what the harness's `permits` workload
//! does (open a session, acquire, hold, release, keep the session alive), recording the
//! same ops so the same checkers read them.
//!
//! Owns a client's door to the cluster (a write tried through the nodes as the client
//! library tries them: the leader a `NotLeader` names, else the next node; an answer lost
//! or late is an unknown outcome; a node that let a try go unanswered for the library's
//! silence bound passed over for a while and a `NotLeader` naming it not followed, as the
//! library suspects a silent node) and its belief in its permits. The belief follows the
//! client library's rule, with the library's own [`margin_for`]: a permit is believed until
//! the send time of the session's last acknowledged keep-alive (or open) plus the TTL less
//! the margin, on the client's own clock (which runs at its own rate). The library's
//! `Session` itself runs over TCP to a node's client port, which the simulator does not
//! have, so its keep-alive loop is not what runs here: this file's loop follows the same
//! rule (`KEEPALIVES_PER_TTL` keep-alives a TTL, a retry after 100 ms), and asks the
//! library's own sans-I/O rules what an acknowledged keep-alive is credited with
//! ([`keep_alive_credit`]) and when the application is told ([`told_at`]). Every other
//! permit client is a client of a node's HTTP door ([`Door::through_http`]): its writes are
//! answered when the door's own rule says ([`weir_http::write_answer_hold`]).
//!
//! Invariants:
//! - A `hold` ends when the library's [`told_at`] says the application is told (the
//!   belief deadline the client computed: the client wakes exactly then), or at its release
//!   if that comes first.
//! - Every op the client records pairs (an invoke, then one completion of the same `f`).
//! - Randomness comes only from the client's own seeded generator.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use weir_client::{BootInstant, keep_alive_credit, margin_for, told_at};
use weir_core::machine::{Acquire, Command, Priority, Refusal, Reply, SessionId};
use weir_proto::protocol::{Answer, Failure, Query};
use weir_server::security::Principal;

use super::links::NodeId;
use super::world::World;
use crate::history::{Kind, Recorder};
use crate::rng::Rng;
use crate::setup::{TENANT, TTL};

/// The network endpoint of client `index`: far above any node's id.
pub const CLIENT_ENDPOINT_BASE: NodeId = 1_000;

/// How long one try of a write waits for its answer (sim time): the library's silence
/// bound (`SILENCE_MAX`), past which it gives a connection up and suspects its node. The
/// library times no request shorter: a node that answers within it (a stall shorter than
/// the bound, an election) keeps the request, and a stalled node costs a try, not a session.
const TRY_TIMEOUT: Duration = weir_client::SILENCE_MAX;
/// Tries of one write before the client gives up on it.
const TRIES_MAX: u32 = 6;
/// Pause before trying the next node when one could not serve.
const NEXT_NODE_PAUSE: Duration = Duration::from_millis(30);
/// Keep-alives per TTL (the library's `KEEPALIVES_PER_TTL`).
pub(super) const KEEPALIVES_PER_TTL: u32 = 5;
/// How soon an unacknowledged keep-alive is tried again (the library's `KEEPALIVE_RETRY`).
const KEEPALIVE_RETRY: Duration = Duration::from_millis(100);
/// A short hold's length, ms on the client's clock: from a blip to a quarter of the TTL.
const HOLD_MS: (u64, u64) = (20, 800);
/// A long hold's length, ms on the client's clock: up to twice the TTL, so it lives on
/// keep-alives and spans faults (a cluster that expires a session early, or a client that
/// believes too long, shows only in a hold that outlives a lapse of its keep-alives).
const LONG_HOLD_MS: (u64, u64) = (2_000, 6_000);
/// One hold in this many is long.
const LONG_EVERY: u64 = 4;
/// Pause after a refused acquire, ms.
const BUSY_PAUSE_MS: (u64, u64) = (10, 200);

/// The processes holding a permit now: the nemesis aims a client cut at one of them, as the
/// harness's cut client is a holder (a cut that hits a client between permits shows
/// nothing about beliefs).
#[derive(Clone, Default)]
pub struct Holders(Arc<Mutex<BTreeSet<u64>>>);

impl Holders {
    fn set(&self, process: u64, holding: bool) {
        let mut holders = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if holding {
            holders.insert(process);
        } else {
            holders.remove(&process);
        }
    }

    /// The `n`th holder (modulo how many there are), in process order; `None` when no one
    /// holds.
    pub fn pick(&self, n: usize) -> Option<u64> {
        let holders = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if holders.is_empty() {
            return None;
        }
        holders.iter().nth(n % holders.len()).copied()
    }
}

/// One client: which limit it works on, its clock's rate, its seed.
#[derive(Clone, Debug)]
pub struct ClientSpec {
    /// Its process number in the history (from 1).
    pub process: u64,
    pub limit: &'static str,
    pub cap: u64,
    /// Its clock's rate: `rate` client nanoseconds per simulated one.
    pub rate: f64,
    pub seed: u64,
    /// The simulator's planted bug ([`super::run::Config`]): a refused acquire is recorded
    /// as granted (fence 0) and held.
    pub refusals_recorded_as_grants: bool,
}

impl ClientSpec {
    /// Its endpoint on the network.
    pub fn endpoint(&self) -> NodeId {
        CLIENT_ENDPOINT_BASE + self.process
    }
}

/// A client's own clock: simulated time scaled by its rate.
#[derive(Clone, Copy)]
struct Clock(f64);

impl Clock {
    /// The client's clock reading at run time `sim_ns`.
    fn local(self, sim_ns: u64) -> u64 {
        (sim_ns as f64 * self.0) as u64
    }

    /// The run time at which the client's clock reads `local_ns`.
    fn sim(self, local_ns: u64) -> u64 {
        (local_ns as f64 / self.0).ceil() as u64
    }

    /// A span of `d` on the client's clock, in simulated time.
    fn span(self, d: Duration) -> Duration {
        Duration::from_nanos((d.as_nanos() as f64 / self.0).ceil() as u64)
    }
}

/// A session as the client believes it.
struct Belief {
    id: SessionId,
    /// The belief deadline on the client's clock, ns: only ever later.
    deadline_local: u64,
    /// The cluster said the session is gone.
    ended: bool,
}

/// What a client shares with its keep-alive task.
type Shared = Arc<Mutex<Belief>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Belief> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a node that let a try go unanswered is passed over (the library's
/// `SUSPECT_FOR`): the next node skips it, and a `NotLeader` naming it is not followed.
const SUSPECT_FOR: Duration = Duration::from_secs(3);

/// A client's way to the cluster.
#[derive(Clone)]
pub struct Door {
    world: Arc<World>,
    endpoint: NodeId,
    /// The node tried first.
    node: Arc<Mutex<NodeId>>,
    /// The node that last let a try go unanswered, and when.
    suspect: Arc<Mutex<Option<(NodeId, tokio::time::Instant)>>>,
    /// Who the client acts for: the anonymous principal (every session unowned), unless
    /// changed by [`Door::acting_for`].
    principal: Principal,
    /// Whether the client speaks to a node's HTTP door ([`Door::through_http`]).
    http: bool,
}

impl Door {
    pub fn new(world: Arc<World>, endpoint: NodeId) -> Door {
        Door {
            world,
            endpoint,
            node: Arc::new(Mutex::new(1)),
            suspect: Arc::new(Mutex::new(None)),
            principal: Principal::anonymous(),
            http: false,
        }
    }

    /// This door as a client of a node's HTTP door sees it: the door's internal client
    /// tries the nodes as the library does (this door's own tries), and the door answers a
    /// write when its rule says ([`weir_http::write_answer_hold`]: at once, however many
    /// leaders the write followed). What of the HTTP door runs here is that rule; its HTTP
    /// and its forwarding connection are the library's tries.
    pub fn through_http(self) -> Door {
        Door { http: true, ..self }
    }

    /// This door, its writes `principal`'s (as a connection authenticated by a token):
    /// the sessions it opens are the principal's own.
    pub fn acting_for(self, principal: Principal) -> Door {
        Door { principal, ..self }
    }

    /// The node the door tries first: after an answer, the node that gave it.
    pub fn node(&self) -> NodeId {
        *self.node.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn go_to(&self, node: NodeId) {
        *self.node.lock().unwrap_or_else(|p| p.into_inner()) = node;
    }

    /// Whether `node` let a try go unanswered less than [`SUSPECT_FOR`] ago.
    fn suspects(&self, node: NodeId) -> bool {
        self.suspect
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|(n, at)| n == node && at.elapsed() < SUSPECT_FOR)
    }

    /// Moves on from `failed`, the node a try could not be served by, to the next member
    /// not suspected, unless another request through this door has moved on already (to
    /// the leader a `NotLeader` named, say): then the door stays where that one went,
    /// rather than step past it.
    fn next_after(&self, failed: NodeId) {
        let members = self.world.members();
        let at = members.iter().position(|n| *n == failed).unwrap_or(0);
        let next = (1..=members.len())
            .map(|k| members[(at + k) % members.len()])
            .find(|n| !self.suspects(*n))
            .unwrap_or(members[(at + 1) % members.len()]);
        let mut node = self.node.lock().unwrap_or_else(|p| p.into_inner());
        if *node == failed {
            *node = next;
        }
    }

    /// One try through `node`: the request's leg there, the node's answer, the answer's leg
    /// back.
    async fn once(&self, node: NodeId, ask: &Ask) -> Result<Got, Failure> {
        let net = &self.world.net;
        if net.leg(self.endpoint, node).await.is_none() {
            return Err(Failure::Unavailable("unreachable".into()));
        }
        let answer = match ask {
            Ask::Write(command) => {
                let answer = self
                    .world
                    .propose(node, &self.principal, command.clone())
                    .await;
                answer.map(|a| a.map(Got::Write))
            }
            Ask::Read(query) => {
                let answer = self.world.read(node, query.clone()).await;
                answer.map(|a| a.map(Got::Read))
            }
        }
        .ok_or_else(|| Failure::OutcomeUnknown("the node went down".into()))?;
        if net.leg(node, self.endpoint).await.is_none() {
            return Err(Failure::OutcomeUnknown("the answer was lost".into()));
        }
        answer
    }

    /// A request, tried through the nodes until one answers it (at most [`TRIES_MAX`]
    /// tries): the error of the last try, `OutcomeUnknown` if any try's outcome was.
    async fn tried(&self, ask: Ask) -> Result<Got, Failure> {
        let mut unknown = None;
        let mut last = Failure::Unavailable("no try made".into());
        for _ in 0..TRIES_MAX {
            let node = self.node();
            let tried = tokio::time::timeout(TRY_TIMEOUT, self.once(node, &ask)).await;
            match tried {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(Failure::NotLeader {
                    leader: Some((leader, _)),
                })) if leader != node
                    && self.world.members().contains(&leader)
                    && !self.suspects(leader) =>
                {
                    self.go_to(leader);
                    continue;
                }
                Ok(Err(e @ (Failure::BadRequest(_) | Failure::Forbidden(_)))) => return Err(e),
                Ok(Err(Failure::OutcomeUnknown(why))) => {
                    unknown = Some(why);
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    unknown = Some("no answer in time".into());
                    *self.suspect.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((node, tokio::time::Instant::now()));
                }
            }
            self.next_after(node);
            tokio::time::sleep(NEXT_NODE_PAUSE).await;
        }
        Err(match unknown {
            Some(why) => Failure::OutcomeUnknown(why),
            None => last,
        })
    }

    /// A write, tried through the nodes as [`Door::tried`] says; through an HTTP door,
    /// answered when the door's rule says.
    pub async fn write(&self, command: Command) -> Result<(u64, Reply), Failure> {
        let sent = tokio::time::Instant::now();
        let tried = self.tried(Ask::Write(command)).await;
        if self.http {
            let hold = weir_http::write_answer_hold(sent.elapsed());
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
        }
        match tried? {
            Got::Write(answer) => Ok(answer),
            Got::Read(_) => unreachable!("a write is answered as a write"),
        }
    }

    /// A linearizable read, tried through the nodes as [`Door::tried`] says.
    pub async fn read(&self, query: Query) -> Result<Answer, Failure> {
        match self.tried(Ask::Read(query)).await? {
            Got::Read(answer) => Ok(answer),
            Got::Write(_) => unreachable!("a read is answered as a read"),
        }
    }
}

/// What a door carries to a node.
enum Ask {
    Write(Command),
    Read(Query),
}

/// A node's answer to an [`Ask`], of the same kind.
enum Got {
    Write((u64, Reply)),
    Read(Answer),
}

/// A permit process: sessions, and in each, acquires of one unit of its limit (never
/// waiting in line: a full limit answers `Busy`), each held for a drawn time or until its
/// belief deadline, then released. Records `acquire`, `hold` and `release` as the harness's
/// `permits` workload does. Returns when `stop` is set (after its current permit).
pub async fn permits(
    spec: ClientSpec,
    door: Door,
    history: Recorder,
    stop: Arc<AtomicBool>,
    holders: Holders,
) {
    let mut rng = Rng::new(spec.seed);
    let clock = Clock(spec.rate);
    while !stop.load(Ordering::Relaxed) {
        let Some(shared) = open(&door, &history, clock).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let keeper = tokio::spawn(keep_alive(
            door.clone(),
            shared.clone(),
            history.clone(),
            clock,
        ));
        let worked = Worker {
            spec: &spec,
            door: &door,
            history: &history,
            clock,
            holders: &holders,
        };
        worked.session(&shared, &mut rng, &stop).await;
        keeper.abort();
        if stop.load(Ordering::Relaxed) {
            // As an application closes its session at its end, so the cluster settles
            // without waiting for it to expire; should the close be lost, it expires.
            let session = lock(&shared).id;
            let _ = door.write(Command::CloseSession { session }).await;
        }
    }
}

/// Opens a session; its belief deadline counts from the open's send time (its first try's,
/// as the library counts it).
async fn open(door: &Door, history: &Recorder, clock: Clock) -> Option<Shared> {
    let sent = clock.local(history.now_ns());
    let ttl_ms = TTL.as_millis() as u64;
    match door.write(Command::OpenSession { ttl_ms }).await {
        Ok((_, Reply::SessionOpened { session, ttl_ms })) => Some(Arc::new(Mutex::new(Belief {
            id: session,
            deadline_local: deadline(sent, ttl_ms),
            ended: false,
        }))),
        _ => None,
    }
}

/// The belief deadline after an open or keep-alive sent at client time `sent_local` was
/// acknowledged: send time + TTL − margin (the library's rule, its own margin).
fn deadline(sent_local: u64, ttl_ms: u64) -> u64 {
    let ttl = Duration::from_millis(ttl_ms);
    sent_local + (ttl - margin_for(ttl)).as_nanos() as u64
}

/// A time in ns (a client's, or simulated time) as the library's clock type, for its rules.
pub(super) fn boot(local_ns: u64) -> BootInstant {
    BootInstant::from_since_boot(Duration::from_nanos(local_ns))
}

/// [`boot`]'s inverse.
pub(super) fn local_of(at: BootInstant) -> u64 {
    at.saturating_since(boot(0)).as_nanos() as u64
}

/// Keeps the session alive: a keep-alive every TTL/5 of the client's clock, a retry soon
/// after one unacknowledged; each acknowledged one moves the deadline to the time the
/// library credits it with ([`keep_alive_credit`]: its send time) + TTL − margin. Ends
/// when the cluster says the session is gone.
async fn keep_alive(door: Door, shared: Shared, history: Recorder, clock: Clock) {
    let every = TTL / KEEPALIVES_PER_TTL;
    let mut wait = every;
    loop {
        tokio::time::sleep(clock.span(wait)).await;
        let id = lock(&shared).id;
        // The send of the whole keep-alive, its first try's, as the library counts it.
        let sent = clock.local(history.now_ns());
        wait = match door.write(Command::KeepAlive { session: id }).await {
            Ok((_, Reply::KeptAlive { ttl_ms })) => {
                let arrived = clock.local(history.now_ns());
                let credited = local_of(keep_alive_credit(boot(sent), boot(arrived), every));
                let mut belief = lock(&shared);
                belief.deadline_local = belief.deadline_local.max(deadline(credited, ttl_ms));
                every
            }
            Ok((_, Reply::Refused(Refusal::UnknownSession { .. }))) => {
                lock(&shared).ended = true;
                return;
            }
            _ => KEEPALIVE_RETRY.min(every),
        };
    }
}

/// What a client works with in a session.
struct Worker<'a> {
    spec: &'a ClientSpec,
    door: &'a Door,
    history: &'a Recorder,
    clock: Clock,
    holders: &'a Holders,
}

impl Worker<'_> {
    /// Acquires, holds and releases in one session until it ends, its belief lapses, or the
    /// run stops.
    async fn session(&self, shared: &Shared, rng: &mut Rng, stop: &AtomicBool) {
        let Worker {
            spec,
            door,
            history,
            clock,
            holders,
        } = *self;
        let mut ticket = 0;
        while !stop.load(Ordering::Relaxed) && !lock(shared).ended {
            ticket += 1;
            let id = lock(shared).id;
            let limit = spec.limit;
            let invoked = history.record(
                spec.process,
                Kind::Invoke,
                "acquire",
                json!({"limit": limit}),
            );
            let command = Command::Acquire(Acquire {
                session: id,
                ticket,
                tenant: TENANT.into(),
                limit: limit.into(),
                units: 1,
                priority: Priority::default(),
                agent: None,
                wait: false,
            });
            let fence = match door.write(command).await {
                Ok((_, Reply::Granted { fence, .. })) => fence,
                Ok((_, Reply::Refused(Refusal::Busy { .. })))
                    if spec.refusals_recorded_as_grants =>
                {
                    0
                }
                Ok((_, Reply::Refused(refusal))) => {
                    let error = format!("{refusal:?}");
                    history.record(
                        spec.process,
                        Kind::Fail,
                        "acquire",
                        json!({"limit": limit, "error": error}),
                    );
                    if matches!(refusal, Refusal::UnknownSession { .. }) {
                        return;
                    }
                    let pause = rng.range(BUSY_PAUSE_MS.0, BUSY_PAUSE_MS.1);
                    tokio::time::sleep(clock.span(Duration::from_millis(pause))).await;
                    continue;
                }
                Ok((_, other)) => {
                    let error = format!("unexpected reply {other:?}");
                    history.record(
                        spec.process,
                        Kind::Info,
                        "acquire",
                        json!({"limit": limit, "error": error}),
                    );
                    return;
                }
                Err(failure) => {
                    // Granted or not, no one here believes it: the session is left to expire
                    // (its keep-alives stop), which frees the ticket if it was granted.
                    let (kind, error) = match &failure {
                        Failure::OutcomeUnknown(_) => (Kind::Info, failure.to_string()),
                        _ => (Kind::Fail, failure.to_string()),
                    };
                    history.record(
                        spec.process,
                        kind,
                        "acquire",
                        json!({"limit": limit, "error": error}),
                    );
                    return;
                }
            };
            let from = history.now_ns();
            holders.set(spec.process, true);
            history.record_at(
                spec.process,
                Kind::Ok,
                "acquire",
                json!({"limit": limit, "fence": fence, "invoke_ns": invoked}),
                from,
            );
            let (lo, hi) = if rng.range(1, LONG_EVERY) == 1 {
                LONG_HOLD_MS
            } else {
                HOLD_MS
            };
            let hold = Duration::from_millis(rng.range(lo, hi));
            let told = work(
                history,
                clock,
                shared,
                from + clock.span(hold).as_nanos() as u64,
            )
            .await;
            let seen = history.now_ns();
            let deadline_ns = clock.sim(lock(shared).deadline_local);
            let to = told.unwrap_or(seen).min(seen).max(from);
            history.record_at(
                spec.process,
                Kind::Ok,
                "hold",
                json!({"limit": limit, "cap": spec.cap, "fence": fence, "from_ns": from,
                "to_ns": to, "seen_ns": seen, "deadline_ns": deadline_ns, "told_ns": told,
                "lost": told.map(|_| weir_client::Lost::Deadline.to_string()), "application": true}),
                seen,
            );
            let v = json!({"limit": limit, "fence": fence});
            holders.set(spec.process, false);
            history.record(spec.process, Kind::Invoke, "release", v.clone());
            let released = door
                .write(Command::Release {
                    session: id,
                    ticket,
                })
                .await;
            let kind = match released {
                Ok((_, Reply::Released { .. })) => Kind::Ok,
                _ => Kind::Info,
            };
            history.record(spec.process, kind, "release", v);
            if told.is_some() {
                // The belief lapsed: this session is given up, a new one opened.
                return;
            }
        }
    }
}

/// Works on a permit until run time `until_ns`, or until the application is told that the
/// permit may be lost (the library's [`told_at`] of the belief deadline) first: then
/// returns the moment it was told (when the client woke for it).
async fn work(history: &Recorder, clock: Clock, shared: &Shared, until_ns: u64) -> Option<u64> {
    loop {
        let told_ns = clock.sim(local_of(told_at(boot(lock(shared).deadline_local))));
        let now = history.now_ns();
        if now >= told_ns {
            return Some(now);
        }
        if now >= until_ns {
            return None;
        }
        let wake = until_ns.min(told_ns);
        tokio::time::sleep_until(history.instant_of(wake)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_scales_both_ways_and_spans_never_shrink_to_early() {
        let fast = Clock(1.04);
        assert_eq!(fast.local(1_000_000), 1_040_000);
        // The run time at which a fast clock reads a deadline comes before it on a true one.
        assert_eq!(fast.sim(1_040_000), 1_000_000);
        assert_eq!(
            fast.span(Duration::from_millis(104)),
            Duration::from_millis(100)
        );
        let slow = Clock(0.96);
        assert!(slow.sim(slow.local(123_456_789)) >= 123_456_789 - 2);
    }

    #[test]
    fn the_deadline_is_send_time_plus_ttl_less_the_librarys_margin() {
        // TTL 3 s: margin 300 ms.
        assert_eq!(deadline(1_000, 3_000), 1_000 + 2_700_000_000);
    }
}
