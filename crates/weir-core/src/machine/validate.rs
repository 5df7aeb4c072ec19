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
//! The machine's command handlers assume a command that passed: `Machine::apply` validates
//! every command before its handler runs, so a handler judges only what depends on the
//! state. (One argument rule stays with its handler: a reserve's hold needs a period.)
//!
//! The shapes and what a command names live in [`crate::machine::command`]; the rules live
//! here, so the command types know no refusal. A request of parts names 1..=`PARTS_MAX`
//! parts, each limit (each key of a keyed one) once, keys non-empty and at most `KEY_BYTES_MAX` bytes; whether a
//! part's key fits its limit (a key on a keyed limit, none on another) needs the state and
//! is the machine's. A definition's spec ([`Definition::spec`]) is built here too.

use std::fmt::Display;

use super::command::{
    Acquire, AcquireParts, Command, Definition, Effect, HaltScope, LeaseTokens, Part, Settle,
};
use super::limit::LimitSpec;
use super::reply::Refusal;
use crate::bounds::{
    APPLY_DEFINITIONS_MAX, BURST_MAX, KEY_BYTES_MAX, KEYS_LIVE_MAX, KEYS_MAX_DEFAULT,
    NAME_BYTES_MAX, PARTS_MAX, PER_SECOND_MAX, REASON_BYTES_MAX, SESSION_TTL_MS_MAX,
    SESSION_TTL_MS_MIN, UNITS_MAX,
};

impl Command {
    /// Checks the arguments alone; `Err` names the field and its bound.
    pub fn validate(&self) -> Result<(), Refusal> {
        // What every command's description names is checked the same way: its tenant is a
        // key, an open's TTL is in range. The arms below check the rest of each command.
        let described = self.describe();
        if let Some(tenant) = described.tenant {
            check_key("tenant", tenant)?;
        }
        if let Effect::Opens { ttl_ms } = described.effect
            && !(SESSION_TTL_MS_MIN..=SESSION_TTL_MS_MAX).contains(&ttl_ms)
        {
            return Err(Refusal::Invalid(format!(
                "ttl_ms {ttl_ms} is not in {SESSION_TTL_MS_MIN}..={SESSION_TTL_MS_MAX}"
            )));
        }
        match self {
            Command::DefineLimit { .. } | Command::Define(_) => {
                self.definition()
                    .expect("a definition command")
                    .validate()?;
            }
            Command::RemoveLimit { name, .. } => check_key("limit name", name)?,
            Command::ApplyLimits {
                tenant,
                definitions,
                ..
            } => check_apply(tenant, definitions)?,
            Command::SettleTake { cost, .. } => {
                if *cost > BURST_MAX {
                    return Err(Refusal::Invalid(format!(
                        "cost {cost} is above the bound of {BURST_MAX}"
                    )));
                }
            }
            Command::OpenSession { .. }
            | Command::OpenSessionFor { .. }
            | Command::KeepAlive { .. }
            | Command::KeepAliveAcked { .. }
            | Command::CloseSession { .. }
            | Command::Release { .. }
            | Command::SetTenant { .. }
            | Command::FreezeTenant { .. }
            | Command::DropFrozen { .. }
            | Command::Tick => {}
            Command::PlaceTenant { group, .. } => {
                if *group == 0 {
                    return Err(Refusal::Invalid(
                        "a tenant is placed in a data group, numbered from 1; group 0 is the \
                         metadata group"
                            .into(),
                    ));
                }
            }
            Command::AdoptTenant { frozen, .. } => {
                // The value itself is decoded, and checked against the state it would
                // make, when it is applied.
                let bytes = frozen.len();
                if bytes > crate::bounds::MOVE_BYTES_MAX {
                    return Err(Refusal::Invalid(format!(
                        "a frozen tenant of {bytes} bytes; the bound is {}",
                        crate::bounds::MOVE_BYTES_MAX
                    )));
                }
            }
            Command::Acquire(a) => a.validate()?,
            Command::AcquireParts(a) => a.validate()?,
            Command::LeaseTokens(l) => l.validate()?,
            Command::Reserve {
                run, agent, period, ..
            } => {
                check_key("run", run)?;
                if let Some(agent) = agent {
                    check_key("agent", agent)?;
                }
                if let Some(period) = period {
                    check_key("period", period)?;
                }
            }
            Command::ReleaseRun { run, .. } => check_key("run", run)?,
            Command::Settle(s) => s.validate()?,
            Command::SetHalt { scope, reason, .. } => {
                scope.validate()?;
                check_reason(reason)?;
            }
            Command::ClearHalt { scope, .. } => scope.validate()?,
            Command::ReturnTokens { parts, .. } => check_parts(parts)?,
            Command::DefineOverride {
                tenant,
                requests,
                unit_s,
            } => {
                override_definition(tenant, *requests, *unit_s)
                    .spec()
                    .map_err(|why| {
                        Refusal::Invalid(format!("override of {requests} per {unit_s} s: {why}"))
                    })?;
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

impl HaltScope {
    /// Checks the agent's name of an agent scope.
    pub fn validate(&self) -> Result<(), Refusal> {
        match self {
            HaltScope::Tenant => Ok(()),
            HaltScope::Agent(a) => check_key("agent", a),
        }
    }
}

impl Acquire {
    /// Checks the arguments alone: names, units in `1..=UNITS_MAX`, a weight of at least 1.
    pub fn validate(&self) -> Result<(), Refusal> {
        check_key("tenant", &self.tenant)?;
        check_key("limit name", &self.limit)?;
        check_name("fairness key", &self.priority.fairness_key)?;
        if let Some(agent) = &self.agent {
            check_key("agent", agent)?;
        }
        if self.units == 0 || self.units > UNITS_MAX {
            return Err(Refusal::Invalid(format!(
                "units {} is not in 1..={UNITS_MAX}",
                self.units
            )));
        }
        if self.priority.fairness_weight == 0 {
            return Err(Refusal::Invalid(
                "fairness weight 0: weights are at least 1".into(),
            ));
        }
        Ok(())
    }
}

impl Settle {
    /// Checks the arguments alone: the tenant, run and period names.
    pub fn validate(&self) -> Result<(), Refusal> {
        check_key("tenant", &self.tenant)?;
        check_key("run", &self.run)?;
        if let Some(period) = &self.period {
            check_key("period", period)?;
        }
        Ok(())
    }
}

/// Whether `c` may not be in a name: a control character (NUL, ESC, newline, …), a
/// bidirectional override, embedding, isolate or mark, or a zero-width or invisible
/// formatting character. Names are printed on operators' terminals and pages; each of
/// these can hide text, move the cursor or make one name look like another.
pub fn hidden_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{061c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
        )
}

/// The name rule of every name a client sends, on writes and reads alike: at most `max`
/// bytes and no [`hidden_char`]; the refusal names the field (`what`) and the character.
/// Every command's names pass here on the node that takes it and again in each node's
/// `apply`, so the accepted case costs a byte scan and nothing else: `what` is formatted
/// only into a refusal (pass `format_args!` rather than a `String` made in advance).
pub fn name_rule(what: impl Display, name: &str, max: usize) -> Result<(), String> {
    // Printable ASCII, the usual name, holds no hidden character.
    if name.len() <= max && name.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return Ok(());
    }
    if name.len() > max {
        return Err(format!(
            "{what} is {} bytes, the bound is {max}",
            name.len()
        ));
    }
    if let Some(c) = name.chars().find(|c| hidden_char(*c)) {
        return Err(format!(
            "{what} holds the character {}: names are printable text, without control, \
             bidirectional or zero-width characters",
            c.escape_unicode()
        ));
    }
    Ok(())
}

/// Checks a name by [`name_rule`] (at most [`NAME_BYTES_MAX`] bytes); `what` names the
/// field in the refusal.
pub(super) fn check_name(what: impl Display, name: &str) -> Result<(), Refusal> {
    name_rule(what, name, NAME_BYTES_MAX).map_err(Refusal::Invalid)
}

/// Checks a name that must also be non-empty.
pub(super) fn check_key(what: impl Display, name: &str) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err(Refusal::Invalid(format!("{what} is empty")));
    }
    check_name(what, name)
}

/// The definition of the limit deciding overrides of `requests` per `unit_s` seconds in
/// `tenant` (`Command::DefineOverride`).
pub(crate) fn override_definition(tenant: &str, requests: u32, unit_s: u64) -> Definition {
    Definition {
        tenant: tenant.to_owned(),
        name: crate::rls::path::override_name(requests, unit_s),
        concurrent: 0,
        per_second: requests as f64 / unit_s.max(1) as f64,
        burst: Some(requests as u64),
        keyed: true,
        keys_max: Some(crate::bounds::RLS_KEYS_MAX_DEFAULT),
        shadow: false,
    }
}

impl Definition {
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
                if n == 0 || n as usize > KEYS_LIVE_MAX {
                    return Err(format!("keys_max {n} is not in 1..={KEYS_LIVE_MAX}"));
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

impl LeaseTokens {
    /// Checks the arguments alone: 1..=[`PARTS_MAX`] parts, keys, a cap within
    /// [`BURST_MAX`], a rate within [`PER_SECOND_MAX`], and no more tokens given back than a
    /// cap can hold. A refusal names the part by its position (from 1) and its limit. That
    /// the parts name distinct limits (or distinct keys of one keyed limit) is checked when
    /// the request is applied, after its session (`Machine::resolve_lease`): a request of an
    /// unknown session is refused as that first, whatever its parts.
    pub fn validate(&self) -> Result<(), Refusal> {
        check_key("tenant", &self.tenant)?;
        if self.parts.is_empty() || self.parts.len() > PARTS_MAX {
            return Err(Refusal::Invalid(format!(
                "{} parts, a lease request names 1..={PARTS_MAX}",
                self.parts.len()
            )));
        }
        let rate_max = PER_SECOND_MAX as u64 * crate::machine::limit::MICRO;
        for (i, part) in self.parts.iter().enumerate() {
            let n = i + 1;
            check_key(format_args!("part {n}'s limit name"), &part.limit)?;
            if let Some(key) = &part.key {
                check_key_bytes(n, &part.limit, key)?;
            }
            if part.cap > BURST_MAX
                || part.rate_micro_per_s > rate_max
                || part.returned_micro > BURST_MAX * crate::machine::limit::MICRO
            {
                return Err(Refusal::Invalid(format!(
                    "part {n} ({}): a lease's cap is at most {BURST_MAX} tokens, its rate at \
                     most {rate_max} micro-tokens a second, and what it gives back at most \
                     its cap",
                    part.limit
                )));
            }
        }
        Ok(())
    }
}

impl AcquireParts {
    /// Checks the arguments alone: names, 1..=[`PARTS_MAX`] parts naming distinct limits
    /// (or distinct keys of one keyed limit),
    /// keys, units in `1..=UNITS_MAX`, a weight of at least 1. A refusal names the part by
    /// its position (from 1) and its limit.
    pub fn validate(&self) -> Result<(), Refusal> {
        check_key("tenant", &self.tenant)?;
        check_parts(&self.parts)?;
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

/// Checks the parts of a request (or a return): 1..=[`PARTS_MAX`] parts naming distinct
/// limits (or distinct keys of one keyed limit), keys, units in `1..=UNITS_MAX`. A refusal
/// names the part by its position (from 1) and its limit.
fn check_parts(parts: &[Part]) -> Result<(), Refusal> {
    if parts.is_empty() || parts.len() > PARTS_MAX {
        return Err(Refusal::Invalid(format!(
            "{} parts, a request names 1..={PARTS_MAX}",
            parts.len()
        )));
    }
    for (i, part) in parts.iter().enumerate() {
        let n = i + 1;
        check_key(format_args!("part {n}'s limit name"), &part.limit)?;
        if let Some(key) = &part.key {
            check_key_bytes(n, &part.limit, key)?;
        }
        if part.units == 0 || part.units > UNITS_MAX {
            return Err(Refusal::Invalid(format!(
                "part {n} ({}): units {} is not in 1..={UNITS_MAX}",
                part.limit, part.units
            )));
        }
        if parts[..i]
            .iter()
            .any(|p| p.limit == part.limit && (p.key.is_none() || p.key == part.key))
        {
            return Err(Refusal::Invalid(format!(
                "part {n} names limit {} again: a request names each limit (and each \
                 key of a keyed one) once",
                part.limit
            )));
        }
    }
    Ok(())
}

/// Checks part `n`'s key: non-empty, at most [`KEY_BYTES_MAX`] bytes.
fn check_key_bytes(n: usize, limit: &str, key: &str) -> Result<(), Refusal> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(Refusal::Invalid(format!(
            "part {n} ({limit}): key is {} bytes, not in 1..={KEY_BYTES_MAX}",
            key.len()
        )));
    }
    name_rule(format_args!("part {n} ({limit}): key"), key, KEY_BYTES_MAX).map_err(Refusal::Invalid)
}

/// An `ApplyLimits`'s arguments: at most [`APPLY_DEFINITIONS_MAX`] definitions, each of
/// `tenant`, valid, and naming a distinct limit; a refusal names the definition.
pub(crate) fn check_apply(tenant: &str, definitions: &[Definition]) -> Result<(), Refusal> {
    check_key("tenant", tenant)?;
    if definitions.len() > APPLY_DEFINITIONS_MAX {
        return Err(Refusal::Invalid(format!(
            "{} definitions, an apply names at most {APPLY_DEFINITIONS_MAX}",
            definitions.len()
        )));
    }
    let mut names = std::collections::BTreeSet::new();
    for d in definitions {
        let name = &d.name;
        if d.tenant != tenant {
            return Err(Refusal::Invalid(format!(
                "definition {name} is of tenant {}, the apply of tenant {tenant}",
                d.tenant
            )));
        }
        if !names.insert(name.as_str()) {
            return Err(Refusal::Invalid(format!(
                "definition {name} is given twice"
            )));
        }
        d.validate()
            .map_err(|r| Refusal::Invalid(format!("definition {name}: {r}")))?;
    }
    Ok(())
}
