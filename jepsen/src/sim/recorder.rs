//! The history of one simulated run, on simulated time.
//!
//! Owns the ops the clients and the nemesis record, in the harness's own [`Op`] format so
//! the harness's checkers read them unchanged. Times are nanoseconds of tokio's clock since
//! the run began (paused in a run, so they are simulated time and a replay gives the same
//! ones); the harness's own recorder reads the machine's monotonic clock instead, which a
//! simulation must never do.
//!
//! Invariants:
//! - Ops are kept in the order recorded; [`SimRecorder::ops`] sorts them by time, stably,
//!   so ops of one instant keep that order.

use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::history::{Kind, Op};

/// A history being recorded, shared by every client and the nemesis of one run.
#[derive(Clone)]
pub struct SimRecorder {
    started: Instant,
    ops: Arc<Mutex<Vec<Op>>>,
}

impl SimRecorder {
    /// A history beginning now (on tokio's clock).
    pub fn new() -> SimRecorder {
        SimRecorder {
            started: Instant::now(),
            ops: Arc::default(),
        }
    }

    /// Simulated nanoseconds since the run began.
    pub fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// The tokio instant of run time `ns`.
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

    /// The history so far, in time order.
    pub fn ops(&self) -> Vec<Op> {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ops.sort_by_key(|o| o.time_ns);
        ops
    }
}

impl Default for SimRecorder {
    fn default() -> Self {
        SimRecorder::new()
    }
}
