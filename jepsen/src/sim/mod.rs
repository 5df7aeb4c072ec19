//! The deterministic simulator: the whole cluster's own code (openraft, the machine, the
//! proposer, the log over a simulated disk) on simulated time and a simulated network,
//! driven by a seed, its history judged by the harness's own checkers.
//!
//! The modules are declared in layers, highest first: a file imports only modules declared
//! below its own.

pub mod schedule;
pub mod net;
pub mod links;
pub mod recorder;
