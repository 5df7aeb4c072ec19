//! The simulated token leases (G1 in spend time): a holder leasing most of the rate of the
//! harness's `leased-fast` limit (10 a second, burst 4) and spending it from a local bucket
//! with no entry per token, and cluster takers taking the rest through the log. The ops are
//! the harness's own `lease-take` ops (`workload::leased`), so its `leased` checker judges
//! the cluster's grants and the local spends together against `burst + rate × window`.
//!
//! Owns these processes. The holder lives a string of lives, each a session, one lease of
//! [`WANT_RATE`] a second and a cap of [`WANT_CAP`], and local spends: one token whenever
//! its bucket holds one, refilled at the granted rate up to the granted cap (the client
//! library's `Leased`, with its refill on the holder's clock), and only before its belief
//! deadline (the send time of its last acknowledged keep-alive, or of the open, plus the
//! TTL less the library's margin). A life lasts [`LIFE_MS`] and ends by a crash (its
//! keep-alives stop: the lease lapses with its session a TTL later) or by closing its
//! session under the lease; either way the lease's tokens count as spent and are never
//! the cluster's again.
//!
//! Invariants:
//! - A local spend is recorded at the instant it is decided (its invoke and its ok at one
//!   simulated time): simulated time does not pass inside it.
//! - Nothing is spent locally at or past the belief deadline.
//! - Every op pairs; randomness comes only from each process's own seeded generator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_core::machine::{
    AcquireParts, Command, LeasePart, LeaseTokens, Part, Priority, Refusal, Reply,
};

use super::client::Door;
use super::kept;
use crate::history::{Kind, Recorder};
use crate::rng::Rng;
use crate::setup::{LEASED_LIMITS, TENANT, TTL};

/// The lease processes' numbers start here: the holder, then the cluster takers.
pub const LEASED_BASE: u64 = 500;
/// Cluster takers beside the holder: one, whose tries outpace the cluster's own refill.
pub const TAKERS: u64 = 1;
/// The limit leased: (name, per_second, burst).
pub const LIMIT: (&str, f64, u64) = LEASED_LIMITS[1];
/// The holder's wanted refill, tokens a second: most of the limit's.
const WANT_RATE: f64 = 7.0;
/// The holder's wanted local bucket, tokens.
const WANT_CAP: u64 = 3;
/// How long a holder's life lasts, ms.
const LIFE_MS: (u64, u64) = (1_000, 3_000);
/// A cluster taker's pause after a refusal, ms (each refusal is a log entry).
const BUSY_PAUSE_MS: (u64, u64) = (20, 60);
/// How long a cluster taker uses one session, ns: two thirds of its TTL.
const TAKER_SESSION_NS: u64 = 2_000_000_000;
const MICRO: u64 = 1_000_000;

/// The `lease-take` op of one take, as the harness records it.
fn take_op(invoked: u64, local: bool) -> serde_json::Value {
    json!({"limit": LIMIT.0, "units": 1, "invoke_ns": invoked, "per_second": LIMIT.1,
        "burst": LIMIT.2, "local": local})
}

/// The holder: lives until `stop`.
pub async fn holder(process: u64, seed: u64, door: Door, history: Recorder, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::Relaxed) {
        if !life(process, &mut rng, &door, &history, &stop).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// One life: a session, its lease, local spends, and its end. False when no lease was had.
async fn life(
    process: u64,
    rng: &mut Rng,
    door: &Door,
    history: &Recorder,
    stop: &AtomicBool,
) -> bool {
    let Some(kept) = kept::open(door, history).await else {
        return false;
    };
    let session = kept.id;
    let lease = Command::LeaseTokens(LeaseTokens {
        session,
        tenant: TENANT.into(),
        seq: 1,
        parts: vec![LeasePart {
            limit: LIMIT.0.into(),
            key: None,
            rate_micro_per_s: (WANT_RATE * MICRO as f64) as u64,
            cap: WANT_CAP,
            returned_micro: 0,
        }],
    });
    let share = match door.write(lease).await {
        Ok((_, Reply::Leased(shares))) if shares.len() == 1 => shares[0],
        _ => {
            // Refused, or its outcome unknown: the session is closed with whatever it holds
            // (a lease it never heard of counts as spent, never spent here).
            drop(kept);
            let _ = door.write(Command::CloseSession { session }).await;
            return false;
        }
    };
    history.record(
        process,
        Kind::Info,
        "lease",
        json!({"event": "open", "limit": LIMIT.0, "session": session,
            "rate_micro_per_s": share.rate_micro_per_s, "cap": share.cap}),
    );
    let life_ends = history.now_ns() + rng.range(LIFE_MS.0, LIFE_MS.1) * 1_000_000;
    let mut tokens_micro = share.tokens_micro.min(share.cap * MICRO);
    let mut refilled_ns = history.now_ns();
    loop {
        let now = history.now_ns();
        if stop.load(Ordering::Relaxed) || now >= life_ends {
            break;
        }
        let deadline = kept.deadline_ns();
        let refill =
            u128::from(now - refilled_ns) * u128::from(share.rate_micro_per_s) / 1_000_000_000;
        tokens_micro =
            (tokens_micro + u64::try_from(refill).unwrap_or(u64::MAX)).min(share.cap * MICRO);
        refilled_ns = now;
        if now >= deadline {
            // Past the belief deadline nothing is local: wait for a keep-alive to move it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        if tokens_micro >= MICRO {
            tokens_micro -= MICRO;
            let at = history.record(
                process,
                Kind::Invoke,
                "lease-take",
                json!({"limit": LIMIT.0, "units": 1}),
            );
            history.record(process, Kind::Ok, "lease-take", take_op(at, true));
            continue;
        }
        // Until the next whole token, or the deadline, or the life's end.
        let rate = share.rate_micro_per_s.max(1);
        let next_ns = (MICRO - tokens_micro) * 1_000_000_000 / rate + 1;
        let wake = (now + next_ns).min(deadline).min(life_ends);
        tokio::time::sleep_until(history.instant_of(wake)).await;
    }
    drop(kept);
    let how = if rng.range(0, 2) == 0 {
        // As an application closes its session: the lease ends with it.
        let _ = door.write(Command::CloseSession { session }).await;
        "close"
    } else {
        // A crash: nothing more is sent; the lease lapses with the session.
        "crash"
    };
    history.record(
        process,
        Kind::Info,
        "lease",
        json!({"event": how, "limit": LIMIT.0, "session": session}),
    );
    true
}

/// A cluster taker: takes one token at a time through the log until `stop`, pausing after a
/// refusal.
pub async fn taker(process: u64, seed: u64, door: Door, history: Recorder, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::Relaxed) {
        let ttl_ms = TTL.as_millis() as u64;
        let Ok((_, Reply::SessionOpened { session, .. })) =
            door.write(Command::OpenSession { ttl_ms }).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        // Each take is finished at its grant, so the session needs no keep-alive: a new one
        // is opened each [`TAKER_SESSION_NS`], well inside its TTL, and after an unknown
        // outcome.
        let opened = history.now_ns();
        let mut ticket = 0;
        while !stop.load(Ordering::Relaxed) && history.now_ns() - opened < TAKER_SESSION_NS {
            ticket += 1;
            let invoked = history.record(
                process,
                Kind::Invoke,
                "lease-take",
                json!({"limit": LIMIT.0, "units": 1}),
            );
            let take = Command::AcquireParts(AcquireParts {
                session,
                ticket,
                tenant: TENANT.into(),
                parts: vec![Part {
                    limit: LIMIT.0.into(),
                    key: None,
                    units: 1,
                }],
                priority: Priority::default(),
                agent: None,
                wait: false,
                estimate: false,
            });
            match door.write(take).await {
                Ok((_, Reply::Granted { .. })) => {
                    history.record(process, Kind::Ok, "lease-take", take_op(invoked, false));
                }
                Ok((_, Reply::Refused(Refusal::Busy { .. }))) => {
                    let v = json!({"limit": LIMIT.0, "error": "busy"});
                    history.record(process, Kind::Fail, "lease-take", v);
                    let pause = rng.range(BUSY_PAUSE_MS.0, BUSY_PAUSE_MS.1);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                other => {
                    let v = json!({"limit": LIMIT.0, "error": format!("{other:?}")});
                    history.record(process, Kind::Info, "lease-take", v);
                    break;
                }
            }
        }
        let _ = door.write(Command::CloseSession { session }).await;
    }
}
