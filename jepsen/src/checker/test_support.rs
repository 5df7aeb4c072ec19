//! What the checkers' tests share: an op built in one call, a nemesis fact, and the grant
//! and belief ops most checkers read.

use serde_json::json;

use crate::history::{Kind, NEMESIS, Op};

pub fn op(process: u64, kind: Kind, f: &str, value: serde_json::Value, time_ns: u64) -> Op {
    Op {
        process,
        kind,
        f: f.into(),
        value,
        time_ns,
    }
}

/// A fact the nemesis records (an `Info` op of the nemesis process): `f` with `value`.
pub fn fact(f: &str, value: serde_json::Value, time_ns: u64) -> Op {
    op(NEMESIS, Kind::Info, f, value, time_ns)
}

/// A granted acquire of `fence` on `limit`, invoked at `invoked_ns`, acknowledged at `at_ns`.
pub fn granted(limit: &str, fence: u64, invoked_ns: u64, at_ns: u64) -> Op {
    let v = json!({"limit": limit, "fence": fence, "invoke_ns": invoked_ns});
    op(1, Kind::Ok, "acquire", v, at_ns)
}

/// The belief in `fence` on `limit` (concurrency `cap`) from `from_ns` to `to_ns`.
pub fn hold(limit: &str, cap: u64, fence: u64, from_ns: u64, to_ns: u64) -> Op {
    let v = json!({"limit": limit, "cap": cap, "fence": fence, "from_ns": from_ns, "to_ns": to_ns});
    op(1, Kind::Ok, "hold", v, to_ns)
}
