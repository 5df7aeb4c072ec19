//! The `weir` command line: parses arguments, runs the command, maps outcomes to exit codes
//! (0 done, 1 error, 2 usage, 3 refused).

mod acquire;
mod bench;
mod cluster;
mod halt;
mod limit;
mod log;
mod runs;

use clap::{Parser, Subcommand};
use serde_json::json;

use crate::client::{Client, ClientError};
use crate::config::Config;
use crate::machine::{Refusal, Reply};
use crate::protocol::{NodeStatus, Request, Response};

/// Exit status: done.
pub const EXIT_OK: i32 = 0;
/// Exit status: an error (unreachable, internal).
pub const EXIT_ERROR: i32 = 1;
/// Exit status: bad usage.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: refused (halted, over a ceiling or budget, conflict, timed out waiting).
pub const EXIT_REFUSED: i32 = 3;

#[derive(Parser, Debug)]
#[command(name = "weir", version, about = "Weir: a replicated limit cluster")]
pub struct Cli {
    /// Servers to reach the cluster through, comma-separated host:port.
    #[arg(
        long,
        global = true,
        env = "WEIR_SERVERS",
        default_value = "127.0.0.1:7411",
        value_delimiter = ','
    )]
    pub servers: Vec<String>,
    /// The tenant (namespace of limits).
    #[arg(long, global = true, default_value = "default")]
    pub tenant: String,
    /// Machine-readable output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Answer reads from the node reached, without a quorum round (possibly stale).
    #[arg(long, global = true)]
    pub stale: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a node (no arguments: a single-node cluster on 127.0.0.1:7411, data in ./weir-data).
    Serve {
        /// Node configuration (TOML).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Overrides the configuration's data directory.
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
    },
    /// Show every node: id, address, role, term, applied index, lag, digest.
    Status,
    /// Define, show, list and remove limits.
    #[command(subcommand)]
    Limit(limit::LimitCommand),
    /// Hold a permit for a while, or while a command runs.
    Acquire(acquire::AcquireArgs),
    /// Set a tenant's ceilings and budgets.
    #[command(subcommand)]
    Tenant(runs::TenantCommand),
    /// Admit, release, settle and list runs.
    #[command(subcommand)]
    Run(runs::RunCommand),
    /// Spend charged to a tenant's period.
    Spent { tenant: String, period: String },
    /// Set, clear and list halts.
    #[command(subcommand)]
    Halt(halt::HaltCommand),
    /// Add and remove nodes.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Load the cluster and report throughput and latency.
    Bench(bench::BenchArgs),
}

/// What a command ends with: the exit status, and what was printed is already printed.
pub type Exit = i32;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Exit {
    if let Command::Serve { config, data_dir } = &cli.command {
        return serve(config.as_deref(), data_dir.clone());
    }
    if let Command::Bench(args) = &cli.command {
        return bench::run(args, &cli.servers, &Output { json: cli.json });
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir: cannot start a runtime: {e}");
            return EXIT_ERROR;
        }
    };
    runtime.block_on(async {
        let client = Client::new(cli.servers.clone()).stale_reads(cli.stale);
        let out = Output { json: cli.json };
        match &cli.command {
            Command::Serve { .. } | Command::Bench(_) => unreachable!("handled above"),
            Command::Status => status(&cli.servers, &out).await,
            Command::Limit(c) => limit::run(c, &cli.tenant, &client, &out).await,
            Command::Acquire(a) => acquire::run(a, &cli.tenant, &client, &out).await,
            Command::Tenant(c) => runs::tenant(c, &client, &out).await,
            Command::Run(c) => runs::run(c, &client, &out).await,
            Command::Spent { tenant, period } => runs::spent(tenant, period, &client, &out).await,
            Command::Halt(c) => halt::run(c, &client, &out).await,
            Command::Cluster(c) => cluster::run(c, &client, &out).await,
        }
    })
}

fn serve(config: Option<&std::path::Path>, data_dir: Option<std::path::PathBuf>) -> Exit {
    let mut config = match config {
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("weir serve: {e}");
                return EXIT_USAGE;
            }
        },
        None => Config::default(),
    };
    if let Some(dir) = data_dir {
        config.data_dir = dir;
    }
    log::init(config.id);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir serve: cannot start a runtime: {e}");
            return EXIT_ERROR;
        }
    };
    match runtime.block_on(crate::server::serve(config)) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("weir serve: {e}");
            EXIT_ERROR
        }
    }
}

/// Where results go: human text or one JSON value.
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `value` as JSON, or `text` for people.
    pub fn print(&self, value: serde_json::Value, text: impl FnOnce() -> String) {
        if self.json {
            println!("{value}");
        } else {
            println!("{}", text());
        }
    }
}

/// Reports a client error; returns the exit status for it.
pub fn client_error(e: &ClientError) -> Exit {
    eprintln!("weir: {e}");
    EXIT_ERROR
}

/// Reports a refusal; returns the exit status for it.
pub fn refused(r: &Refusal) -> Exit {
    eprintln!("weir: refused: {r}");
    match r {
        Refusal::Invalid(_) => EXIT_USAGE,
        _ => EXIT_REFUSED,
    }
}

/// Sends a write and returns its reply, or the exit status of its failure.
pub async fn write(client: &Client, command: crate::machine::Command) -> Result<Reply, Exit> {
    match client.request(Request::Write(command)).await {
        Ok(Response::Written {
            reply: Reply::Refused(r),
            ..
        }) => Err(refused(&r)),
        Ok(Response::Written { reply, .. }) => Ok(reply),
        Ok(Response::Failed(f)) => Err(client_error(&ClientError::Failed(f))),
        Ok(other) => Err(client_error(&ClientError::Protocol(format!(
            "unexpected answer {other:?}"
        )))),
        Err(e) => Err(client_error(&e)),
    }
}

/// Sends a read (linearizable unless `--stale`) and returns its answer, or the exit status
/// of its failure.
pub async fn read(
    client: &Client,
    query: crate::protocol::Query,
) -> Result<crate::protocol::Answer, Exit> {
    client.read(query).await.map_err(|e| client_error(&e))
}

/// One row of `status`.
struct Row {
    id: u64,
    addr: String,
    status: Option<NodeStatus>,
}

/// Any node's status names every member, so the first server that answers will do (no
/// leader needed, no retries: an unreachable cluster is reported at once).
async fn status(servers: &[String], out: &Output) -> Exit {
    let mut why = Vec::new();
    let mut answered = None;
    for addr in servers {
        match Client::ask_node(addr, &Request::Status).await {
            Ok(Response::Status(s)) => {
                answered = Some(s);
                break;
            }
            Ok(other) => why.push(format!("{addr}: unexpected answer {other:?}")),
            Err(e) => why.push(e.to_string()),
        }
    }
    let Some(first) = answered else {
        return client_error(&ClientError::Unreachable(format!(
            "no server answered ({})",
            why.join("; ")
        )));
    };
    let mut rows = Vec::new();
    for m in &first.members {
        let status = if m.id == first.id {
            Some(first.clone())
        } else {
            match Client::ask_node(&m.client, &Request::Status).await {
                Ok(Response::Status(s)) => Some(s),
                _ => None,
            }
        };
        rows.push(Row {
            id: m.id,
            addr: m.client.clone(),
            status,
        });
    }
    if rows.is_empty() {
        rows.push(Row {
            id: first.id,
            addr: first.addr.clone(),
            status: Some(first.clone()),
        });
    }
    let leader = rows
        .iter()
        .filter_map(|r| r.status.as_ref())
        .filter_map(|s| s.leader)
        .max();
    let term = rows
        .iter()
        .filter_map(|r| r.status.as_ref())
        .map(|s| s.term)
        .max()
        .unwrap_or(0);
    let leader_log = rows
        .iter()
        .filter_map(|r| r.status.as_ref())
        .find(|s| Some(s.id) == leader)
        .map(|s| s.last_log_index);
    let nodes: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| match &r.status {
            Some(s) => json!({
                "id": r.id, "addr": r.addr, "state": s.state, "term": s.term,
                "applied": s.applied, "lag": leader_log.map(|l| l.saturating_sub(s.applied)),
                "digest": s.digest,
            }),
            None => json!({"id": r.id, "addr": r.addr, "state": "Unreachable"}),
        })
        .collect();
    out.print(
        json!({"leader": leader, "term": term, "nodes": nodes}),
        || {
            let mut text = format!(
                "leader {} term {term}\n{:<4} {:<22} {:<12} {:>6} {:>10} {:>8}  digest",
                leader.map_or("none".to_string(), |l| l.to_string()),
                "id",
                "address",
                "role",
                "term",
                "applied",
                "lag"
            );
            for r in &rows {
                match &r.status {
                    Some(s) => text.push_str(&format!(
                        "\n{:<4} {:<22} {:<12} {:>6} {:>10} {:>8}  {}",
                        r.id,
                        r.addr,
                        s.state,
                        s.term,
                        s.applied,
                        leader_log
                            .map_or("-".to_string(), |l| l.saturating_sub(s.applied).to_string()),
                        s.digest
                    )),
                    None => text.push_str(&format!(
                        "\n{:<4} {:<22} {:<12}",
                        r.id, r.addr, "unreachable"
                    )),
                }
            }
            text
        },
    );
    EXIT_OK
}
