//! The simulated keyed requests: processes sending takes and acquires of several parts of
//! the harness's keyed limits (`workload::keyed`: a keyed bucket that barely refills, a
//! keyed semaphore of one, an unkeyed bucket), with keys from small sets so requests
//! collide, and after the heal the drain of every bucket key they named. The ops are the
//! harness's own (`multi`, `multi-hold`, `multi-release`, `drain`), so its `keyed` checker
//! judges G1 per key and that a refused request of several parts charged nothing.
//!
//! Owns these processes and their sessions. A process keeps its session alive (a
//! keep-alive each fifth of the TTL) and believes a held key until the send time of its
//! last acknowledged keep-alive (or open) plus the TTL less the library's margin; a
//! request whose outcome is unknown ends the session (a new one is opened), as the
//! harness's process does.
//!
//! Invariants:
//! - Every op pairs (an invoke, then one completion of the same `f`).
//! - A ticket number is used once in a session.
//! - Randomness comes only from each process's own seeded generator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_core::machine::{AcquireParts, Command, Part, Priority, Refusal, Reply, SessionId};
use weir_proto::protocol::Failure;

use super::client::Door;
use super::kept::{self, Kept};
use crate::history::{Kind, Recorder};
use crate::rng::Rng;
use crate::setup::TENANT;
use crate::workload::keyed::{
    DRAINERS, EPOCH, KEYED_CAP, KEYED_RATE, KEYED_RATE_BURST, part_json, parts_among,
};

/// The keyed processes' numbers start here (far from the other simulated processes').
pub const KEYED_BASE: u64 = 400;
/// Keys of the bucket per epoch: one, so the run's requests and the drain spend about a
/// burst an epoch (the harness has three; a simulated run is short).
const BUCKET_KEYS: u64 = 1;
/// Keys of the semaphore: two, so the processes collide on them.
const SEMAPHORE_KEYS: u64 = 2;
/// Pause between two requests of one process, ms.
const REQUEST_PAUSE_MS: (u64, u64) = (80, 250);
/// How long a grant holding a semaphore key is held, ms.
const HOLD_MS: (u64, u64) = (10, 60);
/// Tries of a drain's session.
const OPEN_TRIES: u32 = 10;

/// A request of `parts` that never waits.
fn request_command(session: SessionId, ticket: u64, parts: &[Part]) -> Command {
    Command::AcquireParts(AcquireParts {
        session,
        ticket,
        tenant: TENANT.into(),
        parts: parts.to_vec(),
        priority: Priority::default(),
        agent: None,
        wait: false,
        estimate: false,
    })
}

/// A multi-part process: requests until `stop`, a new session after each unknown outcome.
pub async fn multi(process: u64, seed: u64, door: Door, history: Recorder, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::Relaxed) {
        let Some(session) = kept::open(&door, &history).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut ticket = 0;
        while !stop.load(Ordering::Relaxed) {
            ticket += 1;
            let epoch = history.now_ns() / EPOCH.as_nanos() as u64;
            let parts = parts_among(&mut rng, epoch, BUCKET_KEYS, SEMAPHORE_KEYS);
            let one = (process, &door, &history);
            if !request(one, &session, ticket, &parts, &mut rng).await {
                break;
            }
            let pause = rng.range(REQUEST_PAUSE_MS.0, REQUEST_PAUSE_MS.1);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        let _ = door
            .write(Command::CloseSession {
                session: session.id,
            })
            .await;
    }
}

/// Sends one request and records it (and, for a grant holding a semaphore key, its hold
/// and release). Returns whether the session goes on.
async fn request(
    (process, door, history): (u64, &Door, &Recorder),
    session: &Kept,
    ticket: u64,
    parts: &[Part],
    rng: &mut Rng,
) -> bool {
    let mut value = json!({"parts": parts.iter().map(part_json).collect::<Vec<_>>()});
    let invoked = history.record(process, Kind::Invoke, "multi", value.clone());
    value["invoke_ns"] = invoked.into();
    match door.write(request_command(session.id, ticket, parts)).await {
        Ok((_, Reply::Granted { fence, .. })) => {
            let from = history.now_ns();
            value["fence"] = fence.into();
            history.record_at(process, Kind::Ok, "multi", value, from);
            let Some(cap) = parts.iter().find(|part| part.limit == KEYED_CAP) else {
                return true;
            };
            let key = cap.key.clone().unwrap_or_default();
            tokio::time::sleep(Duration::from_millis(rng.range(HOLD_MS.0, HOLD_MS.1))).await;
            let seen = history.now_ns();
            let deadline = session.deadline_ns();
            let to = seen.min(deadline).max(from);
            history.record_at(
                process,
                Kind::Ok,
                "multi-hold",
                json!({"key": key, "cap": 1, "fence": fence, "from_ns": from, "to_ns": to,
                    "seen_ns": seen, "deadline_ns": deadline}),
                seen,
            );
            let v = json!({"key": key, "fence": fence});
            history.record(process, Kind::Invoke, "multi-release", v.clone());
            let released = door
                .write(Command::Release {
                    session: session.id,
                    ticket,
                })
                .await;
            let kind = match released {
                Ok((_, Reply::Released { .. })) => Kind::Ok,
                _ => Kind::Info,
            };
            history.record(process, kind, "multi-release", v);
            true
        }
        Ok((_, Reply::Refused(refusal))) => {
            value["error"] = format!("{refusal:?}").into();
            value["busy"] = matches!(refusal, Refusal::Busy { .. }).into();
            history.record(process, Kind::Fail, "multi", value);
            !matches!(refusal, Refusal::UnknownSession { .. })
        }
        Ok((_, other)) => {
            value["error"] = format!("unexpected reply {other:?}").into();
            history.record(process, Kind::Info, "multi", value);
            false
        }
        Err(e) => {
            let kind = match e {
                Failure::OutcomeUnknown(_) => Kind::Info,
                _ => Kind::Fail,
            };
            value["error"] = e.to_string().into();
            history.record(process, kind, "multi", value);
            false
        }
    }
}

/// After the heal: takes one token at a time of every bucket key the `multi` ops named,
/// until each is refused `Busy` (recorded as `drain` ops, `busy` on the refusal), each key
/// bounded by its burst and five more tries.
pub async fn drain(door: &Door, history: &Recorder) {
    let mut keys: Vec<String> = history
        .ops()
        .iter()
        .filter(|o| o.kind == Kind::Invoke && o.f == "multi")
        .filter_map(|o| Some(o.value["parts"][0]["key"].as_str()?.to_string()))
        .collect();
    keys.sort();
    keys.dedup();
    for (i, key) in keys.iter().enumerate() {
        drain_key(DRAINERS + i as u64, door, history, key).await;
    }
}

/// Drains one bucket key (see [`drain`]).
async fn drain_key(process: u64, door: &Door, history: &Recorder, key: &str) {
    let mut session = None;
    for _ in 0..OPEN_TRIES {
        session = kept::open(door, history).await;
        if session.is_some() {
            break;
        }
    }
    let Some(session) = session else {
        return;
    };
    let part = Part {
        limit: KEYED_RATE.into(),
        key: Some(key.into()),
        units: 1,
    };
    for ticket in 1..=KEYED_RATE_BURST + 5 {
        let mut v = json!({"key": key, "units": 1});
        let invoked = history.record(process, Kind::Invoke, "drain", v.clone());
        v["invoke_ns"] = invoked.into();
        let command = request_command(session.id, ticket, std::slice::from_ref(&part));
        let (kind, done) = match door.write(command).await {
            Ok((_, Reply::Granted { fence, .. })) => {
                v["fence"] = fence.into();
                (Kind::Ok, false)
            }
            Ok((_, Reply::Refused(refusal))) => {
                v["error"] = format!("{refusal:?}").into();
                v["busy"] = matches!(refusal, Refusal::Busy { .. }).into();
                (Kind::Fail, true)
            }
            Ok((_, other)) => {
                v["error"] = format!("unexpected reply {other:?}").into();
                (Kind::Info, true)
            }
            Err(e) => {
                v["busy"] = false.into();
                v["error"] = e.to_string().into();
                match e {
                    Failure::OutcomeUnknown(_) => (Kind::Info, true),
                    _ => (Kind::Fail, true),
                }
            }
        };
        history.record(process, kind, "drain", v);
        if done {
            break;
        }
    }
    let _ = door
        .write(Command::CloseSession {
            session: session.id,
        })
        .await;
}
