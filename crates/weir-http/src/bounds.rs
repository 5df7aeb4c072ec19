//! The HTTP port's own bounds: how large a request body may be, how long it may take to
//! arrive, how much of an unread body is drained before an answer, and how long an acquire
//! may hold its request open, how far a console's event stream may fall behind. The bounds
//! every port shares are weir-core's.

/// Largest request body, in bytes; a larger one is answered 413 `PayloadTooLarge`. The
/// largest body the API takes is a halt with the longest reason (about 1 KiB of JSON);
/// 64 KiB is far above it, and bounds what one request makes the node buffer.
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// How long a request's body may take to arrive once its head has: a client that sends a
/// body slowly holds its connection only this long (answered 408 `RequestTimeout`).
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// At most this much of a body that will not be read (a request refused 401, or above
/// [`BODY_BYTES_MAX`]) is read and dropped before the answer, so that a client which sends
/// its whole body before reading (curl does) reads the answer instead of a connection reset
/// under its write. Dropped as it arrives: it costs no memory, only [`DRAIN_TIMEOUT`] of
/// time at most. 16 MiB covers any body a client of this API sends by mistake.
pub const DRAIN_BYTES_MAX: usize = 16 << 20;

/// Longest the drain of an unread body may take.
pub const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Longest an acquire may hold its request open waiting, ms. A minute is far above a
/// grant's usual wait and below common proxy idle timeouts; a longer wait is a loop of
/// acquires (idempotent) or the event stream.
pub const WAIT_MS_MAX: u64 = 60_000;

/// Page size of `GET /v1/tenants/{tenant}/limits` when the request names no `limit`: the
/// largest page (weir-core's `LIMITS_PAGE_MAX`), so a tenant of up to a thousand limits
/// answers in one page, and one of 100,000 in a hundred pages, each a read of its own
/// range that builds at most a third of a megabyte of JSON.
pub const LIMITS_PAGE_DEFAULT: u32 = weir_core::bounds::LIMITS_PAGE_MAX as u32;
/// Most activities one `GET /v1/events` stream sends per second; above it the stream drops
/// the rest of that second and sends `resync` once, so a flood of grants (a benchmark, an
/// incident) costs a viewer's connection a bounded rate of frames, and the page re-reads
/// the state instead of rendering each one. A person reads nowhere near 200 events a second.
pub const WATCH_EVENTS_PER_SECOND_MAX: u32 = 200;

/// Leader changes a node keeps in its own record for the console (`leaders.rs`): the newest
/// 256. An election every ten minutes for a day is 144; a cluster that elects more often
/// than that has one problem to show, not 256 rows of it. An entry is a few dozen bytes.
pub const LEADER_HISTORY_MAX: usize = 256;

/// Longest a caller's internal client retries a request this node forwards before the
/// answer is 503 "no leader yet, try another node" (`forward.rs` argues the value: one
/// election with room, inside a 3 s TTL's keep-alive budget).
pub const FORWARD_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(2);

// ---- the gRPC port (Envoy's rate-limit service, `rls/`) ----
//
// Before authentication a gRPC request costs its headers only: the token is read from the
// request's metadata and a request without a valid one is refused UNAUTHENTICATED before a
// byte of its body is read (`rls::gate`). The bounds below hold what an authenticated
// connection may make the node keep, and how long any connection may stay.

/// Largest `RateLimitRequest` a caller may send, in bytes, refused before it is decoded
/// (`OUT_OF_RANGE`, tonic's "decoded message length too large"). The largest request the
/// edge's checks accept ([`weir_core::bounds::RLS_DESCRIPTORS_MAX`] descriptors of
/// [`weir_core::bounds::RLS_ENTRIES_MAX`] entries, each a longest key and value) encodes in
/// about 34 KiB; 64 KiB is the next round size above it, where tonic's default is 4 MiB.
pub const RLS_MESSAGE_BYTES_MAX: usize = 64 * 1024;

/// Streams open at once on one gRPC connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`);
/// a stream past it is refused by HTTP/2 (`REFUSED_STREAM`), and Envoy opens another
/// connection when it needs more. With [`RLS_MESSAGE_BYTES_MAX`] it bounds a connection's
/// request bodies to 2 MiB.
pub const RLS_STREAMS_PER_CONNECTION_MAX: u32 = 32;

/// gRPC connections open at once on a node; one past it is closed as it is accepted (after
/// its TLS handshake). Envoy holds a connection or a few per worker thread: 512 is 64
/// proxies of 8 workers, and with [`RLS_STREAMS_PER_CONNECTION_MAX`] bounds the bodies
/// all connections may hold to 1 GiB, far less in practice (a request is a few hundred
/// bytes). It also keeps the port's share of the file descriptors the node's other ports
/// need.
pub const RLS_CONNECTIONS_MAX: usize = 512;

/// Longest a `ShouldRateLimit` call may take, from its headers to its answer, body
/// included: past it the call is answered `CANCELLED` and its body dropped. The take it
/// makes is bounded by the client's 10 s request deadline, which answers first
/// (`UNAVAILABLE`, with the reason); 15 s only bounds a body that arrives slowly.
pub const RLS_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Longest a gRPC connection may go, once its TLS handshake is done (5 s, the other ports'
/// `HANDSHAKE_TIMEOUT`), before its first request with a valid token: a connection that
/// sends no HTTP/2 preface, or only requests without a valid token, is closed then. The
/// same 10 s as the client port's hello and the HTTP port's request head.
pub const RLS_FIRST_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest a gRPC connection stays open after its last request with a valid token: a
/// connection that goes quiet, or sends only pings or refused requests, is closed then.
/// A minute keeps Envoy's connection across ordinary gaps in traffic (reconnecting costs a
/// TLS handshake) and frees an abandoned one's slot of [`RLS_CONNECTIONS_MAX`] soon.
pub const RLS_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
