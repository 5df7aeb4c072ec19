//! A local cluster of real `weir serve` processes: what `weir bench --spawn`, the cluster
//! tests and the partition harness share.
//!
//! It owns the processes and their files, nothing about the network between them: a
//! caller that puts a proxy or a namespace in the path builds the [`Config`]s and the
//! commands itself and hands them in. Configs are written with `toml::to_string` of
//! [`Config`], never formatted by hand, and validated before they are written. Every wait
//! is bounded; every process is killed on drop.
//!
//! [`Config`]: weir_server::config::Config

mod local_cluster;
mod ports;

pub use local_cluster::{LocalCluster, Node, leader_among, leader_among_with};
pub use ports::{PORT_MIN, ephemeral_range, free_port, loopback_addr};
