//! The client library: one multiplexed connection to the cluster's leader, followed across
//! failovers; sessions kept alive in the background; permits as guards; typed errors that
//! say whether a request may have taken effect.
//!
//! # Layout
//!
//! Imports point down this list; nothing below knows anything above it.
//!
//! - `session.rs` — [`Session`]: open, acquire, close; its background task (keep-alives,
//!   pushed events, re-asks, the belief deadline).
//! - `permit.rs` — [`Permit`]: a held permit as a guard; released on drop.
//! - `session_state.rs` — what a session, its permits and its task share: the id, the belief
//!   deadline, the waiting and held tickets.
//! - `ops.rs` — typed shorthands on [`Client`] for the writes and reads of the spec.
//! - `client.rs` — [`Client`]: leader following and retries.
//! - `conn.rs` — one connection to one node: handshake, request ids, reader and writer.
//! - `lost.rs`, `error.rs` — [`Lost`], [`ClientError`], [`AcquireError`].
//!
//! # Leader following
//!
//! A [`Client`] is a cheap handle (clone it freely); clones share one connection, and the
//! requests of many tasks go over it at once, each with an id, their responses coming back
//! in any order. There is no connection until the first request. A connect goes to the
//! *preferred* address if there is one — the leader a `NotLeader` answer named — and
//! otherwise to the next of the configured servers, round-robin. A `NotLeader` that names
//! another node gives the connection up and sends the next try there at once; one that
//! names no other node (an election is under way) pauses first, so the requests sharing the
//! connection do not all reconnect at once. `Status` and `ReadLocal` are answered by
//! whichever node is asked; [`Client::stale_reads`] sends reads as `ReadLocal`.
//!
//! Only one connect is in flight at a time: the requests that find the connection dead
//! wait for it and then share the new one (the doc of the connection field in `client.rs`
//! says why). Each new connection bumps [`Client::generation`].
//!
//! # Retries
//!
//! [`Client::request`] retries at most [`ATTEMPTS_MAX`] tries within [`REQUEST_DEADLINE`]:
//! - a connect that fails moves on to the next server at once, pausing after a full round
//!   of them or a failed connect to the preferred address;
//! - a node that is `Unavailable`, or that answers `OutcomeUnknown`, loses the connection
//!   and the next try comes after a pause;
//! - a connection that breaks, or a try with no response within [`RESPONSE_TIMEOUT`], loses
//!   the connection and is tried again at once;
//! - every other answer, refusals included, is returned.
//!
//! Every write of the machine is idempotent by its ids (a retried `OpenSession` at worst
//! opens a session that expires unused), so a write whose answer was lost is retried too;
//! when retries run out after a try that may have applied, the error is
//! [`ClientError::OutcomeUnknown`], never "failed".
//!
//! # Sessions: keep-alive and the belief deadline
//!
//! A [`Session`] sends `KeepAlive` every TTL/3. When one is acknowledged, the session's
//! **belief deadline** becomes `send time + TTL − margin` ([`margin_for`]) on this process's
//! monotonic clock: the cluster cannot expire the session before then (G2, see the
//! `machine` module doc). Every [`Permit`] of the session is believed held only until that
//! deadline, so a permit's belief ends no later than the lease it rests on. A keep-alive
//! with no acknowledgement leaves the deadline where it was and is retried soon (100 ms);
//! when the deadline passes, every held permit is lost ([`Lost::Deadline`], seen through
//! [`Permit::lost`] and [`Permit::lost_reason`]). A keep-alive answered `UnknownSession`
//! ends the session ([`Lost::Expired`]).
//!
//! # Pushes and re-asks
//!
//! A node pushes to a connection the events of the sessions that connection has used, and
//! the client fans them out to every [`Client::events`] subscriber; a session learns its
//! grants, refusals, halts and expiry from them without asking. An acquire's ticket is
//! registered as waiting *before* the acquire is sent, so a grant pushed ahead of the
//! acquire's own answer is not lost. A push can still be lost — with a connection that
//! broke, or by a subscriber that fell behind — so on every new connection (and on a lag)
//! the session re-asks each waiting ticket: the acquire is idempotent by (session,
//! ticket), and a ticket granted meanwhile answers `Granted` with the same fence. With no
//! ticket waiting it sends a keep-alive instead, which names the session on the new
//! connection so its pushes follow it there.
//!
//! # Typed errors
//!
//! [`ClientError`] says why a request has no answer, with [`ClientError::definitely_failed`]
//! ("did not take effect" versus "outcome unknown") and [`ClientError::is_retryable`].
//! [`AcquireError`] adds what only an acquire can meet (refused, timed out, session lost).
//! Refusals of the machine (halted, busy, over budget) are typed replies
//! (`Reply::Refused`), never text to match on; [`Lost`] says why a permit may no longer
//! be held.
//!
//! # Caveats
//!
//! - The belief deadline is safe only while this client's clock rate stays within the
//!   margin of the leaders' (see [`margin_for`]).
//! - A [`Permit`] dropped outside a tokio runtime sends no release: it stays held on the
//!   cluster until its session closes or expires.
//! - A session and its permits share its state: the keep-alives go on while any of them
//!   lives, and stop (the cluster then expires the session) once all are dropped.
//! - [`Client::ask_node`] asks one given node, with no redirect or retry.

mod boot_clock;
#[allow(clippy::module_inception)] // named after its type like its siblings; re-exported
mod client;
mod conn;
mod error;
#[cfg(test)]
mod fake_node;
mod lost;
mod ops;
mod permit;
mod session;
mod session_state;
#[cfg(test)]
mod tests;

pub use boot_clock::BootInstant;
pub use client::{ATTEMPTS_MAX, Client, REQUEST_DEADLINE};
pub use conn::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT, SILENCE_MAX};
pub use error::{AcquireError, ClientError};
pub use lost::Lost;
pub use permit::Permit;
pub use session::{AcquireOptions, Session, believed_at, deadline_after, margin_for};
