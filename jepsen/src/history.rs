//! The recorded history: one [`Op`] per line of `history.jsonl`, in harness-clock order, and
//! an EDN export that Jepsen's knossos and elle can read.
//!
//! Ops follow Jepsen's shape: a client `invoke`s an operation, which ends `ok` (it happened),
//! `fail` (it certainly did not) or `info` (its outcome is unknown). The nemesis records its
//! faults as `info` ops of process `nemesis`. Times are nanoseconds of the harness's
//! monotonic clock since the run began.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// How an operation ended (or that it began).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// One history entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// A client process number, or `u64::MAX` for the nemesis.
    pub process: u64,
    pub kind: Kind,
    /// The operation: `acquire`, `release`, `hold`, `take`, `reserve`, `settle`, `spent`,
    /// `set-halt`, `clear-halt`, `probe`, or a nemesis fault.
    pub f: String,
    pub value: serde_json::Value,
    pub time_ns: u64,
}

/// The nemesis's process number.
pub const NEMESIS: u64 = u64::MAX;

/// A history being recorded, shared by every client and the nemesis.
#[derive(Clone)]
pub struct Recorder {
    started: Instant,
    ops: Arc<Mutex<Vec<Op>>>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            started: Instant::now(),
            ops: Arc::default(),
        }
    }

    /// Nanoseconds since the run began.
    pub fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// The harness time of `at` (0 if it was before the run began).
    pub fn ns_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_nanos() as u64
    }

    /// Records an op now; returns its time.
    pub fn record(&self, process: u64, kind: Kind, f: &str, value: serde_json::Value) -> u64 {
        let time_ns = self.now_ns();
        self.record_at(process, kind, f, value, time_ns);
        time_ns
    }

    /// Records an op with a time taken earlier.
    pub fn record_at(
        &self,
        process: u64,
        kind: Kind,
        f: &str,
        value: serde_json::Value,
        time_ns: u64,
    ) {
        let op = Op {
            process,
            kind,
            f: f.to_owned(),
            value,
            time_ns,
        };
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// The history so far, in time order.
    pub fn ops(&self) -> Vec<Op> {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ops.sort_by_key(|o| o.time_ns);
        ops
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

/// Writes `ops` as JSON lines.
pub fn write_jsonl(path: &std::path::Path, ops: &[Op]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for op in ops {
        serde_json::to_writer(&mut f, op)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

/// Reads a history written by [`write_jsonl`].
pub fn read_jsonl(path: &std::path::Path) -> Result<Vec<Op>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

fn edn(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "nil".into(),
        serde_json::Value::Bool(b) => b.to_string(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => format!("{s:?}"),
        serde_json::Value::Array(a) => {
            format!("[{}]", a.iter().map(edn).collect::<Vec<_>>().join(" "))
        }
        serde_json::Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!(":{k} {}", edn(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The history as EDN, one map per line (`{:type :ok, :f :acquire, ...}`).
pub fn to_edn(ops: &[Op]) -> String {
    let mut out = String::new();
    for op in ops {
        let kind = match op.kind {
            Kind::Invoke => "invoke",
            Kind::Ok => "ok",
            Kind::Fail => "fail",
            Kind::Info => "info",
        };
        let process = if op.process == NEMESIS {
            ":nemesis".to_string()
        } else {
            op.process.to_string()
        };
        out.push_str(&format!(
            "{{:type :{kind}, :f :{}, :value {}, :process {process}, :time {}}}\n",
            op.f,
            edn(&op.value),
            op.time_ns
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edn_export_reads_like_jepsen() {
        let op = Op {
            process: 3,
            kind: Kind::Ok,
            f: "acquire".into(),
            value: serde_json::json!({"fence": 7, "limit": "mutex"}),
            time_ns: 12,
        };
        assert_eq!(
            to_edn(&[op]),
            "{:type :ok, :f :acquire, :value {:fence 7, :limit \"mutex\"}, :process 3, :time 12}\n"
        );
    }
}
