//! A Weir node: the replicated shell around the pure machine (`weir-core`).
//!
//! Owns: one node as the deterministic simulator runs it, with its simulated disk and
//! network seam (`sim`, with the `sim` feature); the backup file and restoring a data directory from it ([`backup`]); the node,
//! its client port, proposer and readers, and the front doors it is given at start
//! ([`server`]); the session-owner rule the client port and the HTTP port share
//! ([`session_owner`]); the node's configuration ([`config`]); openraft's glue over Weir's
//! own write-ahead log and snapshot files ([`raft`]); Prometheus metrics ([`metrics`]);
//! the node's shutdown signal ([`shutdown`]); the accept loop of the client and peer ports
//! ([`accept`]); server-side security: tokens, roles, node certificates, mutual TLS
//! between peers ([`security`]); the switch that makes this thread's nodes deterministic
//! for a simulation ([`simulated`]).
//!
//! Imports point down the list below: nothing knows anything above it (`config` reads the
//! log's segment size from [`raft`], and takes its token and TLS entries from
//! [`security`]). It builds on `weir-core` and `weir-proto` (the client protocol, the wire
//! framing, client-side TLS) and must never depend on `weir-client` or `weir-http`: the
//! front doors (HTTP/JSON, Envoy's gRPC) reach the cluster through the client library and
//! are handed to the node by whoever starts it ([`server::front`]). The crates and their
//! dependency arrows: `docs/design.md`, "Layers".

#![forbid(unsafe_code)]

#[cfg(feature = "sim")]
pub mod sim;

pub mod backup;

pub mod server;

pub mod session_owner;

pub mod config;

pub mod raft;

pub mod metrics;

pub mod lock;

pub mod shutdown;

pub mod accept;

pub mod private_files;

// TLS, tokens and roles; `config` takes its token and TLS entries from here.
pub mod security;

pub mod simulated;
