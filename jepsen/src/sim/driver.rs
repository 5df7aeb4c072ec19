//! The simulator's driver: many seeds on a few threads, a summary, and for each failing
//! seed the one command that replays it.
//!
//! Owns the spread of seeds over threads (each seed a fresh runtime of its own, so threads
//! share nothing but the queue of seeds) and the report. A seed that panics (a bug in the
//! node's code or the simulator's) fails as `panic`, and the other seeds go on.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::run::{Config, Outcome, run_seed};

/// What the driver is asked for.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub first: u64,
    pub seeds: u64,
    pub threads: usize,
    pub trace: bool,
    pub config: Config,
}

/// What the driver found.
pub struct Summary {
    /// Every seed's outcome, in seed order.
    pub outcomes: Vec<Outcome>,
    pub wall_s: f64,
}

impl Summary {
    /// The failing seeds and what failed them.
    pub fn failures(&self) -> Vec<(u64, Vec<String>)> {
        self.outcomes
            .iter()
            .map(|o| (o.seed, o.failures()))
            .filter(|(_, f)| !f.is_empty())
            .collect()
    }
}

/// Runs one seed, a panic turned into a failed outcome.
fn guarded(seed: u64, config: Config) -> Outcome {
    match std::panic::catch_unwind(|| run_seed(seed, config)) {
        Ok(outcome) => outcome,
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Outcome {
                seed,
                verdicts: vec![],
                error: Some(format!("panic: {why}")),
                trace: vec![],
                sim_ns: 0,
            }
        }
    }
}

/// Runs the seeds `first..first + seeds` on `threads` threads.
pub fn run(options: Options) -> Summary {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let outcomes = Mutex::new(vec![]);
    std::thread::scope(|scope| {
        for _ in 0..options.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= options.seeds {
                        return;
                    }
                    let outcome = guarded(options.first + i, options.config);
                    outcomes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(outcome);
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap_or_else(|p| p.into_inner());
    outcomes.sort_by_key(|o| o.seed);
    Summary {
        outcomes,
        wall_s: started.elapsed().as_secs_f64(),
    }
}

/// The command that replays `seed` with its trace.
pub fn replay_command(seed: u64, config: Config) -> String {
    format!(
        "weir-jepsen sim --first {seed} --seeds 1 --nodes {} --trace",
        config.nodes
    )
}

/// The report: traces when asked for, every failing seed with its checkers, details and
/// replay command, then one summary line.
pub fn report(summary: &Summary, options: &Options) -> String {
    let mut out = String::new();
    for o in &summary.outcomes {
        if options.trace {
            out.push_str(&format!("seed {}: trace\n", o.seed));
            for line in &o.trace {
                out.push_str(line);
                out.push('\n');
            }
            for j in &o.verdicts {
                out.push_str(&format!(
                    "seed {} {}: {} {}\n",
                    o.seed,
                    j.checker,
                    j.verdict.label(),
                    j.verdict.detail()
                ));
            }
        }
        let failed = o.failures();
        if !failed.is_empty() {
            out.push_str(&format!("seed {} FAILED: {}\n", o.seed, failed.join(", ")));
            for j in &o.verdicts {
                if failed.iter().any(|f| f == j.checker) {
                    out.push_str(&format!("  {}: {}\n", j.checker, j.verdict.detail()));
                }
            }
            if let Some(e) = &o.error {
                out.push_str(&format!("  harness: {e}\n"));
            }
            out.push_str(&format!(
                "  replay: {}\n",
                replay_command(o.seed, options.config)
            ));
        }
    }
    let sim_s: f64 = summary.outcomes.iter().map(|o| o.sim_ns as f64 / 1e9).sum();
    let unknown: usize = summary
        .outcomes
        .iter()
        .flat_map(|o| &o.verdicts)
        .filter(|j| matches!(j.verdict, crate::checker::Verdict::Unknown(_)))
        .count();
    out.push_str(&format!(
        "sim: {} seeds from {} on {} nodes, {} failed, {} unknown verdicts; {:.0} simulated s in {:.1} wall s on {} threads\n",
        summary.outcomes.len(),
        options.first,
        options.config.nodes,
        summary.failures().len(),
        unknown,
        sim_s,
        summary.wall_s,
        options.threads
    ));
    out
}
