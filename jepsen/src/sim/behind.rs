//! The simulated client kill (G7): after the final heal, a holder of [`CRASH`] (cap 1)
//! dies with a waiter queued behind it, and its permit must move on to the waiter within
//! its session's TTL plus G7's bound, as the harness's `client-kill` nemesis sets it up
//! (the ops are the harness's, so its `client kill` checker judges them).
//!
//! Owns the scene's two processes. The holder keeps its session alive until the kill,
//! which stops it (no release, no close: as a `kill -9`), and a `client-kill` fact records
//! when. The waiter queued before the kill asks again for its ticket (the machine answers a
//! known ticket with its state) until it is granted or [`WAIT_MAX`] has passed, which is
//! past the checker's bound: a permit that never moves on is recorded as not granted.
//!
//! It runs after the heal, with no fault: an outage freezes the log clock, so a fault
//! would stretch the expiry by its length, which G7 does not promise.
//!
//! Invariants:
//! - Every op pairs (an invoke, then one completion of the same `f`).
//! - Every wait is bounded in simulated time.

use std::time::Duration;

use serde_json::json;
use weir_core::machine::{Acquire, Command, Priority, Reply, SessionId};

use super::client::Door;
use crate::history::{Kind, NEMESIS, Recorder};
use crate::setup::{CRASH, TENANT};

/// The scene's processes: the holder, then the waiter.
pub const BEHIND_BASE: u64 = 300;
/// The kill's number (one a run).
const KILL: u64 = 1;
/// The scene's sessions' TTL: short, so the scene is short (the checker's bound is the
/// default TTL's, longer).
const SCENE_TTL: Duration = Duration::from_secs(1);
/// How often a session is kept alive (the library's five a TTL).
const KEEP_ALIVE_EVERY: Duration = Duration::from_millis(200);
/// How long the holder lives with the waiter queued behind it.
const HOLD_BEFORE_KILL: Duration = Duration::from_millis(300);
/// How often the waiter asks again for its ticket.
const REASK_EVERY: Duration = Duration::from_millis(100);
/// How long the waiter waits after the kill: past the checker's bound (the default TTL
/// and G7's bound, 6 s), so a permit that never moves on is judged, not cut short.
const WAIT_MAX: Duration = Duration::from_secs(8);
/// Tries at each step of the setup (a session, the holder's grant, the waiter's queueing).
const SETUP_TRIES: u32 = 20;

fn acquire(session: SessionId, wait: bool) -> Command {
    Command::Acquire(Acquire {
        session,
        ticket: 1,
        tenant: TENANT.into(),
        limit: CRASH.into(),
        units: 1,
        priority: Priority::default(),
        agent: None,
        wait,
    })
}

async fn open(door: &Door) -> Result<SessionId, String> {
    let ttl_ms = SCENE_TTL.as_millis() as u64;
    for _ in 0..SETUP_TRIES {
        if let Ok((_, Reply::SessionOpened { session, .. })) =
            door.write(Command::OpenSession { ttl_ms }).await
        {
            return Ok(session);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the client-kill scene could not open a session".into())
}

/// Keeps `session` alive until aborted.
async fn keep_alive(door: Door, session: SessionId) {
    loop {
        tokio::time::sleep(KEEP_ALIVE_EVERY).await;
        let _ = door.write(Command::KeepAlive { session }).await;
    }
}

/// The scene: the holder's grant, the waiter queued, the kill, the waiter's outcome. An
/// error when the scene could not be set up on a healed cluster (a harness error).
pub async fn scene(holder_door: Door, waiter_door: Door, history: &Recorder) -> Result<(), String> {
    let (holder, waiter) = (BEHIND_BASE, BEHIND_BASE + 1);
    let held = open(&holder_door).await?;
    let keeper = tokio::spawn(keep_alive(holder_door.clone(), held));
    let v = json!({"limit": CRASH});
    let invoked = history.record(holder, Kind::Invoke, "acquire", v);
    let mut fence = None;
    for _ in 0..SETUP_TRIES {
        // Asking again for the same ticket is answered with its state: granted once.
        if let Ok((_, Reply::Granted { fence: f, .. })) =
            holder_door.write(acquire(held, false)).await
        {
            fence = Some(f);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(fence) = fence else {
        keeper.abort();
        history.record(holder, Kind::Info, "acquire", json!({"limit": CRASH}));
        return Err("the client-kill scene's holder was never granted".into());
    };
    history.record(
        holder,
        Kind::Ok,
        "acquire",
        json!({"limit": CRASH, "fence": fence, "invoke_ns": invoked}),
    );

    let waiting = match open(&waiter_door).await {
        Ok(waiting) => waiting,
        Err(e) => {
            keeper.abort();
            return Err(e);
        }
    };
    let waiter_keeper = tokio::spawn(keep_alive(waiter_door.clone(), waiting));
    let v = json!({"limit": CRASH, "behind_kill": true, "kill": KILL});
    let asked = history.record(waiter, Kind::Invoke, "acquire", v.clone());
    let mut answer = waiter_door.write(acquire(waiting, true)).await;
    for _ in 0..SETUP_TRIES {
        if answer.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = waiter_door.write(acquire(waiting, true)).await;
    }
    tokio::time::sleep(HOLD_BEFORE_KILL).await;

    history.record(NEMESIS, Kind::Invoke, "client-kill", json!({"kill": KILL}));
    keeper.abort();
    let killed = history.now_ns();
    history.record(
        NEMESIS,
        Kind::Info,
        "client-kill",
        json!({"kill": KILL, "killed_ns": killed, "limit": CRASH}),
    );
    while !matches!(
        answer,
        Ok((_, Reply::Granted { .. })) | Ok((_, Reply::Refused(_)))
    ) && history.now_ns() - killed < WAIT_MAX.as_nanos() as u64
    {
        tokio::time::sleep(REASK_EVERY).await;
        answer = waiter_door.write(acquire(waiting, true)).await;
    }
    let mut value = v;
    value["invoke_ns"] = asked.into();
    let kind = match answer {
        Ok((_, Reply::Granted { fence, .. })) => {
            value["fence"] = fence.into();
            Kind::Ok
        }
        other => {
            value["error"] = format!("not granted: {other:?}").into();
            Kind::Fail
        }
    };
    history.record(waiter, kind, "acquire", value);
    waiter_keeper.abort();
    let _ = waiter_door
        .write(Command::CloseSession { session: waiting })
        .await;
    Ok(())
}
