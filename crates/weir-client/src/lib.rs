//! Weir's Rust client library: async, any node as the entry point, the leader followed
//! across failovers with bounded retries, sessions kept alive in the background, permits as
//! guards that release on drop, and typed errors that say whether a request may have taken
//! effect. It builds on `weir-core` (the commands and replies) and `weir-proto` (the
//! client protocol, its frames, client-side TLS), and must never depend on `weir-server` or
//! `weir-http`: the front doors depend on it, not the reverse.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use weir_client::{AcquireOptions, Client, Session};
//!
//! # async fn work(_fence: u64) {}
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::new(vec!["127.0.0.1:7411".into(), "127.0.0.1:7412".into()]);
//! client.define_limit("default", "db", 4, 0.0, None).await?;
//! let session = Session::open(&client, Duration::from_secs(3)).await?;
//! let permit = session.acquire(AcquireOptions::new("default", "db")).await?;
//! tokio::select! {
//!     // The fence goes to the guarded resource, which refuses any older one.
//!     () = work(permit.fence()) => permit.release().await?,
//!     lost = permit.lost() => eprintln!("stop working: {lost}"),
//! }
//! session.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The belief rule (G2)
//!
//! A permit is believed held from its grant until its release, or until the session's
//! belief deadline passes: the send time of its last acknowledged keep-alive plus the TTL
//! less a margin ([`margin_for`], [`deadline_after`]), on the boot clock ([`BootInstant`]).
//! The cluster cannot expire the session before then, so no two clients believe they hold
//! more than a limit allows; [`Permit::lost`] resolves when the belief ends.
//!
//! # Errors
//!
//! [`ClientError`] says why a request has no answer, with
//! [`ClientError::definitely_failed`] ("did not take effect" versus "outcome unknown") and
//! [`ClientError::is_retryable`]; [`AcquireError`] adds what only an acquire meets (refused,
//! timed out, session lost). Refusals of the machine (halted, busy, over budget) are typed
//! replies (`Reply::Refused`), never text to match on; [`Lost`] says why a permit may no
//! longer be held.
//!
//! # Caveats
//!
//! - The belief deadline is safe only while this client's clock rate stays within the
//!   margin of the leaders' ([`margin_for`]).
//! - A TTL below 3 s has less slack than a leader stall needs (the budget in the `hedge`
//!   module doc) and may lose permits to one.
//! - A client process starved of CPU for longer than [`SILENCE_MAX`] can find a live node
//!   silent; it then reconnects (a wasted connect, never a wrong belief).
//! - A [`Permit`] dropped outside a tokio runtime sends no release: it stays held on the
//!   cluster until its session closes or expires. A background release that runs out of
//!   retries leaves the ticket to the session's end too.
//! - A session and its permits share its state: the keep-alives go on while any of them
//!   lives, and stop (the cluster then expires the session) once all are dropped.
//! - [`Client::ask_node`] asks one given node, with no redirect or retry.
//!
//! How it works — leader following, failure detection and retries, sessions and re-asks,
//! the hedged write — is in the module docs of `client.rs`, `conn.rs`, `session.rs`
//! and `hedge.rs`.
//!
//! # Layout
//!
//! Imports point down the module list below (`ops` adds the typed operations to
//! `Client`; `error` and `lost` know nothing above them). The crates and their dependency
//! arrows: `docs/design.md`, "Layers".

#![forbid(unsafe_code)]

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fake_node;

mod ops;

mod leased;

mod lease_bucket;

mod session;

mod hedge;

mod permit;

mod session_state;

mod rules;

mod boot_clock;

mod client;

mod conn;

mod lost;

mod error;

pub use boot_clock::{BootInstant, LOOK_EVERY};
pub use client::{ATTEMPTS_MAX, Client, REQUEST_DEADLINE};
pub use conn::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT, SILENCE_MAX};
pub use error::{AcquireError, ClientError};
pub use lease_bucket::{LocalBucket, Spend};
pub use leased::{LeaseBucket, LeaseFigures, LeaseOptions, Leased, QUIET_PER_PERIOD};
pub use lost::Lost;
pub use permit::Permit;
pub use rules::{keep_alive_credit, told_at};
pub use session::{AcquireOptions, Session, believed_at, deadline_after, margin_for};
