//! Weir's partition-test harness: real node processes, generated client operations, a
//! nemesis injecting faults, a recorded history, and checkers that judge it. See
//! `jepsen/README.md`; the crates it drives are in `docs/design.md`, "Layers".
//!
//! Owns: the deterministic simulator ([`sim`]), the run ([`run`]), the checkers ([`checker`]), the nemesis ([`nemesis`]), the
//! cluster of real processes and its network ([`cluster`], [`netns`], [`proxy`]), the
//! workloads ([`workload`]), the history they record ([`history`]). Must never be a
//! dependency of a Weir crate.
//!
//! The modules are declared in layers, highest first: a file imports only modules declared
//! below its own (`tests/layering` holds every crate to its list), and no two files import
//! each other.

#![forbid(unsafe_code)]

pub mod sim;
pub mod run;
pub mod checker;
pub mod finals;
pub mod nemesis;
pub mod converge;
pub mod monitor;
pub mod cluster;
pub mod lazyfs;
pub mod netns;
pub mod probe;
pub mod proxy;
pub mod workload;
pub mod client_front;
pub mod secure;
pub mod rules;
pub mod rng;
pub mod history;
pub mod setup;
pub mod addrs;
