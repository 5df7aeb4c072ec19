//! `weir halt set | clear | list`, on the tenant named by the global `--tenant`.

use clap::Subcommand;
use serde_json::json;

use super::{EXIT_OK, Exit, Output, answered};
use weir_client::Client;
use weir_core::machine::HaltScope;

#[derive(Subcommand, Debug)]
pub enum HaltCommand {
    /// Halt a tenant, or one agent of it: its reserves and acquires are refused, its waiters
    /// refused, its holders told.
    Set {
        /// Halt only this agent of the tenant (default: the whole tenant).
        #[arg(long)]
        agent: Option<String>,
        /// Why: told to holders and refused requests.
        #[arg(long)]
        reason: String,
    },
    /// Clear a halt (the tenant's, or one agent's; the other stays).
    Clear {
        /// Clear only this agent's halt (default: the tenant's).
        #[arg(long)]
        agent: Option<String>,
    },
    /// The standing halts of a tenant.
    List,
}

fn scope(agent: &Option<String>) -> HaltScope {
    agent.clone().map_or(HaltScope::Tenant, HaltScope::Agent)
}

pub async fn run(command: &HaltCommand, tenant: &str, client: &Client, out: &Output) -> Exit {
    match command {
        HaltCommand::Set { agent, reason } => out.done(
            client.set_halt(tenant, scope(agent), reason).await,
            json!({"tenant": tenant, "agent": agent, "halted": true}),
            || format!("halted {tenant} ({})", scope(agent)),
        ),
        HaltCommand::Clear { agent } => out.done(
            client.clear_halt(tenant, scope(agent)).await,
            json!({"tenant": tenant, "agent": agent, "cleared": true}),
            || format!("cleared the halt of {tenant} ({})", scope(agent)),
        ),
        HaltCommand::List => match answered(client.halts(tenant).await) {
            Ok(halts) => {
                let rows: Vec<_> = halts
                    .iter()
                    .map(|(s, reason)| match s {
                        HaltScope::Tenant => {
                            json!({"scope": "tenant", "agent": null, "reason": reason})
                        }
                        HaltScope::Agent(a) => {
                            json!({"scope": "agent", "agent": a, "reason": reason})
                        }
                    })
                    .collect();
                out.print(serde_json::Value::Array(rows), || {
                    halts
                        .iter()
                        .map(|(s, r)| format!("{s}: {r}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                EXIT_OK
            }
            Err(code) => code,
        },
    }
}
