//! Checkers: one per property, each judging a whole history.
//!
//! Each returns a [`Verdict`]: `Valid`, `Invalid` with the first violation found, or
//! `Unknown` when the history cannot show the property either way (nothing to judge, a
//! requested fault that never fired). Unknown is never counted as a pass. `verdict.rs` holds
//! the verdict, `ops.rs` how checkers read ops; each checker imports them from there, never
//! from this file, which only maps the module.

pub mod capacity;
pub mod ceilings;
pub mod clock;
pub mod convergence;
pub mod coverage;
pub mod fenced;
pub mod fences;
pub mod halts;
pub mod kept;
pub mod keyed;
pub mod leased;
pub mod linearizable;
pub mod liveness;
mod ops;
pub mod panics;
pub mod permits;
pub mod python;
pub mod rate;
pub mod security;
pub mod settlement;
pub mod snapshots;
pub mod stalls;
pub mod strands;
#[cfg(test)]
mod test_support;
pub mod told;
mod verdict;

pub use verdict::Verdict;
