//! Weir: a replicated limit cluster.
//!
//! This file is the table of contents; it holds no logic. Imports point down the list:
//! nothing below knows anything above it.

#![forbid(unsafe_code)]

pub mod cli;
pub mod launcher;
pub mod server;

pub mod http;

pub mod client;
pub mod protocol;
// TLS, tokens and roles; `config` borrows only its token parsers (`security::token`).
pub mod security;

pub mod raft;

pub mod machine;

pub mod metrics;

pub mod bounds;
pub mod codec;
pub mod config;
pub mod task;
// Test-only planted bugs (the `planted` feature); inert in default builds.
pub mod planted;
pub mod wire;
