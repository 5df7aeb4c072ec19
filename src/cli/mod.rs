//! The `weir` command line: parses arguments, runs the command, maps outcomes to exit codes
//! (0 done, 1 error, 2 usage, 3 refused: by the machine, or the token or its role).
//!
//! This file holds the clap definitions and the dispatch; each command group has a file of
//! its own, and `output.rs` how every command prints and ends. `weir bench` is the
//! `weir-bench` crate's: its arguments and its run, with the same exit statuses.

mod acquire;
mod certs;
mod cluster;
mod docs;
mod halt;
mod limit;
pub mod limits_file;
mod log;
mod output;
mod room;
mod runs;
mod serve;
mod session;
mod snapshot;
mod status;

use clap::{CommandFactory, Parser, Subcommand};

use weir_client::Client;
use weir_proto::tls::ClientSecurity;

pub use output::{
    EXIT_ERROR, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Exit, Output, answered, client_error, refused,
    replied,
};

/// The exit statuses, for `weir --help` (and the man page).
const EXIT_STATUS_HELP: &str = "Exit status: 0 done; 1 error (unreachable, internal); 2 usage; \
3 refused (halted, over a ceiling or budget, conflict, timed out waiting, a token missing, \
unknown or revoked, a role that may not)";

/// The help heading of the options every command takes: a subcommand's help lists its own
/// options first, then these.
const GLOBAL: &str = "Global options";

#[derive(Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "Weir: a replicated limit cluster",
    after_help = EXIT_STATUS_HELP
)]
pub struct Cli {
    /// Servers to reach the cluster through, comma-separated host:port.
    #[arg(
        long,
        global = true,
        env = "WEIR_SERVERS",
        default_value = "127.0.0.1:7411",
        value_delimiter = ',',
        help_heading = GLOBAL
    )]
    pub servers: Vec<String>,
    /// The tenant (namespace of limits, runs, budgets and halts) every command acts in.
    #[arg(
        long,
        global = true,
        env = "WEIR_TENANT",
        default_value = "default",
        help_heading = GLOBAL
    )]
    pub tenant: String,
    /// The Raft group to speak to, on a cluster of several groups: the data group the
    /// tenant lives in (`weir tenant place` shows it). Default: each node's default group.
    #[arg(long, global = true, env = "WEIR_GROUP", help_heading = GLOBAL)]
    pub group: Option<u64>,
    /// Machine-readable output.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    /// Answer reads from the node reached, without a quorum round (possibly stale).
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub stale: bool,
    /// The token to present (its role decides what may be done).
    #[arg(long, global = true, env = "WEIR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Connect with TLS, verifying the servers against this CA certificate (PEM).
    #[arg(long, global = true, env = "WEIR_CA")]
    pub ca: Option<std::path::PathBuf>,
    /// Open every connection to the cluster from this local address (a host with several).
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub local_addr: Option<std::net::IpAddr>,
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
    Status {
        /// Redraw the table every second until interrupted.
        #[arg(long)]
        watch: bool,
    },
    /// Define, show, list and remove limits.
    #[command(subcommand)]
    Limit(limit::LimitCommand),
    /// A tenant's limits as a file: apply one (all or nothing), or export them.
    #[command(subcommand)]
    Limits(limits_file::LimitsCommand),
    /// Hold a permit for a while, or while a command runs.
    Acquire(acquire::AcquireArgs),
    /// Set or show a tenant's ceilings and budgets.
    #[command(subcommand)]
    Tenant(runs::TenantCommand),
    /// Admit, release, settle and list runs.
    #[command(subcommand)]
    Run(runs::RunCommand),
    /// Spend charged to a tenant's period.
    Spent {
        /// The budget period (any name: `2026-05`, `week-19`).
        period: String,
    },
    /// Set, clear and list halts.
    #[command(subcommand)]
    Halt(halt::HaltCommand),
    /// End a session (its owner, or an admin for any session).
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// Add and remove nodes.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Back up the cluster, inspect a backup, restore a new cluster from one.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Load the cluster and report throughput and latency.
    Bench(weir_bench::BenchArgs),
    /// Development certificates.
    #[command(subcommand)]
    Certs(certs::CertsCommand),
    /// Token helpers.
    #[command(subcommand)]
    Token(certs::TokenCommand),
    /// Print a shell completion script (source it, or install it where your shell looks).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of weir; `weir man | man -l -` shows it.
    Man,
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Exit {
    if let Command::Serve { config, data_dir } = &cli.command {
        return serve::run(config.as_deref(), data_dir.clone());
    }
    if let Command::Completions { shell } = &cli.command {
        return docs::completions(*shell, Cli::command());
    }
    if let Command::Man = &cli.command {
        return docs::man(Cli::command());
    }
    if let Command::Certs(c) = &cli.command {
        return certs::certs(c);
    }
    if let Command::Token(c) = &cli.command {
        return certs::token(c);
    }
    log::init_client();
    if let Command::Snapshot(c) = &cli.command
        && let Some(exit) = snapshot::offline(c, &Output { json: cli.json })
    {
        return exit;
    }
    let security = match ClientSecurity::new(cli.ca.as_deref(), cli.token.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("weir: {e}");
            return EXIT_USAGE;
        }
    };
    if let Command::Bench(args) = &cli.command {
        let out = weir_bench::Output { json: cli.json };
        return weir_bench::run(args, &cli.servers, &security, &out);
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
        let mut client =
            Client::with_security(cli.servers.clone(), security.clone()).stale_reads(cli.stale);
        if let Some(ip) = cli.local_addr {
            client = client.with_local_addr(ip);
        }
        if let Some(group) = cli.group {
            client = client.in_group(group);
        }
        let out = Output { json: cli.json };
        match &cli.command {
            Command::Serve { .. }
            | Command::Bench(_)
            | Command::Certs(_)
            | Command::Token(_)
            | Command::Completions { .. }
            | Command::Man => unreachable!("handled above"),
            Command::Status { watch } => status::run(&cli.servers, &security, *watch, &out).await,
            Command::Limit(c) => limit::run(c, &cli.tenant, &client, &out).await,
            Command::Limits(c) => limits_file::run(c, &cli.tenant, &client, &out).await,
            Command::Acquire(a) => acquire::run(a, &cli.tenant, &client, &out).await,
            Command::Tenant(c) => runs::tenant(c, &cli.tenant, &client, &out).await,
            Command::Run(c) => runs::run(c, &cli.tenant, &client, &out).await,
            Command::Spent { period } => runs::spent(&cli.tenant, period, &client, &out).await,
            Command::Halt(c) => halt::run(c, &cli.tenant, &client, &out).await,
            Command::Session(c) => session::run(c, &client, &out).await,
            Command::Cluster(c) => cluster::run(c, &client, &out).await,
            Command::Snapshot(c) => snapshot::save(c, &client, &out).await,
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every argument and option of every command, with no help text.
    fn undocumented(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if arg.get_help().is_none() && !["help", "version"].contains(&id) {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in command.get_subcommands() {
            undocumented(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }

    #[test]
    fn every_argument_and_option_has_help_text() {
        let mut missing = Vec::new();
        undocumented(&Cli::command(), "weir", &mut missing);
        assert_eq!(missing, Vec::<String>::new(), "arguments without help text");
    }

    #[test]
    fn a_subcommand_lists_its_own_options_before_the_global_ones() {
        let help = Cli::try_parse_from(["weir", "limit", "define", "--help"])
            .unwrap_err()
            .to_string();
        let own = help.find("--concurrent").unwrap();
        let global = help
            .find("Global options")
            .expect("a Global options heading");
        assert!(own < global, "{help}");
        assert!(help[global..].contains("--tenant"), "{help}");
    }

    #[test]
    fn the_tenant_is_never_positional() {
        for args in [
            vec!["weir", "tenant", "set", "acme"],
            vec!["weir", "run", "list", "acme"],
            vec!["weir", "spent", "acme", "p"],
            vec!["weir", "halt", "list", "acme"],
        ] {
            assert!(Cli::try_parse_from(&args).is_err(), "{args:?} parsed");
        }
        let cli = Cli::try_parse_from(["weir", "spent", "p", "--tenant", "acme"]).unwrap();
        assert_eq!(cli.tenant, "acme");
    }

    #[test]
    fn the_bench_ends_with_the_statuses_of_every_command() {
        assert_eq!(weir_bench::EXIT_OK, EXIT_OK);
        assert_eq!(weir_bench::EXIT_ERROR, EXIT_ERROR);
        assert_eq!(weir_bench::EXIT_USAGE, EXIT_USAGE);
    }
}
