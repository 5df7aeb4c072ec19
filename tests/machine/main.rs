//! The state machine's tests: scenarios named for the behaviours of the operations, a property
//! test against a reference model (G1, G5), determinism and snapshot damage (G4, G8), and
//! the deadline index against a full scan, the machine-wide bounds, and token leases against
//! the spend-time bound (G1).

mod apply;
mod deadlines;
mod determinism;
mod global_bounds;
mod keyed;
mod leases;
mod memory;
mod model;
mod moves;
mod owners;
mod placement;
mod queue_reads;
mod scenarios;
mod sim;
mod snapshot_damage;
