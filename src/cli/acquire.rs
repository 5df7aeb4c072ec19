//! `weir acquire NAME [...] (--hold SECS | -- COMMAND [ARG...])`: hold a permit for a while,
//! or while a command runs.
//!
//! With a command: it runs with `WEIR_FENCE` (and `WEIR_UNITS`) in its environment, its
//! standard streams inherited; weir exits with its status and releases the permit when it
//! ends. If the permit may be lost (the lease deadline passed, a halt covers it, the session
//! expired) the command gets SIGTERM (SIGKILL 10 s later) and weir exits 3; weir learns of
//! the loss from the library's `Permit::lost`, which looks at the deadline at least every
//! `weir_client::LOOK_EVERY`, so the command is signalled within that of the deadline. With
//! `--json` it says so on stderr first as `{"lost": WHY, "deadline_boot_ns": N}`: the
//! session's belief deadline on CLOCK_BOOTTIME (ns since boot). SIGTERM or
//! ctrl-c to weir is passed on to the command as SIGTERM; the permit is released when it
//! has exited.
//!
//! With `--hold SECS`: holds, then releases; ctrl-c or SIGTERM end the hold early (released,
//! exit 0); a lost permit exits 3.
//!
//! `--key K` names the key of a keyed limit; `--part LIMIT[:UNITS][@KEY]` (repeatable) adds
//! limits decided with NAME in one entry: the permit holds on all of them under one fence,
//! or the acquire is refused (or waits) with nothing charged. A refusal for want of room
//! (`busy`, or a wait timed out) says when to retry in seconds from now and which part
//! lacked room and what it lacked ([`super::room`]).
//!
//! `--estimate` (with a command) takes the rate parts' units as an estimate and settles the
//! actual cost when the command ends: the command finds `WEIR_SETTLE_FILE` in its
//! environment, the path of an empty file weir made for it, and writes the cost there in
//! tokens (a decimal count; surrounding whitespace is ignored). Below the estimate the
//! difference returns to each rate part's bucket (never above its burst); above it the
//! difference is charged and recorded as an overrun. A file left empty settles nothing: the
//! estimate stands, as it does for a take never settled. A file that does not hold a count
//! is an error (exit 1) and settles nothing. The file is removed afterwards.

use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use super::{EXIT_ERROR, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Exit, Output, refused, room};
use weir_client::{AcquireError, AcquireOptions, BootInstant, Client, Lost, Permit, Session};
use weir_core::bounds::SESSION_TTL_MS_DEFAULT;
use weir_core::machine::{Part, Priority, Refusal, Reply};

#[derive(Args, Debug)]
pub struct AcquireArgs {
    /// The limit (in --tenant).
    pub name: String,
    /// Units of the limit to hold (or tokens to take, on a rate-only limit).
    #[arg(long, default_value_t = 1)]
    pub units: u32,
    /// The key of NAME, when NAME is a keyed limit (a user, an API key, an IP, a model).
    #[arg(long)]
    pub key: Option<String>,
    /// Another limit decided with NAME in one entry, as LIMIT[:UNITS][@KEY] (units 1 by
    /// default; the key is everything after the first @). Repeatable: every part is granted
    /// under one fence, or none is charged.
    #[arg(long = "part", value_parser = parse_part)]
    pub parts: Vec<Part>,
    /// Priority level: higher is served first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Fairness key: waiters of one level are served fairly across keys.
    #[arg(long, default_value = "")]
    pub fairness_key: String,
    /// Weight of the fairness key.
    #[arg(long, default_value_t = 1)]
    pub weight: u32,
    /// The agent acting (agent-scoped halts apply).
    #[arg(long)]
    pub agent: Option<String>,
    /// Give up waiting after SECS (exit 3).
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Refuse at once if there is no room (exit 3).
    #[arg(long)]
    pub no_wait: bool,
    /// Hold the permit for SECS, then release it.
    #[arg(long, conflicts_with = "command")]
    pub hold: Option<f64>,
    /// Session TTL, ms.
    #[arg(long, default_value_t = SESSION_TTL_MS_DEFAULT)]
    pub ttl_ms: u64,
    /// The rate parts' units are an estimate: the command writes the actual cost to the file
    /// named in WEIR_SETTLE_FILE, and weir settles it when the command ends.
    #[arg(long, conflicts_with = "hold")]
    pub estimate: bool,
    /// The command to run while holding the permit.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Runs `acquire`; while it waits, and when stderr is a terminal, redraws one status line
/// each second: queued, at which position (how many tickets were ahead when the cluster
/// answered `Queued`), how many wait in the limit's queue now, how long so far. The line is
/// erased once the acquire ends.
async fn with_progress<T>(
    acquire: impl std::future::Future<Output = T>,
    session: &Session,
    client: &Client,
    tenant: &str,
    name: &str,
) -> T {
    use std::io::{IsTerminal, Write};
    if !std::io::stderr().is_terminal() {
        return acquire.await;
    }
    let started = std::time::Instant::now();
    let progress = async {
        // A grant at once should print nothing: the first line comes after a second.
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        loop {
            tick.tick().await;
            let waiting = match client.limit_status(tenant, name).await {
                Ok(Some(l)) => format!("{} in the queue", l.waiting),
                _ => "queue length unknown".into(),
            };
            let position = match session.queued_position() {
                Some(ahead) => format!("{ahead} ahead when queued, "),
                None => String::new(),
            };
            eprint!(
                "\r\x1b[Kqueued for {tenant}/{name}: {position}{waiting}, waiting {} s",
                started.elapsed().as_secs()
            );
            let _ = std::io::stderr().flush();
        }
    };
    let result = tokio::select! {
        r = acquire => r,
        _ = progress => unreachable!("the progress loop never ends"),
    };
    if started.elapsed() >= Duration::from_secs(1) {
        eprint!("\r\x1b[K");
    }
    result
}

impl AcquireArgs {
    /// Every part of the request, NAME first.
    fn request_parts(&self) -> Vec<Part> {
        let first = Part {
            limit: self.name.clone(),
            key: self.key.clone(),
            units: self.units,
        };
        std::iter::once(first).chain(self.parts.clone()).collect()
    }
}

/// Parses `--part LIMIT[:UNITS][@KEY]`.
fn parse_part(text: &str) -> Result<Part, String> {
    let (head, key) = match text.split_once('@') {
        Some((head, key)) => (head, Some(key.to_owned())),
        None => (text, None),
    };
    let (limit, units) = match head.rsplit_once(':') {
        Some((limit, units)) => {
            let units = units
                .parse::<u32>()
                .map_err(|_| format!("units {units:?} of part {text:?} is not a count"))?;
            (limit, units)
        }
        None => (head, 1),
    };
    if limit.is_empty() {
        return Err(format!(
            "part {text:?} names no limit (LIMIT[:UNITS][@KEY])"
        ));
    }
    Ok(Part {
        limit: limit.to_owned(),
        key,
        units,
    })
}

fn seconds(what: &str, s: f64) -> Result<Duration, Exit> {
    if !s.is_finite() || !(0.0..=1e9).contains(&s) {
        eprintln!("weir: --{what} {s} is not a number of seconds");
        return Err(EXIT_USAGE);
    }
    Ok(Duration::from_secs_f64(s))
}

pub async fn run(args: &AcquireArgs, tenant: &str, client: &Client, out: &Output) -> Exit {
    if args.hold.is_none() && args.command.is_empty() {
        eprintln!("weir acquire: give --hold SECS or -- COMMAND [ARG...]");
        return EXIT_USAGE;
    }
    if args.estimate && args.command.is_empty() {
        eprintln!("weir acquire: --estimate needs -- COMMAND (it reports the cost)");
        return EXIT_USAGE;
    }
    let timeout = match args.timeout.map(|s| seconds("timeout", s)).transpose() {
        Ok(t) => t,
        Err(code) => return code,
    };
    let hold = match args.hold.map(|s| seconds("hold", s)).transpose() {
        Ok(h) => h,
        Err(code) => return code,
    };
    let session = match Session::open(client, Duration::from_millis(args.ttl_ms)).await {
        Ok(s) => s,
        Err(e) => return super::client_error(&e),
    };
    let options = AcquireOptions {
        tenant: tenant.to_owned(),
        limit: args.name.clone(),
        key: args.key.clone(),
        units: args.units,
        parts: args.parts.clone(),
        estimate: args.estimate,
        priority: Priority {
            level: args.priority,
            fairness_key: args.fairness_key.clone(),
            fairness_weight: args.weight,
        },
        agent: args.agent.clone(),
        wait: !args.no_wait,
        timeout,
        ticket: None,
    };
    let permit = match with_progress(
        session.acquire(options),
        &session,
        client,
        tenant,
        &args.name,
    )
    .await
    {
        Ok(p) => p,
        Err(AcquireError::Refused(Refusal::Busy { retry_at_ms })) => {
            let when = match retry_at_ms {
                Some(at) => match room::log_now_ms(client, tenant, &args.name).await {
                    Some(now) => room::retry_in(at, now),
                    None => format!("retry at log time {at} ms"),
                },
                None => "no room until a release".into(),
            };
            let lacking = room::lacking(client, tenant, &args.request_parts()).await;
            eprintln!("weir: refused: busy: {when}{lacking}");
            let _ = session.close().await;
            return EXIT_REFUSED;
        }
        Err(AcquireError::Refused(r)) => return refused(&r),
        Err(AcquireError::TimedOut) => {
            let lacking = room::lacking(client, tenant, &args.request_parts()).await;
            eprintln!(
                "weir: refused: timed out after {} s waiting for {tenant}/{}{lacking}",
                timeout.unwrap_or_default().as_secs_f64(),
                args.name
            );
            let _ = session.close().await;
            return EXIT_REFUSED;
        }
        Err(AcquireError::SessionLost) => {
            eprintln!("weir: session lost while waiting");
            return EXIT_ERROR;
        }
        Err(AcquireError::Client(e)) => return super::client_error(&e),
    };
    let granted = json!({"tenant": tenant, "name": args.name, "fence": permit.fence(), "units": permit.units()});
    let code = match hold {
        Some(hold) => {
            out.print(granted, || {
                format!("granted {tenant}/{} fence {}", args.name, permit.fence())
            });
            hold_for(&permit, hold).await
        }
        None => {
            if out.json {
                eprintln!("{granted}");
            }
            match args.estimate {
                true => run_estimated(&permit, &args.command, (&session, out)).await,
                false => run_command(&permit, &args.command, &[], (&session, out)).await,
            }
        }
    };
    let released = permit.release().await;
    let _ = session.close().await;
    if let Err(e) = released {
        eprintln!("weir: release: {e}");
    }
    code
}

async fn hold_for(permit: &Permit, hold: Duration) -> Exit {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("weir: cannot watch SIGTERM: {e}");
            return EXIT_ERROR;
        }
    };
    tokio::select! {
        _ = tokio::time::sleep(hold) => EXIT_OK,
        why = permit.lost() => {
            eprintln!("weir: permit lost: {why}");
            EXIT_REFUSED
        }
        _ = tokio::signal::ctrl_c() => EXIT_OK,
        _ = term.recv() => EXIT_OK,
    }
}

fn terminate(pid: u32) {
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}

/// Runs the command of an `--estimate` acquire with `WEIR_SETTLE_FILE`, then settles the
/// cost it wrote there (module doc). The command's exit status, or 1 when the cost could not
/// be read or settled.
async fn run_estimated(permit: &Permit, argv: &[String], tell: (&Session, &Output)) -> Exit {
    let out = tell.1;
    let path = std::env::temp_dir().join(format!(
        "weir-settle-{}-{}",
        std::process::id(),
        permit.fence()
    ));
    if let Err(e) = std::fs::File::create_new(&path) {
        eprintln!("weir: cannot make {}: {e}", path.display());
        return EXIT_ERROR;
    }
    let settle = [("WEIR_SETTLE_FILE", path.as_os_str())];
    let code = run_command(permit, argv, &settle, tell).await;
    let written = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    let cost = match written.as_deref().map(str::trim) {
        Ok("") => return code,
        Ok(text) => match text.parse::<u64>() {
            Ok(cost) => cost,
            Err(_) => {
                eprintln!("weir: WEIR_SETTLE_FILE holds {text:?}, not a count of tokens");
                return EXIT_ERROR;
            }
        },
        Err(e) => {
            eprintln!("weir: reading WEIR_SETTLE_FILE: {e}");
            return EXIT_ERROR;
        }
    };
    match permit.settle(cost).await {
        Ok(Reply::Overrun { tokens, .. }) => {
            report_settled(out, cost, tokens);
            code
        }
        Ok(Reply::Settled { .. }) => {
            report_settled(out, cost, 0);
            code
        }
        Ok(Reply::Refused(r)) => refused(&r),
        Ok(other) => {
            eprintln!("weir: settle: unexpected reply {other:?}");
            EXIT_ERROR
        }
        Err(e) => super::client_error(&e),
    }
}

/// Says on stderr (stdout is the command's) what a settlement did.
fn report_settled(out: &Output, cost: u64, overrun: u64) {
    if out.json {
        eprintln!("{}", json!({"settled": cost, "overrun_tokens": overrun}));
    } else if overrun > 0 {
        eprintln!("weir: settled at {cost} tokens: {overrun} above the estimate, charged");
    } else {
        eprintln!("weir: settled at {cost} tokens");
    }
}

/// Says on stderr that the permit may be lost (`why`) and `command` is being stopped: with
/// `--json` as `{"lost": WHY, "deadline_boot_ns": N}` (module doc), else as text.
fn report_lost(out: &Output, session: &Session, why: &Lost, command: &str) {
    if !out.json {
        eprintln!("weir: permit lost ({why}): stopping {command}");
        return;
    }
    // The deadline is kept on the boot clock; `Session::deadline` maps it to an `Instant`.
    let (boot, now, deadline) = (BootInstant::now(), Instant::now(), session.deadline());
    let since_boot = boot.saturating_since(BootInstant::from_since_boot(Duration::ZERO));
    let at = (since_boot + deadline.saturating_duration_since(now))
        .saturating_sub(now.saturating_duration_since(deadline));
    let line = json!({"lost": why.to_string(), "deadline_boot_ns": at.as_nanos() as u64});
    eprintln!("{line}");
}

/// Runs `argv` while the permit is held (module doc); `tell`: the session and the output
/// style, to report a loss.
async fn run_command(
    permit: &Permit,
    argv: &[String],
    env: &[(&str, &std::ffi::OsStr)],
    tell: (&Session, &Output),
) -> Exit {
    let mut child = match tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("WEIR_FENCE", permit.fence().to_string())
        .env("WEIR_UNITS", permit.units().to_string())
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir: cannot run {}: {e}", argv[0]);
            return EXIT_ERROR;
        }
    };
    let pid = child.id().unwrap_or(0);
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("weir: cannot watch SIGTERM: {e}");
            return EXIT_ERROR;
        }
    };
    let mut lost = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            why = permit.lost(), if lost.is_none() => {
                // PLANTED(cli-told-late): the command is stopped 3 s after the loss.
                if weir_core::planted::is(weir_core::planted::Plant::CliToldLate) {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                report_lost(tell.1, tell.0, &why, &argv[0]);
                terminate(pid);
                lost = Some(why);
                let killer = tokio::time::sleep(Duration::from_secs(10));
                tokio::pin!(killer);
                tokio::select! {
                    status = child.wait() => break status,
                    _ = &mut killer => {
                        let _ = child.start_kill();
                        break child.wait().await;
                    }
                }
            }
            _ = tokio::signal::ctrl_c() => terminate(pid),
            _ = term.recv() => terminate(pid),
        }
    };
    if lost.is_some() {
        return EXIT_REFUSED;
    }
    match status {
        Ok(s) => s.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + s.signal().unwrap_or(0)
        }),
        Err(e) => {
            eprintln!("weir: waiting for {}: {e}", argv[0]);
            EXIT_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_names_its_limit_units_and_key() {
        let part = |limit: &str, key: Option<&str>, units| Part {
            limit: limit.into(),
            key: key.map(Into::into),
            units,
        };
        assert_eq!(parse_part("global"), Ok(part("global", None, 1)));
        assert_eq!(
            parse_part("model:3@gpt-4"),
            Ok(part("model", Some("gpt-4"), 3))
        );
        assert_eq!(parse_part("ip@::1"), Ok(part("ip", Some("::1"), 1)));
        assert!(
            parse_part("model:x")
                .unwrap_err()
                .contains("is not a count")
        );
        assert!(parse_part("@k").unwrap_err().contains("names no limit"));
    }
}
