//! `weir tenant set | show | place`, `weir run reserve | release | settle | list`, `weir spent`. The
//! tenant is the global `--tenant` (or `WEIR_TENANT`), never a positional argument.

use clap::Subcommand;
use serde_json::json;

use super::{EXIT_OK, EXIT_USAGE, Exit, Output, answered, replied};
use weir_client::Client;
use weir_core::machine::{Change, Reply, Settle};
use weir_proto::protocol::{Answer, Query};

#[derive(Subcommand, Debug)]
pub enum TenantCommand {
    /// Set a tenant's ceilings; a value of `none` removes one, an absent flag keeps it.
    Set {
        /// Most runs at once (`none`: no ceiling; 0 admits nobody).
        #[arg(long)]
        max_running: Option<String>,
        /// Token budget per period.
        #[arg(long)]
        budget_tokens: Option<String>,
        /// Budget per period in minor currency units.
        #[arg(long)]
        budget_minor: Option<String>,
    },
    /// Show the tenant's ceilings, budgets, running count, spend in a period, and halts.
    Show {
        /// Also show the spend charged to this budget period.
        #[arg(long)]
        period: Option<String>,
    },
    /// Place the tenant in a data group of a cluster of several groups (admin), before it
    /// has any state: once, for good. Without GROUP, show the group it lives in, placing
    /// it in the default group (1) if it lives nowhere yet.
    Place {
        /// The data group, from 1 to the nodes' `groups`.
        group: Option<u64>,
    },
}

#[derive(Subcommand, Debug)]
pub enum RunCommand {
    /// Admit a run into its tenant's running set (idempotent per run).
    Reserve {
        /// The run's id, unique in the tenant.
        run: String,
        /// The agent acting, for agent-scoped halts.
        #[arg(long)]
        agent: Option<String>,
        /// The budget period checked.
        #[arg(long)]
        period: Option<String>,
        /// Hold this many tokens of the period's budget for the run (needs --period): admitted
        /// only while settled + standing holds + this hold fit the budget.
        #[arg(long)]
        hold_tokens: Option<u64>,
        /// Hold this many minor units of the period's budget for the run (needs --period).
        #[arg(long)]
        hold_minor: Option<u64>,
    },
    /// Free a run's slot (idempotent).
    Release {
        /// The run's id.
        run: String,
    },
    /// Charge one pass of a run (idempotent per run and epoch).
    Settle {
        /// The run's id.
        run: String,
        /// The pass being settled: a retry of the same epoch and payload is a no-op.
        #[arg(long)]
        epoch: u64,
        /// The budget period charged (none: the receipt is kept, no period charged).
        #[arg(long)]
        period: Option<String>,
        /// Tokens spent by the pass.
        #[arg(long, default_value_t = 0)]
        tokens: u64,
        /// Spend of the pass in minor currency units.
        #[arg(long, default_value_t = 0)]
        minor: u64,
        /// Also free the run's slot.
        #[arg(long)]
        release_slot: bool,
    },
    /// The running set, with admission times.
    List,
}

fn change<T: std::str::FromStr>(flag: &str, v: &Option<String>) -> Result<Change<T>, Exit> {
    match v.as_deref() {
        None => Ok(Change::Keep),
        Some("none") => Ok(Change::Clear),
        Some(s) => s.parse().map(Change::Set).map_err(|_| {
            eprintln!("weir: --{flag} {s:?} is not a number or `none`");
            EXIT_USAGE
        }),
    }
}

pub async fn tenant(command: &TenantCommand, tenant: &str, client: &Client, out: &Output) -> Exit {
    let (max_running, budget_tokens, budget_minor) = match command {
        TenantCommand::Show { period } => {
            return show(tenant, period.as_deref(), client, out).await;
        }
        TenantCommand::Place { group } => return place(tenant, *group, client, out).await,
        TenantCommand::Set {
            max_running,
            budget_tokens,
            budget_minor,
        } => (max_running, budget_tokens, budget_minor),
    };
    let changes = (|| {
        Ok::<_, Exit>((
            change("max-running", max_running)?,
            change("budget-tokens", budget_tokens)?,
            change("budget-minor", budget_minor)?,
        ))
    })();
    let (max_running, budget_tokens, budget_minor) = match changes {
        Ok(c) => c,
        Err(code) => return code,
    };
    let set = client
        .set_tenant(tenant, max_running, budget_tokens, budget_minor)
        .await;
    if let Err(code) = replied(set) {
        return code;
    }
    let shown = client
        .read(Query::Tenant {
            tenant: tenant.into(),
        })
        .await;
    match answered(shown) {
        Ok(Answer::Tenant(t)) => {
            out.print(
                json!({"tenant": tenant, "max_running": t.max_running, "budget_tokens": t.budget_tokens,
                       "budget_minor": t.budget_minor, "running": t.running}),
                || {
                    let show = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
                    format!(
                        "{tenant}: max running {}, budget tokens {}, budget minor {}; {} running",
                        show(t.max_running.map(u64::from)),
                        show(t.budget_tokens),
                        show(t.budget_minor),
                        t.running
                    )
                },
            );
            EXIT_OK
        }
        Ok(_) => EXIT_OK,
        Err(code) => code,
    }
}

/// `weir tenant place [GROUP]`: the group the tenant lives in, placed now or before.
async fn place(tenant: &str, group: Option<u64>, client: &Client, out: &Output) -> Exit {
    match answered(client.place_tenant(tenant, group).await) {
        Ok(placed) => {
            out.print(json!({"tenant": tenant, "group": placed}), || {
                if placed == 0 {
                    format!("{tenant} lives in group 0, the cluster's one group")
                } else {
                    format!("{tenant} lives in group {placed} (speak to it with --group {placed})")
                }
            });
            EXIT_OK
        }
        Err(code) => code,
    }
}

pub async fn run(command: &RunCommand, tenant: &str, client: &Client, out: &Output) -> Exit {
    match command {
        RunCommand::Reserve {
            run,
            agent,
            period,
            hold_tokens,
            hold_minor,
        } => {
            let reserved = client
                .reserve_holding(
                    tenant,
                    run,
                    agent.as_deref(),
                    period.as_deref(),
                    *hold_tokens,
                    *hold_minor,
                )
                .await;
            out.done(
                reserved,
                json!({"tenant": tenant, "run": run, "admitted": true}),
                || format!("admitted {tenant}/{run}"),
            )
        }
        RunCommand::Release { run } => out.done(
            client.release_run(tenant, run).await,
            json!({"tenant": tenant, "run": run, "released": true}),
            || format!("released {tenant}/{run}"),
        ),
        RunCommand::Settle {
            run,
            epoch,
            period,
            tokens,
            minor,
            release_slot,
        } => {
            let settle = Settle {
                tenant: tenant.into(),
                run: run.clone(),
                epoch: *epoch,
                period: period.clone(),
                tokens: *tokens,
                minor_units: *minor,
                release_slot: *release_slot,
            };
            match replied(client.settle(settle).await) {
                Ok(Reply::Settled { duplicate }) => {
                    out.print(
                        json!({"tenant": tenant, "run": run, "epoch": epoch, "settled": true, "duplicate": duplicate}),
                        || {
                            if duplicate {
                                format!("{tenant}/{run} epoch {epoch} was already settled with this payload")
                            } else {
                                format!("settled {tenant}/{run} epoch {epoch}")
                            }
                        },
                    );
                    EXIT_OK
                }
                Ok(Reply::Overrun {
                    tokens: over_tokens,
                    minor_units: over_minor,
                }) => {
                    out.print(
                        json!({"tenant": tenant, "run": run, "epoch": epoch, "settled": true, "duplicate": false,
                               "overrun_tokens": over_tokens, "overrun_minor_units": over_minor}),
                        || {
                            format!(
                                "settled {tenant}/{run} epoch {epoch}; overrun of its hold: \
                                 {over_tokens} tokens, {over_minor} minor units"
                            )
                        },
                    );
                    EXIT_OK
                }
                Ok(_) => EXIT_OK,
                Err(code) => code,
            }
        }
        RunCommand::List => list(tenant, client, out).await,
    }
}

/// `run list`: the running set, with admission times (and, for people, how long ago).
async fn list(tenant: &str, client: &Client, out: &Output) -> Exit {
    match answered(client.running(tenant).await) {
        Ok(runs) => {
            let rows: Vec<_> = runs
                .iter()
                .map(|(run, slot)| {
                    json!({"run": run, "admitted_at_ms": slot.admitted_at_wall_ms, "agent": slot.agent})
                })
                .collect();
            out.print(serde_json::Value::Array(rows), || {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                runs.iter()
                    .map(|(run, slot)| {
                        format!(
                            "{run}  admitted {} ms ago (at {} ms){}",
                            now.saturating_sub(slot.admitted_at_wall_ms),
                            slot.admitted_at_wall_ms,
                            slot.agent
                                .as_ref()
                                .map_or(String::new(), |a| format!("  agent {a}"))
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            EXIT_OK
        }
        Err(code) => code,
    }
}

pub async fn spent(tenant: &str, period: &str, client: &Client, out: &Output) -> Exit {
    match answered(client.spent(tenant, period).await) {
        Ok(s) => {
            out.print(
                json!({"tenant": tenant, "period": period, "tokens": s.tokens, "minor_units": s.minor_units,
                       "held_tokens": s.held_tokens, "held_minor_units": s.held_minor,
                       "overrun_tokens": s.overrun_tokens, "overrun_minor_units": s.overrun_minor}),
                || {
                    format!(
                        "{tenant} {period}: {} tokens, {} minor units; held {} tokens, {} minor \
                         units; overrun {} tokens, {} minor units",
                        s.tokens,
                        s.minor_units,
                        s.held_tokens,
                        s.held_minor,
                        s.overrun_tokens,
                        s.overrun_minor
                    )
                },
            );
            EXIT_OK
        }
        Err(code) => code,
    }
}

/// `tenant show`: ceilings, budgets, running count, the period's spend (with `--period`)
/// and the standing halts.
async fn show(tenant: &str, period: Option<&str>, client: &Client, out: &Output) -> Exit {
    let t = match answered(
        client
            .read(Query::Tenant {
                tenant: tenant.into(),
            })
            .await,
    ) {
        Ok(Answer::Tenant(t)) => t,
        Ok(_) => return EXIT_OK,
        Err(code) => return code,
    };
    let halts = match answered(client.halts(tenant).await) {
        Ok(h) => h,
        Err(code) => return code,
    };
    let spend = match period {
        Some(p) => match answered(client.spent(tenant, p).await) {
            Ok(s) => Some(s),
            Err(code) => return code,
        },
        None => None,
    };
    let halts_json: Vec<_> = halts
        .iter()
        .map(|(s, reason)| json!({"scope": s.to_string(), "reason": reason}))
        .collect();
    out.print(
        json!({"tenant": tenant, "max_running": t.max_running, "budget_tokens": t.budget_tokens,
               "budget_minor": t.budget_minor, "running": t.running, "period": period,
               "spent": spend.map(|s| json!({"tokens": s.tokens, "minor_units": s.minor_units})),
               "halts": halts_json}),
        || {
            let show = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
            let mut lines = vec![
                format!("tenant        {tenant}"),
                format!(
                    "max running   {} ({} running)",
                    show(t.max_running.map(u64::from)),
                    t.running
                ),
                format!("budget tokens {}", show(t.budget_tokens)),
                format!("budget minor  {}", show(t.budget_minor)),
            ];
            if let (Some(p), Some(s)) = (period, spend) {
                lines.push(format!(
                    "spent in {p}   {} tokens, {} minor units",
                    s.tokens, s.minor_units
                ));
            }
            if halts.is_empty() {
                lines.push("halts         none".into());
            }
            for (s, r) in &halts {
                lines.push(format!("halted        {s}: {r}"));
            }
            lines.join("\n")
        },
    );
    EXIT_OK
}
