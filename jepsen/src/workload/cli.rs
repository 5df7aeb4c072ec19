//! The CLI holder: permits held by `weir acquire cli -- COMMAND` processes (the CLI), whose
//! COMMAND is this harness's own binary in its command mode ([`command_main`]), so that
//! P1, capacity, the linearizability checker and `told` judge what the CLI's command was
//! told: its belief runs from its start (it is given `WEIR_FENCE` once the permit is
//! granted) to the SIGTERM the CLI sends when the permit may be lost, or to its own exit.
//!
//! The command writes to a record file, on CLOCK_BOOTTIME (the clock the client library
//! keeps its deadline on): `start NS FENCE PID` once its signal handlers are in place, then
//! `term NS` when SIGTERM arrives or `exit NS` when it ends on its own (its hold is over, or
//! SIGUSR1: the harness letting a pinned hold go). The CLI runs with `--json`, so when it
//! stops its command it says the session's belief deadline on stderr
//! (`{"lost": WHY, "deadline_boot_ns": N}`). Both go into one `hold` fact
//! (`"client": "cli"`, `"application": true`), converted to the harness's clock as the
//! Python holders' times are; a hold whose CLI never lost the permit carries no deadline
//! (`told` leaves it out; the other checkers judge it).
//!
//! Its connections come from [`CLI_CLIENT_IP`] (`weir --local-addr`), so the client fronts
//! can fault its links and no one else's: the `client-cut` fault pins it ([`CutClient`], as
//! it pins the cut client) and cuts it from the leader with the cut client, long enough for
//! its session's deadline to pass while the command holds; two waiters of ordinary
//! addresses ([`super::permits`] on [`CLI_LIMIT`]) are granted the permit once the session
//! expires. Run only when `client-cut` is asked for (loopback mode).
//!
//! Invariants: one CLI process at a time; every command it starts is waited for (bounded:
//! killed [`CLI_WAIT`] after a let-go or the run's end); the record file is removed after.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cut::CutClient;
use super::process::Process;
use super::python::boot_ns;
use crate::client_front::CLI_CLIENT_IP;
use crate::history::Kind;
use crate::setup::{CLI_LIMIT, TENANT, TTL};

/// The first argument that puts this binary in its command mode.
pub const COMMAND_FLAG: &str = "--cli-command";

/// A pinned hold's command holds this long at most (the fault lets it go sooner).
const PINNED_HOLD_MS: u64 = 30_000;

/// How long a CLI process may take after a let-go, or the run's end, before it is killed.
const CLI_WAIT: Duration = Duration::from_secs(15);

/// The command mode: `--cli-command RECORD HOLD_MS` (module doc). Exit 0, or 2 on bad
/// arguments or a record file it cannot write.
pub fn command_main(args: &[std::ffi::OsString]) -> i32 {
    let (Some(record), Some(hold)) = (args.first(), args.get(1)) else {
        eprintln!("weir-jepsen {COMMAND_FLAG} RECORD HOLD_MS");
        return 2;
    };
    let Some(hold_ms) = hold.to_str().and_then(|h| h.parse::<u64>().ok()) else {
        eprintln!("weir-jepsen {COMMAND_FLAG}: HOLD_MS {hold:?} is not a count");
        return 2;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(_) => return 2,
    };
    runtime.block_on(command(Path::new(record), hold_ms))
}

async fn command(record: &Path, hold_ms: u64) -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut usr1)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::user_defined1()),
    ) else {
        return 2;
    };
    let fence = std::env::var("WEIR_FENCE").unwrap_or_default();
    let note = |line: String| {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(record)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .is_ok()
    };
    if !note(format!(
        "start {} {fence} {}\n",
        boot_ns(),
        std::process::id()
    )) {
        return 2;
    }
    let ended = tokio::select! {
        _ = term.recv() => "term",
        _ = usr1.recv() => "exit",
        _ = tokio::time::sleep(Duration::from_millis(hold_ms)) => "exit",
    };
    if note(format!("{ended} {}\n", boot_ns())) {
        0
    } else {
        2
    }
}

/// What the record file said: the start (boot ns, fence, pid) and the end (`term` or
/// `exit`, boot ns).
#[derive(Debug, Default, PartialEq)]
struct Record {
    start: Option<(u64, u64, u32)>,
    end: Option<(bool, u64)>,
}

fn parse_record(text: &str) -> Record {
    let mut r = Record::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        match words.first() {
            Some(&"start") => {
                if let (Some(at), Some(fence), Some(pid)) = (n(1), n(2), n(3)) {
                    r.start = Some((at, fence, pid as u32));
                }
            }
            Some(&"term") => r.end = n(1).map(|at| (true, at)),
            Some(&"exit") => r.end = n(1).map(|at| (false, at)),
            _ => {}
        }
    }
    r
}

/// The CLI's loss report on its stderr: why, and the deadline on the boot clock.
fn lost_line(stderr: &str) -> Option<(String, u64)> {
    stderr.lines().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        Some((
            v["lost"].as_str()?.to_string(),
            v["deadline_boot_ns"].as_u64()?,
        ))
    })
}

/// The CLI holder's process (module doc): `weir` is the CLI, `dir` the run's folder (the
/// record files go there).
pub async fn cli_holder(p: Process, weir: PathBuf, dir: PathBuf, handle: Arc<CutClient>) {
    let mut rng = p.rng();
    // The harness's time 0 on the boot clock.
    let epoch = boot_ns().saturating_sub(p.history.now_ns());
    let mut n = 0;
    while p.running() {
        n += 1;
        let record = dir.join(format!("cli-holder-{}-{n}.record", p.id));
        let pinned = handle.take_pin();
        let hold_ms = match pinned {
            Some(_) => PINNED_HOLD_MS,
            None => rng.range(100, 500),
        };
        hold_once(&p, (&weir, &record), hold_ms, (&handle, pinned), epoch).await;
        let _ = std::fs::remove_file(&record);
        if pinned.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The `weir acquire` command line of one hold.
fn cli_command(p: &Process, weir: &Path, record: &Path, hold_ms: u64) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(weir);
    command
        .arg("--servers")
        .arg(p.servers.join(","))
        .args(["--json", "--tenant", TENANT, "--local-addr"])
        .arg(CLI_CLIENT_IP.to_string())
        .args(["acquire", CLI_LIMIT, "--timeout", "5", "--ttl-ms"])
        .arg(TTL.as_millis().to_string())
        .arg("--")
        .arg(std::env::current_exe().unwrap_or_else(|_| PathBuf::from("weir-jepsen")))
        .arg(COMMAND_FLAG)
        .arg(record)
        .arg(hold_ms.to_string())
        .env_remove("WEIR_TOKEN")
        .env_remove("WEIR_CA")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(group) = crate::secure::run_group() {
        command.arg("--group").arg(group.to_string());
    }
    if let Some(secure) = crate::secure::current() {
        command.env("WEIR_CA", &secure.ca);
        if let Some(token) = secure.token(crate::secure::Access::Tenant(TENANT)) {
            command.env("WEIR_TOKEN", token);
        }
    }
    command
}

/// One CLI process: acquire, run the command for `hold_ms` (pinned: until let go, or lost),
/// recorded.
async fn hold_once(
    p: &Process,
    (weir, record): (&Path, &Path),
    hold_ms: u64,
    (handle, pinned): (&CutClient, Option<u64>),
    epoch: u64,
) {
    let mut command = cli_command(p, weir, record, hold_ms);
    let invoked = p
        .history
        .record(p.id, Kind::Invoke, "acquire", json!({"limit": CLI_LIMIT}));
    let Ok(mut child) = command.spawn() else {
        let v = json!({"limit": CLI_LIMIT, "error": "cannot start the CLI"});
        p.history.record(p.id, Kind::Fail, "acquire", v);
        return;
    };
    let stderr = child.stderr.take().map(|mut e| {
        tokio::spawn(async move {
            let mut text = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut e, &mut text).await;
            text
        })
    });
    let at = |boot: u64| boot.saturating_sub(epoch);
    let mut started = None;
    let mut kill_at: Option<Instant> = None;
    let mut signalled = false;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        let seen = parse_record(&std::fs::read_to_string(record).unwrap_or_default());
        if let (None, Some((boot, fence, _))) = (started, seen.start) {
            started = Some(fence);
            let v = json!({"limit": CLI_LIMIT, "fence": fence, "invoke_ns": invoked});
            p.history.record_at(p.id, Kind::Ok, "acquire", v, at(boot));
            if pinned.is_some() {
                handle.set_holding(fence);
            }
        }
        let let_go = pinned.is_some_and(|epoch| handle.let_go_epoch() != epoch);
        if (let_go || !p.running()) && !signalled {
            signalled = true;
            if let Some((_, _, pid)) = seen.start {
                // It may have exited already: then there is nothing to let go.
                let _ = std::process::Command::new("kill")
                    .args(["-USR1", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
            kill_at = Some(Instant::now() + CLI_WAIT);
        }
        if kill_at.is_some_and(|k| Instant::now() >= k) {
            let _ = child.start_kill();
            break child.wait().await.ok();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if pinned.is_some() {
        handle.set_holding(0);
    }
    let stderr = match stderr {
        Some(task) => task.await.unwrap_or_default(),
        None => String::new(),
    };
    let seen_ns = p.history.now_ns();
    let record_text = std::fs::read_to_string(record).unwrap_or_default();
    let Record { start, end } = parse_record(&record_text);
    let Some((from, fence, _)) = start else {
        // No command ran: refused or timed out (exit 3), or of unknown outcome.
        let kind = match status.and_then(|s| s.code()) {
            Some(3) => Kind::Fail,
            _ => Kind::Info,
        };
        let v = json!({"limit": CLI_LIMIT, "error": stderr.lines().last().unwrap_or("")});
        p.history.record(p.id, kind, "acquire", v);
        return;
    };
    if started.is_none() {
        // The command ran and ended between two looks at the record (a grant that arrived
        // past its deadline ends within milliseconds): its acquire is still to record.
        let v = json!({"limit": CLI_LIMIT, "fence": fence, "invoke_ns": invoked});
        p.history.record_at(p.id, Kind::Ok, "acquire", v, at(from));
    }
    let lost = lost_line(&stderr);
    let to = end.map_or(seen_ns, |(_, e)| at(e));
    let told = end.filter(|(term, _)| *term).map(|(_, e)| at(e));
    let hold = json!({"limit": CLI_LIMIT, "cap": 1, "fence": fence, "from_ns": at(from),
        "to_ns": to.max(at(from)), "seen_ns": seen_ns,
        "deadline_ns": lost.as_ref().map(|(_, d)| at(*d)), "told_ns": told,
        "lost": lost.map(|(why, _)| why), "application": true, "client": "cli"});
    p.history.record_at(p.id, Kind::Ok, "hold", hold, seen_ns);
    // The CLI released the permit itself; the harness does not see the outcome.
    let v = json!({"limit": CLI_LIMIT, "fence": fence});
    p.history.record(p.id, Kind::Invoke, "release", v.clone());
    p.history.record(p.id, Kind::Info, "release", v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_file_and_the_cli_loss_line_parse() {
        let r = parse_record("start 100 7 4242\nterm 900\n");
        assert_eq!(
            r,
            Record {
                start: Some((100, 7, 4242)),
                end: Some((true, 900))
            }
        );
        let r = parse_record("start 100 7 4242\nexit 300\n");
        assert_eq!(r.end, Some((false, 300)));
        assert_eq!(parse_record("start 1\n"), Record::default());
        let stderr = "{\"tenant\":\"jepsen\",\"fence\":7}\nweir: something\n{\"lost\":\"lease deadline passed without a keep-alive\",\"deadline_boot_ns\":850}\n";
        assert_eq!(
            lost_line(stderr),
            Some(("lease deadline passed without a keep-alive".into(), 850))
        );
        assert_eq!(lost_line("{\"fence\":7}\n"), None);
    }
}
