//! Ledger processes: reserve a run, settle it (retrying the same payload until the outcome
//! is known), deliver a settled payload again now and then, and race conflicting payloads
//! against it.
//!
//! Every key (run, epoch 1) settles into a period of its own (`ledger-RUN`), so the final
//! read of that period is exactly what the key was charged (the settlement checker judges
//! each key alone). Conflicting payloads (one more token) come three ways: sent by a racer
//! at the same moment as the first payload (either may be applied first: the other must be
//! refused), sent after the first was acknowledged, and sent after the first's outcome
//! stayed unknown (then the refusal, or the acceptance, tells which one was applied).
//! A payload already acknowledged is delivered again, unchanged, one key in four, the way
//! an at-least-once queue redelivers a settlement message: it must be answered as a
//! duplicate and charge nothing more (recorded as a `settle` op marked `redelivered`, so a
//! second charge shows in the key's spend whatever faults the run had).
//! A racer records under a process number of its own ([`RACER`] + the process), as Jepsen
//! wants one outstanding op per process.

use serde_json::json;
use weir_client::Client;
use weir_core::machine::{Refusal, Reply, Settle};

use super::process::Process;
use crate::history::{Kind, Recorder};
use crate::setup::TENANT;

/// Added to a ledger process's number for its racer's.
pub const RACER: u64 = 1_000;

/// The period a key settles into.
pub fn period_of(run: &str) -> String {
    format!("ledger-{run}")
}

/// A ledger process: reserve a run, settle it, and now and then race or follow it with a
/// conflicting payload.
pub async fn ledger(p: Process) {
    let mut rng = p.rng();
    let client = p.client(crate::secure::Access::Tenant(TENANT));
    let mut n = 0u64;
    while p.running() {
        n += 1;
        let run = format!("p{}-r{n}", p.id);
        let period = period_of(&run);
        let _ = client.reserve(TENANT, &run, None, Some(&period)).await;
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
            let (client, history, conflicting, key) = (
                client.clone(),
                p.history.clone(),
                conflicting.clone(),
                key.clone(),
            );
            let racer = p.id + RACER;
            tokio::spawn(async move {
                let fields = json!({"key": key, "tokens": conflicting.tokens});
                send_once(
                    racer,
                    &client,
                    &conflicting,
                    "settle-conflict",
                    fields,
                    &history,
                )
                .await;
            })
        });
        p.history.record(
            p.id,
            Kind::Invoke,
            "settle",
            json!({"key": key, "tokens": tokens, "period": period}),
        );
        let outcome = settle_until_known(p.id, &client, &settle, &key, &p.history).await;
        if let Some(r) = racer {
            let _ = r.await;
        }
        if matches!(outcome, Outcome::Settled) && rng.range(0, 3) == 0 {
            // Delivered once more, as an at-least-once queue does.
            let fields = json!({"key": key, "tokens": tokens, "redelivered": true});
            send_once(p.id, &client, &settle, "settle", fields, &p.history).await;
        }
        // One settled key in five is sent again with another payload; every unknown one in
        // two.
        let again = match outcome {
            Outcome::Settled => rng.range(0, 4) == 0,
            Outcome::Unknown => rng.range(0, 1) == 0,
            Outcome::Refused => false,
        };
        if again {
            let fields = json!({"key": key, "tokens": conflicting.tokens});
            let f = "settle-conflict";
            send_once(p.id, &client, &conflicting, f, fields, &p.history).await;
        }
    }
}

/// How a settle ended.
enum Outcome {
    Settled,
    Refused,
    Unknown,
}

/// Settles `settle` (invoke already recorded), trying the same payload up to three times
/// while the outcome is unknown, and records exactly one completion.
async fn settle_until_known(
    process: u64,
    client: &Client,
    settle: &Settle,
    key: &str,
    history: &Recorder,
) -> Outcome {
    let tokens = settle.tokens;
    for _ in 0..3 {
        let (kind, fields, outcome) = match client.settle(settle.clone()).await {
            // A retry that found its own earlier attempt applied (`duplicate`): charged
            // once, by the attempt whose answer was lost.
            Ok(Reply::Settled { duplicate }) => (
                Kind::Ok,
                json!({"key": key, "tokens": tokens, "retried_duplicate": duplicate}),
                Outcome::Settled,
            ),
            Ok(other) => {
                let error = match other {
                    Reply::Refused(Refusal::Conflict { .. }) => "conflict".to_string(),
                    other => format!("{other:?}"),
                };
                let fields = json!({"key": key, "tokens": tokens, "error": error});
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

/// Sends `settle` once as op `f`: records the invoke (with the payload's period) and one
/// completion, each carrying `fields`: `ok` when settled, with `duplicate` (whether the
/// answer called it one); `fail` when refused (`error` "conflict" for a conflicting
/// payload) or certainly not applied; `info` when its outcome is unknown.
async fn send_once(
    process: u64,
    client: &Client,
    settle: &Settle,
    f: &str,
    fields: serde_json::Value,
    history: &Recorder,
) {
    let mut invoke = fields.clone();
    invoke["period"] = json!(settle.period);
    history.record(process, Kind::Invoke, f, invoke);
    let mut done = fields;
    let kind = match client.settle(settle.clone()).await {
        Ok(Reply::Settled { duplicate }) => {
            done["duplicate"] = duplicate.into();
            Kind::Ok
        }
        Ok(Reply::Refused(Refusal::Conflict { .. })) => {
            done["error"] = "conflict".into();
            Kind::Fail
        }
        Ok(other) => {
            done["error"] = format!("{other:?}").into();
            Kind::Fail
        }
        Err(e) => {
            done["error"] = e.to_string().into();
            if e.definitely_failed() {
                Kind::Fail
            } else {
                Kind::Info
            }
        }
    };
    history.record(process, kind, f, done);
}
