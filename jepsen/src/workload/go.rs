//! Go holders: permit holders running the Go client (`clients/go`) in processes of their
//! own, beside the Rust holders on the same limits, so that P1, capacity, linearizability
//! and `told` judge the Go client's beliefs as they judge the Rust library's and the Python
//! client's (`--go-holders N`).
//!
//! Each is the program `clients/go/cmd/weir-jepsen-holder` (its package doc says what it
//! does and records), built once per run with the Go toolchain (with
//! the build tag `weir_planted` in a planted harness build, so `WEIR_PLANT` can switch on
//! the Go client's own plants), or a binary `--go-holder` names. It takes the Python
//! driver's arguments and writes the same ops; [`super::python`]'s driver runs it. Its
//! stderr goes to `go-holder-N.log`; a `go-holder` fact opens and closes each driver's
//! stretch, read by the `go holders` checker.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::process::Process;
use super::python::{drive, holder_args};

/// The Go holders of a run.
#[derive(Clone, Debug)]
pub struct GoHolders {
    /// How many: taking turns on `mutex` and `three`.
    pub count: u64,
    /// The holder binary.
    pub binary: PathBuf,
    /// Every which permit a holder holds through a stop of its process past its TTL (0:
    /// never); the run sets it when `client-pause` is requested.
    pub pause_every: u64,
    /// The folder the run built `binary` into, removed when the run ends (`None` for a
    /// binary the caller named).
    pub built_in: Option<PathBuf>,
}

impl GoHolders {
    /// Builds the holder from `clients/go` into `dir` with the `go` on PATH (no module
    /// proxy: the client uses the standard library only); answers the binary.
    pub fn build(dir: &Path) -> Result<PathBuf, String> {
        let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../clients/go");
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let binary = dir.join("weir-jepsen-go-holder");
        let mut go = std::process::Command::new("go");
        go.arg("build");
        if weir_core::planted::ENABLED {
            go.args(["-tags", "weir_planted"]);
        }
        let out = go
            .arg("-o")
            .arg(&binary)
            .arg("./cmd/weir-jepsen-holder")
            .current_dir(&source)
            .env("GOFLAGS", "-mod=mod")
            .env("GOPROXY", "off")
            .output()
            .map_err(|e| format!("cannot run go build (is golang-go installed?): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "go build of the Go holder failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(binary)
    }
}

/// One Go holder on `limit` (of `cap`), reaching the nodes at `http`; its stderr goes to
/// `log`. Returns once it has exited (or was killed).
pub async fn go_holder(
    p: Process,
    holders: Arc<GoHolders>,
    http: Vec<String>,
    (limit, cap): (&'static str, u64),
    log: PathBuf,
) {
    let mut command = tokio::process::Command::new(&holders.binary);
    holder_args(&mut command, &p, &http, (limit, cap), holders.pause_every);
    drive(
        &p,
        command,
        "go-holder",
        (limit, cap),
        &log,
        &holders.binary,
    )
    .await;
}
