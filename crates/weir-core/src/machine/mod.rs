//! The limit state machine: pure, deterministic, bit-exact.
//!
//! Every node applies the same Raft log to a [`Machine`] and reaches byte-identical state.
//! This module owns every rule of the operations — limits, sessions, tickets and grants, the wait
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
//! and those behind it wait too, so large requests are never starved. (A request of
//! several parts that has room in a queue is the one exception: see below.)
//!
//! # Keyed limits
//!
//! A keyed definition stands for one bucket or semaphore per key ([`limit`]). A key's state
//! (kept in memory as the paragraphs below say) is created by the first request that
//! charges it or waits on it, and dropped in the entry that finds it fresh again: nothing held, nothing waiting, its
//! bucket at its burst. A bucket reaches its burst by refill alone, so a key with a bucket
//! below its burst and nothing else is filed in the deadline index at the log time it is
//! full (`deadlines`) and dropped there. *Claim: dropping a fresh key changes no
//! decision.* A request on a key with no state is decided as on a new limit: a full bucket
//! (whose refill the burst caps, so its remainder is zero either way), nothing held, an
//! empty queue; that is exactly the state that was dropped, since `max_in_use` is not
//! decided on. So the decisions and fences are those of a machine that kept every key
//! forever, and a snapshot holds only the keys that are not fresh, all decided on the log
//! clock (G4). Live keys are bounded per definition (`keys_max`) and across the machine
//! ([`crate::bounds::KEYS_LIVE_MAX`], apart from the definitions' `LIMITS_MAX`): a new key
//! past either is refused `AtCapacity`, naming the limit or the live keys.
//!
//! In memory a live key is what differs from a fresh bucket, kept once. Most live keys
//! differ by their bucket alone (a rate take leaves nothing else): such a key is *lean*,
//! three numbers (tokens, refill remainder, last refill time) and its name in its
//! definition's key table ([`key_table`]), which keeps keys in chunks of up to 64, names
//! back to back in one buffer and numbers in columns: a key costs its name's bytes and 22
//! more, no allocation of its own, no id. The deadline index files each chunk, not each
//! key, under the earliest time one of its keys is full again (`deadlines`); the entry that
//! reaches it drops the chunk's keys that are full, which are fresh. The rare states (a
//! permit held, a ticket waiting, an unsettled estimate, a token lease) belong to a key
//! kept as a limit of its own under an id, as a definition is, found through its
//! definition's `keys` map; it exists only while one of them does.
//!
//! The rules decide on limits by id, so a command that names a lean key *promotes* it to a
//! limit under a fresh id (with the same bucket) before deciding, and the key is *demoted*
//! back to its table when the command leaves it nothing but a bucket below its burst (or
//! dropped when full, as before); a key promoted by a command that then leaves it alone
//! (a request refused by another part) is demoted at the command's end. *Claim: keeping a
//! key lean changes no decision.* A lean key and the limit it is promoted to have the same
//! bucket and the definition's spec, and nothing else (no holder, waiter, estimate or
//! lease, and `max_in_use` is not decided on); its due time is the limit's `full_at_ms`,
//! so it is dropped in the same entry. Ids are handed out in log order, so every node
//! promotes to the same ids; a promotion takes one even when its command is then refused.
//! (A key's id is that of its last promotion, so keys whose queues are served in the same
//! entry are served, and their fences handed out, in the order of those ids.) A key's
//! `max_in_use` is kept only while it is a limit of its own: a key that held a permit and
//! is lean reads 0 there.
//!
//! The snapshot holds the limits (keys with a state of their own among them, each encoded
//! as the unshared, unboxed limit it stands for), then each definition's lean keys as a
//! list in key order, whatever the chunks: two nodes in the same state write the same
//! bytes, and a restore builds the chunks afresh. A version 7 snapshot's keys are all
//! limits of their own; each is demoted or dropped the next time a command or a deadline
//! reaches it.
//!
//! # Several parts
//!
//! A request may name up to [`crate::bounds::PARTS_MAX`] parts, each (limit, key, units),
//! all of one tenant, no limit twice. It is decided in one entry: granted on every part
//! under one fence, or queued on every part, or refused with nothing charged. A part that
//! names an unknown limit, a key its limit does not take, or more units than its limit
//! can ever grant refuses the whole request naming that part's limit.
//!
//! A new request is granted at once when every part is *ready*: its limit has room for it
//! and no waiter in its queue lacks room (else it would pass someone who blocks). A waiting
//! request of several parts sits in the queue of every part's limit. Serving a queue walks
//! it in order ([`state`]'s `serve`):
//! - a waiter without room here stops the walk: it blocks those behind it, as a head does;
//! - a waiter of one part with room is granted;
//! - a waiter of several parts with room here is granted when every other part is ready
//!   for it (room there, and no waiter ahead of it there without room), all parts in this
//!   entry, taking it out of every queue as service; otherwise it is passed over and the
//!   walk goes on: the room here is not what it waits for, so it never blocks a waiter
//!   behind it that can use it.
//!
//! *G1 holds:* every part is charged only when its own limit has room for it
//! (`Limit::grant` asserts it), and the parts of one request are charged in the same entry
//! or not at all; a passed-over waiter holds nothing.
//!
//! *No wake-up is lost (G7):* say waiter `W` has room on every part and nobody ahead of it
//! without room on any part. The last change that brought this about made room (a release,
//! an expiry, a refill, a withdrawal) on some limit `L` of `W`'s, or withdrew a waiter
//! ahead of `W` there. Each of those serves `L` in the same entry: a release, an expiry and
//! a withdrawal serve the limits they touch, and a refill is filed in the deadline index
//! under the time the first waiter without room in `L` gets its tokens — `W` itself or a
//! waiter ahead of it, whose service comes first. The walk of `L` passes over or grants
//! everyone ahead of `W` (none lacks room) and reaches `W`, whose other parts are ready: it
//! is granted. So after every entry, every waiting request has a part without room, or a
//! waiter ahead of it on some part without room (the property test of the machine checks
//! this after every entry against a model).
//!
//! Caveat: a request of several parts can wait longer than head-of-line order would let
//! it. While it waits for part `A`, the room it has in `B` goes to those behind it in
//! `B`; when `A` has room, `B` may have none, and it blocks `B` from then on. It is served
//! as soon as both have room at once, which blocking makes come: each of its queues stops
//! at it once it lacks room there. A walk also visits the passed-over waiters ahead, so
//! serving a queue costs the waiters it passes over as well as those it grants.
//!
//! # Takes with an estimate
//!
//! A take may hold an estimate (`AcquireParts::estimate`): its rate parts take the units
//! asked, and the ticket stays live, recorded on each rate part's limit under its fence,
//! until `SettleTake` names the actual cost. Below the estimate the difference returns to
//! the bucket, never above its burst; above it the difference is taken as far as the
//! bucket holds (it floors at empty, no debt is carried) and the whole overrun is recorded
//! on the definition and answered `Overrun`. A settlement is idempotent by ticket; a take
//! released unsettled, or whose session ends, keeps its estimate as charged. A key with an
//! unsettled estimate is not fresh, so the key a settlement returns tokens to exists.
//! G1's rate bound counts what is granted: returned tokens were granted and not used, and
//! an overrun is spending the limit did not grant, recorded rather than hidden.
//!
//! # Tokens returned
//!
//! `ReturnTokens` gives tokens back to rate buckets with no take to settle (what Envoy's
//! `is_negative_hits` asks: a gateway returning hits it charged earlier). Each part's units
//! go back to its limit's bucket, or its key's, never above the burst; the parts are judged
//! first and a bad one refuses them all, changing nothing. A key without a state is full,
//! so a return creates none; a key the return fills is fresh and dropped as any fresh key
//! is. The limits it touches are served in the same entry (the tokens may let waiters
//! through). G1's rate bound then counts tokens granted less tokens returned: a return is
//! the caller's word that what it was granted went unused, as a settlement below its
//! estimate is, and a bucket still never holds more than its burst.
//!
//! # Token leases
//!
//! A session may lease a share of a rate limit (or of one key of a keyed limit) and decide
//! takes on it locally, without an entry per take ([`command::LeaseTokens`],
//! `state/token_leases.rs`). A lease is two numbers held by the session until it changes
//! them or ends: a refill share `r` (micro-tokens a second) and a bucket size `c` (tokens).
//! While it stands, the cluster's own bucket refills at `per_second − Σr` and holds at most
//! `burst − Σc` over the limit's leases ([`limit::Limit::own_cap_micro`]); a lease whose
//! cap grows takes its first tokens from the cluster's bucket, as many as it held up to the
//! growth. The holder keeps a local bucket of size `c`, filled with what the reply moved and
//! refilled at `r` from the moment it has the reply; it spends from it until its session's
//! belief deadline (the G2 rule: the send time of its last acknowledged keep-alive plus the
//! TTL, less the margin), and no longer. Leases together take at most
//! [`token_lease::LEASE_SHARE`] of a limit's rate and burst, so callers that do not
//! lease, and holders past their share who ask per take, keep the rest. Each reply states a
//! fair share (the leasable part over the holders); a holder above it asks for less in its
//! next request, so a newcomer's share grows as others shrink, and nobody's is taken.
//!
//! *Claim (G1 in spend time): over any real-time window `W`, the tokens spent by the
//! cluster and every holder together are at most `burst + per_second × W`* (up to the log
//! clock's drift `ρ`, as for the cluster alone). Look at the buckets at any real instant:
//! the cluster's and each holder's. (1) *Their levels sum to at most `burst`*, because each is
//! at most its own cap, and the caps sum to at most `burst`: a cap grows at the holder only
//! after the entry that shrank the cluster's was applied (it learns of it from the reply),
//! and shrinks at the holder when it sends the request, before the entry that grows the
//! cluster's is applied. Tokens move between buckets, never appear: what a growing cap
//! takes was in the cluster's bucket; what a holder gives back (`returned_micro`) it stopped
//! spending when it sent it, and a retried request gives nothing back twice (its `seq` is not
//! above the session's last, so it changes nothing). (2) *Their refill rates sum to at most
//! `per_second`*, by the same order: a holder's rate rises after the entry that lowered the
//! cluster's, and falls before the entry that raises it. (3) *A lease ends only when its
//! holder has stopped*: by its own request (as in (1)), or with its session, which expires in
//! the first entry whose log clock passes the session's lease; by the G2 argument above, the
//! holder's belief deadline passed before that entry, and it stops spending at its deadline.
//! Its tokens are then gone: a lapsed lease counts as spent, never refunded. (4) Every bucket
//! spends at most its level at the window's start plus its refill during it; summing over
//! the buckets with (1) and (2) gives the claim. A failover changes none of it: leases are
//! state, in the log and the snapshot, and a new leader's first entry freezes the log clock,
//! which only slows the cluster's refill.
//!
//! A cluster share is never taken back from a holder: a request is granted at least the
//! smaller of what it asks and what it has (`state/token_leases.rs`). A limit redefined
//! below its leases (a lower rate or burst) keeps them, as a lowered `concurrent` keeps its
//! holders: the cluster's own bucket then refills at no rate and holds nothing until the
//! holders shrink or end, and a take that needs it waits (`Busy` has no retry time).
//!
//! Caveats: a halt refuses new lease requests of its tenant at once, but a holder learns of it
//! only by its next request or its session's events, so leased takes can go on for up to one
//! renewal interval after the halt is acknowledged (G6 holds for reserves and for the takes
//! the cluster decides). Leases are on rate-only limits: a limit that caps concurrency, has no
//! rate, or is in shadow mode is refused a new lease.
//!
//! # Shadow limits
//!
//! A shadow limit (`shadow` in its spec) is evaluated on each request and never refuses:
//! a part on it with room is charged with the rest; a part that would refuse (no room, too
//! many units, no room for a new key) passes uncharged and is counted on the definition
//! when the request is granted or queued (a request refused by another part counts
//! nothing). A shadow part is decided when its request arrives: a request that waits
//! carries only its enforced parts, so its later grant does not charge the shadow limit.
//!
//! # Limits as files
//!
//! `ApplyLimits` sets a tenant's definitions in one entry (`state/apply_limits.rs`). It is judged
//! whole before anything changes: every spec, no limit changing whether it is keyed, room
//! for the limits and the tenant it creates. A refusal names the definition and the state
//! is as before, so a file is applied entirely or not at all, and every replica decides it
//! the same way from the same entry (G4). Then each created or changed definition is
//! applied as `Define` is and each pruned limit removed as `RemoveLimit` is, so G1 holds as
//! it does for those: a lowered `concurrent` keeps its holders and new grants wait, and
//! waiters the new spec can never serve (or of a removed limit) are refused at once rather
//! than left queued. A definition equal to the limit's spec is not touched at all. The
//! snapshot carries the definitions and nothing of the apply itself. The dry run
//! (`Machine::apply_dry_run`) is the same judgment on the applied state, answered by a
//! linearizable read.
//!
//! # Moving a tenant
//!
//! A tenant moves between groups by `FreezeTenant` in the one it leaves (its whole state
//! taken out as one [`FrozenTenant`], its requests answered `Moved` from then), `AdoptTenant`
//! in the one it joins (installed with its limits renumbered, its log times moved by the
//! two clocks' offset, so nothing has less time left, and the fence counter raised to the
//! source's, so fences stay strictly increasing), and `DropFrozen` in the source once the
//! move is placed. [`frozen_tenant`] states what moves and why tokens stay exact.
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
//! A node builds a snapshot without stopping the machine for the encode: under its state
//! lock it only freezes the state ([`Machine::freeze`]), a clone of `SavedLimits` whose
//! lean keys share their map of chunks and the chunks with the machine's, copy-on-write (a
//! persistent tree: a chunk, and the tree nodes above it, are copied only when the machine
//! changes it while a frozen state still holds it); the frozen state is encoded after the
//! lock is let go. *Claim: the bytes are those of the state at the frozen
//! index (G4).* The clone is taken between two applies and shares nothing the machine can
//! change in place: a shared chunk is copied before any change, so the encode reads the
//! frozen values whatever the machine applies meanwhile. The freeze costs a reference a
//! keyed definition's table, whatever its keys, and a copy of the rest (sessions, tickets,
//! limits, tenants).
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
//! - Retention: a finished ticket is kept until its session's acknowledged mark passes it
//!   (the client's word that it will not ask about it again) or a log-time window longer
//!   than the client's retry deadline runs out, whichever is first; a ticket below the mark
//!   that is not live is refused without effect, and a session that would need more than
//!   its bound is refused rather than made to forget ([`session`]). Settlement receipts are kept a day and bounded in
//!   count per tenant (the oldest evicted and counted, see [`crate::bounds`]); a duplicate
//!   older than either retention is treated as new.

pub mod clock;
pub mod command;
mod deadlines;
pub mod frozen_tenant;
pub mod key_table;
pub mod limit;
pub mod queue;
mod queue_key;
mod queue_rank;
pub mod queue_view;
pub mod reply;
pub mod saved;
mod saved_v5;
mod saved_v6;
mod saved_v7;
mod saved_v8;
mod saved_v9;
pub mod session;
pub mod snapshot;
#[cfg(test)]
mod snapshot_size;
pub mod state;
pub mod status;
pub mod tenant;
pub mod token_lease;
pub mod totals;
mod validate;

pub use command::{
    Acquire, AcquireParts, Batch, Change, Command, Control, Definition, Description, Effect, Fence,
    HaltScope, Leadership, LeasePart, LeaseTokens, LimitId, Owner, Part, Priority, SessionId,
    Settle, TicketId, next_session_candidate,
};
pub use frozen_tenant::{FrozenTenant, GroupId};
pub use queue_view::{HolderView, QueuePage, WaiterView};
pub use reply::{Applied, BudgetKind, Event, LeaseShare, LimitsChange, Refusal, Reply};
pub use snapshot::{
    Frozen, SNAPSHOT_MAGIC, SNAPSHOT_VERSION, SNAPSHOT_VERSION_READ_MIN, SnapshotContents,
    digest_of,
};
pub use state::Machine;
pub use status::{BucketNow, KeyPage, LimitStatus, LimitsPage, TenantStatus};
pub use tenant::{RunSlot, Spend};
pub use validate::{hidden_char, name_rule};
