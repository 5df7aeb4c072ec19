//! Ledger processes: reserve a run, settle it (retrying the same payload until the outcome
//! is known), and now and then send a conflicting payload for a settled key.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use weir::client::Client;
use weir::machine::{Refusal, Reply, Settle};

use super::TENANT;
use crate::history::{Kind, Recorder};
use crate::rng::Rng;

/// A ledger process: reserve a run, settle it (retrying the same payload until the outcome
/// is known), and now and then send a conflicting payload for a settled key.
pub async fn ledger(
    process: u64,
    servers: Vec<String>,
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let client = Client::new(servers);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let run = format!("p{process}-r{n}");
        let _ = client.reserve(TENANT, &run, None, Some("ledger")).await;
        let tokens = rng.range(1, 9);
        let settle = Settle {
            tenant: TENANT.into(),
            run: run.clone(),
            epoch: 1,
            period: Some("ledger".into()),
            tokens,
            minor_units: tokens * 10,
            release_slot: true,
        };
        let key = format!("{run}/1");
        history.record(
            process,
            Kind::Invoke,
            "settle",
            json!({"key": key, "tokens": tokens}),
        );
        let outcome = settle_until_known(process, &client, &settle, &key, &history).await;
        if outcome.is_some() && rng.range(0, 4) == 0 {
            conflict(process, &client, &settle, &key, &history).await;
        }
    }
}

/// Settles `settle` (invoke already recorded), trying the same payload up to three times
/// while the outcome is unknown, and records the outcome: `Some(duplicate)` once settled.
async fn settle_until_known(
    process: u64,
    client: &Client,
    settle: &Settle,
    key: &str,
    history: &Recorder,
) -> Option<bool> {
    let tokens = settle.tokens;
    let mut outcome = None;
    for _ in 0..3 {
        match client.settle(settle.clone()).await {
            Ok(Reply::Settled { duplicate }) => {
                outcome = Some(duplicate);
                break;
            }
            Ok(other) => {
                history.record(
                    process,
                    Kind::Fail,
                    "settle",
                    json!({"key": key, "tokens": tokens, "error": format!("{other:?}")}),
                );
                break;
            }
            Err(_) => continue,
        }
    }
    match outcome {
        // A retry that found its own earlier attempt applied: charged once, by the
        // attempt whose answer was lost.
        Some(duplicate) => {
            history.record(process, Kind::Ok, "settle", json!({"key": key, "tokens": tokens, "duplicate": false, "retried_duplicate": duplicate}));
        }
        None => {
            history.record(
                process,
                Kind::Info,
                "settle",
                json!({"key": key, "tokens": tokens}),
            );
        }
    }
    outcome
}

/// Sends a payload for the settled `settle`'s key that differs from it, recorded as a
/// `settle-conflict` op: the checker expects a conflict, never a second charge.
async fn conflict(process: u64, client: &Client, settle: &Settle, key: &str, history: &Recorder) {
    let mut conflicting = settle.clone();
    conflicting.tokens += 1;
    history.record(
        process,
        Kind::Invoke,
        "settle-conflict",
        json!({"key": key}),
    );
    match client.settle(conflicting).await {
        Ok(Reply::Refused(Refusal::Conflict)) => {
            history.record(
                process,
                Kind::Fail,
                "settle-conflict",
                json!({"key": key, "error": "conflict"}),
            );
        }
        Ok(Reply::Settled { .. }) => {
            history.record(process, Kind::Ok, "settle-conflict", json!({"key": key}));
        }
        other => {
            history.record(
                process,
                Kind::Info,
                "settle-conflict",
                json!({"key": key, "error": format!("{other:?}")}),
            );
        }
    }
}
