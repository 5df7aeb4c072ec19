//! Python holders: permit holders running the Python client (`clients/python`) in processes
//! of their own, beside the Rust holders on the same limits, so that P1, capacity and the
//! linearizability checker judge the Python client's beliefs as they judge the Rust
//! library's (`--python-holders N`).
//!
//! Each is the driver `clients/python/tests/jepsen_holder.py` (its module doc says what it
//! does and records) run by the interpreter `--python` names, which must have the client
//! installed. It reaches the nodes over HTTP (a run with Python holders has every node serve
//! HTTP; TLS and its tenant's token through `WEIR_CA` and `WEIR_TOKEN` in a secure run), is
//! given its process number and the harness's start on CLOCK_BOOTTIME, and writes its ops
//! to stdout in the history's own format, on the harness's clock: each line is recorded as
//! it arrives, with its own time. Its `hold` facts are beliefs as its application saw them
//! (when `lost()` / `lost_reason()` told it), judged by `told` with the Rust holders'.
//! A planted harness build starts the interpreter with `-X weir_planted`, so the client's
//! own plants (`clients/python/src/weir/_planted.py`) can be switched on by `WEIR_PLANT`.
//! Its stderr goes to `python-holder-N.log` in the run's folder. When the workloads stop, its stdin is closed; it releases, closes its session and
//! exits, or is killed after [`EXIT_WAIT`].
//!
//! A `python-holder` fact opens and closes each driver's stretch (its limit, then its exit,
//! the lines it recorded, the lines refused and why): the `python holders` checker reads
//! them. A line that does not parse as an op of the driver's own process, or of a kind a
//! holder records, is refused (not recorded) and counted.
//!
//! The Go and TypeScript drivers take the Python driver's arguments: [`holder_args`] gives
//! them to each, and [`drive`] runs each.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use weir_client::BootInstant;

use super::process::Process;
use crate::history::{Kind, Op};
use crate::secure::Access;
use crate::setup::{TENANT, TTL};

/// How long a driver may take to exit after its stdin is closed: its last hold (at most
/// [`HOLD_MS`]'s upper end, or a pause of at most TTL + 1 s and a TTL of work after it),
/// its release (3 s at most) and its session's close (3 s at most), on a loaded machine.
pub const EXIT_WAIT: Duration = Duration::from_secs(20);

/// A Python holder's hold, ms (seeded in the driver): brief, as most Rust holders'.
pub(super) const HOLD_MS: (u64, u64) = (10, 150);

/// The ops a holder records; any other `f` in its output is refused.
const HOLDER_OPS: [&str; 4] = ["acquire", "hold", "release", "client-pause"];

/// The Python holders of a run.
#[derive(Clone, Debug)]
pub struct PythonHolders {
    /// How many: taking turns on `mutex` and `three`.
    pub count: u64,
    /// The interpreter (a venv's `bin/python` with the client installed).
    pub python: PathBuf,
    /// The driver.
    pub script: PathBuf,
    /// Every which permit a holder holds through a stop-the-world pause past its TTL (0:
    /// never); the run sets it when `client-pause` is requested.
    pub pause_every: u64,
}

impl PythonHolders {
    /// The driver's default path, next to the client it drives.
    pub fn default_script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../clients/python/tests/jepsen_holder.py")
    }
}

/// Nanoseconds on CLOCK_BOOTTIME now (the clock the Python client, the Rust library and so
/// the CLI keep their deadlines on).
pub(super) fn boot_ns() -> u64 {
    let zero = BootInstant::from_since_boot(Duration::ZERO);
    BootInstant::now().saturating_since(zero).as_nanos() as u64
}

/// One Python holder on `limit` (of `cap`), reaching the nodes at `http`; its stderr goes
/// to `log`. Returns once it has exited (or was killed).
pub async fn python_holder(
    p: Process,
    holders: Arc<PythonHolders>,
    http: Vec<String>,
    (limit, cap): (&'static str, u64),
    log: PathBuf,
) {
    let mut command = tokio::process::Command::new(&holders.python);
    if weir_core::planted::ENABLED {
        // A planted build: the client honours a Python plant `WEIR_PLANT` names (it is
        // inherited), as the Rust library in this harness honours a Rust one.
        command.args(["-X", "weir_planted"]);
    }
    command.arg(&holders.script);
    holder_args(&mut command, &p, &http, (limit, cap), holders.pause_every);
    drive(
        &p,
        command,
        "python-holder",
        (limit, cap),
        &log,
        &holders.python,
    )
    .await;
}

/// Gives a holder driver's `command` (its program, and its script if it has one, already
/// set) what every driver takes: the nodes' HTTP addresses `http`, the tenant, `limit` and
/// its `cap`, the process's number and seed, the harness's time 0 on the boot clock, the
/// TTL, the hold and pause lengths (`pause_every`: every which permit is held through a
/// pause; 0 never), and in a secure run the CA and the tenant's token; the environment's
/// own addresses and secrets removed, stdin and stdout piped, killed when dropped. The
/// Python, Go and TypeScript drivers take the same arguments.
pub(super) fn holder_args(
    command: &mut tokio::process::Command,
    p: &Process,
    http: &[String],
    (limit, cap): (&'static str, u64),
    pause_every: u64,
) {
    // The harness's time 0 on the boot clock: both clocks read back to back.
    let epoch = boot_ns().saturating_sub(p.history.now_ns());
    let ttl_ms = TTL.as_millis() as u64;
    command
        .args([
            "--servers",
            &http.join(","),
            "--tenant",
            TENANT,
            "--limit",
            limit,
        ])
        .args(["--cap", &cap.to_string(), "--process", &p.id.to_string()])
        .args([
            "--seed",
            &p.seed.to_string(),
            "--epoch-boot-ns",
            &epoch.to_string(),
        ])
        .args(["--ttl-ms", &ttl_ms.to_string()])
        .args(["--hold-ms", &format!("{},{}", HOLD_MS.0, HOLD_MS.1)])
        .args(["--pause-every", &pause_every.to_string()])
        // Past the TTL by 0.2–1 s: the session expires and the permit may go to another,
        // and the client's deadline passed at most 1.6 s before the resume (it falls 2.1–2.7 s
        // into the pause), so a client that tells its application ~3 s late keeps it
        // believing well over `told`'s bound past the resume.
        .args([
            "--pause-ms",
            &format!("{},{}", ttl_ms + 200, ttl_ms + 1_000),
        ])
        .env_remove("WEIR_HTTP_SERVERS")
        .env_remove("WEIR_SERVERS")
        .env_remove("WEIR_CA")
        .env_remove("WEIR_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    if let Some(secure) = crate::secure::current() {
        command.env("WEIR_CA", &secure.ca);
        if let Some(token) = secure.token(Access::Tenant(TENANT)) {
            command.env("WEIR_TOKEN", token);
        }
    }
}

/// Runs a holder driver's `command` (its arguments and environment set): records the
/// `fact` that opens its stretch, its ops as they come, and the `fact` that closes it;
/// `program` names it in an error. Its stderr goes to `log`.
pub(super) async fn drive(
    p: &Process,
    mut command: tokio::process::Command,
    fact: &'static str,
    (limit, cap): (&'static str, u64),
    log: &std::path::Path,
    program: &std::path::Path,
) {
    let record = |value: serde_json::Value| {
        p.history.record(p.id, Kind::Ok, fact, value);
    };
    record(json!({"limit": limit, "cap": cap, "started": true}));
    let stderr = std::fs::File::create(log).map(Stdio::from);
    let spawned = stderr
        .map_err(|e| e.to_string())
        .and_then(|stderr| command.stderr(stderr).spawn().map_err(|e| e.to_string()));
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let error = format!("cannot start {}: {e}", program.display());
            record(json!({"limit": limit, "exit": null, "error": error}));
            return;
        }
    };
    let ended = follow(p, child).await;
    record(
        json!({"limit": limit, "exit": ended.exit, "recorded": ended.recorded, "refused": ended.refused, "error": ended.first_refusal, "early": ended.early}),
    );
}

/// How a driver's run ended.
#[derive(Default)]
struct Ended {
    /// Its exit code (`None`: killed, or no status).
    exit: Option<i32>,
    /// Ops recorded from its output, and lines refused (the first refusal's reason).
    recorded: u64,
    refused: u64,
    first_refusal: Option<String>,
    /// It exited before the workloads stopped.
    early: bool,
}

/// Records the driver's ops as they come; closes its stdin once the run stops, and kills it
/// if it has not exited [`EXIT_WAIT`] later.
async fn follow(p: &Process, mut child: tokio::process::Child) -> Ended {
    let mut ended = Ended::default();
    let mut stdin = child.stdin.take();
    let Some(stdout) = child.stdout.take() else {
        ended.first_refusal = Some("no stdout".into());
        return ended;
    };
    let mut lines = BufReader::new(stdout).lines();
    let mut kill_at: Option<Instant> = None;
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => match holder_op(&line, p.id) {
                    Ok(op) => {
                        p.history.record_at(op.process, op.kind, &op.f, op.value, op.time_ns);
                        ended.recorded += 1;
                    }
                    Err(e) => {
                        ended.refused += 1;
                        ended.first_refusal.get_or_insert(e);
                    }
                },
                // Its stdout closed: it has exited (or is exiting).
                _ => break,
            },
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                if !p.running() && stdin.is_some() {
                    stdin = None; // dropped: closed, the driver's signal to stop
                    kill_at = Some(Instant::now() + EXIT_WAIT);
                }
                if kill_at.is_some_and(|at| Instant::now() >= at) {
                    let _ = child.start_kill();
                    break;
                }
            }
        }
    }
    ended.early = stdin.is_some();
    drop(stdin);
    let status = tokio::time::timeout(EXIT_WAIT, child.wait()).await;
    ended.exit = status.ok().and_then(|s| s.ok()).and_then(|s| s.code());
    ended
}

/// A line of the driver's output as an op of process `id`, or why it is refused.
fn holder_op(line: &str, id: u64) -> Result<Op, String> {
    let op: Op = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
    if op.process != id {
        return Err(format!(
            "an op of process {} from process {id}: {line}",
            op.process
        ));
    }
    if !HOLDER_OPS.contains(&op.f.as_str()) {
        return Err(format!("not an op a holder records: {line}"));
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_line_is_an_op_of_its_own_process_and_kinds() {
        let line =
            r#"{"process": 4, "kind": "ok", "f": "hold", "value": {"fence": 9}, "time_ns": 17}"#;
        let op = holder_op(line, 4).expect("a hold");
        assert_eq!(
            (op.process, op.kind, op.f.as_str(), op.time_ns),
            (4, Kind::Ok, "hold", 17)
        );
        assert!(
            holder_op(line, 5)
                .unwrap_err()
                .contains("of process 4 from process 5")
        );
        let other = line.replace("\"hold\"", "\"settle\"");
        assert!(
            holder_op(&other, 4)
                .unwrap_err()
                .contains("not an op a holder records")
        );
        assert!(holder_op("{\"process\": 4", 4).is_err());
    }
}
