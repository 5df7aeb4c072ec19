//! What a Weir client and a Weir node share, and nothing else: the client protocol
//! ([`protocol`]), the frames it travels in ([`wire`]), one socket type for plaintext and
//! TLS with the client side of a handshake ([`tls`]), and the guard that ties a spawned
//! task to its owner ([`task`]).
//!
//! It builds on `weir-core` (the commands and replies the protocol carries) and must never
//! depend on `weir-client`, `weir-server` or `weir-http`: both ends of the client port
//! depend on it. Imports point down the list below; none of its modules imports another
//! (the protocol travels in [`wire`] frames, on a [`tls::Stream`] or any other byte stream).
//!
//! The crates and their dependency arrows: `docs/design.md`, "Crates".

#![forbid(unsafe_code)]

pub mod protocol;

pub mod wire;

pub mod tls;

pub mod task;
