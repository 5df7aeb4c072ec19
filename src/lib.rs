//! The `weir` binary's library: the command line ([`cli`]). The layers it drives live in
//! their own crates: `weir-core` (the pure machine), `weir-client` (protocol and client
//! library), `weir-server` (a node) and `weir-bench` (`weir bench`, which starts local
//! clusters through `weir-launcher`).

#![forbid(unsafe_code)]

pub mod cli;
