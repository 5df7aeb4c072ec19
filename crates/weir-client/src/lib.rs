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
//! - `conn.rs` — one connection to one node: handshake, request ids, reader, writer and the
//!   silence watchdog.
//! - `hedge.rs` — the bounds of the hedged keep-alive, and the jitter of retry pauses.
//! - `boot_clock.rs` — [`BootInstant`]: CLOCK_BOOTTIME, which the belief deadline is on.
//! - `lost.rs`, `error.rs` — [`Lost`], [`ClientError`], [`AcquireError`].
//! - `fake_node.rs`, `tests.rs` (tests only) — a scripted node, and the failure scenarios
//!   run against it.
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
//! On a multi-homed host, [`Client::with_local_addr`] binds every connection of the client
//! (the leader's, the hedge's, each redirect's) to one local address before it connects, so
//! its traffic leaves by that interface and the nodes (and firewalls between) see that
//! source; the partition harness tells one client's links from the others' by it.
//!
//! # Failure detection: a silent node versus a busy one
//!
//! A node that stops answering while its process lives on (SIGSTOP, a frozen VM, a stalled
//! disk) keeps its sockets open: nothing fails, requests just wait. A shorter per-try
//! timeout cannot tell that node from a busy one — during an election, tries legitimately
//! take over a second (`docs/benchmarks.md`, "Tried and reverted"). So the client does not
//! time requests; it listens for *silence*:
//!
//! - **Heartbeats.** Right after the welcome, every connection sends `Heartbeats`, and the
//!   node then sends a small `Heartbeat` frame every `HEARTBEAT_PERIOD` (200 ms) from a task
//!   of its own, whatever its requests are doing. A busy node — an election under way, a
//!   slow commit — still sends them; a stopped one sends nothing at all.
//! - **The silence bound.** A watchdog per connection declares it dead when *no frame at
//!   all* (response, event or heartbeat) arrived for [`SILENCE_MAX`] (1 s, five periods).
//!   Every request in flight on it then fails at once as "outcome unknown" and is retried
//!   (every write is idempotent) on a new connection; the welcome of a new connection is
//!   held to the same bound, since a stopped process's socket still accepts connects.
//! - **Where to go next.** The silent node is *suspected* for `SUSPECT_FOR` (3 s): connects
//!   pass it over, and a `NotLeader` that still names it (a follower that has not noticed
//!   yet) is treated as "no leader known" (a pause, then the next server) instead of a
//!   redirect into the silence. The live nodes elect a leader within about a second, and the
//!   usual `NotLeader` redirects lead there.
//! - **A deposed leader.** Heartbeats carry the node's term and the leader it knows of. A
//!   connection whose node named itself leader and then names another (it lost an
//!   election while partitioned, and is alive) is given up with that leader as the next
//!   address, before any request has to fail there.
//! - **No storms.** One connect at a time per [`Client`] (the lock below), so a dead
//!   connection costs one reconnect per `Client`, not one per request in flight; a kill
//!   (connection refused) is detected at once as before, so kill-failover is not slowed;
//!   and the `Heartbeat` is `try_send` on the node, so a slow reader is never sent more than
//!   its outbox holds.
//!
//! - **Hedged keep-alives** (`hedge.rs`). A keep-alive still unanswered when less than
//!   1.6 s of the belief is left, on a connection silent for 400 ms (two heartbeats), is sent
//!   to the other nodes too, through one hedge connection per [`Client`], following their
//!   redirects. The node that acknowledges it leads; the client adopts that connection at
//!   once (the silent one is suspected and its waiting requests retried there). It never
//!   fires on a connection that is heard from, nor with the deadline far, so a slow commit
//!   or a kill (a refused connection, never silent) is not touched by it.
//! - **Jitter.** Every pause between tries (no leader known, a full round of refused
//!   connects, an unavailable node) is 50–150% of `RETRY_PAUSE`: the mean is unchanged, so
//!   kill-failover waits no longer on average, and clients that lost their leader at the same
//!   instant do not come back in step. Immediate retries (a redirect, the next server after a
//!   refused connect) stay immediate.
//!
//! **The budget: the session's deadline sets the urgency.** A session with TTL `T` renews
//! every `T/5` and believes its permits until `last acknowledged send + T − margin`. With
//! `T` = 3 s (margin 300 ms) the worst case is a stop just after a keep-alive was sent and
//! before its answer: the last acknowledged one was sent 600 ms earlier, so the belief ends
//! `2.1 s − r` after the stop (it was `1.7 s − r` while keep-alives went every `T/3`), `r` being how long before the stop that keep-alive went out
//! (up to one commit round trip: a few ms on a quiet machine, over 100 ms in a loaded debug
//! build). Against it:
//!
//! | step | detector path | hedged path |
//! |---|---|---|
//! | notice the silence | 1.0–1.1 s (`SILENCE_MAX` + its check) | 0.4–0.45 s |
//! | find the leader (the election runs from the stop, concurrently: 0.8–1 s) | redirects, 100 ms pauses | the same, on the hedge connection |
//! | reconnect | one connect per `Client` (loopback: ~1 ms) | one per `Client` |
//! | keep-alive round trip | one commit on the new leader | the same |
//!
//! On the detector path alone that leaves 1.0 s − `r` for discovery, reconnect and the
//! commit, which a loaded machine can exceed; the hedge starts the discovery 0.6 s sooner
//! and ends at the election's end plus one commit. The session on the cluster does not
//! expire meanwhile: the log clock freezes across the leader change (`machine` module doc),
//! so what costs a holder its permit is only its own belief deadline. Two more things were
//! found to cost it (#10): a keep-alive due while the session re-asked its tickets after the
//! reconnect waited for the re-ask (a string of writes and reads, each retried through the
//! election) — keep-alives now run in a loop of their own; and after `SUSPECT_FOR` (3 s
//! from the detection, about 4.1 s from the stop) a node still stopped can be connected to
//! again, costing one welcome timeout (1 s) to the requests behind that connect — the
//! hedge does not wait on that connect. A TTL below 3 s has less slack than this budget
//! and may lose permits to a stall.

//! # Retries
//!
//! [`Client::request`] retries at most [`ATTEMPTS_MAX`] tries within [`REQUEST_DEADLINE`]:
//! - a connect that fails moves on to the next server at once, pausing after a full round
//!   of them or a failed connect to the preferred address;
//! - a node that is `Unavailable`, or that answers `OutcomeUnknown`, loses the connection
//!   and the next try comes after a pause;
//! - a connection that breaks, falls silent ([`SILENCE_MAX`]) or is deposed, or a try with
//!   no response within [`RESPONSE_TIMEOUT`], loses the connection and is tried again at
//!   once;
//! - every other answer, refusals included, is returned.
//!
//! Every write of the machine is idempotent by its ids (a retried `OpenSession` at worst
//! opens a session that expires unused), so a write whose answer was lost is retried too;
//! when retries run out after a try that may have applied, the error is
//! [`ClientError::OutcomeUnknown`], never "failed".
//!
//! # Sessions: keep-alive and the belief deadline
//!
//! A [`Session`] sends `KeepAlive` every TTL/5. When one is acknowledged, the session's
//! **belief deadline** becomes `send time + TTL − margin` ([`margin_for`],
//! [`deadline_after`]) on CLOCK_BOOTTIME ([`BootInstant`]): the cluster cannot expire the
//! session before then (G2, see the `machine` module doc). The boot clock counts the time
//! the machine spends suspended, which the monotonic clock (`Instant`) does not, so a
//! client resuming from a suspend finds its deadline passed instead of believing in
//! permits whose lease ran out in real time; timers only say when to look. Every [`Permit`] of the session is believed held only until that
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
//! broke, by a subscriber that fell behind, or by the node's forwarder that fell behind
//! (it then sends `Resync`, which bumps [`Client::generation`]) — so on every new
//! connection, every `Resync` and every lag of its own the session re-asks each waiting
//! ticket: the acquire is idempotent by (session, ticket), and a ticket granted meanwhile
//! answers `Granted` with the same fence. With no ticket waiting it sends a keep-alive
//! instead, which names the session on the new connection so its pushes follow it there.
//! Asking again for a *held* ticket answers `Granted` even under a halt, so for held
//! permits the re-ask reads the halts of their tenants instead, and marks lost every permit
//! a halt covers: a `Halted` push that was lost is learned too.
//!
//! # Nothing stays held that no one believes it holds
//!
//! A ticket leaves the session's maps without a permit owning it when its acquire fails
//! with an unknown outcome, times out, or is cancelled (the future dropped), or when a
//! grant arrives for an acquirer that is gone. Each of these releases the ticket in the
//! background, with bounded retries (a release is idempotent, and releases a queued ticket
//! too); so does a permit dropped without `release`, and a withdrawal whose release failed.
//! A definite refusal holds nothing and sends nothing.
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
//! - A client process starved of CPU for longer than [`SILENCE_MAX`] can find a live
//!   node silent; it then reconnects (a wasted connect, never a wrong belief).
//! - A partitioned old leader that still believes it leads keeps sending heartbeats that
//!   name itself; requests there wait for its commit timeout as before (the partition
//!   harness covers that path). Only a deposed node that *knows* the new leader redirects.
//! - A background release that runs out of retries leaves the ticket to the session's end
//!   (close, or expiry after its TTL).
//! - A [`Permit`] dropped outside a tokio runtime sends no release: it stays held on the
//!   cluster until its session closes or expires.
//! - A session and its permits share its state: the keep-alives go on while any of them
//!   lives, and stop (the cluster then expires the session) once all are dropped.
//! - [`Client::ask_node`] asks one given node, with no redirect or retry.

#![forbid(unsafe_code)]

pub mod protocol;
pub mod task;
pub mod tls;
pub mod wire;

mod boot_clock;
mod client;
mod conn;
mod error;
#[cfg(test)]
mod fake_node;
mod hedge;
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
