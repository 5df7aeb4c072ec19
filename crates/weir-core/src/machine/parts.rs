//! The commands of keyed limits and multi-part requests: a [`Definition`] (a limit that may
//! be keyed, or in shadow mode) and an [`AcquireParts`] (an acquire or take naming one or
//! more [`Part`]s, each a limit, an optional key and units).
//!
//! Plain data like the rest of [`super::command`]: serialized into log entries, field order
//! part of the format. The older [`Command::DefineLimit`] and [`Command::Acquire`] stay in
//! the log format and mean a [`Definition`] that is neither keyed nor shadow, and an
//! [`AcquireParts`] of one keyless part ([`Definition::from_legacy`], [`From<&Acquire>`]).
//!
//! The argument rules a request breaks on its own are checked here ([`Definition::validate`],
//! [`AcquireParts::validate`]): between 1 and [`PARTS_MAX`] parts, no limit named twice,
//! keys non-empty and at most [`KEY_BYTES_MAX`] bytes. Whether a part's key fits its limit
//! (a key on a keyed limit, none on an unkeyed one) needs the state and is the machine's.
//!
//! [`Command::DefineLimit`]: super::Command::DefineLimit
//! [`Command::Acquire`]: super::Command::Acquire

use serde::{Deserialize, Serialize};

use super::command::{Acquire, Priority, SessionId, TicketId, check_key, check_name};
use super::limit::LimitSpec;
use super::reply::Refusal;
use crate::bounds::{KEY_BYTES_MAX, KEYS_MAX_DEFAULT, LIMITS_MAX, PARTS_MAX, UNITS_MAX};

/// A limit's definition, as `DefineLimit` with two more settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    pub tenant: String,
    pub name: String,
    /// Most units held at once (per key, when keyed); 0 = no cap.
    pub concurrent: u32,
    /// Token refill per second (per key, when keyed); 0 = no rate.
    pub per_second: f64,
    /// Bucket size in tokens; `None` = `max(ceil(per_second), 1)`.
    pub burst: Option<u64>,
    /// One bucket or semaphore per key: every request on it names a key.
    pub keyed: bool,
    /// Most live keys of a keyed limit; `None` = [`KEYS_MAX_DEFAULT`]. Only with `keyed`.
    pub keys_max: Option<u32>,
    /// Evaluated and counted, never refuses (see [`LimitSpec::shadow`]).
    pub shadow: bool,
}

impl Definition {
    /// The definition a `DefineLimit` makes: not keyed, not shadow.
    pub fn from_legacy(
        tenant: &str,
        name: &str,
        concurrent: u32,
        per_second: f64,
        burst: Option<u64>,
    ) -> Definition {
        Definition {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
            concurrent,
            per_second,
            burst,
            keyed: false,
            keys_max: None,
            shadow: false,
        }
    }

    /// The spec this definition gives, or why it is invalid.
    pub fn spec(&self) -> Result<LimitSpec, String> {
        let keys_max = match (self.keyed, self.keys_max) {
            (false, None) => None,
            (false, Some(n)) => {
                return Err(format!(
                    "keys_max {n} is given for a limit that is not keyed"
                ));
            }
            (true, n) => {
                let n = n.unwrap_or(KEYS_MAX_DEFAULT);
                if n == 0 || n as usize > LIMITS_MAX {
                    return Err(format!("keys_max {n} is not in 1..={LIMITS_MAX}"));
                }
                Some(n)
            }
        };
        let mut spec = LimitSpec::new(self.concurrent, self.per_second, self.burst)?;
        spec.keys_max = keys_max;
        spec.shadow = self.shadow;
        Ok(spec)
    }

    /// Checks the arguments alone: names and the spec.
    pub fn validate(&self) -> Result<(), Refusal> {
        check_key("tenant", &self.tenant)?;
        check_key("limit name", &self.name)?;
        self.spec().map_err(Refusal::Invalid)?;
        Ok(())
    }
}

/// One limit of a request: which limit, which key of it (keyed limits only), how many units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub limit: String,
    /// The key of a keyed limit; `None` on an unkeyed one.
    pub key: Option<String>,
    /// Units wanted, at least 1.
    pub units: u32,
}

/// A request for a permit (or a take) on one or more limits of one tenant, decided in one
/// entry for all its parts: granted on every part under one fence, or on none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcquireParts {
    pub session: SessionId,
    pub ticket: TicketId,
    pub tenant: String,
    /// In the order the client gave; replies name the first part's units.
    pub parts: Vec<Part>,
    pub priority: Priority,
    /// The agent acting, for agent-scoped halts.
    pub agent: Option<String>,
    /// Queue when a part has no room; `false` answers `Busy` instead.
    pub wait: bool,
}

impl From<&Acquire> for AcquireParts {
    fn from(a: &Acquire) -> AcquireParts {
        AcquireParts {
            session: a.session,
            ticket: a.ticket,
            tenant: a.tenant.clone(),
            parts: vec![Part {
                limit: a.limit.clone(),
                key: None,
                units: a.units,
            }],
            priority: a.priority.clone(),
            agent: a.agent.clone(),
            wait: a.wait,
        }
    }
}

impl AcquireParts {
    /// Checks the arguments alone: names, 1..=[`PARTS_MAX`] parts naming distinct limits,
    /// keys, units in `1..=UNITS_MAX`, a weight of at least 1. A refusal names the part by
    /// its position (from 1) and its limit.
    pub fn validate(&self) -> Result<(), Refusal> {
        check_key("tenant", &self.tenant)?;
        if self.parts.is_empty() || self.parts.len() > PARTS_MAX {
            return Err(Refusal::Invalid(format!(
                "{} parts, a request names 1..={PARTS_MAX}",
                self.parts.len()
            )));
        }
        for (i, part) in self.parts.iter().enumerate() {
            let n = i + 1;
            check_key(&format!("part {n}'s limit name"), &part.limit)?;
            if let Some(key) = &part.key {
                check_key_bytes(n, &part.limit, key)?;
            }
            if part.units == 0 || part.units > UNITS_MAX {
                return Err(Refusal::Invalid(format!(
                    "part {n} ({}): units {} is not in 1..={UNITS_MAX}",
                    part.limit, part.units
                )));
            }
            if self.parts[..i].iter().any(|p| p.limit == part.limit) {
                return Err(Refusal::Invalid(format!(
                    "part {n} names limit {} again: a request names each limit once",
                    part.limit
                )));
            }
        }
        check_name("fairness key", &self.priority.fairness_key)?;
        if let Some(agent) = &self.agent {
            check_key("agent", agent)?;
        }
        if self.priority.fairness_weight == 0 {
            return Err(Refusal::Invalid(
                "fairness weight 0: weights are at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Checks part `n`'s key: non-empty, at most [`KEY_BYTES_MAX`] bytes.
fn check_key_bytes(n: usize, limit: &str, key: &str) -> Result<(), Refusal> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(Refusal::Invalid(format!(
            "part {n} ({limit}): key is {} bytes, not in 1..={KEY_BYTES_MAX}",
            key.len()
        )));
    }
    Ok(())
}
