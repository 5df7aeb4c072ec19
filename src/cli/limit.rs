//! `weir limit define | show | list | remove`.

use clap::Subcommand;
use serde_json::json;

use super::{EXIT_ERROR, EXIT_OK, Exit, Output, answered};
use weir_client::Client;
use weir_client::protocol::{Answer, Query};
use weir_core::machine::{Command, Definition, LimitStatus};

#[derive(Subcommand, Debug)]
pub enum LimitCommand {
    /// Define a limit, or change an existing one (holders keep their permits).
    Define {
        /// The limit's name, unique in the tenant.
        name: String,
        /// Most units held at once; 0 = no cap.
        #[arg(long, default_value_t = 0)]
        concurrent: u32,
        /// Token refill per second; 0 = no rate.
        #[arg(long, default_value_t = 0.0)]
        per_second: f64,
        /// Bucket size; default max(ceil(per_second), 1).
        #[arg(long)]
        burst: Option<u64>,
        /// One bucket or semaphore per key: every acquire names a key (`--key`).
        #[arg(long)]
        keyed: bool,
        /// Most live keys of a keyed limit (default 1000); implies --keyed.
        #[arg(long)]
        keys_max: Option<u32>,
        /// Shadow mode: evaluated and counted, never refuses.
        #[arg(long)]
        shadow: bool,
    },
    /// Show one limit.
    Show {
        /// The limit's name.
        name: String,
    },
    /// List the tenant's limits.
    List,
    /// Remove a limit: waiters are refused; holders keep their permits until they release.
    Remove {
        /// The limit's name.
        name: String,
    },
}

/// `limit show --json`: spec §4's `{"tenant", "name", "concurrent", "per_second", "burst",
/// "in_use", "waiting", "max_in_use"}`, then `tokens`, `removing`, `keyed`, `live_keys` and
/// `shadow` — the fields of [`LimitStatus`] in order.
fn limit_json<T: serde::Serialize + ?Sized>(l: &T) -> serde_json::Value {
    serde_json::to_value(l).expect("limit status serializes")
}

/// One line per limit, naming only what the limit has: a cap (with its use) and a rate
/// (with its bucket). A rate-only limit has no holders, a cap-only limit no bucket.
pub fn limit_text(l: &LimitStatus) -> String {
    let mut parts = Vec::new();
    if l.concurrent > 0 {
        parts.push(format!(
            "concurrent {}; in use {}, waiting {}, max in use {}",
            l.concurrent, l.in_use, l.waiting, l.max_in_use
        ));
    }
    if l.per_second > 0.0 {
        let waiting = if l.concurrent == 0 {
            format!(", waiting {}", l.waiting)
        } else {
            String::new()
        };
        parts.push(format!(
            "per_second {} burst {}; tokens {}{waiting}",
            l.per_second, l.burst, l.tokens
        ));
    }
    if parts.is_empty() {
        parts.push("no cap and no rate: admits everything".into());
    }
    format!(
        "{}/{}: {}{}",
        l.tenant,
        l.name,
        parts.join("; "),
        if l.removing { " (removing)" } else { "" }
    )
}

pub async fn run(command: &LimitCommand, tenant: &str, client: &Client, out: &Output) -> Exit {
    match command {
        LimitCommand::Define {
            name,
            concurrent,
            per_second,
            burst,
            keyed,
            keys_max,
            shadow,
        } => {
            let keyed = *keyed || keys_max.is_some();
            let defined = if keyed || *shadow {
                let definition = Definition {
                    tenant: tenant.into(),
                    name: name.clone(),
                    concurrent: *concurrent,
                    per_second: *per_second,
                    burst: *burst,
                    keyed,
                    keys_max: *keys_max,
                    shadow: *shadow,
                };
                client.define(definition).await
            } else {
                client
                    .define_limit(tenant, name, *concurrent, *per_second, *burst)
                    .await
            };
            out.done(
                defined,
                json!({"tenant": tenant, "name": name, "defined": true}),
                || format!("defined {tenant}/{name}"),
            )
        }
        LimitCommand::Show { name } => match answered(client.limit_status(tenant, name).await) {
            Ok(Some(l)) => {
                out.print(limit_json(&l), || limit_text(&l));
                EXIT_OK
            }
            Ok(None) => {
                eprintln!("weir: unknown limit {tenant}/{name}");
                EXIT_ERROR
            }
            Err(code) => code,
        },
        LimitCommand::List => match answered(
            client
                .read(Query::Limits {
                    tenant: tenant.into(),
                })
                .await,
        ) {
            Ok(Answer::Limits(ls)) => {
                out.print(limit_json(&ls), || {
                    ls.iter().map(limit_text).collect::<Vec<_>>().join("\n")
                });
                EXIT_OK
            }
            Ok(_) => EXIT_ERROR,
            Err(code) => code,
        },
        LimitCommand::Remove { name } => {
            let removed = client
                .write(Command::RemoveLimit {
                    tenant: tenant.into(),
                    name: name.clone(),
                })
                .await;
            out.done(
                removed,
                json!({"tenant": tenant, "name": name, "removed": true}),
                || format!("removed {tenant}/{name}"),
            )
        }
    }
}
