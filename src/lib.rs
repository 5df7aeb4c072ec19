//! The `weir` binary's library: the command line ([`cli`]) and the launcher of local
//! clusters ([`launcher`]) that `weir bench --spawn`, the cluster tests and the partition
//! harness share. The layers it drives live in their own crates: `weir-core` (the pure
//! machine), `weir-client` (protocol and client library) and `weir-server` (a node).

#![forbid(unsafe_code)]

pub mod cli;
pub mod launcher;
