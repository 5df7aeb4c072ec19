//! The `weir` binary: parses the command line and hands it to [`weir::cli`].

#![forbid(unsafe_code)]

use clap::Parser;

/// mimalloc for every allocation of the binary (the library and its tests keep the system
/// allocator): glibc's malloc, free and consolidation were about 14% of a node's CPU under
/// 256 clients (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = weir::cli::Cli::parse();
    std::process::exit(weir::cli::run(cli));
}
