//! Keyed, multi-part requests: processes that send takes and acquires naming several
//! (limit, key, units) parts of [`KEYED_RATE`] (a keyed bucket), [`KEYED_CAP`] (a keyed
//! semaphore of one) and [`SHARED_RATE`] (an unkeyed bucket), with keys from small sets so
//! requests collide; and, after the last heal, the [`drain`] of every bucket key they named.
//!
//! Every request is one `multi` op: its invoke and its completion both carry its parts
//! (`{"limit", "key", "units"}`, the keyed bucket's part always first) and the invoke time;
//! `ok` adds the fence, `fail` (a refusal, certainly nothing granted) the refusal's text,
//! `info` (the outcome unknown: granted, refused, or never applied) the error. A grant that
//! holds a key of [`KEYED_CAP`] is held 10–60 ms and recorded as a `multi-hold` fact (its
//! belief interval, as G2 defines it) and released as a `multi-release` op. Requests never
//! wait (`wait: false`): a part without room refuses the whole request at once, which is
//! the case the atomicity check exists for.
//!
//! Bucket keys live for one epoch of [`EPOCH`] (`e<epoch>-<0..KEYS>`): the bucket refills
//! 0.01 token a second, so within a run a key's tokens are spent once and, in effect, never
//! come back. The drain then takes one token at a time of each key until it is refused
//! `Busy`: by then the key's tokens are spent, so the tokens acknowledged plus those of
//! unknown outcome must reach the burst, or some were charged by no grant
//! (`checker::keyed`).

use std::time::Duration;

use serde_json::{Value, json};
use weir_client::{AcquireError, AcquireOptions, Client, Permit, Session};
use weir_core::machine::{Definition, Part, Refusal};

use super::acquire::belief_end;
use super::process::Process;
use crate::history::{Kind, Recorder};
use crate::rng::Rng;
use crate::setup::{TENANT, TTL};

/// The keyed bucket: one per key, every request's first part.
pub const KEYED_RATE: &str = "krate";
/// Its refill per key: 0.01 token a second, so a key's burst is spent once in a run.
pub const KEYED_RATE_PER_SECOND: f64 = 0.01;
/// Its burst per key.
pub const KEYED_RATE_BURST: u64 = 20;
/// The keyed semaphore: one holder per key.
pub const KEYED_CAP: &str = "kconc";
/// The unkeyed bucket every third request also takes from.
pub const SHARED_RATE: &str = "grate";
pub const SHARED_RATE_PER_SECOND: f64 = 10.0;
pub const SHARED_RATE_BURST: u64 = 3;
/// How long one set of bucket keys is used.
pub const EPOCH: Duration = Duration::from_secs(6);
/// Keys per epoch of the bucket, and keys of the semaphore.
const KEYS: u64 = 3;
/// Bound on the bucket's live keys (an epoch's keys stay live to the drain).
const KEYS_MAX: u32 = 512;
/// Process numbers of the drainers start above this.
pub const DRAINERS: u64 = 30_000;

/// The keyed and shared limits of [`TENANT`], as definitions.
pub fn definitions() -> [Definition; 3] {
    let def = |name: &str, concurrent, per_second, burst, keyed| Definition {
        tenant: TENANT.into(),
        name: name.into(),
        concurrent,
        per_second,
        burst,
        keyed,
        keys_max: keyed.then_some(KEYS_MAX),
        shadow: false,
    };
    [
        def(
            KEYED_RATE,
            0,
            KEYED_RATE_PER_SECOND,
            Some(KEYED_RATE_BURST),
            true,
        ),
        def(KEYED_CAP, 1, 0.0, None, true),
        def(
            SHARED_RATE,
            0,
            SHARED_RATE_PER_SECOND,
            Some(SHARED_RATE_BURST),
            false,
        ),
    ]
}

/// A part as the history records it.
pub fn part_json(part: &Part) -> Value {
    json!({"limit": part.limit, "key": part.key, "units": part.units})
}

/// The parts of one request, seeded: the bucket key of this epoch first (1–2 tokens), then
/// a semaphore key, the shared bucket, or both.
fn parts(rng: &mut Rng, epoch: u64) -> Vec<Part> {
    parts_among(rng, epoch, KEYS, KEYS)
}

/// [`parts`] with `bucket_keys` keys of the bucket an epoch and `semaphore_keys` of the
/// semaphore (the simulator's runs are shorter, and use fewer).
pub fn parts_among(rng: &mut Rng, epoch: u64, bucket_keys: u64, semaphore_keys: u64) -> Vec<Part> {
    let mut parts = vec![Part {
        limit: KEYED_RATE.into(),
        key: Some(format!("e{epoch}-{}", rng.range(0, bucket_keys - 1))),
        units: rng.range(1, 2) as u32,
    }];
    let shape = rng.range(0, 2);
    if shape != 1 {
        parts.push(Part {
            limit: KEYED_CAP.into(),
            key: Some(format!("c{}", rng.range(0, semaphore_keys - 1))),
            units: 1,
        });
    }
    if shape != 0 {
        parts.push(Part {
            limit: SHARED_RATE.into(),
            key: None,
            units: 1,
        });
    }
    parts
}

/// The options of a request of `parts` that never waits.
fn options(parts: &[Part]) -> AcquireOptions {
    let mut options = AcquireOptions::new(TENANT, &parts[0].limit);
    options.key = parts[0].key.clone();
    options.units = parts[0].units;
    options.parts = parts[1..].to_vec();
    options.wait = false;
    options.timeout = Some(Duration::from_secs(5));
    options
}

/// How a request ended: the kind of its completion, the error's text, and whether its
/// session goes on.
fn ending(e: &AcquireError) -> (Kind, bool) {
    match e {
        AcquireError::Refused(_) => (Kind::Fail, true),
        AcquireError::Client(c) if c.definitely_failed() => (Kind::Fail, false),
        _ => (Kind::Info, false),
    }
}

/// A multi-part process: requests until the run stops, a new session after each unknown.
pub async fn multi(p: Process) {
    let mut rng = p.rng();
    let client = p.client(crate::secure::Access::Tenant(TENANT));
    while let Some(session) = p.session(&client, TTL).await {
        while p.running() {
            let epoch = p.history.now_ns() / EPOCH.as_nanos() as u64;
            let parts = parts(&mut rng, epoch);
            if !request(&p, &session, &parts, &mut rng).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
        }
    }
}

/// Sends one request and records it (and, for a grant holding a semaphore key, its hold
/// and release). Returns whether the session goes on.
async fn request(p: &Process, session: &Session, parts: &[Part], rng: &mut Rng) -> bool {
    let mut value = json!({"parts": parts.iter().map(part_json).collect::<Vec<_>>()});
    let invoked = p.history.record(p.id, Kind::Invoke, "multi", value.clone());
    value["invoke_ns"] = invoked.into();
    match session.acquire(options(parts)).await {
        Ok(permit) => {
            let from = p.history.now_ns();
            value["fence"] = permit.fence().into();
            p.history.record_at(p.id, Kind::Ok, "multi", value, from);
            match parts.iter().find(|part| part.limit == KEYED_CAP) {
                Some(cap) => {
                    let key = cap.key.clone().unwrap_or_default();
                    hold(p, session, permit, &key, from, rng).await;
                }
                None => {
                    permit.consume();
                }
            }
            true
        }
        Err(e) => {
            let (kind, goes_on) = ending(&e);
            value["error"] = e.to_string().into();
            value["busy"] = matches!(e, AcquireError::Refused(Refusal::Busy { .. })).into();
            p.history.record(p.id, kind, "multi", value);
            goes_on
        }
    }
}

/// Holds a grant on semaphore key `key` for 10–60 ms, records its belief interval and
/// releases it.
async fn hold(p: &Process, session: &Session, permit: Permit, key: &str, from: u64, rng: &mut Rng) {
    tokio::time::sleep(Duration::from_millis(rng.range(10, 60))).await;
    let (to, seen, deadline) = belief_end(&p.history, session, from);
    let fence = permit.fence();
    p.history.record_at(
        p.id,
        Kind::Ok,
        "multi-hold",
        json!({"key": key, "cap": 1, "fence": fence, "from_ns": from, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline}),
        seen,
    );
    let v = json!({"key": key, "fence": fence});
    p.history
        .record(p.id, Kind::Invoke, "multi-release", v.clone());
    let kind = match tokio::time::timeout(Duration::from_secs(3), permit.release()).await {
        Ok(Ok(())) => Kind::Ok,
        _ => Kind::Info,
    };
    p.history.record(p.id, kind, "multi-release", v);
}

/// After the last heal: takes one token at a time of every bucket key the `multi` ops named,
/// until each is refused `Busy` (recorded as `drain` ops, `busy` on the refusal), keys in
/// parallel, each bounded by its burst and 20 s.
pub async fn drain(client: &Client, history: &Recorder) {
    let mut keys: Vec<String> = history
        .ops()
        .iter()
        .filter(|o| o.kind == Kind::Invoke && o.f == "multi")
        .filter_map(|o| Some(o.value["parts"][0]["key"].as_str()?.to_string()))
        .collect();
    keys.sort();
    keys.dedup();
    let tasks: Vec<_> = keys
        .into_iter()
        .enumerate()
        .map(|(i, key)| {
            let (client, history) = (client.clone(), history.clone());
            tokio::spawn(
                async move { drain_key(DRAINERS + i as u64, &client, &history, &key).await },
            )
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
}

/// Drains one bucket key (see [`drain`]).
async fn drain_key(process: u64, client: &Client, history: &Recorder, key: &str) {
    let started = std::time::Instant::now();
    let Ok(session) = Session::open(client, TTL).await else {
        return;
    };
    let part = Part {
        limit: KEYED_RATE.into(),
        key: Some(key.into()),
        units: 1,
    };
    for _ in 0..KEYED_RATE_BURST + 5 {
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
        let mut v = json!({"key": key, "units": 1});
        let invoked = history.record(process, Kind::Invoke, "drain", v.clone());
        v["invoke_ns"] = invoked.into();
        let (kind, v, done) = match session.acquire(options(std::slice::from_ref(&part))).await {
            Ok(permit) => {
                let mut v = v;
                v["fence"] = permit.consume().into();
                (Kind::Ok, v, false)
            }
            Err(e) => {
                let busy = matches!(e, AcquireError::Refused(Refusal::Busy { .. }));
                let (kind, _) = ending(&e);
                let mut v = v;
                v["error"] = e.to_string().into();
                v["busy"] = busy.into();
                (kind, v, kind == Kind::Fail)
            }
        };
        history.record(process, kind, "drain", v);
        if done {
            break;
        }
    }
    let _ = session.close().await;
}
