//! CPU time spent over the measured window by the bench process and the nodes it spawned,
//! per 1,000 operations: the figure a shared machine disturbs far less than throughput
//! (another process's load slows an operation down, it does not make it cost more cycles).
//!
//! Read from `/proc/PID/stat` (utime + stime of every thread of the process, in clock
//! ticks, so with a resolution of 10 ms at the usual 100 Hz: over a window of seconds that
//! is well under 1%). Where `/proc` is missing (not Linux) or a process is gone (a killed
//! leader), there is no figure rather than a wrong one.

use serde::Serialize;

/// CPU ticks of a set of processes at the start of a window.
pub struct CpuClock {
    /// `(name, pid, ticks at the start)`.
    start: Vec<(String, u32, u64)>,
}

/// CPU seconds over a window, and per 1,000 operations.
#[derive(Serialize)]
pub struct CpuReport {
    /// The bench process itself (its clients).
    pub bench_s: f64,
    /// Each spawned node, in node order.
    pub nodes_s: Vec<f64>,
    /// Everything together, CPU milliseconds per 1,000 operations (the same number as CPU
    /// microseconds per operation).
    pub ms_per_1k_ops: f64,
    /// The nodes alone, milliseconds per 1,000 operations.
    pub nodes_ms_per_1k_ops: f64,
}

/// utime + stime of `pid`, in clock ticks.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from the last
    // ')'. After it, field 3 (state) is at 0, so utime (14) at 11 and stime (15) at 12.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

impl CpuClock {
    /// Starts a window over this process and `nodes` (`(name, pid)`); `None` if any cannot
    /// be read.
    pub fn start(nodes: &[(String, u32)]) -> Option<CpuClock> {
        let mut start = vec![("bench".to_string(), std::process::id(), 0)];
        start.extend(nodes.iter().map(|(name, pid)| (name.clone(), *pid, 0)));
        for (_, pid, t) in &mut start {
            *t = ticks(*pid)?;
        }
        Some(CpuClock { start })
    }

    /// Ends the window after `ops` operations; `None` if a process cannot be read (gone).
    pub fn stop(&self, ops: u64) -> Option<CpuReport> {
        let per_s = rustix::param::clock_ticks_per_second() as f64;
        let mut seconds = Vec::with_capacity(self.start.len());
        for (_, pid, t0) in &self.start {
            seconds.push(ticks(*pid)?.checked_sub(*t0)? as f64 / per_s);
        }
        let per_1k = |s: f64| (s * 1e3 / (ops.max(1) as f64 / 1e3) * 1e3).round() / 1e3;
        let nodes_s: Vec<f64> = seconds[1..].to_vec();
        let nodes: f64 = nodes_s.iter().sum();
        Some(CpuReport {
            bench_s: seconds[0],
            ms_per_1k_ops: per_1k(seconds[0] + nodes),
            nodes_ms_per_1k_ops: per_1k(nodes),
            nodes_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{CpuClock, ticks};

    #[test]
    fn this_process_is_readable_and_its_time_only_grows() {
        let before = ticks(std::process::id()).expect("/proc/self/stat");
        let clock = CpuClock::start(&[]).expect("a window on this process");
        // Burn a few clock ticks of CPU (bounded: at most seconds).
        let mut x = 0u64;
        let mut spins = 0u64;
        while ticks(std::process::id()).unwrap() < before + 3 && spins < 100_000 {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            spins += 1;
        }
        std::hint::black_box(x);
        let report = clock.stop(1_000).expect("still running");
        assert!(report.bench_s > 0.0, "CPU spent shows: {}", report.bench_s);
        assert!(report.nodes_s.is_empty());
        // 1,000 operations in the window: their cost is the window's CPU, in ms.
        assert_eq!(report.ms_per_1k_ops, (report.bench_s * 1e6).round() / 1e3);
    }

    #[test]
    fn a_process_that_is_gone_gives_no_figure() {
        assert!(ticks(u32::MAX).is_none());
        assert!(CpuClock::start(&[("n1".into(), u32::MAX)]).is_none());
    }
}
