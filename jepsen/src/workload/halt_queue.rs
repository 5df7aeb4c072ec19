//! Queued tickets in a halted scope: one process, in rounds, while the halter sets and
//! clears halts on [`HALT_TENANT`] (every 300 ms, on the tenant or on agent `a`).
//!
//! Each round a blocker (agent `b`, its own session) takes the one unit of
//! [`HALT_QUEUE`]; a waiter (agent `a`, which every halt covers, its own session) asks for
//! it with `wait`, so it queues; 300–900 ms later (a halt set or cleared meanwhile, most
//! rounds) the blocker releases, and the waiter is granted, refused `Halted`, or times out.
//! The waiter's `acquire` ops carry the tenant, agent and `"queued": true`; when the
//! blocker still held its permit (not lost) and its release was acknowledged, a
//! `halt-room` fact records when the room came (the release's invoke) for that round.
//!
//! The spec: a halt refuses the queued tickets in its scope. So a waiter granted while a
//! halt in its scope stood — its room came after the halt was acknowledged, its grant
//! before the clear was invoked — was granted a ticket the halt should have refused (the
//! `halts` checker's second rule).

use std::time::Duration;

use serde_json::json;
use weir_client::{AcquireError, AcquireOptions, Session};

use super::acquire::{acquire_as, release_recorded};
use super::halts::OTHER_AGENT;
use super::process::Process;
use crate::history::Kind;
use crate::setup::{HALT_AGENT, HALT_QUEUE, HALT_TENANT, TTL};

/// The queued-in-halt processes: rounds of blocker (`p`), queued waiter (`w`, a process
/// number of its own: its acquire is open while the blocker releases) and release.
pub async fn halt_queue(p: Process, w: Process) {
    let mut rng = p.rng();
    let client = p.client(crate::secure::Access::Tenant(HALT_TENANT));
    let mut round = 0u64;
    while p.running() {
        let (Ok(blocker), Ok(waiter)) = (
            Session::open(&client, TTL).await,
            Session::open(&client, TTL).await,
        ) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while p.running() {
            round += 1;
            let hold = Duration::from_millis(rng.range(300, 900));
            if !one_round((&p, &blocker), (&w, &waiter), round, hold).await {
                break;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), blocker.close()).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), waiter.close()).await;
    }
}

/// One round; false when a session should be opened again.
async fn one_round(
    (p, blocker): (&Process, &Session),
    (w, waiter): (&Process, &Session),
    round: u64,
    hold: Duration,
) -> bool {
    let history = &p.history;
    let mut options = AcquireOptions::new(HALT_TENANT, HALT_QUEUE);
    options.agent = Some(OTHER_AGENT.into());
    options.wait = false;
    options.timeout = Some(Duration::from_secs(3));
    let v = json!({"tenant": HALT_TENANT, "agent": OTHER_AGENT, "limit": HALT_QUEUE});
    let held = match acquire_as(p.id, blocker, options, v, history).await {
        Ok(permit) => permit,
        Err((e, value)) => {
            // A tenant halt refuses the blocker too, and a waiter of an earlier round may
            // still hold the unit: try again shortly.
            let again = !matches!(e, AcquireError::SessionLost | AcquireError::Client(_));
            history.record(p.id, failure_kind(&e), "acquire", value);
            tokio::time::sleep(Duration::from_millis(50)).await;
            return again;
        }
    };
    let mut options = AcquireOptions::new(HALT_TENANT, HALT_QUEUE);
    options.agent = Some(HALT_AGENT.into());
    options.timeout = Some(Duration::from_secs(3));
    let v = json!({"tenant": HALT_TENANT, "agent": HALT_AGENT, "limit": HALT_QUEUE,
        "queued": true, "round": round});
    let waiting = acquire_as(w.id, waiter, options, v, history);
    tokio::pin!(waiting);
    let early = tokio::select! {
        r = &mut waiting => Some(r),
        () = tokio::time::sleep(hold) => None,
    };
    let intact = held.lost_reason().is_none();
    let room = history.now_ns();
    let released = release_recorded(p.id, held, history).await;
    if intact && released {
        let fact = json!({"limit": HALT_QUEUE, "round": round, "room_ns": room});
        history.record(p.id, Kind::Ok, "halt-room", fact);
    }
    let answer = match early {
        Some(r) => r,
        None => waiting.await,
    };
    match answer {
        Ok(permit) => {
            release_recorded(w.id, permit, history).await;
            true
        }
        Err((e, value)) => {
            history.record(w.id, failure_kind(&e), "acquire", value);
            !matches!(e, AcquireError::SessionLost | AcquireError::Client(_))
        }
    }
}

/// The kind an acquire's error is recorded as: `info` when its outcome is unknown.
fn failure_kind(e: &AcquireError) -> Kind {
    match e {
        AcquireError::Client(_) => Kind::Info,
        _ => Kind::Fail,
    }
}
