//! Token-lease holders ([`lease_holder`]) and the cluster takers beside them
//! ([`cluster_taker`]) on the leased rate limits (`LEASED_LIMITS`).
//!
//! A holder lives a string of lives, each on a thread of its own and a tokio runtime made
//! for that life: it opens a session (the harness's TTL), leases a share of its limit
//! (`Session::lease`) and takes one token at a time as fast as it can: from its local
//! bucket (`Leased::try_take`, no network), else by the fallback to the cluster
//! (`Leased::take`: one entry), pausing 50–100 ms after a fallback the cluster refused (each
//! refusal is a log entry; the local bucket loses nothing meanwhile, since its cap holds
//! more than 100 ms of its refill).
//! Every take is a `lease-take` op: its invoke before the decision and its ok after it,
//! both on the harness clock (spend time), with `"local"` saying which bucket it came from.
//! A life of a `leased` holder lasts 1–3 s and ends in one of four ways, drawn from
//! the holder's seed:
//! - **end**: the lease given up (`Leased::end`, the bucket's tokens back) and the session
//!   closed;
//! - **close**: the session closed under the lease, which ends with it (its tokens counted
//!   as spent);
//! - **crash**: the runtime dropped at once, its keep-alives and renewals with it, and the
//!   lease and session dropped outside any runtime so nothing more is sent (a kill -9 of
//!   the holder): the lease lapses with its session a TTL later and counts as spent;
//! - **stall**: the whole runtime stopped for TTL + 0.2–1 s (a blocking sleep: keep-alives
//!   and renewals stop too, as a stop-the-world pause would), then taking again at once,
//!   before anything else in the runtime runs: past its belief deadline nothing is local.
//!
//! A life of a `leased-fast` holder lasts until its session is lost (a cut past its TTL)
//! or the run stops, as an application's would.
//!
//! In a run with client fronts every holder's connections come from the cut client's
//! address (`client_front::CUT_CLIENT_IP`), so `client-cut` cuts the holders from the
//! leader while they go on deciding locally: a holder cut past its deadline must stop.
//!
//! Holders take turns on the two limits: every third on `leased-fast` (burst 4), wanting
//! 7 tokens a second and a cap of 3, most of that limit's leasable share; the others on
//! `leased` (4 a second, burst 40), wanting half a token a second and a cap of 10, so a cap
//! is far above what its rate refills in a TTL. The `leased` checker judges the cluster's grants and the local
//! spends together against `burst + rate × window` in spend time. `lease` facts record each
//! life's start and end (with the lease's figures), for the coverage.
//!
//! With `--python-lease-holders`, [`python_lease_holder`] runs the Python client's twin of
//! a holder (`jepsen/lease_holder.py`, over HTTP) and records its ops.
//!
//! Never: a take recorded outside the interval in which it was decided; a life that outlives
//! the run's stop by more than one stall.

use std::time::{Duration, Instant};

use serde_json::json;
use weir_client::{AcquireError, AcquireOptions, LeaseOptions, Leased, Session};

use super::process::Process;
use crate::client_front::CUT_CLIENT_IP;
use crate::history::Kind;
use crate::rng::Rng;
use crate::secure::Access;
use crate::setup::{LEASED_LIMITS, TENANT, TTL};

/// Lease holders (`--lease-holders N`, `--python-lease-holders N`).
#[derive(Clone, Debug)]
pub struct LeaseHolders {
    /// Rust holders.
    pub count: u64,
    /// Holders running the Python client (`jepsen/lease_holder.py`), and its interpreter.
    pub python: u64,
    pub interpreter: std::path::PathBuf,
}

/// What a holder of holder number `i` leases: (limit, per_second, burst, wanted rate a
/// second, wanted cap).
pub fn lease_of(i: u64) -> (&'static str, f64, u64, f64, u64) {
    let (fast, slow) = (LEASED_LIMITS[1], LEASED_LIMITS[0]);
    if i.is_multiple_of(3) {
        (fast.0, fast.1, fast.2, 7.0, 3)
    } else {
        (slow.0, slow.1, slow.2, 0.5, 10)
    }
}

/// How a life ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Normal,
    /// The session closed with the lease still held: the lease ends with it.
    Close,
    Crash,
    Stall,
}

/// A life that crashed (or closed its session under its lease) hands its lease and session
/// out, to be dropped once its runtime is.
type Remains = Option<(Leased, Option<Session>)>;

/// Starts holder `i` (its lease per [`lease_of`]) on a thread of its own; `bound`: its
/// connections come from the cut client's address.
pub fn lease_holder(
    p: Process,
    i: u64,
    bound: bool,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("lease-holder-{}", p.id))
        .spawn(move || {
            let mut rng = p.rng();
            while p.running() {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(_) => return,
                };
                let remains = runtime.block_on(life(&p, &mut rng, i, bound));
                // The runtime first: every task of the life stops, keep-alives and renewals
                // with it; then the lease, outside any runtime, so its drop sends nothing.
                drop(runtime);
                drop(remains);
            }
        })
}

/// One life of a holder: session, lease, takes, and its end.
async fn life(p: &Process, rng: &mut Rng, i: u64, bound: bool) -> Remains {
    let (limit, per_second, burst, rate, cap) = lease_of(i);
    let mut client = p.client(Access::Tenant(TENANT));
    if bound {
        client = client.with_local_addr(CUT_CLIENT_IP);
    }
    let session = match Session::open(&client, TTL).await {
        Ok(s) => s,
        Err(_) => {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return None;
        }
    };
    let leased = match session
        .lease(LeaseOptions::new(TENANT, limit, rate, cap))
        .await
    {
        Ok(l) => l,
        Err(e) => {
            p.history.record(
                p.id,
                Kind::Info,
                "lease",
                json!({"event": "refused", "limit": limit, "error": e.to_string()}),
            );
            let _ = session.close().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            return None;
        }
    };
    p.history.record(
        p.id,
        Kind::Info,
        "lease",
        json!({"event": "open", "limit": limit, "session": session.id()}),
    );
    // A holder of `leased-fast` lives until its session is lost, so that a cut meets it
    // spending; the others crash and stall.
    let fast = limit == LEASED_LIMITS[1].0;
    let end = match rng.range(0, 10) {
        _ if fast => End::Normal,
        0..=3 => End::Crash,
        4..=5 => End::Stall,
        6..=7 => End::Close,
        _ => End::Normal,
    };
    let length = match fast {
        true => Duration::MAX,
        false => Duration::from_millis(rng.range(1_000, 3_000)),
    };
    let stall_at = Duration::from_millis(rng.range(300, 1_500));
    let started = Instant::now();
    let mut stalled = false;
    while p.running() && started.elapsed() < length {
        if end == End::Stall && !stalled && started.elapsed() >= stall_at {
            stalled = true;
            let ms = TTL.as_millis() as u64 + rng.range(200, 1_000);
            p.history.record(
                p.id,
                Kind::Info,
                "lease",
                json!({"event": "stall", "limit": limit, "ms": ms}),
            );
            // The whole runtime stops: nothing of the session runs meanwhile.
            std::thread::sleep(Duration::from_millis(ms));
        }
        match take(p, &leased, limit, per_second, burst).await {
            Taken::Yes => {}
            Taken::Busy => {
                tokio::time::sleep(Duration::from_millis(rng.range(50, 100))).await;
            }
            Taken::Lost => break,
        }
    }
    let figures = leased.figures();
    let fact = |event: &str| {
        json!({"event": event, "limit": limit, "session": session.id(), "local": figures.local,
            "short": figures.short, "requests": figures.requests})
    };
    if end == End::Crash && p.running() {
        p.history.record(p.id, Kind::Info, "lease", fact("crash"));
        return Some((leased, Some(session)));
    }
    if end == End::Close {
        p.history.record(p.id, Kind::Info, "lease", fact("close"));
        // Dropped outside any runtime, as a crash's is: the close alone ends the lease.
        let close = tokio::time::timeout(Duration::from_secs(2), session.close());
        let _ = close.await;
        return Some((leased, None));
    }
    p.history.record(p.id, Kind::Info, "lease", fact("end"));
    let _ = tokio::time::timeout(Duration::from_secs(2), leased.end()).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), session.close()).await;
    None
}

/// How long a take by the fallback is waited for: a holder cut from the cluster must go on
/// deciding locally (and stop at its deadline), not hang on the cluster.
const FALLBACK_WAIT: Duration = Duration::from_millis(500);

/// What one take came to.
enum Taken {
    Yes,
    /// Neither bucket had a token.
    Busy,
    /// The session or the cluster is gone for this life.
    Lost,
}

/// One take of a token: locally if the bucket has it, else by the fallback; recorded.
async fn take(p: &Process, leased: &Leased, limit: &str, per_second: f64, burst: u64) -> Taken {
    let invoked = p.history.record(
        p.id,
        Kind::Invoke,
        "lease-take",
        json!({"limit": limit, "units": 1}),
    );
    let ok = |local: bool| {
        json!({"limit": limit, "units": 1, "invoke_ns": invoked, "per_second": per_second,
            "burst": burst, "local": local})
    };
    if leased.try_take(1) {
        p.history.record(p.id, Kind::Ok, "lease-take", ok(true));
        return Taken::Yes;
    }
    let local_before = leased.figures().local;
    match tokio::time::timeout(FALLBACK_WAIT, leased.take(1)).await {
        Ok(Ok(true)) => {
            // The fallback tries the local bucket first: it may have refilled meanwhile.
            let local = leased.figures().local > local_before;
            p.history.record(p.id, Kind::Ok, "lease-take", ok(local));
            Taken::Yes
        }
        Ok(Ok(false)) => {
            p.history.record(
                p.id,
                Kind::Fail,
                "lease-take",
                json!({"limit": limit, "error": "busy"}),
            );
            Taken::Busy
        }
        Ok(Err(e)) => {
            p.history.record(
                p.id,
                Kind::Info,
                "lease-take",
                json!({"limit": limit, "error": e.to_string()}),
            );
            Taken::Lost
        }
        Err(_) => {
            // Unknown (never counted by the checker, which counts only the takes known
            // granted); the holder goes on deciding locally, as an application would.
            p.history.record(
                p.id,
                Kind::Info,
                "lease-take",
                json!({"limit": limit, "error": "no answer within 0.5 s"}),
            );
            Taken::Busy
        }
    }
}

/// A process taking tokens of leased limit `limit` from the cluster alone, 1 to 3 at a
/// time (1 on `leased-fast`, whose own bucket holds 1 beside full leases), each take waiting (at most 2 s) for the cluster's bucket: it keeps that bucket drained, so
/// whatever the cluster grants is spent at once.
pub async fn cluster_taker(p: Process, limit: &'static str, per_second: f64, burst: u64) {
    let mut rng = p.rng();
    let client = p.client(Access::Tenant(TENANT));
    while let Some(session) = p.session(&client, TTL).await {
        while p.running() {
            // Never more than the cluster's own bucket can hold beside full leases.
            let units = rng.range(1, if burst >= 10 { 3 } else { 1 });
            let mut options = AcquireOptions::new(TENANT, limit);
            options.units = units as u32;
            options.timeout = Some(Duration::from_secs(2));
            let invoked = p.history.record(
                p.id,
                Kind::Invoke,
                "lease-take",
                json!({"limit": limit, "units": units}),
            );
            match session.acquire(options).await {
                Ok(permit) => {
                    permit.consume();
                    p.history.record(p.id, Kind::Ok, "lease-take", json!({"limit": limit, "units": units, "invoke_ns": invoked, "per_second": per_second, "burst": burst, "local": false}));
                }
                Err(AcquireError::TimedOut) => {
                    p.history.record(
                        p.id,
                        Kind::Fail,
                        "lease-take",
                        json!({"limit": limit, "error": "timed out"}),
                    );
                }
                Err(e) => {
                    p.history.record(
                        p.id,
                        Kind::Info,
                        "lease-take",
                        json!({"limit": limit, "error": e.to_string()}),
                    );
                    break;
                }
            }
        }
    }
}

/// One holder running the Python client's leases (`jepsen/lease_holder.py`), its lease per
/// [`lease_of`] of `i`, reaching the nodes at `http`; its ops are recorded as they come
/// (lines of another process, or not a lease op, are dropped), its stderr goes to `log`.
/// Its stdin is closed when the run stops; it is killed 10 s later if still running.
pub async fn python_lease_holder(
    p: Process,
    interpreter: std::path::PathBuf,
    i: u64,
    http: Vec<String>,
    log: std::path::PathBuf,
) {
    use tokio::io::AsyncBufReadExt;
    let (limit, per_second, burst, rate, cap) = lease_of(i);
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("lease_holder.py");
    let epoch = super::python::boot_ns().saturating_sub(p.history.now_ns());
    let mut command = tokio::process::Command::new(&interpreter);
    if weir_core::planted::ENABLED {
        command.args(["-X", "weir_planted"]);
    }
    command
        .arg(&script)
        .args([
            "--servers",
            &http.join(","),
            "--tenant",
            TENANT,
            "--limit",
            limit,
        ])
        .args([
            "--per-second",
            &per_second.to_string(),
            "--burst",
            &burst.to_string(),
        ])
        .args(["--rate", &rate.to_string(), "--cap", &cap.to_string()])
        .args([
            "--process",
            &p.id.to_string(),
            "--seed",
            &p.seed.to_string(),
        ])
        .args(["--epoch-boot-ns", &epoch.to_string()])
        .args(["--ttl-ms", &TTL.as_millis().to_string()])
        .env_remove("WEIR_CA")
        .env_remove("WEIR_TOKEN")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(secure) = crate::secure::current() {
        command.env("WEIR_CA", &secure.ca);
        if let Some(token) = secure.token(Access::Tenant(TENANT)) {
            command.env("WEIR_TOKEN", token);
        }
    }
    if let Ok(file) = std::fs::File::create(&log) {
        command.stderr(file);
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            p.history.record(
                p.id,
                Kind::Info,
                "lease",
                json!({"event": "refused", "limit": limit, "client": "python", "error": format!("cannot start {}: {e}", interpreter.display())}),
            );
            return;
        }
    };
    let mut stdin = child.stdin.take();
    let Some(stdout) = child.stdout.take() else {
        return;
    };
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut kill_at: Option<Instant> = None;
    loop {
        match tokio::time::timeout(Duration::from_millis(200), lines.next_line()).await {
            Ok(Ok(Some(line))) => {
                if let Ok(op) = serde_json::from_str::<crate::history::Op>(&line)
                    && op.process == p.id
                    && (op.f == "lease-take" || op.f == "lease")
                {
                    p.history
                        .record_at(op.process, op.kind, &op.f, op.value, op.time_ns);
                }
            }
            Ok(_) => break,
            Err(_) => {}
        }
        if !p.running() && stdin.is_some() {
            stdin = None; // closed: the driver's signal to stop
            kill_at = Some(Instant::now() + Duration::from_secs(10));
        }
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            let _ = child.start_kill();
            break;
        }
    }
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
}
