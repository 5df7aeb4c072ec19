//! TypeScript holders: permit holders running the TypeScript client (`clients/typescript`)
//! in processes of their own, beside the Rust holders on the same limits, so that P1,
//! capacity, linearizability and `told` judge the TypeScript client's beliefs as they judge
//! the Rust library's and the Python and Go clients' (`--ts-holders N`).
//!
//! Each is the driver `clients/typescript/test/jepsen_holder.mjs` (its head comment says
//! what it does and records) run by the `node` `--node` names, with the package built
//! (`npm ci` in `clients/typescript` builds `dist/`). A planted harness build starts Node
//! with `--conditions=weir-planted`, the one way the client's own plants
//! (`clients/typescript/src/planted.ts`, switched on by `WEIR_PLANT`) are read. It takes
//! the Python driver's arguments and writes the same ops; [`super::python`]'s driver runs
//! it. Its stderr (the client's own account, stamped on the history's clock) goes to
//! `ts-holder-N.log`; a `ts-holder` fact opens and closes each driver's stretch, read by
//! the `typescript` row.

use std::path::PathBuf;
use std::sync::Arc;

use super::process::Process;
use super::python::{drive, holder_args};

/// The TypeScript holders of a run.
#[derive(Clone, Debug)]
pub struct TsHolders {
    /// How many: taking turns on `mutex` and `three`.
    pub count: u64,
    /// The Node that runs the driver.
    pub node: PathBuf,
    /// The driver.
    pub script: PathBuf,
    /// Every which permit a holder holds through a stop-the-world pause past its TTL (0:
    /// never); the run sets it when `client-pause` is requested.
    pub pause_every: u64,
}

impl TsHolders {
    /// The driver's default path, next to the client it drives.
    pub fn default_script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../clients/typescript/test/jepsen_holder.mjs")
    }
}

/// One TypeScript holder on `limit` (of `cap`), reaching the nodes at `http`; its stderr
/// goes to `log`. Returns once it has exited (or was killed).
pub async fn ts_holder(
    p: Process,
    holders: Arc<TsHolders>,
    http: Vec<String>,
    (limit, cap): (&'static str, u64),
    log: PathBuf,
) {
    let mut command = tokio::process::Command::new(&holders.node);
    if weir_core::planted::ENABLED {
        command.arg("--conditions=weir-planted");
    }
    command.arg(&holders.script);
    holder_args(&mut command, &p, &http, (limit, cap), holders.pause_every);
    drive(&p, command, "ts-holder", (limit, cap), &log, &holders.node).await;
}
