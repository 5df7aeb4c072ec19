//! The simulated halts (G6): a halter setting and clearing halts on [`HALT_TENANT`], on the
//! whole tenant or on agent [`HALT_AGENT`] (drawn from its seed); admitters meanwhile
//! asking to be admitted in that scope (reserves of runs, acquires of [`HALT_LIMIT`], as
//! the halted agent or another); and rounds of a ticket queued behind a blocker while halts
//! come and go (`"queued": true`, a `halt-room` fact when the blocker's release freed the
//! unit). The ops are the harness's own (`workload::halts`, `workload::halt_queue`), so its
//! `halts` checker judges them: nothing admitted inside an acknowledged halt, and no queued
//! ticket granted from room that came inside one.
//!
//! Owns these processes and their sessions. A queued ticket learns its grant by asking
//! again for the same ticket (the machine answers a known ticket with its state, G5), as
//! the client library re-asks when a push may have been lost.
//!
//! Invariants:
//! - Every op pairs (an invoke, then one completion of the same `f`).
//! - Every session opened is closed, or left to expire when the close is not answered.
//! - Randomness comes only from each process's own seeded generator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_core::machine::{Acquire, Command, HaltScope, Priority, Refusal, Reply, SessionId};

use super::client::Door;
use crate::history::{Kind, Recorder};
use crate::rng::Rng;
use crate::setup::{HALT_AGENT, HALT_LIMIT, HALT_QUEUE, HALT_TENANT, TTL};

/// The halt processes' numbers start here (far from the other simulated processes').
pub const HALTS_BASE: u64 = 200;
/// The other agent the admitters act as: only tenant halts cover it.
const OTHER_AGENT: &str = "b";
/// How long a halt stands, and how long the tenant goes unhalted between two, ms.
const HALT_MS: u64 = 300;
/// Pause between two admissions of one admitter, ms.
const ADMIT_PAUSE_MS: (u64, u64) = (300, 700);
/// How long the blocker holds the queue's unit in a round, ms: halts come and go meanwhile.
const ROUND_HOLD_MS: (u64, u64) = (300, 900);
/// How often a queued ticket asks again for its state.
const REASK_EVERY: Duration = Duration::from_millis(50);
/// How long a queued ticket waits for its grant before the round gives up on it.
const QUEUED_WAIT_MAX: Duration = Duration::from_secs(3);

/// The halter: a halt set, [`HALT_MS`], its clear, [`HALT_MS`], until `stop`.
pub async fn halter(process: u64, seed: u64, door: Door, history: Recorder, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::Relaxed) {
        let (scope, agent) = if rng.range(0, 1) == 0 {
            (HaltScope::Tenant, None)
        } else {
            (HaltScope::Agent(HALT_AGENT.into()), Some(HALT_AGENT))
        };
        let v = json!({"tenant": HALT_TENANT, "agent": agent});
        history.record(process, Kind::Invoke, "set-halt", v.clone());
        let set = door
            .write(Command::SetHalt {
                tenant: HALT_TENANT.into(),
                scope: scope.clone(),
                reason: "sim".into(),
            })
            .await;
        let kind = match set {
            Ok((_, Reply::Done)) => Kind::Ok,
            _ => Kind::Info,
        };
        history.record(process, kind, "set-halt", v.clone());
        tokio::time::sleep(Duration::from_millis(HALT_MS)).await;
        // A clear may take effect from its invoke on: admissions after it are allowed.
        history.record(process, Kind::Invoke, "clear-halt", v.clone());
        let cleared = door
            .write(Command::ClearHalt {
                tenant: HALT_TENANT.into(),
                scope,
            })
            .await;
        let kind = if cleared.is_ok() {
            Kind::Ok
        } else {
            Kind::Info
        };
        history.record(process, kind, "clear-halt", v);
        tokio::time::sleep(Duration::from_millis(HALT_MS)).await;
    }
}

/// An admitter: in turn reserves (and releases) a run and acquires (and releases) one unit
/// of [`HALT_LIMIT`] in a session of its own, as `agent`, until `stop`.
pub async fn admitter(
    process: u64,
    agent: &'static str,
    seed: u64,
    door: Door,
    history: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng::new(seed);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        if n.is_multiple_of(2) {
            if let Some(session) = open(&door).await {
                let v = json!({"tenant": HALT_TENANT, "agent": agent, "limit": HALT_LIMIT});
                if let Some(ticket) = acquire(process, &door, session, 1, agent, v, &history).await
                {
                    release(process, &door, session, ticket, &history).await;
                }
                close(&door, session).await;
            }
        } else {
            reserve(process, &door, agent, n, &history).await;
        }
        let pause = rng.range(ADMIT_PAUSE_MS.0, ADMIT_PAUSE_MS.1);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Reserves a run in the halted tenant as `agent` and records the `reserve` op; releases
/// the run when admitted.
async fn reserve(process: u64, door: &Door, agent: &str, n: u64, history: &Recorder) {
    let run = format!("h{process}-{n}");
    let v = json!({"tenant": HALT_TENANT, "agent": agent});
    let invoked = history.record(process, Kind::Invoke, "reserve", v);
    let mut value =
        json!({"tenant": HALT_TENANT, "agent": agent, "invoke_ns": invoked, "run": run});
    let reserved = door
        .write(Command::Reserve {
            tenant: HALT_TENANT.into(),
            run: run.clone(),
            agent: Some(agent.into()),
            period: None,
            hold_tokens: None,
            hold_minor: None,
        })
        .await;
    match reserved {
        Ok((_, Reply::Admitted)) => {
            history.record(process, Kind::Ok, "reserve", value);
            let _ = door
                .write(Command::ReleaseRun {
                    tenant: HALT_TENANT.into(),
                    run,
                })
                .await;
        }
        Ok((_, Reply::Refused(r))) => {
            value["error"] = format!("{r:?}").into();
            history.record(process, Kind::Fail, "reserve", value);
        }
        _ => {
            history.record(process, Kind::Info, "reserve", value);
        }
    }
}

/// Opens a session of [`TTL`]; `None` when no node opened one.
async fn open(door: &Door) -> Option<SessionId> {
    let ttl_ms = TTL.as_millis() as u64;
    match door.write(Command::OpenSession { ttl_ms }).await {
        Ok((_, Reply::SessionOpened { session, .. })) => Some(session),
        _ => None,
    }
}

/// Closes a session; one whose close is not answered expires.
async fn close(door: &Door, session: SessionId) {
    let _ = door.write(Command::CloseSession { session }).await;
}

/// The acquire of one unit of a halt limit as `agent`, never waiting.
fn acquire_command(
    session: SessionId,
    ticket: u64,
    limit: &str,
    agent: &str,
    wait: bool,
) -> Command {
    Command::Acquire(Acquire {
        session,
        ticket,
        tenant: HALT_TENANT.into(),
        limit: limit.into(),
        units: 1,
        priority: Priority::default(),
        agent: Some(agent.into()),
        wait,
    })
}

/// Acquires one unit of [`HALT_LIMIT`] without waiting and records the `acquire` op with
/// `value` (and its invoke time, and the fence when granted). The ticket when granted.
async fn acquire(
    process: u64,
    door: &Door,
    session: SessionId,
    ticket: u64,
    agent: &str,
    mut value: serde_json::Value,
    history: &Recorder,
) -> Option<u64> {
    let invoked = history.record(process, Kind::Invoke, "acquire", value.clone());
    value["invoke_ns"] = invoked.into();
    let command = acquire_command(session, ticket, HALT_LIMIT, agent, false);
    let (kind, granted) = match door.write(command).await {
        Ok((_, Reply::Granted { fence, .. })) => {
            value["fence"] = fence.into();
            (Kind::Ok, true)
        }
        Ok((_, Reply::Refused(r))) => {
            value["error"] = format!("{r:?}").into();
            (Kind::Fail, false)
        }
        Ok((_, other)) => {
            value["error"] = format!("unexpected reply {other:?}").into();
            (Kind::Info, false)
        }
        Err(e) => {
            value["error"] = e.to_string().into();
            (Kind::Info, false)
        }
    };
    history.record(process, kind, "acquire", value);
    granted.then_some(ticket)
}

/// Releases a ticket and records the `release` op; whether the release was acknowledged
/// with the permit still held (so the unit was freed at its invoke or after, not at an
/// expiry of its session before).
async fn release(
    process: u64,
    door: &Door,
    session: SessionId,
    ticket: u64,
    history: &Recorder,
) -> bool {
    history.record(
        process,
        Kind::Invoke,
        "release",
        json!({"tenant": HALT_TENANT}),
    );
    let released = door.write(Command::Release { session, ticket }).await;
    let kind = match released {
        Ok((_, Reply::Released { .. })) => Kind::Ok,
        _ => Kind::Info,
    };
    // A session that expired meanwhile is answered `held: false`: its unit was freed at the
    // expiry, before this release.
    let held = matches!(released, Ok((_, Reply::Released { held: true, .. })));
    history.record(process, kind, "release", json!({"tenant": HALT_TENANT}));
    held
}

/// Rounds of a ticket queued in a halted scope, until `stop`: the blocker (`process`, agent
/// `b`, which only tenant halts cover) takes the one unit of [`HALT_QUEUE`]; the waiter
/// (`process + 1`, agent `a`, which every halt covers) asks for it waiting, so it queues;
/// a drawn time later (a halt set or cleared meanwhile, most rounds) the blocker releases,
/// and the waiter is granted, refused `Halted`, or gives up.
pub async fn halt_queue(
    process: u64,
    seed: u64,
    door: Door,
    history: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng::new(seed);
    let waiter = process + 1;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (blocking, waiting) = (open(&door).await, open(&door).await);
        let (Some(blocking), Some(waiting)) = (blocking, waiting) else {
            for session in [blocking, waiting].into_iter().flatten() {
                close(&door, session).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        round += 1;
        let hold = Duration::from_millis(rng.range(ROUND_HOLD_MS.0, ROUND_HOLD_MS.1));
        one_round(
            (process, blocking),
            (waiter, waiting),
            round,
            hold,
            &door,
            &history,
        )
        .await;
        close(&door, blocking).await;
        close(&door, waiting).await;
    }
}

/// One round in two fresh sessions (so a ticket number is never reused).
async fn one_round(
    (blocker, blocking): (u64, SessionId),
    (waiter, waiting): (u64, SessionId),
    round: u64,
    hold: Duration,
    door: &Door,
    history: &Recorder,
) {
    let v = json!({"tenant": HALT_TENANT, "agent": OTHER_AGENT, "limit": HALT_QUEUE});
    let invoked = history.record(blocker, Kind::Invoke, "acquire", v.clone());
    let mut value = v;
    value["invoke_ns"] = invoked.into();
    let command = acquire_command(blocking, 1, HALT_QUEUE, OTHER_AGENT, false);
    match door.write(command).await {
        Ok((_, Reply::Granted { fence, .. })) => {
            value["fence"] = fence.into();
            history.record(blocker, Kind::Ok, "acquire", value);
        }
        other => {
            // A tenant halt refuses the blocker too: the round is tried again.
            value["error"] = format!("{other:?}").into();
            let kind = match other {
                Ok((_, Reply::Refused(_))) => Kind::Fail,
                _ => Kind::Info,
            };
            history.record(blocker, kind, "acquire", value);
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
    }
    let v = json!({"tenant": HALT_TENANT, "agent": HALT_AGENT, "limit": HALT_QUEUE,
        "queued": true, "round": round});
    let invoked = history.record(waiter, Kind::Invoke, "acquire", v.clone());
    let mut value = v;
    value["invoke_ns"] = invoked.into();
    let queued = acquire_command(waiting, 1, HALT_QUEUE, HALT_AGENT, true);
    let first = door.write(queued.clone()).await;
    tokio::time::sleep(hold).await;
    let room = history.now_ns();
    if release(blocker, door, blocking, 1, history).await {
        let fact = json!({"limit": HALT_QUEUE, "round": round, "room_ns": room});
        history.record(blocker, Kind::Ok, "halt-room", fact);
    }
    let mut answer = first;
    let asked = history.now_ns();
    while matches!(answer, Ok((_, Reply::Queued { .. })) | Err(_))
        && history.now_ns() - asked < QUEUED_WAIT_MAX.as_nanos() as u64
    {
        tokio::time::sleep(REASK_EVERY).await;
        answer = door.write(queued.clone()).await;
    }
    match answer {
        Ok((_, Reply::Granted { fence, .. })) => {
            value["fence"] = fence.into();
            history.record(waiter, Kind::Ok, "acquire", value);
            release(waiter, door, waiting, 1, history).await;
        }
        Ok((_, Reply::Refused(r))) => {
            let unknown = matches!(r, Refusal::UnknownSession { .. });
            value["error"] = format!("{r:?}").into();
            let kind = if unknown { Kind::Info } else { Kind::Fail };
            history.record(waiter, kind, "acquire", value);
        }
        other => {
            // Still queued when the round gave up on it, or no answer: its session's close
            // withdraws it.
            value["error"] = format!("{other:?}").into();
            history.record(waiter, Kind::Info, "acquire", value);
        }
    }
}
