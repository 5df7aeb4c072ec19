//! The `weir` binary: parses the command line and hands it to [`weir::cli`].

#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    let cli = weir::cli::Cli::parse();
    std::process::exit(weir::cli::run(cli));
}
