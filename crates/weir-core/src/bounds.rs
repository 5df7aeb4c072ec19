//! Every bound on sizes, counts and durations that the state machine enforces, in one place,
//! each with the reason for its value.
//!
//! The machine refuses a command that crosses one of these with a typed refusal
//! ([`crate::machine::Refusal::Invalid`] for an argument out of its rule,
//! [`crate::machine::Refusal::AtCapacity`] for a count bound the state reached, or a specific
//! one); it never panics on them and never truncates silently. The network edge (`weir_server::server::edge`) runs the same argument
//! check, [`crate::machine::Command::validate`], before a command is proposed, so a command
//! that breaks a bound on names, reasons, units, weights, TTLs or a limit's spec never reaches
//! the log: a machine refusal for one of them means a command bypassed the edge or the bounds
//! changed. Bounds on what is open at once (sessions, limits, tickets, waiters) depend on the
//! state and are judged by the machine, in log order.
//!
//! The last section bounds what travels between nodes: a command's and an entry's encoded
//! bytes, and the peer frame, so that no request, however large or numerous, makes an
//! AppendEntries that a follower must refuse (G8).

/// Longest tenant, limit, agent, run, period or fairness-key name, in bytes. Names are keys in
/// ordered maps and travel in every command; 128 bytes fits a UUID with a prefix and keeps a
/// hostile client from inflating the state through names.
pub const NAME_BYTES_MAX: usize = 128;

/// Longest halt reason, in bytes: a sentence for the operator who reads it during an incident.
pub const REASON_BYTES_MAX: usize = 1024;

/// Shortest session TTL, in ms. Below this a client cannot keep a session alive across one
/// ordinary leader election (about 300 ms here) plus a keep-alive interval of TTL/5.
pub const SESSION_TTL_MS_MIN: u64 = 500;

/// Longest session TTL, in ms. A crashed client's permits return only when its session
/// expires; ten minutes bounds how long a dead holder can block a limit.
pub const SESSION_TTL_MS_MAX: u64 = 600_000;

/// Default session TTL, in ms (the TTL G9 is promised for).
pub const SESSION_TTL_MS_DEFAULT: u64 = 3_000;

/// Largest session id the edge draws: 2^53 - 1. JSON numbers are doubles in JavaScript
/// and in many other parsers, exact only up to 2^53; ids drawn below it read back exactly
/// from the HTTP API's JSON, and 53 random bits still make an id unguessable. (The
/// machine's collision step, taken only when a drawn id is zero or live, about one open in
/// 2^53 / live sessions, may pick a larger id: a client still gets the right session, in
/// any integer type wider than a double's mantissa.)
pub const SESSION_ID_DRAWN_MAX: u64 = (1 << 53) - 1;

/// Most sessions open at once. A session costs a few hundred bytes plus its tickets; a
/// million bounds that part of the state near 1 GiB even in the worst case.
pub const SESSIONS_MAX: usize = 1_000_000;

/// Most token leases of one session (one per limit or key it leases). A holder leases the
/// few hot limits it takes from; more would be a client leasing everything it touches.
pub const SESSION_LEASES_MAX: usize = 64;

/// Most live tickets (queued or held) of one session. A client that needs more is leaking
/// tickets; refusing them protects every other session's queue positions.
pub const SESSION_TICKETS_MAX: usize = 10_000;

/// How long a session remembers a finished ticket (released, refused, or a rate take), in
/// log-clock ms, so that a retried acquire of it is answered as before instead of being
/// granted again (G5). The client retries a request for at most its `REQUEST_DEADLINE` of
/// 10 s of real time; log time never runs faster than real time (machine module doc), so
/// 15 s keeps every retry covered, with half the window again for proposer queues and clock
/// drift. All are forgotten when the session ends. The window sets a throughput ceiling with
/// [`FINISHED_TICKETS_MAX`] (and [`FINISHED_REFUSALS_MAX`]): tickets finished per second ×
/// the window must stay under it.
/// At 60 s (the first choice) a 256-client bench finishing 14,000 tickets a second filled
/// the machine's bound in 18 s, and every acquire of every tenant was then refused
/// `AtCapacity` until tickets aged out; at 15 s the bounds hold 113,000 a second (13,300
/// refusals).
pub const FINISHED_TICKET_RETENTION_MS: u64 = 15_000;

/// Most finished tickets one session keeps: those at or above its acknowledged mark and
/// inside [`FINISHED_TICKET_RETENTION_MS`] (`machine::session`). At the bound a new ticket
/// of the session is refused `AtCapacity` rather than an old one being forgotten while its
/// client may still retry it. A client that carries a mark (the Rust client, on every
/// keep-alive) keeps only what finished since its last keep-alive plus what it has in
/// flight, far below this; the bound is for a client that carries none. 65,536 lets one session finish over
/// 4,000 tickets a second for the whole window (a busy bench client does a few hundred);
/// a finished ticket costs some 40 bytes, a refused one up to a halt reason more.
pub const SESSION_FINISHED_TICKETS_MAX: usize = 65_536;

/// Most tickets waiting on one limit. A queue longer than this is an outage in progress;
/// further tickets are refused `QueueFull` rather than growing memory without bound.
pub const LIMIT_WAITERS_MAX: usize = 100_000;

/// Most limit definitions at once, across all tenants (the live keys of keyed ones are
/// bounded apart, by [`KEYS_LIVE_MAX`]). Past it a definition is refused `AtCapacity`.
pub const LIMITS_MAX: usize = 100_000;

/// Most live keys at once, across every keyed limit. A key lives only while its state
/// differs from a fresh one, so this bounds the keys active within a refill time: ten
/// million is a per-user or per-IP limit of a very large service. A live key of a token
/// bucket with nothing else is lean (`machine::key_table`): its name and 22 bytes of a
/// node's heap, and at most some 160 bytes of a snapshot with a 128-byte key, so this part
/// of the state stays near 1.5 GiB encoded (the keys with a state of their own, which
/// live tickets and token leases bound, cost some 290 MiB more). Past it a new key is
/// refused `AtCapacity`.
pub const KEYS_LIVE_MAX: usize = 10_000_000;

/// Longest key of a keyed limit, in bytes. Keys name users, API keys, IP addresses and
/// models; 128 holds a UUID with a prefix, an IPv6 address or a sha256 in hex, and keeps a
/// live key's encoding within the snapshot arithmetic of [`KEYS_LIVE_MAX`].
pub const KEY_BYTES_MAX: usize = 128;

/// Live keys of a keyed limit when its definition names no `keys_max`. A key lives only
/// while its state differs from a fresh one (a bucket below its burst, a permit held, a
/// ticket waiting), so this bounds the keys active within a refill time, not all keys ever
/// seen; a thousand keeps a thousand keyed limits at their bound within [`KEYS_LIVE_MAX`].
/// A definition may set any `keys_max` up to `KEYS_LIVE_MAX`.
pub const KEYS_MAX_DEFAULT: u32 = 1_000;

/// Live keys of a keyed limit compiled from an envoyproxy/ratelimit file when `weir limits
/// apply` is given no `--keys-max` and the limit had none: sized for a gateway, which sees
/// tens of thousands of client addresses and API keys a minute. At the bound a limit's
/// keys hold some 16 MiB of a snapshot (about 160 bytes each with the longest keys, see
/// [`KEYS_LIVE_MAX`]); a hundred such limits at their bound reach [`KEYS_LIVE_MAX`], which
/// stays the machine's bound.
pub const RLS_KEYS_MAX_DEFAULT: u32 = 100_000;

/// Most limits one tenant holds for Envoy's descriptor `limit` overrides
/// (`Command::DefineOverride`): one per distinct (requests, unit) a gateway's routes
/// override with. Each is keyed, with [`RLS_KEYS_MAX_DEFAULT`] live keys at most, so a
/// tenant's overrides hold at most this many times that, within [`KEYS_LIVE_MAX`].
pub const RLS_OVERRIDES_MAX: usize = 64;

/// Most keys in one page of a keyed definition's live keys (`Query::Keys`, `weir limit
/// keys`, `GET …/keys`): at most [`KEY_BYTES_MAX`] bytes each, a page stays far below the
/// client frame bound and one read of it holds the apply lock for a bounded walk, however
/// many keys live.
pub const KEYS_PAGE_MAX: u32 = 1_000;

/// Most descriptors of one Envoy `ShouldRateLimit` request. A route's rate-limit actions
/// make a few (a remote address, a path, a header); sixteen leaves room, while the
/// descriptors a request charges become parts, at most [`PARTS_MAX`].
pub const RLS_DESCRIPTORS_MAX: usize = 16;

/// Most entries of one Envoy descriptor: the depth of a ratelimit descriptor tree. Every
/// level adds a segment to a limit's name, which fits in [`NAME_BYTES_MAX`] only for a few
/// levels anyway.
pub const RLS_ENTRIES_MAX: usize = 8;

/// Most parts of one request. A decision against the tenant's, the model's, the user's and
/// the global limit is four; eight leaves room, and keeps the largest request (every part
/// a longest name and key) within [`COMMAND_BYTES_MAX`].
pub const PARTS_MAX: usize = 8;

/// Most limits one list read answers (a page; the next page is asked `after` the last
/// name). A limit's status encodes in at most about 330 bytes (two longest names and its
/// figures), so a page stays near 330 KB, far below the client frame bound of 4 MiB, and a
/// read of a tenant with [`LIMITS_MAX`] limits never builds an answer of all of them.
pub const LIMITS_PAGE_MAX: usize = 1_000;

/// Largest `concurrent` and largest `units` of one acquire. Held units are summed in u64, so
/// any u32 is safe; the bound exists to keep fairness arithmetic far from overflow.
pub const UNITS_MAX: u32 = 1 << 30;

/// Largest `per_second` rate. A bucket balance is kept in micro-tokens in a u64; a billion
/// tokens a second with a burst of the same size stays six orders of magnitude below
/// overflow.
pub const PER_SECOND_MAX: f64 = 1e9;

/// Largest bucket (`burst`), in whole tokens. See [`PER_SECOND_MAX`].
pub const BURST_MAX: u64 = 1_000_000_000;

/// How long a settlement receipt is kept, in log-clock ms: one day. A retry of a settle
/// within this window is recognized and has no effect; a client must not retry a settle it
/// first sent longer ago than this (the client library gives up after seconds).
pub const RECEIPT_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// Most receipts one tenant keeps. Past this the oldest are dropped first, even inside the
/// retention window, and counted in the tenant's `receipts_evicted` so the loss of
/// idempotency for very old retries is visible, never silent.
pub const TENANT_RECEIPTS_MAX: usize = 200_000;

/// Most commands in one log entry. `Config::validate` keeps `proposer.batch_max` at or
/// below it, so the proposer never packs more; the log store refuses to read a stored entry
/// with more (as damaged, naming its index). Entry *bytes* are bounded separately, by
/// [`ENTRY_BYTES_MAX`].
pub const ENTRY_COMMANDS_MAX: usize = 4_096;

/// Largest snapshot the machine will decode, in bytes. Far above the 10,000-session,
/// 100,000-permit scale point (a few MiB) and far below what a damaged length field could
/// ask for. 3 GiB: the worst state the global bounds allow must fit (see below), and with
/// [`KEYS_LIVE_MAX`] live keys of the longest names that state is some 2.8 GiB.
pub const SNAPSHOT_BYTES_MAX: u64 = 3 << 30;

// ---- the state machine's tenants (every container of the state is bounded) ----

/// Most tenants at once. Any reserve, settle, halt, ceiling or limit names a tenant into
/// being, so without a bound a client could grow the state one name at a time; ten thousand
/// namespaces is far beyond the teams one cluster serves. Past it, a command that would
/// create a tenant is refused `AtCapacity`.
pub const TENANTS_MAX: usize = 10_000;

/// Most periods one tenant keeps spend for. Periods are never pruned (a period's spend is
/// the record of what it cost); a thousand is eighty years of months or three years of days.
/// A settle or hold into a new period past it is refused `AtCapacity`.
pub const TENANT_PERIODS_MAX: usize = 1_000;

/// Most halt records of one tenant (the tenant's own and one per halted agent). A hundred
/// agents halted at once is an incident of its own; a thousand bounds a runaway script.
pub const TENANT_HALTS_MAX: usize = 1_000;

/// Most running runs of one tenant, whatever its `max_running` (which may be unset). A run
/// slot costs a few hundred bytes; ten thousand running runs is far beyond one tenant's
/// agents, and bounds a tenant without a ceiling.
pub const TENANT_RUNS_MAX: usize = 10_000;

// ---------------------------------------------------------------------------------------------
// The edge and the wire: bytes of commands, entries and peer frames, connections' followings.
// ---------------------------------------------------------------------------------------------

/// Largest encoded command, in bytes, refused at the edge (`BadRequest`) above this. Every
/// command that passes [`crate::machine::Command::validate`] encodes below it (the largest,
/// an `AcquireParts` of [`PARTS_MAX`] parts each with the longest limit name and key, is
/// about 2.6 KiB; a unit test in `server::edge` builds the worst of each kind); the check
/// exists so that the entry bound below holds by arithmetic, not by trust in every
/// variant's fields.
pub const COMMAND_BYTES_MAX: usize = 4 * 1024;

/// Most definitions in one `ApplyLimits` (a tenant's limits as a file). A definition
/// encodes in at most about 300 bytes (a longest tenant and name and its spec), so 256 of
/// them stay under [`APPLY_COMMAND_BYTES_MAX`]; applying them is 256 defines in one entry,
/// microseconds of work. A tenant with more limits applies its file in parts (without
/// `prune`, or with prefixes of its own).
pub const APPLY_DEFINITIONS_MAX: usize = 256;

/// Largest encoded `ApplyLimits`, refused at the edge (`BadRequest`) above this; every other
/// command keeps [`COMMAND_BYTES_MAX`]. 128 KiB is a quarter of [`ENTRY_BYTES_MAX`]: the
/// proposer closes a batch before it, so one entry carries it beside other commands, and
/// a follower receives it in an ordinary AppendEntries. Replication never waits on more
/// than one entry's bytes, so an apply cannot stall it (G8).
pub const APPLY_COMMAND_BYTES_MAX: usize = 128 * 1024;

/// Largest encoded frozen tenant (`machine::frozen_tenant`), the payload of one
/// `AdoptTenant`: a freeze of a tenant whose state encodes above this is refused
/// (`AtCapacity`, naming it) and leaves the tenant where it is. Half of [`ENTRY_BYTES_MAX`],
/// so the adopt is one command of one entry, carried by an ordinary AppendEntries (G8).
pub const MOVE_BYTES_MAX: usize = 256 * 1024;

/// Most frozen tenants one machine keeps at once (each until its `DropFrozen`): with
/// [`MOVE_BYTES_MAX`] they add at most 16 MiB to a snapshot.
pub const FROZEN_TENANTS_MAX: usize = 64;

/// Most tenants the metadata group places (`Command::PlaceTenant`): [`TENANTS_MAX`] for
/// each of the sixteen data groups a node may host. A placement is a name (at most
/// [`NAME_BYTES_MAX`] bytes) and a number, so the whole map stays below 24 MiB of the
/// metadata group's snapshot (about 3 MiB for names of 16 bytes).
pub const PLACEMENTS_MAX: usize = TENANTS_MAX * 16;

/// Largest log entry, in encoded bytes (openraft's entry around the batch). The proposer
/// closes a batch before its commands would take it past this, and the log store refuses to
/// read a stored entry above it. 512 KiB holds hundreds of the largest commands, thousands
/// of ordinary ones (an acquire is ~60 bytes), so batching still fills an fsync; and
/// `max_payload_entries` of them fit a peer frame (see [`APPEND_OVERHEAD_BYTES`]).
pub const ENTRY_BYTES_MAX: usize = 512 * 1024;

/// Bytes of an entry that are not its commands: the log id, the payload tag, the batch's
/// stamps and the commands' count, each a varint of at most 10 bytes; 256 is generous. The
/// proposer keeps its commands to `ENTRY_BYTES_MAX - ENTRY_HEADER_BYTES`.
pub const ENTRY_HEADER_BYTES: usize = 256;

/// Bytes of an AppendEntries peer frame that are not its entries: the request's tag, the
/// vote, the previous log id, the commit index and the entries' count (under 100 bytes);
/// 4 KiB leaves room for openraft to add fields.
pub const APPEND_OVERHEAD_BYTES: usize = 4 * 1024;

/// Largest peer frame, in bytes, checked before allocation. `Config::validate` proves the
/// largest AppendEntries (`raft.max_payload_entries` × [`ENTRY_BYTES_MAX`] +
/// [`APPEND_OVERHEAD_BYTES`]) and the largest snapshot chunk fit it: a frame above it is
/// closed by the follower, which openraft would resend forever.
pub const PEER_FRAME_MAX: u32 = 64 << 20;

/// Largest frame a client-port connection may send before its hello is accepted, in bytes.
/// Before the hello the connection is unauthenticated, so what it may make the node hold
/// must be small: a hello is a version and a token (a token of a few hundred bytes is
/// already long; 4 KiB leaves room for any secret a deployment generates). A first frame
/// above it is refused, and the connection closed, before a byte of its payload is read.
pub const HELLO_FRAME_MAX: u32 = 4 * 1024;

/// Longest a client-port frame may take to arrive once its first byte has, after the
/// hello, in ms; past it the connection is closed (`a frame begun was not complete within
/// 10s`). A connection may be idle between frames as long as it likes, but a frame begun
/// holds the bytes read so far (up to the client frame bound of 4 MiB): without this bound
/// a client could pin that much per connection for as long as it stayed connected. The
/// largest request a client sends (an `ApplyLimits` of 128 KiB) takes a second even at
/// 1 Mbit/s; ten is the hello's and the HTTP head's bound.
pub const FRAME_READ_TIMEOUT_MS: u64 = 10_000;

/// Client-port connections one principal (one token; every connection when no tokens are
/// configured) may hold open to one node at once, by default (`client_connections_max`
/// in a node's config). One more is refused at its hello, naming the bound. The client
/// library holds one connection per node, and the HTTP port's one per caller token; a
/// thousand is a fleet of a thousand processes sharing one token, and with
/// [`FRAME_READ_TIMEOUT_MS`] bounds what one principal's half-sent frames can hold.
pub const CLIENT_CONNECTIONS_PER_PRINCIPAL_DEFAULT: usize = 1_024;

/// Longest node address (peer or client) in `AddNode`, in bytes: a host name and a port.
/// Addresses live in every membership entry and in every snapshot's metadata.
pub const ADDR_BYTES_MAX: usize = 256;

/// Most members (voters and learners) of a cluster. Raft clusters are 3 or 5 voters; 16
/// bounds a membership entry (with [`ADDR_BYTES_MAX`]) to a few KiB, far below
/// [`ENTRY_BYTES_MAX`], even in a joint configuration.
pub const MEMBERS_MAX: usize = 16;

/// Most sessions one client connection follows for pushes. A client library multiplexes its
/// sessions over one connection; past this many, opening or naming another session on that
/// connection is refused (`BadRequest`) and the client opens another connection. A session
/// is unfollowed when the connection sees it closed or expired. 16,384 is far above what one
/// process holds in practice (the scale point spreads 10,000 sessions over many connections)
/// and keeps the forwarder's per-entry lookup and the set's memory small.
pub const FOLLOWED_SESSIONS_MAX: usize = 16_384;

// ---------------------------------------------------------------------------------------------
// Global bounds of the state: the worst state these allow must fit `SNAPSHOT_BYTES_MAX`, or
// a node would write a snapshot its own restore refuses. The sum of every count bound × the
// largest encoding of its item is a unit test
// (`machine::snapshot_size::worst_state_fits_a_snapshot`): raising a bound past it fails.
// Each is judged by the machine in log order and refused `AtCapacity` at the bound.
// ---------------------------------------------------------------------------------------------

/// Most live tickets (held or queued) across the machine. The scale target is a million
/// held permits; a held ticket encodes in under 200 bytes in the worst case (a 128-byte agent
/// name), so this part of the state stays under 200 MiB.
pub const TICKETS_LIVE_MAX: usize = 1_000_000;

/// Most token leases across the machine. A lease encodes in under 70 bytes with its key, so
/// this part of the state stays under 7 MiB; 100,000 is a lease on every hot limit for
/// thousands of holders.
pub const TOKEN_LEASES_MAX: usize = 100_000;

/// Most queued tickets across the machine. A queued ticket is the largest live item (its
/// waiter carries an agent and a fairness key, and may be the only one of its flow), and a
/// halt or a removal turns each into a finished refusal carrying up to a halt reason, without
/// a request that could be refused; so queued tickets are bounded apart from held ones. Two
/// full [`LIMIT_WAITERS_MAX`] queues at once.
pub const TICKETS_QUEUED_MAX: usize = 2 * LIMIT_WAITERS_MAX;

/// Most finished tickets kept for retries across the machine, of every kind: the ceiling
/// for sessions whose clients carry no acknowledged mark (with marks, each session keeps
/// what it has in flight and what finished since its last keep-alive). Most are small
/// (a release or a rate take: under 45 bytes encoded); 1,700,000 is over 110,000 finished
/// tickets a second sustained for the whole [`FINISHED_TICKET_RETENTION_MS`] window by
/// clients that carry no mark, which caps their sustained acquire rate. A bound below that
/// rate times the window refuses every acquire of every tenant `AtCapacity` once the window
/// fills: the release build (fat LTO) releases about 45,000 permits a second at 256 clients
/// (docs/benchmarks.md, "Bounds sized from a measurement"). The snapshot arithmetic
/// (`machine::snapshot_size`) counts them beside a million sessions, each with its
/// acknowledged mark, and ten million live keys.
/// Tickets that finish without a request (a release of a live one, a halt's refusal of a
/// waiter) are never refused, so the count passes this by at most the live tickets; the
/// snapshot arithmetic counts that excess under the live and queued bounds.
pub const FINISHED_TICKETS_MAX: usize = 1_700_000;

/// Most of the [`FINISHED_TICKETS_MAX`] that are refusals with a text (`Finished::Refused`
/// but `Busy`, `Halted`):
/// those may carry a halt reason or an error text, about 1.2 KiB at worst, so they are
/// bounded apart from the small ones; the snapshot arithmetic of `machine::snapshot_size`
/// leaves no room for more of them at that size beside the small finished tickets' bound.
/// 200,000 is 13,300 refusals a second for the window.
pub const FINISHED_REFUSALS_MAX: usize = 200_000;

/// Most settlement receipts across the machine. Past it a settle with a new key is refused
/// `AtCapacity` (receipts past their retention are dropped on every `Tick`); per tenant the
/// older [`TENANT_RECEIPTS_MAX`] eviction still applies. A receipt is under 450 bytes.
pub const RECEIPTS_MAX: usize = 250_000;

/// Most running runs across the machine (each tenant also has [`TENANT_RUNS_MAX`]).
pub const RUNS_MAX: usize = 100_000;

/// Most periods with spend across the machine (each tenant also has
/// [`TENANT_PERIODS_MAX`]).
pub const PERIODS_MAX: usize = 100_000;

/// Most halt records across the machine (each tenant also has [`TENANT_HALTS_MAX`]). A halt
/// keeps its reason, up to [`REASON_BYTES_MAX`].
pub const HALTS_MAX: usize = 10_000;

// ---------------------------------------------------------------------------------------------
// Buffers and queues of a node and of the client library, outside the machine: each bounds
// the memory one connection or one node's pipeline may hold, so a slow or hostile peer stalls
// only itself. They are defined here beside the machine's bounds so that each value, and
// every difference between the node's side and the client's, is said in one place.
// ---------------------------------------------------------------------------------------------

/// Bytes buffered in front of a connection's socket, on the node and in the client library
/// alike: a burst of frames (pushed events, answers) is read in few system calls, and a
/// frame is one read, not three. 64 KiB is several hundred typical frames and small beside
/// a connection's other memory.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Frames queued for one client connection's writer on the node: answers and pushed events
/// waiting for the socket. A client that does not read stalls only itself: a full outbox
/// holds up that connection's request tasks, their in-flight slots run out, and its reader
/// stops reading. 1,024 frames (a few hundred KiB) per connection keeps thousands of
/// connections' worst case small, and coalesced writes of up to 512 frames keep it drained.
pub const NODE_OUTBOX_FRAMES_MAX: usize = 1_024;

/// Frames queued for one connection's writer in the client library: the requests of every
/// task of the process that shares the connection. Larger than the node's, because one
/// client connection carries many callers at once and a full outbox makes each of them
/// wait; 4,096 matches the requests the node serves at once on one connection, so the
/// queue never holds more than the node would take.
pub const CLIENT_OUTBOX_FRAMES_MAX: usize = 4_096;

/// Commands waiting for a node's proposer, at most; past it a write is answered
/// `Unavailable` at once (`try_send`), never queued without bound. 65,536 is sixteen full
/// entries of [`ENTRY_COMMANDS_MAX`], far more than a healthy leader ever has waiting
/// (the proposer drains it into entries as fast as they commit), and at
/// [`COMMAND_BYTES_MAX`] each at most 128 MiB.
pub const PROPOSE_QUEUE_MAX: usize = 65_536;

/// Linearizable reads waiting for a node's reader, at most; past it a read is answered
/// `Unavailable` at once. The same 65,536 as [`PROPOSE_QUEUE_MAX`]: a read round answers up
/// to 4,096 at once after one quorum round, so a full queue is sixteen rounds behind and
/// the node is overloaded, not bursting.
pub const READ_QUEUE_MAX: usize = 65_536;

/// Applied entries a subscriber of a node's event feed (a client connection's forwarder, an
/// HTTP event stream) may fall behind by before it misses some: it is then told so
/// (`Resync`, a `lagged` event) and asks again, losing nothing. The feed holds shared
/// entries, so the cost is the last 4,096 entries' events, once per node; at a
/// healthy node's rate of a few hundred entries a second, several seconds of slack.
pub const APPLIED_EVENTS_BACKLOG: usize = 4_096;

/// Events the client library buffers for a slow subscriber of its event stream before that
/// subscriber misses some (and is told it lagged). One process's own sessions produce far
/// fewer events than a node's whole feed; 4,096 covers a burst of grants to every permit a
/// process usually waits for.
pub const CLIENT_EVENTS_BACKLOG: usize = 4_096;

/// Most holders or waiters one read of a limit's permits or queue answers (the console's
/// holders and waiters views page through more). A page is built under the state lock on
/// every node that answers it; 500 rows is a screenful many times over and costs well under
/// a millisecond to collect, while a queue may hold 100,000 waiters.
pub const QUEUE_PAGE_MAX: u32 = 500;
