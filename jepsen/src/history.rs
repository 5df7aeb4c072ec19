//! The recorded history: one [`Op`] per line of `history.jsonl`, in harness-clock order, and
//! an EDN export that Jepsen's knossos and elle can read.
//!
//! Ops follow Jepsen's shape: a client `invoke`s an operation, which ends `ok` (it happened),
//! `fail` (it certainly did not) or `info` (its outcome is unknown). The nemesis records its
//! faults as `info` ops of process `nemesis`. Times are nanoseconds of tokio's clock since
//! the run began: the machine's monotonic clock in a harness run, and the paused, simulated
//! clock in a simulated one (`crate::sim`), so a replay there gives the same times.

use std::io::Write;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

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
    /// The operation: `acquire`, `release`, `hold`, `take`, `multi`, `drain`, `reserve`, `settle`, `spent`,
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
    pub fn ns_of(&self, at: std::time::Instant) -> u64 {
        Instant::from_std(at)
            .saturating_duration_since(self.started)
            .as_nanos() as u64
    }

    /// The instant of run time `ns`.
    pub fn instant_of(&self, ns: u64) -> Instant {
        self.started + std::time::Duration::from_nanos(ns)
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

    /// The `ok` ops named `f` among the last `window` recorded, newest first: cheap (it
    /// clones only those), for workloads that act on what others just did.
    pub fn recent_oks(&self, f: &str, window: usize) -> Vec<Op> {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        ops.iter()
            .rev()
            .take(window)
            .filter(|o| o.kind == Kind::Ok && o.f == f)
            .cloned()
            .collect()
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

/// Facts: records that are not operations (a belief interval, a pause taken, what the
/// status monitor and the convergence probe saw, what the node logs said of snapshots).
/// They have no invoke, are kept in
/// `history.jsonl` for the checkers, and are left out of the EDN export.
pub const FACTS: [&str; 17] = [
    "hold",
    "multi-hold",
    "leadership",
    "queue-armed",
    "queue-round",
    "client-pause",
    "leader",
    "digest-mismatch",
    "converge",
    "monitor",
    "log-clock",
    "python-holder",
    "go-holder",
    "ts-holder",
    "halt-room",
    "snapshots",
    "lease",
];

/// Checks Jepsen's shape on every operation (facts aside): per process, an `invoke`, then
/// exactly one completion (`ok`, `fail` or `info`) of the same `f`, before the next invoke.
/// An invoke left open at the end is allowed (the process stopped mid-op).
pub fn check_pairs(ops: &[Op]) -> Result<(), String> {
    let mut open: std::collections::BTreeMap<u64, &str> = std::collections::BTreeMap::new();
    for op in ops.iter().filter(|o| !FACTS.contains(&o.f.as_str())) {
        match (op.kind, open.get(&op.process)) {
            (Kind::Invoke, None) => {
                open.insert(op.process, &op.f);
            }
            (Kind::Invoke, Some(f)) => {
                return Err(format!(
                    "process {} invoked {} at {} ns with {f} still open",
                    op.process, op.f, op.time_ns
                ));
            }
            (_, Some(f)) if *f == op.f => {
                open.remove(&op.process);
            }
            (_, _) => {
                return Err(format!(
                    "process {} completed {} at {} ns without its invoke",
                    op.process, op.f, op.time_ns
                ));
            }
        }
    }
    Ok(())
}

/// The history as EDN, one map per line (`{:type :ok, :f :acquire, ...}`), facts left out
/// ([`FACTS`]): every op is an `:invoke` followed by one completion of the same `:process`,
/// which is the shape Knossos and Elle read.
pub fn to_edn(ops: &[Op]) -> String {
    let mut out = String::new();
    for op in ops.iter().filter(|o| !FACTS.contains(&o.f.as_str())) {
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

    fn at(process: u64, kind: Kind, f: &str, time_ns: u64) -> Op {
        Op {
            process,
            kind,
            f: f.into(),
            value: serde_json::json!({}),
            time_ns,
        }
    }

    #[test]
    fn facts_are_left_out_of_the_edn_and_ops_must_pair() {
        let h = [
            at(1, Kind::Invoke, "acquire", 1),
            at(1, Kind::Ok, "acquire", 2),
            at(1, Kind::Ok, "hold", 3),
            at(1, Kind::Invoke, "release", 3),
            at(NEMESIS, Kind::Info, "leader", 3),
            at(1, Kind::Info, "release", 4),
        ];
        assert_eq!(check_pairs(&h), Ok(()));
        let edn = to_edn(&h);
        assert_eq!(edn.lines().count(), 4);
        assert!(!edn.contains(":hold") && !edn.contains(":leader"));
        // A refused settle recorded twice (the old ledger's bug) and a completion without
        // its invoke are both caught.
        let twice = [
            at(2, Kind::Invoke, "settle", 1),
            at(2, Kind::Fail, "settle", 2),
            at(2, Kind::Info, "settle", 3),
        ];
        assert!(check_pairs(&twice).is_err());
        assert!(check_pairs(&[at(3, Kind::Ok, "spent", 1)]).is_err());
        let overlapping = [
            at(4, Kind::Invoke, "use", 1),
            at(4, Kind::Invoke, "validate", 2),
        ];
        assert!(check_pairs(&overlapping).is_err());
    }

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
