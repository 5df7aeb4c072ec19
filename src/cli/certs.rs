//! `weir certs init DIR` (a development CA and node certificates, [`weir_server::security::certs`])
//! and `weir token hash SECRET` (the sha256 hex a config's `[[tokens]]` entry stores).

use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK, Exit};
use weir_server::security::{certs, hash_token};

#[derive(Subcommand, Debug)]
pub enum CertsCommand {
    /// Write ca.pem and node{i}.pem / node{i}.key (loopback names) into DIR.
    Init {
        /// The directory to write the CA and node certificates into (created if missing).
        dir: std::path::PathBuf,
        /// How many node certificates.
        #[arg(long, default_value_t = 3)]
        nodes: u64,
    },
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Print the sha256 hex of SECRET, for a `[[tokens]]` entry's `sha256`.
    Hash {
        /// The token's secret, as clients will send it.
        secret: String,
    },
}

pub fn certs(command: &CertsCommand) -> Exit {
    let CertsCommand::Init { dir, nodes } = command;
    match certs::init(dir, *nodes) {
        Ok(files) => {
            for f in files {
                super::output::say(&format!("wrote {}", f.display()));
            }
            EXIT_OK
        }
        Err(e) => {
            eprintln!("weir certs init: {e}");
            EXIT_ERROR
        }
    }
}

pub fn token(command: &TokenCommand) -> Exit {
    let TokenCommand::Hash { secret } = command;
    super::output::say(&hash_token(secret));
    EXIT_OK
}
