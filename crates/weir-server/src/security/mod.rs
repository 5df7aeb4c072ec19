//! Security at the edges (G10, docs/security.md): TLS on the ports, tokens with roles, and what each
//! role may ask.
//!
//! - [`tls`] loads certificates and keys into rustls configurations and wraps sockets in
//!   [`weir_proto::tls::Stream`], so the wire code reads and writes one stream type whether TLS is on
//!   or not. The peer port is mutual TLS: both ends present a certificate from the one
//!   cluster CA, and a connection without one is refused in the handshake, before a frame.
//! - [`token`] holds the configured tokens (sha256 hex of the secret, never the secret) and
//!   the role each grants; [`authorize()`] says whether a role may make a request.
//! - [`certs`] writes a development CA and node certificates (`weir certs init`).
//!
//! Invariants:
//! - A node without TLS files listens on loopback addresses only, unless its config says
//!   `insecure = true` (`Config::validate`, in `config.rs`).
//! - With tokens configured, no request is served on a connection whose hello carried no
//!   known token; every request is checked against the connection's role before it is
//!   proposed or read.
//! - The controls an operator sets on a tenant (halts, its ceiling and budgets, its limit
//!   definitions) are the admin role's alone ([`authorize()`]): a tenant cannot lift them.
//! - A reload never turns authentication off unless the reloaded config says so
//!   ([`Tokens::reload`]); a revoked token's connections and HTTP event streams end.
//! - Certificates' private keys are written readable by their owner alone
//!   ([`certs::init`]).
//! - Nothing here runs inside the state machine: randomness (session nonces) is drawn at
//!   the edge and travels in the log entry.

pub mod authorize;
pub mod certs;
pub mod tls;
pub mod token;

pub use authorize::authorize;
pub use tls::{Acceptor, TlsFiles};
pub use token::{Principal, Role, TokenEntry, TokenTable, Tokens, hash_token};

/// A random u64 from the OS (in a simulation, from its seed: [`crate::simulated::random`]):
/// session nonces, generated secrets.
pub fn random_u64() -> Result<u64, String> {
    crate::simulated::random().ok_or_else(|| "no randomness from the OS".to_string())
}
