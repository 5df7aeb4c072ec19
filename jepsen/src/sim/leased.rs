//! The simulated token leases (G1 in spend time): a holder leasing most of the rate of the
//! harness's `leased-fast` limit (10 a second, burst 4) and spending it from a local bucket
//! with no entry per token, and cluster takers taking the rest through the log. The ops are
//! the harness's own `lease-take` ops (`workload::leased`), so its `leased` checker judges
//! the cluster's grants and the local spends together against `burst + rate × window`.
//!
//! Owns these processes. The holder lives a string of lives, each a session, one lease of
//! [`WANT_RATE`] a second and a cap of [`WANT_CAP`], renewed with the same ask every
//! keep-alive period, and local spends: requests of one token and of two in turn, each
//! decided once its bucket holds it (a request of two is looked at again every 20 ms while
//! the bucket holds one), as a node's Envoy service decides a request from
//! its token leases (the service's own rule for what a request takes from a local bucket,
//! [`weir_http::rls::local_units`], so the harness's Envoy holders' takes of two hits have
//! their counterpart here), by the client library's own bucket rules ([`LocalBucket`], on
//! simulated time: refill at the granted rate up to the granted cap, a renewal's share
//! replacing the one held, nothing spent at or past the belief deadline, the send time of
//! its last acknowledged keep-alive, or of the open, plus the TTL less the library's
//! margin). A life lasts [`LIFE_MS`] and
//! ends by a crash (its keep-alives stop: the lease lapses with its session a TTL later),
//! by closing its session under the lease, or by a stall: frozen past the TTL (so the
//! session expires meanwhile), then spending on from the belief it had, as the library's
//! holder does when its process is stopped and resumes. Whichever the end, the lease's
//! tokens count as spent and are never the cluster's again.
//!
//! Invariants:
//! - A local spend is recorded at the instant it is decided (its invoke and its ok at one
//!   simulated time): simulated time does not pass inside it.
//! - Every local spend is decided by [`LocalBucket::spend`]: nothing at or past the belief
//!   deadline.
//! - Every op pairs; randomness comes only from each process's own seeded generator.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use weir_client::{LocalBucket, Spend};
use weir_core::machine::{
    AcquireParts, Command, LeasePart, LeaseTokens, Part, Priority, Refusal, Reply, SessionId,
};
use weir_proto::task::AbortOnDrop;

use super::client::{Door, KEEPALIVES_PER_TTL, boot, local_of};
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
/// A stalled holder is frozen for the TTL and this much more, ms (the harness's stall).
const STALL_PAST_TTL_MS: (u64, u64) = (200, 1_000);
/// How long a holder spends on after its stall before it ends, ms.
const AFTER_STALL_MS: (u64, u64) = (500, 1_500);
/// A cluster taker's pause after a refusal, ms (each refusal is a log entry).
const BUSY_PAUSE_MS: (u64, u64) = (20, 60);
/// How long a cluster taker uses one session, ns: two thirds of its TTL.
const TAKER_SESSION_NS: u64 = 2_000_000_000;
const MICRO: u64 = 1_000_000;
/// [`WANT_RATE`] in micro-tokens a second, as a lease request asks it.
const WANT_RATE_MICRO: u64 = (WANT_RATE * MICRO as f64) as u64;

/// The `lease-take` op of one take of `units`, as the harness records it.
fn take_op(invoked: u64, units: u32, local: bool) -> serde_json::Value {
    json!({"limit": LIMIT.0, "units": units, "invoke_ns": invoked, "per_second": LIMIT.1,
        "burst": LIMIT.2, "local": local})
}

/// Hits of the holder's local requests, in turn (the harness's Envoy holders ask two).
const HITS: [u32; 2] = [1, 2];

/// The holder: lives until `stop`.
pub async fn holder(process: u64, seed: u64, door: Door, history: Recorder, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::Relaxed) {
        if !life(process, &mut rng, &door, &history, &stop).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The lease request of `session` numbered `seq`, asking what the holder wants and giving
/// back `returned_micro`.
fn lease_request(session: SessionId, seq: u64, returned_micro: u64) -> Command {
    Command::LeaseTokens(LeaseTokens {
        session,
        tenant: TENANT.into(),
        seq,
        parts: vec![LeasePart {
            limit: LIMIT.0.into(),
            key: None,
            rate_micro_per_s: WANT_RATE_MICRO,
            cap: WANT_CAP,
            returned_micro,
        }],
    })
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
    let share = match door.write(lease_request(session, 1, 0)).await {
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
    let bucket = Arc::new(Mutex::new(LocalBucket::new(boot(history.now_ns()))));
    lock(&bucket).adopt(&share, boot(history.now_ns()));
    let renewals = AbortOnDrop(tokio::spawn(renew(
        door.clone(),
        session,
        bucket.clone(),
        history.clone(),
    )));
    let life_ends = history.now_ns() + rng.range(LIFE_MS.0, LIFE_MS.1) * 1_000_000;
    spend_until(process, history, stop, &bucket, life_ends, || {
        kept.deadline_ns()
    })
    .await;
    let how = match rng.range(0, 5) {
        0 | 1 => "crash",
        2 => "close",
        _ => "stall",
    };
    // Whatever the end, the keep-alives and renewals stop here (a crashed or frozen holder
    // sends nothing); the belief deadline stays where the last acknowledgement put it.
    let deadline_ns = kept.deadline_ns();
    drop(renewals);
    drop(kept);
    if how == "close" {
        // As an application closes its session: the lease ends with it.
        let _ = door.write(Command::CloseSession { session }).await;
    }
    let ms = TTL.as_millis() as u64 + rng.range(STALL_PAST_TTL_MS.0, STALL_PAST_TTL_MS.1);
    let fact = match how {
        "stall" => json!({"event": how, "limit": LIMIT.0, "session": session, "ms": ms}),
        _ => json!({"event": how, "limit": LIMIT.0, "session": session}),
    };
    history.record(process, Kind::Info, "lease", fact);
    if how == "stall" && !stop.load(Ordering::Relaxed) {
        // Frozen past the TTL, so the session expires meanwhile, then spending on by the
        // same rules from a belief no keep-alive moved (the library's holder after a stall).
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let resumed_ends =
            history.now_ns() + rng.range(AFTER_STALL_MS.0, AFTER_STALL_MS.1) * 1_000_000;
        spend_until(process, history, stop, &bucket, resumed_ends, || {
            deadline_ns
        })
        .await;
    }
    true
}

/// Decides requests of [`HITS`] in turn from `bucket` by the library's rules, each
/// whenever the bucket holds what the Envoy service's rule takes for it and the belief
/// `deadline` (simulated ns) has not passed, until `ends` (simulated ns).
async fn spend_until(
    process: u64,
    history: &Recorder,
    stop: &AtomicBool,
    bucket: &Mutex<LocalBucket>,
    ends: u64,
    deadline: impl Fn() -> u64,
) {
    let mut asked = 0usize;
    loop {
        let now = history.now_ns();
        if stop.load(Ordering::Relaxed) || now >= ends {
            return;
        }
        let deadline_ns = deadline();
        let (spent, next_token, hits) = {
            let mut b = lock(bucket);
            // A request the bucket could never hold goes to the cluster at a node's
            // service; the holder asks one token instead.
            let hits = HITS[asked % HITS.len()].min(b.share().1.max(1) as u32);
            let part = Part {
                limit: LIMIT.0.into(),
                key: None,
                units: hits,
            };
            let units = weir_http::rls::local_units(&part);
            (
                b.spend(units, boot(now), boot(deadline_ns)),
                b.next_token_at(),
                hits,
            )
        };
        let wake = match spent {
            Spend::Spent => {
                asked += 1;
                let at = history.record(
                    process,
                    Kind::Invoke,
                    "lease-take",
                    json!({"limit": LIMIT.0, "units": hits}),
                );
                history.record(process, Kind::Ok, "lease-take", take_op(at, hits, true));
                continue;
            }
            // Past the belief deadline nothing is local: wait for a keep-alive to move it.
            Spend::PastDeadline => now + 50_000_000,
            // Until the next whole token, or the deadline, or the end.
            Spend::Short => {
                let next = next_token.map_or(now + 50_000_000, local_of);
                // A whole token is there, but not as many as the request's hits.
                let next = if next <= now { now + 20_000_000 } else { next };
                match deadline_ns > now {
                    true => next.min(deadline_ns),
                    false => next,
                }
            }
        };
        let wake = wake.min(ends).max(now + 1_000_000);
        tokio::time::sleep_until(history.instant_of(wake)).await;
    }
}

/// Renews the lease every keep-alive period with the same ask, as the library's renewal
/// task does for a holder whose demand keeps up: a decrease (none here) applies at the
/// send, the share in the reply replaces the one held on its arrival, and a request whose
/// outcome is unknown changes nothing. One request at a time, numbered after the open.
async fn renew(door: Door, session: SessionId, bucket: Arc<Mutex<LocalBucket>>, history: Recorder) {
    let want = (WANT_RATE_MICRO, WANT_CAP);
    for seq in 2.. {
        tokio::time::sleep(TTL / KEEPALIVES_PER_TTL).await;
        let returned = lock(&bucket).lower_to(want.0, want.1, boot(history.now_ns()));
        match door.write(lease_request(session, seq, returned)).await {
            Ok((_, Reply::Leased(shares))) if shares.len() == 1 => {
                lock(&bucket).adopt(&shares[0], boot(history.now_ns()));
            }
            Ok((_, Reply::Refused(_))) => {
                // The lease or its session ended on the cluster: nothing more is local.
                lock(&bucket).stop();
                return;
            }
            _ => {}
        }
    }
}

/// Locks a holder's bucket; the simulation is one thread, so a poisoned lock is a panic
/// already reported.
fn lock(bucket: &Mutex<LocalBucket>) -> std::sync::MutexGuard<'_, LocalBucket> {
    bucket.lock().expect("lease bucket lock")
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
                    history.record(process, Kind::Ok, "lease-take", take_op(invoked, 1, false));
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
