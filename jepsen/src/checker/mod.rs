//! Checkers: one per property, each judging a whole history.
//!
//! Each returns a [`Verdict`]: `Valid`, `Invalid` with the first violation found, or
//! `Unknown` when the history cannot show the property either way (nothing to judge, a
//! requested fault that never fired). Unknown is never counted as a pass.

pub mod capacity;
pub mod ceilings;
pub mod clock;
pub mod convergence;
pub mod coverage;
pub mod fenced;
pub mod fences;
pub mod halts;
pub mod linearizable;
pub mod liveness;
pub mod panics;
pub mod permits;
pub mod rate;
pub mod security;
pub mod settlement;
pub mod stalls;
pub mod strands;

use crate::history::{Kind, Op};

/// A checker's judgement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Valid,
    Invalid(String),
    Unknown(String),
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Invalid(_) => "INVALID",
            Verdict::Unknown(_) => "unknown",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            Verdict::Valid => "",
            Verdict::Invalid(d) | Verdict::Unknown(d) => d,
        }
    }
}

/// The `ok` ops named `f`.
pub(crate) fn oks<'a>(ops: &'a [Op], f: &'a str) -> impl Iterator<Item = &'a Op> + 'a {
    ops.iter().filter(move |o| o.kind == Kind::Ok && o.f == f)
}

/// The latest a `hold`'s permit can be taken to have ended, as the bounds of `capacity` and
/// `linearizable` read it: its `to_ns` (the release sent, or the deadline), or its
/// `deadline_ns` when that passed even before the grant arrived. A grant that reached its
/// holder after the session's deadline is recorded as believed from arrival to arrival
/// (`to_ns` = `from_ns`), but its session may have expired any time after the deadline, right
/// after the grant in log order: bounding its end by its arrival charged it with entries it
/// may not have lived to see (a false G1 violation in a `--secure` netns partition run).
pub(crate) fn hold_end(op: &Op) -> Option<u64> {
    let to = u(op, "to_ns")?;
    Some(match u(op, "deadline_ns") {
        Some(deadline) => to.min(deadline),
        None => to,
    })
}

/// A u64 field of an op's value.
pub(crate) fn u(op: &Op, key: &str) -> Option<u64> {
    op.value.get(key)?.as_u64()
}

/// A string field of an op's value.
pub(crate) fn s<'a>(op: &'a Op, key: &str) -> Option<&'a str> {
    op.value.get(key)?.as_str()
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::history::{Kind, Op};

    pub fn op(process: u64, kind: Kind, f: &str, value: serde_json::Value, time_ns: u64) -> Op {
        Op {
            process,
            kind,
            f: f.into(),
            value,
            time_ns,
        }
    }
}
