//! The limit state machine: pure, deterministic, bit-exact.
//!
//! Every node applies the same Raft log to a [`Machine`] and reaches byte-identical state.
//! This module owns every rule of spec §2 — limits, sessions, tickets and grants, the wait
//! queue, tenants, budgets, halts — and nothing else: no clock, no I/O, no randomness, no
//! hash-map order, no floating-point arithmetic in any decision. The server wraps it; the
//! server never decides a grant.
//!
//! # Entries, replies and events
//!
//! A log entry is a [`Batch`]: many clients' [`Command`]s, stamped once by the leader's
//! proposer (openraft pays an fsync per entry, so batching is what makes the cluster fast).
//! [`Machine::apply`] returns an [`Applied`]: one [`Reply`] per command, and the [`Event`]s
//! produced for other sessions — a queued ticket granted because someone released, a
//! session expired, a halt landed. Grants of queued tickets are made *by the machine*, in
//! the entry that freed the room; no wake-up depends on a waiter asking again. A lost push
//! loses nothing: the grant is state, and asking again for the same ticket answers
//! `Granted` with the same fence.
//!
//! # Time: the log clock
//!
//! The machine knows only the log clock ([`clock`]): it advances by the differences of
//! consecutive stamps of one leadership and by *nothing* at the first entry of a new
//! leadership. The proposer must stamp `clock_ms` from its monotonic clock, so within a
//! leadership stamps advance at real-time rate (up to the clock's drift `ρ`).
//!
//! *Claim: log time never runs faster than real time (times `1 + ρ`).* Split any stretch of
//! log at its changes of leadership. Within one leadership the log clock advances by the
//! leader's monotonic clock between two stamps it took, so by at most `(1 + ρ)` times the
//! real time between them. At a change of leadership it advances by zero, though real time
//! passed. Summing, log time over the stretch is at most `(1 + ρ)` times the real time
//! between its first and last stamps. A new leader whose clock is fast, jumped, or an hour
//! ahead changes nothing: only its own differences count, from its first entry on. (Wall
//! time is carried too, for `admitted-at` displays, and never decides.)
//!
//! # Leases, and why no two clients believe they hold the same permit (G2)
//!
//! A session's lease runs `ttl_ms` of log time from the entry that applied its last
//! keep-alive. It expires in the first entry whose log clock reaches `expires_at_ms`; only
//! then are its permits released and granted to others.
//!
//! The client believes it holds its permits until `send + ttl − margin` on its monotonic
//! clock, where `send` is when it sent its last acknowledged keep-alive. That keep-alive was
//! stamped after it was sent, so the lease started at real time `≥ send`. By the claim, the
//! lease cannot run out before `ttl / (1 + ρ)` of real time has passed since then, and a new
//! holder learns of its grant only after the expiring entry is applied. So with
//! `margin ≥ ttl · ρ / (1 + ρ)` (plus the client's own drift, conservatively doubled) the
//! old holder's belief ends before any new holder's begins. The freeze at a change of leader
//! only lengthens leases, which errs in the safe direction: a limit under-admits for at most
//! one election, never over-admits.
//!
//! # Fences
//!
//! Every grant gets a fence strictly above all earlier ones: the entry's log index when
//! that is larger, the next integer otherwise (an entry of many commands can grant many
//! permits). A fence survives failover as part of the state, so a holder keeps the same
//! fence; a downstream resource that remembers the largest fence it saw can refuse a stale
//! holder.
//!
//! # The wait queue
//!
//! Priority level first; within a level weighted-fair across fairness keys; first come
//! within a key ([`queue`]). The head blocks: a ticket for more units than are free waits,
//! and those behind it wait too, so large requests are never starved.
//!
//! # Snapshots
//!
//! The snapshot ([`snapshot`]) is the machine's `SavedLimits` ([`saved`]), bit-exact: all of
//! its state but what is derived from the rest — the lease-expiry index, the deadline index,
//! the totals of the bounded items and each queue's ranks — which a restore rebuilds;
//! ordered containers, integers, f64 rates as bits, one pinned codec, a framed header with a
//! crc32c. Decoding re-checks every invariant; a restored machine fed the rest of the log
//! ends byte-equal to one that never snapshotted.
//!
//! # Caveats
//!
//! - Lowering `concurrent` keeps existing holders, so the units held can exceed the new
//!   cap until they release; G1 is kept at every grant (`held + units ≤ concurrent`).
//! - A reserve *without* a hold is checked against what was settled so far; the runs
//!   admitted that way can still overspend the budget by what they settle later. Once the
//!   budget is exhausted, no further reserve in that period is admitted. Reserves *with* a
//!   hold cannot overspend together (G6): each is admitted only while settled + standing
//!   holds + its hold fit; a charge above its hold is recorded and reported as an overrun.
//! - Retention: finished tickets are kept for a log-time window longer than the client's
//!   retry deadline, and a session that would need more than its bound is refused rather
//!   than made to forget ([`session`]). Settlement receipts are kept a day and bounded in
//!   count per tenant (the oldest evicted and counted, see [`crate::bounds`]); a duplicate
//!   older than either retention is treated as new.

pub mod clock;
pub mod command;
mod deadlines;
pub mod limit;
pub mod queue;
mod queue_key;
mod queue_rank;
pub mod reply;
pub mod saved;
pub mod session;
pub mod snapshot;
#[cfg(test)]
mod snapshot_size;
pub mod state;
pub mod status;
pub mod tenant;
pub mod totals;
mod validate;

pub use command::{
    Acquire, AcquireParts, Batch, Change, Command, Definition, Fence, HaltScope, Leadership,
    LimitId, Owner, Part, Priority, SessionId, Settle, TicketId, next_session_candidate,
};
pub use reply::{Applied, BudgetKind, Event, Refusal, Reply};
pub use snapshot::{SNAPSHOT_MAGIC, SNAPSHOT_VERSION, digest_of};
pub use state::Machine;
pub use status::{LimitStatus, TenantStatus};
pub use tenant::{RunSlot, Spend};
