//! A Weir node: the replicated shell around the pure machine (`weir-core`).
//!
//! Owns: the backup file and restoring a data directory from it ([`backup`]); openraft's glue over Weir's own write-ahead log and snapshot files ([`raft`]); the
//! node, its client port, proposer and readers ([`server`]); HTTP/JSON ([`http`]);
//! the session-owner rule the client port and HTTP share ([`session_owner`]); Prometheus
//! metrics ([`metrics`]); the node's shutdown signal ([`shutdown`]); the node's
//! configuration ([`config`]); server-side security: tokens, roles, node certificates,
//! mutual TLS between peers ([`security`]).
//!
//! Imports point down the list below: nothing knows anything above it. It builds on
//! `weir-core` and `weir-client` (the protocol, the wire framing, and the client library
//! that HTTP forwards through) and must never be a dependency of either.

#![forbid(unsafe_code)]

pub mod backup;

pub mod server;

pub mod session_owner;

pub mod raft;

pub mod metrics;

pub mod lock;

pub mod shutdown;

pub mod accept;

pub mod config;

// TLS, tokens and roles; `config` takes its token and TLS entries from here.
pub mod security;
