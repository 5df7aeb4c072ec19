//! A local cluster of real `weir serve` processes: what `weir bench --spawn`, the cluster
//! tests and the partition harness share.
//!
//! It owns the processes and their files, nothing about the network between them: a
//! caller that puts a proxy or a namespace in the path builds the [`Config`]s and the
//! commands itself and hands them in. Configs are written with `toml::to_string` of
//! [`Config`], never formatted by hand, and validated before they are written. Every wait
//! is bounded; every process is killed on drop.
//!
//! Must never depend on: the `weir` crate (it runs the binary whose path it is given),
//! `weir-bench` or the harness, which all depend on it; and nothing of weir-core, -client or
//! -server may ever depend on it. Where it sits among the crates: `docs/design.md`.
//!
//! [`Config`]: weir_server::config::Config

#![forbid(unsafe_code)]

mod local_cluster;
mod ports;

pub use local_cluster::{LocalCluster, Node, leader_among, leader_among_with};
pub use ports::{PORT_MIN, ephemeral_range, free_port, loopback_addr};
