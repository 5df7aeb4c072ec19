//! The `weir` command line: parses arguments, runs the command, maps outcomes to exit codes
//! (0 done, 1 error, 2 usage, 3 refused).
//!
//! This file holds the clap definitions and the dispatch; each command group has a file of
//! its own, and `output.rs` how every command prints and ends.

mod acquire;
mod bench;
mod certs;
mod cluster;
mod halt;
mod limit;
mod log;
mod output;
mod runs;
mod serve;
mod status;

use clap::{Parser, Subcommand};

use crate::client::Client;
use crate::security::ClientSecurity;

pub use output::{
    EXIT_ERROR, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Exit, Output, answered, client_error, refused,
    replied,
};

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
    /// The token to present (its role decides what may be done).
    #[arg(long, global = true, env = "WEIR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Connect with TLS, verifying the servers against this CA certificate (PEM).
    #[arg(long, global = true, env = "WEIR_CA")]
    pub ca: Option<std::path::PathBuf>,
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
    /// Development certificates.
    #[command(subcommand)]
    Certs(certs::CertsCommand),
    /// Token helpers.
    #[command(subcommand)]
    Token(certs::TokenCommand),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Exit {
    if let Command::Serve { config, data_dir } = &cli.command {
        return serve::run(config.as_deref(), data_dir.clone());
    }
    if let Command::Certs(c) = &cli.command {
        return certs::certs(c);
    }
    if let Command::Token(c) = &cli.command {
        return certs::token(c);
    }
    let security = match ClientSecurity::new(cli.ca.as_deref(), cli.token.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("weir: {e}");
            return EXIT_USAGE;
        }
    };
    if let Command::Bench(args) = &cli.command {
        return bench::run(args, &cli.servers, &security, &Output { json: cli.json });
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
        let client =
            Client::with_security(cli.servers.clone(), security.clone()).stale_reads(cli.stale);
        let out = Output { json: cli.json };
        match &cli.command {
            Command::Serve { .. } | Command::Bench(_) | Command::Certs(_) | Command::Token(_) => {
                unreachable!("handled above")
            }
            Command::Status => status::run(&cli.servers, &security, &out).await,
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
