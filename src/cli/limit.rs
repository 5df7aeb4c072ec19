//! `weir limit define | show | keys | list | remove`. `show --key K` reads one key of a
//! keyed limit (a key that is not live shows a fresh key's state); `keys` pages through a
//! keyed limit's live keys, at most `bounds::KEYS_PAGE_MAX` a page.

use clap::Subcommand;
use serde_json::json;

use super::{EXIT_ERROR, EXIT_OK, Exit, Output, answered};
use weir_client::Client;
use weir_core::bounds::KEYS_PAGE_MAX;
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
    /// Show one limit, or one key of a keyed limit (a key that is not live shows a fresh
    /// key's state: a full bucket, an idle semaphore).
    Show {
        /// The limit's name.
        name: String,
        /// A key of the keyed limit.
        #[arg(long)]
        key: Option<String>,
    },
    /// List a keyed limit's live keys, in key order, a page at a time.
    Keys {
        /// The keyed limit's name.
        name: String,
        /// Start after this key (the `next` of the previous page).
        #[arg(long)]
        after: Option<String>,
        /// Most keys in the page (at most 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// List the tenant's limits.
    List,
    /// Remove a limit: waiters are refused; holders keep their permits until they release.
    Remove {
        /// The limit's name.
        name: String,
    },
}

/// `limit show --json`: the documented `{"tenant", "name", "concurrent", "per_second", "burst",
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
    if let Some(keys_max) = l.keys_max {
        parts.push(format!("keyed; live keys {} of {keys_max}", l.live_keys));
    }
    if l.overrun_tokens > 0 {
        parts.push(format!("overrun tokens {}", l.overrun_tokens));
    }
    if l.shadow {
        let r = &l.shadow_refusals;
        parts.push(format!(
            "shadow; would have refused {} (busy {}, too large {}, at capacity {})",
            r.total(),
            r.busy,
            r.too_large,
            r.at_capacity
        ));
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
        LimitCommand::Show { name, key } => show(client, tenant, name, key.as_deref(), out).await,
        LimitCommand::Keys { name, after, limit } => {
            keys(client, tenant, name, after.as_deref(), *limit, out).await
        }
        LimitCommand::List => match answered(client.limits(tenant).await) {
            Ok(ls) => {
                out.print(limit_json(&ls), || {
                    ls.iter().map(limit_text).collect::<Vec<_>>().join("\n")
                });
                EXIT_OK
            }
            Err(code) => code,
        },
        LimitCommand::Remove { name } => {
            // A name as a ratelimit file wrote it (`envoy:path=/beta`): the read finds the
            // limit, and the removal names it as it is stored.
            let stored = match client.limit_status(tenant, name).await {
                Ok(Some(l)) if name.starts_with(weir_core::rls::path::PREFIX) => Some(l.name),
                _ => None,
            };
            let name = stored.as_ref().unwrap_or(name);
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

/// `limit show NAME [--key K]`.
async fn show(client: &Client, tenant: &str, name: &str, key: Option<&str>, out: &Output) -> Exit {
    let status = match key {
        Some(key) => client.key_status(tenant, name, key).await,
        None => client.limit_status(tenant, name).await,
    };
    match answered(status) {
        Ok(Some(l)) => {
            let mut json = limit_json(&l);
            if let Some(key) = key {
                json["key"] = key.into();
            }
            out.print(json, || match key {
                Some(key) => format!("key {key} of {}", limit_text(&l)),
                None => limit_text(&l),
            });
            EXIT_OK
        }
        Ok(None) => {
            let what = if key.is_some() {
                "keyed limit"
            } else {
                "limit"
            };
            eprintln!("weir: unknown {what} {tenant}/{name}");
            EXIT_ERROR
        }
        Err(code) => code,
    }
}

/// `limit keys NAME [--after K] [--limit N]`: one page, `{"keys": [...], "next": ...}`.
async fn keys(
    client: &Client,
    tenant: &str,
    name: &str,
    after: Option<&str>,
    limit: u32,
    out: &Output,
) -> Exit {
    if limit == 0 || limit > KEYS_PAGE_MAX {
        eprintln!("weir: --limit must be in 1..={KEYS_PAGE_MAX}");
        return super::EXIT_USAGE;
    }
    match answered(client.keys(tenant, name, after, limit).await) {
        Ok(Some(page)) => {
            out.print(json!({"keys": page.keys, "next": page.next}), || {
                let mut lines = page.keys.clone();
                if let Some(next) = &page.next {
                    lines.push(format!("(more: --after {next})"));
                }
                lines.join("\n")
            });
            EXIT_OK
        }
        Ok(None) => {
            eprintln!("weir: unknown keyed limit {tenant}/{name}");
            EXIT_ERROR
        }
        Err(code) => code,
    }
}
