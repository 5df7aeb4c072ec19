//! [`Command::validate`]: every bound a command can break on its own, without the state —
//! name and reason lengths, empty keys, units, weights, TTLs, a limit's spec — in one
//! function that both the network edge (`weir_server::server::edge`) and the machine call.
//!
//! The edge calls it before a command is proposed, so a command that breaks one never reaches
//! the log; the machine calls it again first thing in `apply` (defence in depth: a log written
//! by another build, or a caller that bypassed the edge). Bounds that depend on the state
//! (sessions, limits, tickets, waiters open at once) can only be judged in log order, so they
//! stay with the machine.
//!
//! Invariant: each command is checked in the order its own handler checks, so the machine's
//! refusal is the same whether this function or the handler finds the problem first.

use super::command::{Command, check_key};
use super::limit::LimitSpec;
use super::reply::Refusal;
use crate::bounds::{REASON_BYTES_MAX, SESSION_TTL_MS_MAX, SESSION_TTL_MS_MIN};

impl Command {
    /// Checks the arguments alone; `Err` names the field and its bound.
    pub fn validate(&self) -> Result<(), Refusal> {
        match self {
            Command::DefineLimit {
                tenant,
                name,
                concurrent,
                per_second,
                burst,
            } => {
                check_key("tenant", tenant)?;
                check_key("limit name", name)?;
                LimitSpec::new(*concurrent, *per_second, *burst).map_err(Refusal::Invalid)?;
            }
            Command::RemoveLimit { tenant, name } => {
                check_key("tenant", tenant)?;
                check_key("limit name", name)?;
            }
            Command::OpenSession { ttl_ms } | Command::OpenSessionFor { ttl_ms, .. } => {
                if !(SESSION_TTL_MS_MIN..=SESSION_TTL_MS_MAX).contains(ttl_ms) {
                    return Err(Refusal::Invalid(format!(
                        "ttl_ms {ttl_ms} is not in {SESSION_TTL_MS_MIN}..={SESSION_TTL_MS_MAX}"
                    )));
                }
            }
            Command::KeepAlive { .. }
            | Command::CloseSession { .. }
            | Command::Release { .. }
            | Command::Tick => {}
            Command::Acquire(a) => a.validate()?,
            Command::AcquireParts(a) => a.validate()?,
            Command::Define(d) => d.validate()?,
            Command::SetTenant { tenant, .. } => check_key("tenant", tenant)?,
            Command::Reserve {
                tenant,
                run,
                agent,
                period,
                ..
            } => {
                check_key("tenant", tenant)?;
                check_key("run", run)?;
                if let Some(agent) = agent {
                    check_key("agent", agent)?;
                }
                if let Some(period) = period {
                    check_key("period", period)?;
                }
            }
            Command::ReleaseRun { tenant, run } => {
                check_key("tenant", tenant)?;
                check_key("run", run)?;
            }
            Command::Settle(s) => s.validate()?,
            Command::SetHalt {
                tenant,
                scope,
                reason,
            } => {
                check_key("tenant", tenant)?;
                scope.validate()?;
                check_reason(reason)?;
            }
            Command::ClearHalt { tenant, scope } => {
                check_key("tenant", tenant)?;
                scope.validate()?;
            }
        }
        Ok(())
    }
}

/// Checks a halt reason's length (at most [`REASON_BYTES_MAX`] bytes).
fn check_reason(reason: &str) -> Result<(), Refusal> {
    if reason.len() > REASON_BYTES_MAX {
        return Err(Refusal::Invalid(format!(
            "reason is {} bytes, the bound is {REASON_BYTES_MAX}",
            reason.len()
        )));
    }
    Ok(())
}
