//! `weir serve [--config FILE] [--data-dir DIR]`: runs a node until SIGTERM or ctrl-c.

use std::path::{Path, PathBuf};

use super::{EXIT_ERROR, EXIT_OK, EXIT_USAGE, Exit, log};
use weir_server::config::Config;

/// Loads the config (the single-node default without a file), starts logging and a runtime
/// of the config's worker threads, and serves.
pub fn run(config: Option<&Path>, data_dir: Option<PathBuf>) -> Exit {
    let config_path = config.map(Path::to_path_buf);
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
    match runtime.block_on(weir_server::server::serve(
        config,
        config_path,
        &weir_http::Front,
    )) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("weir serve: {e}");
            EXIT_ERROR
        }
    }
}
