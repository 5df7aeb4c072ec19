//! The `weir` binary's library: the command line ([`cli`]), one file per command group, and
//! the reading of limits files (Weir's TOML and envoyproxy/ratelimit's YAML, which only the
//! CLI parses: `cli::limits_file`). Everything else lives in the crates it drives:
//! `weir-core` (the pure machine), `weir-proto` (the client protocol), `weir-client` (the
//! client library), `weir-server` (a node), `weir-http` (a node's HTTP and gRPC front doors,
//! handed to the node by `weir serve`) and `weir-bench` (`weir bench`, which starts local
//! clusters through `weir-launcher`).
//!
//! Owns the top of the house: no crate of the workspace depends on it but the cluster tests
//! in `tests/`. Where it sits among the crates, and the map of every file:
//! `docs/design.md`, "Layers" and "Map of the source".

#![forbid(unsafe_code)]

pub mod cli;
