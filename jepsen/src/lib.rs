//! Weir's partition-test harness: real node processes, generated client operations, a
//! nemesis injecting faults, a recorded history, and checkers that judge it. See
//! `jepsen/README.md`.

#![forbid(unsafe_code)]

pub mod addrs;
pub mod checker;
pub mod client_front;
pub mod cluster;
pub mod converge;
pub mod finals;
pub mod history;
pub mod lazyfs;
pub mod monitor;
pub mod nemesis;
pub mod netns;
pub mod probe;
pub mod proxy;
pub mod rng;
pub mod rules;
pub mod run;
pub mod secure;
pub mod workload;
