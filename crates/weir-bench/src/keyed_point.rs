//! The keyed point: one keyed rate limit with as many live keys as the bounds allow, and
//! what they cost each node — RSS, snapshot bytes, snapshot build and install time — with
//! the memory of one live key (`--workload keyed-scale`, and the last point of `--curve`).
//!
//! The limit refills one token in 1,000 s from a burst of one, so a key taken from once
//! stays live (differs from a fresh one) for the whole measurement. Builders take from
//! every key once, each over a session of its own, then close their sessions, so what is
//! left on the nodes beyond the empty cluster's state is the live keys. A key's cost is
//! the growth between the figures taken before the keys and after, divided by the keys:
//! exact for snapshot bytes, and for RSS what the process grew (the allocator's slack
//! included). The point is `bounds::KEYS_LIVE_MAX` keys (ten million): every live key the
//! machine allows, all of one definition; `--keys N` builds fewer.
//!
//! With `--against redis` (and `--spawn 3`), the cluster is stopped after its figures and
//! the same keys are kept as Redis's Lua buckets (`redis::keyed_memory`): Redis's
//! `used_memory` and RSS a key are printed beside each node's RSS a key, and in the JSON
//! under `against.redis`.

use std::time::Instant;

use serde_json::json;

use super::redis;
use super::scale::{node_figures, node_line};
use crate::output::{EXIT_OK, Exit, Output};
use weir_client::Client;
use weir_core::bounds::{KEYS_LIVE_MAX, SESSION_TTL_MS_MAX};
use weir_core::machine::{AcquireParts, Command, Definition, Part, Priority, Reply};
use weir_launcher::LocalCluster;
use weir_proto::tls::ClientSecurity;

const TENANT: &str = "keyed-point";
const LIMIT: &str = "keys";
/// Live keys at the point by default (and `--curve`'s): every live key the bounds allow.
pub const KEYS: u64 = KEYS_LIVE_MAX as u64;
/// Clients taking from the keys in parallel: enough that the proposer batches.
const BUILDERS: u64 = 64;
/// Takes of one builder between its session's keep-alives: about 35 s at the build's
/// quiet rate (18,000 takes a second over 64 builders), well inside `SESSION_TTL_MS_MAX`
/// (10 minutes) at a tenth of it.
const KEEP_ALIVE_EVERY: u64 = 10_000;

/// `--workload keyed-scale`: builds the point of `keys` live keys on `servers` and prints
/// its figures; with `against_redis`, then stops `spawned` and measures the same keys in
/// Redis.
pub async fn run(
    servers: &[String],
    security: &ClientSecurity,
    keys: u64,
    against_redis: bool,
    spawned: Option<LocalCluster>,
    out: &Output,
) -> Result<Exit, String> {
    let mut value = build(servers, security, keys).await?;
    if against_redis {
        // Stopped first: the nodes' memory is not Redis's to share.
        drop(spawned);
        eprintln!("[bench] weir's figures taken; now {keys} buckets in redis");
        let redis = redis::keyed_memory(keys, key_name).await?;
        value["against"] = json!({ "redis": redis });
    }
    out.print(value.clone(), || {
        let mut text = format!(
            "keyed point: {} live keys of one keyed limit (built in {:.1} s)",
            value["live_keys"],
            value["setup_s"].as_f64().unwrap_or(0.0)
        );
        for n in value["nodes"].as_array().into_iter().flatten() {
            text.push('\n');
            text.push_str(&node_line(n));
        }
        let r = &value["against"]["redis"];
        if !r.is_null() {
            text.push_str(&format!(
                "\nredis (appendfsync {}), the same {} keys as Lua buckets (filled in {:.1} s): \
                 used_memory {} bytes a key, RSS {} bytes a key ({:.1} -> {:.1} MiB)",
                r["persistence"].as_str().unwrap_or("?"),
                r["keys"],
                r["fill_s"].as_f64().unwrap_or(0.0),
                r["used_memory_bytes_per_key"],
                r["rss_bytes_per_key"],
                r["before"]["rss_bytes"].as_f64().unwrap_or(0.0) / 1_048_576.0,
                r["after"]["rss_bytes"].as_f64().unwrap_or(0.0) / 1_048_576.0,
            ));
        }
        text
    });
    Ok(EXIT_OK)
}

/// Builds `keys` live keys on `servers` (a cluster with nothing of this tenant yet) and
/// returns the figures: each node's before and after, and the growth a live key.
pub async fn build(
    servers: &[String],
    security: &ClientSecurity,
    keys: u64,
) -> Result<serde_json::Value, String> {
    let admin = Client::with_security(servers.to_vec(), security.clone());
    define(&admin, keys).await?;
    let mut before = vec![];
    for s in servers {
        before.push(node_figures(s, security).await);
    }
    let started = Instant::now();
    let mut builders = tokio::task::JoinSet::new();
    for b in 0..BUILDERS {
        let client = Client::with_security(servers.to_vec(), security.clone());
        builders.spawn(async move { take_each(&client, b, keys).await });
    }
    while let Some(r) = builders.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    let built_in = started.elapsed();
    let live = match admin.limit_status(TENANT, LIMIT).await {
        Ok(Some(status)) => status.live_keys,
        other => return Err(format!("status of {TENANT}/{LIMIT}: {other:?}")),
    };
    if live != keys {
        return Err(format!("{live} live keys after taking from {keys}"));
    }
    eprintln!(
        "[bench] {live} live keys in {:.1} s",
        built_in.as_secs_f64()
    );
    let mut nodes = vec![];
    for (s, before) in servers.iter().zip(before) {
        if let Some(after) = node_figures(s, security).await {
            nodes.push(growth(after, before.as_ref(), keys));
        }
    }
    Ok(
        json!({"workload": "keyed-scale", "live_keys": live, "setup_s": built_in.as_secs_f64(),
              "nodes": nodes}),
    )
}

/// Defines the keyed limit: one token in 1,000 s from a burst of one, `keys` live keys.
async fn define(admin: &Client, keys: u64) -> Result<(), String> {
    let definition = Definition {
        tenant: TENANT.into(),
        name: LIMIT.into(),
        concurrent: 0,
        per_second: 0.001,
        burst: Some(1),
        keyed: true,
        keys_max: Some(u32::try_from(keys).map_err(|_| "too many keys".to_string())?),
        shadow: false,
    };
    match admin.define(definition).await {
        Ok(Reply::Done) => Ok(()),
        other => Err(format!("define {TENANT}/{LIMIT}: {other:?}")),
    }
}

/// The key of number `k`: fixed width, so every key costs the same bytes.
pub fn key_name(k: u64) -> String {
    format!("key-{k:07}")
}

/// Builder `b` of [`BUILDERS`] takes one token from every key `k` with `k % BUILDERS == b`,
/// over one session, which it closes after (its finished tickets go with it).
async fn take_each(client: &Client, b: u64, keys: u64) -> Result<(), String> {
    let session = match client
        .write(Command::OpenSession {
            ttl_ms: SESSION_TTL_MS_MAX,
        })
        .await
    {
        Ok(Reply::SessionOpened { session, .. }) => session,
        other => return Err(format!("open session: {other:?}")),
    };
    let mut k = b;
    while k < keys {
        let take = Command::AcquireParts(AcquireParts {
            session,
            ticket: k + 1,
            tenant: TENANT.into(),
            parts: vec![Part {
                limit: LIMIT.into(),
                key: Some(key_name(k)),
                units: 1,
            }],
            priority: Priority::default(),
            agent: None,
            wait: false,
            estimate: false,
        });
        match client.write(take).await {
            Ok(Reply::Granted { .. }) => {}
            other => return Err(format!("take from {}: {other:?}", key_name(k))),
        }
        k += BUILDERS;
        // A take does not extend the session, and one builder's share of ten million keys
        // can take longer than the longest TTL on a loaded machine.
        if (k / BUILDERS).is_multiple_of(KEEP_ALIVE_EVERY) {
            match client.write(Command::KeepAlive { session }).await {
                Ok(Reply::KeptAlive { .. }) => {}
                other => return Err(format!("keep-alive: {other:?}")),
            }
        }
    }
    match client.write(Command::CloseSession { session }).await {
        Ok(Reply::Done) => Ok(()),
        other => Err(format!("close session: {other:?}")),
    }
}

/// A node's figures after, with its RSS before and the growth a live key in RSS and
/// snapshot bytes.
fn growth(
    mut after: serde_json::Value,
    before: Option<&serde_json::Value>,
    keys: u64,
) -> serde_json::Value {
    let of = |v: Option<&serde_json::Value>, k: &str| v.and_then(|v| v[k].as_f64());
    let rss_before = of(before, "rss_mib");
    let per_key = |a: Option<f64>, b: Option<f64>, scale: f64| {
        a.zip(b)
            .map(|(a, b)| ((a - b) * scale / keys as f64).round())
    };
    after["rss_mib_before"] = json!(rss_before);
    after["rss_bytes_per_key"] = json!(per_key(
        of(Some(&after), "rss_mib"),
        rss_before,
        1_048_576.0
    ));
    after["snapshot_bytes_per_key"] = json!(per_key(
        of(Some(&after), "snapshot_bytes"),
        of(before, "snapshot_bytes"),
        1.0
    ));
    after
}
