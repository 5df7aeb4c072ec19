//! The simulated ledger: settlement processes doing what the harness's `ledger` workload
//! does (reserve a run, settle it, retry the same payload while its outcome is unknown,
//! deliver an acknowledged payload again, race and follow it with a conflicting one), and
//! the final reads of what each key was charged, recorded as the harness records them so
//! its `settlement` checker (G3, G5) judges the run.
//!
//! Owns the ledger's ops and the final `spent` reads. Every key settles into a period of its
//! own (`ledger-RUN`), so the final read of that period is what the key was charged.
//! The reserve carries the entry's wall stamp into the state (a run's slot), so the
//! nodes' digests also show an apply that read anything but the entry's own stamp.
//!
//! Invariants:
//! - Every op pairs (an invoke, then one completion of the same `f`); a racer records
//!   under a process number of its own ([`RACER`] above the ledger's).
//! - Randomness comes only from the process's own seeded generator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_core::machine::{Command, Refusal, Reply, Settle};
use weir_proto::protocol::{Answer, Failure, Query};

use super::client::Door;
use crate::history::{Kind, Recorder};
use crate::rng::Rng;
use crate::setup::TENANT;

/// The ledger processes' numbers start here (far from the permit clients').
pub const LEDGER_BASE: u64 = 100;
/// Added to a ledger process's number for its racer's.
pub const RACER: u64 = 1_000;
/// The final readers' numbers start here.
const READERS: u64 = 10_000;
/// Tries of one payload while its outcome is unknown (the harness's ledger tries three).
const SETTLE_TRIES: u32 = 3;
/// Pause between two keys, ms: a few keys a second, each a handful of entries.
const KEY_PAUSE_MS: (u64, u64) = (150, 500);
/// Tries of a final read (each through every node the door tries).
const FINAL_READ_TRIES: u32 = 5;

/// The period a key settles into.
fn period_of(run: &str) -> String {
    format!("ledger-{run}")
}

/// One ledger process: keys until `stop`, each reserved, settled, and now and then
/// delivered again or followed by a conflicting payload.
pub async fn ledger(process: u64, seed: u64, door: Door, history: Recorder, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let run = format!("p{process}-r{n}");
        let period = period_of(&run);
        let _ = door
            .write(Command::Reserve {
                tenant: TENANT.into(),
                run: run.clone(),
                agent: None,
                period: Some(period.clone()),
                hold_tokens: None,
                hold_minor: None,
            })
            .await;
        let tokens = rng.range(1, 9);
        let settle = Settle {
            tenant: TENANT.into(),
            run: run.clone(),
            epoch: 1,
            period: Some(period.clone()),
            tokens,
            minor_units: tokens * 10,
            release_slot: true,
        };
        let key = format!("{run}/1");
        let mut conflicting = settle.clone();
        conflicting.tokens += 1;
        conflicting.minor_units = conflicting.tokens * 10;
        // One key in six is raced by a conflicting payload sent at the same moment.
        let racer = (rng.range(0, 5) == 0).then(|| {
            let (door, history) = (door.clone(), history.clone());
            let (conflicting, key) = (conflicting.clone(), key.clone());
            tokio::spawn(async move {
                let fields = json!({"key": key, "tokens": conflicting.tokens});
                let racer = process + RACER;
                send_once(
                    racer,
                    &door,
                    &conflicting,
                    "settle-conflict",
                    fields,
                    &history,
                )
                .await;
            })
        });
        history.record(
            process,
            Kind::Invoke,
            "settle",
            json!({"key": key, "tokens": tokens, "period": period}),
        );
        let outcome = settle_until_known(process, &door, &settle, &key, &history).await;
        if let Some(racer) = racer {
            let _ = racer.await;
        }
        if matches!(outcome, Outcome::Settled) && rng.range(0, 2) == 0 {
            // Delivered once more, as an at-least-once queue does.
            let fields = json!({"key": key, "tokens": tokens, "redelivered": true});
            send_once(process, &door, &settle, "settle", fields, &history).await;
        }
        let again = match outcome {
            Outcome::Settled => rng.range(0, 4) == 0,
            Outcome::Unknown => rng.range(0, 1) == 0,
            Outcome::Refused => false,
        };
        if again {
            let fields = json!({"key": key, "tokens": conflicting.tokens});
            send_once(
                process,
                &door,
                &conflicting,
                "settle-conflict",
                fields,
                &history,
            )
            .await;
        }
        let pause = rng.range(KEY_PAUSE_MS.0, KEY_PAUSE_MS.1);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// How a settle ended.
enum Outcome {
    Settled,
    Refused,
    Unknown,
}

/// Settles `settle` (its invoke already recorded), sending the same payload again while
/// the outcome is unknown (at most [`SETTLE_TRIES`] times), and records one completion.
async fn settle_until_known(
    process: u64,
    door: &Door,
    settle: &Settle,
    key: &str,
    history: &Recorder,
) -> Outcome {
    let tokens = settle.tokens;
    for _ in 0..SETTLE_TRIES {
        let (kind, fields, outcome) = match door.write(Command::Settle(settle.clone())).await {
            // A retry that found its own earlier attempt applied: charged once.
            Ok((_, Reply::Settled { duplicate })) => (
                Kind::Ok,
                json!({"key": key, "tokens": tokens, "retried_duplicate": duplicate}),
                Outcome::Settled,
            ),
            Ok((_, other)) => {
                let error = match other {
                    Reply::Refused(Refusal::Conflict { .. }) => "conflict".to_string(),
                    other => format!("{other:?}"),
                };
                let fields = json!({"key": key, "tokens": tokens, "error": error});
                (Kind::Fail, fields, Outcome::Refused)
            }
            Err(Failure::BadRequest(e)) => {
                let fields = json!({"key": key, "tokens": tokens, "error": e});
                (Kind::Fail, fields, Outcome::Refused)
            }
            Err(_) => continue,
        };
        history.record(process, kind, "settle", fields);
        return outcome;
    }
    history.record(
        process,
        Kind::Info,
        "settle",
        json!({"key": key, "tokens": tokens}),
    );
    Outcome::Unknown
}

/// Sends `settle` once as op `f`: the invoke (with the payload's period), then `ok` with
/// `duplicate` when settled, `fail` when refused or certainly not applied, `info` when the
/// outcome is unknown.
async fn send_once(
    process: u64,
    door: &Door,
    settle: &Settle,
    f: &str,
    fields: serde_json::Value,
    history: &Recorder,
) {
    let mut invoke = fields.clone();
    invoke["period"] = json!(settle.period);
    history.record(process, Kind::Invoke, f, invoke);
    let mut done = fields;
    let kind = match door.write(Command::Settle(settle.clone())).await {
        Ok((_, Reply::Settled { duplicate })) => {
            done["duplicate"] = duplicate.into();
            Kind::Ok
        }
        Ok((_, Reply::Refused(Refusal::Conflict { .. }))) => {
            done["error"] = "conflict".into();
            Kind::Fail
        }
        Ok((_, other)) => {
            done["error"] = format!("{other:?}").into();
            Kind::Fail
        }
        Err(e) => {
            let definitely = !matches!(e, Failure::OutcomeUnknown(_));
            done["error"] = e.to_string().into();
            if definitely { Kind::Fail } else { Kind::Info }
        }
    };
    history.record(process, kind, f, done);
}

/// After the heal: reads what every period a settlement was sent for was charged, one
/// reader process each, recording `spent` ops as the harness's finals do.
pub async fn final_reads(door: &Door, history: &Recorder) {
    let periods: std::collections::BTreeSet<String> = history
        .ops()
        .iter()
        .filter(|o| o.kind == Kind::Invoke && (o.f == "settle" || o.f == "settle-conflict"))
        .filter_map(|o| Some(o.value.get("period")?.as_str()?.to_string()))
        .collect();
    for (i, period) in periods.into_iter().enumerate() {
        let process = READERS + i as u64;
        history.record(process, Kind::Invoke, "spent", json!({"period": period}));
        let query = Query::Spent {
            tenant: TENANT.into(),
            period: period.clone(),
        };
        let mut read = Err(Failure::Unavailable("no try made".into()));
        for _ in 0..FINAL_READ_TRIES {
            read = door.read(query.clone()).await;
            if read.is_ok() {
                break;
            }
        }
        match read {
            Ok(Answer::Spent(spend)) => history.record(
                process,
                Kind::Ok,
                "spent",
                json!({"period": period, "tokens": spend.tokens}),
            ),
            Ok(other) => history.record(
                process,
                Kind::Fail,
                "spent",
                json!({"period": period, "error": format!("unexpected answer {other:?}")}),
            ),
            Err(e) => history.record(
                process,
                Kind::Fail,
                "spent",
                json!({"period": period, "error": e.to_string()}),
            ),
        };
    }
}
