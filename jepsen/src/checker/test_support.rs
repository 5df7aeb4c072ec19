//! What the checkers' tests share: an op built in one call.

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
