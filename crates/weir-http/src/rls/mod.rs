//! Envoy's rate-limit service on a node's gRPC port (`grpc_listen`):
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, what Envoy's `ratelimit`
//! filter, Istio and Envoy Gateway call. Messages and the service are Envoy's own, from the
//! `envoy-types` crate (generated from Envoy's `.proto` files and published, so the build
//! needs no `protoc`).
//!
//! # A request, end to end
//!
//! 1. **Edge** (`gate.rs`, `request.rs`): the token in the `authorization` metadata
//!    (`Bearer TOKEN`) authenticates as on the HTTP port (`http::Callers`), from the
//!    request's headers, before its body is read: without a valid token the answer is
//!    `UNAUTHENTICATED` and the body is never decoded. The body is decoded up to
//!    `RLS_MESSAGE_BYTES_MAX`; the token's role is checked against the domain (the
//!    tenant): `PERMISSION_DENIED`; then the bounds (descriptors per request, entries per
//!    descriptor, key and value bytes, hits), and bad input is `INVALID_ARGUMENT` naming
//!    the field (`descriptors[1].entries[0].key`). Refusals come in that order:
//!    unauthenticated, forbidden, invalid.
//! 2. **Match** (`plan.rs`): the domain is the tenant. Each descriptor is matched against
//!    the tenant's limits on this node's applied state, by the rule of
//!    [`weir_core::rls::path::resolve`] (exact value, wildcard prefix, key alone); a
//!    `replaces` marker drops a replaced match. A descriptor's `limit` override of another
//!    rate than its match's is decided on the override's own keyed limit
//!    (`weir_core::rls::path::override_name`), keyed by the descriptor's entries, made
//!    through the log (`DefineOverride`) before the take when this node has none. A
//!    descriptor that matches no limit answers OK and is counted (`rls_descriptors
//!    {kind="unmatched"}`), as envoyproxy/ratelimit answers; one that matches a limit with
//!    no rate (an `unlimited` or inner node) answers OK.
//! 3. **Decide locally** (`leases.rs`, unless `grpc_local_leases = false`): the parts a
//!    caller asks often are leased by this node (token leases, in a session of the
//!    caller's); a request whose every part has a lease with room takes from every local
//!    bucket, or from none and goes on to the cluster. Negative hits on a leased part go
//!    back to its local bucket. No log entry, on a follower as on the leader; a lease
//!    spends only until its session's belief deadline.
//! 4. **Decide on the cluster**: descriptors with negative hits that matched a rate (and
//!    no lease took) are the parts of one
//!    return of tokens (`ReturnTokens`), written first; the others that matched a rate
//!    are the parts (limit, key, hits) of ONE
//!    take (`AcquireParts`, `wait = false`) in the caller's take session. On the leader
//!    every write goes through the client port's write path in this process
//!    (`weir_server::server::local_write`: the same checks, then the proposer, no loopback
//!    connection); on a follower through the caller's internal client, so the write goes
//!    through the client port's authorization and is forwarded to the leader as HTTP's is. One entry decides every part:
//!    a request over one limit charges none of the others (G1 per part); two keys of one
//!    keyed limit are two parts. A take refused because a limit has no room for a new key
//!    (`AtCapacity` "keys of limit …") is taken again without that limit's parts, which
//!    answer as `grpc_keys_full_over_limit` says (logged once per limit); any other bound
//!    of the state is `UNAVAILABLE`, never `OVER_LIMIT`.
//! 5. **Answer** (`answer.rs`): a status per descriptor, in the request's order, with the
//!    limit as Envoy names it, what is left and when the bucket is full again, read on this
//!    node's applied state right after the decision; `overall_code` is OVER_LIMIT when any
//!    descriptor is; `RateLimit-*` headers when `grpc_ratelimit_headers` is on. An
//!    `OVER_LIMIT` status has 0 remaining and the time until its hits fit. A request
//!    decided locally reports the local buckets it took from.
//!
//! # Invariants
//!
//! - Nothing is charged unless every part is granted (the machine's multi-part rule), on
//!   the cluster or from the leases: a request is decided wholly by one or the other.
//! - A shadow limit answers OK and is charged when it has room (the machine's shadow mode).
//! - A request's failure is its own: a bad request, an unknown token or an unreachable
//!   leader answers that call with a gRPC status; the port keeps serving.
//!
//! # Caveats
//!
//! - `limit_remaining` and `duration_until_reset` are this node's view just after the
//!   answer, less the takes granted through this node that it has not applied yet
//!   (`pending.rs`): exact for a client that calls one node; takes through other nodes
//!   show once this node applies them (a heartbeat later, about 100 ms).
//! - After a refusal the over-limit descriptors are those whose bucket, on this node's
//!   view (less its pending takes), has fewer tokens than their hits; when that view shows none (it lags), every
//!   charged, non-shadow descriptor is reported over the limit.
//! - A node matches on its own applied state: a limit just defined is matched by a
//!   follower once it has applied the definition (a heartbeat later); until then its
//!   descriptors answer as unmatched (OK).
//! - The same limit and key twice is one part of the summed hits.
//! - A descriptor with `is_negative_hits` is a part of a return (`ReturnTokens`), written
//!   in its own entry before the take: its hits go back to the bucket whatever the take's
//!   outcome, and its status is the bucket as this node reads it after the request.
//!
//! # Layout
//!
//! - `serve.rs` — the port: TCP, TLS (ALPN `h2`), tonic's HTTP/2 server and its bounds,
//!   shutdown.
//! - `gate.rs` — authentication before the body, and each connection's deadline.
//! - `service.rs` — [`RlsService`]: authentication, the take, the answer.
//! - `request.rs` — the edge's checks of a `RateLimitRequest`.
//! - `plan.rs` — matching descriptors to limits: a `Plan`.
//! - `answer.rs` — the `RateLimitResponse`.
//! - `pending.rs` — takes granted through this node and not yet applied here.
//! - `leases.rs` — the token leases this node holds for hot parts, and local decisions.

mod answer;
mod gate;
mod leases;
mod pending;
mod plan;
mod request;
mod serve;
mod service;

pub use leases::local_units;
pub use serve::{grpc_acceptor, serve_grpc};
pub use service::RlsService;
