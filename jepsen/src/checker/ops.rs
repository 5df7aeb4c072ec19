//! How the checkers read a history's ops: the `ok` ops of one kind, the fields of an op's
//! value, and the end of a held permit as the capacity bounds take it.

use crate::history::{Kind, Op};

/// The `ok` ops named `f`.
pub(crate) fn oks<'a>(ops: &'a [Op], f: &'a str) -> impl Iterator<Item = &'a Op> + 'a {
    ops.iter().filter(move |o| o.kind == Kind::Ok && o.f == f)
}

/// The latest a `hold`'s permit can be taken to have ended, as the bounds of `capacity` and
/// `linearizable` read it: its `to_ns` (the release sent, or when the application was told
/// the permit may be lost; for a hold not recorded as the application saw it, the release
/// or the deadline, whichever came first), or its `deadline_ns` when that passed even
/// before the grant arrived. A grant that reached its
/// holder after the session's deadline is recorded as believed from arrival to arrival
/// (`to_ns` = `from_ns`), but its session may have expired any time after the deadline, right
/// after the grant in log order: bounding its end by its arrival charged it with entries it
/// may not have lived to see (a false G1 violation in a `--secure` netns partition run).
pub(crate) fn hold_end(op: &Op) -> Option<u64> {
    let to = u(op, "to_ns")?;
    let application = op.value.get("application").and_then(|a| a.as_bool()) == Some(true);
    Some(match (u(op, "deadline_ns"), u(op, "from_ns")) {
        (Some(deadline), Some(from)) if application && deadline >= from => to,
        (Some(deadline), _) => to.min(deadline),
        (None, _) => to,
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
