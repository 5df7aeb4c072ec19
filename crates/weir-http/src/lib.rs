//! A node's front doors: the HTTP/JSON API (README, "HTTP/JSON, metrics and health") and Envoy's rate-limit service over
//! gRPC ([`rls`]), started beside the node's own ports by [`Front`] (the node's
//! `weir_server::server::front::FrontDoors`, handed in by whoever starts the node).
//!
//! It builds on `weir-server` (the node's applied state, Raft's metrics, tokens, TLS
//! acceptors, metrics), `weir-client` (the internal clients every request goes through)
//! and `weir-proto` (the protocol they speak), and must never be a dependency of any of
//! them: the binary hands it to the node, which never names it. Imports point down the module list below: [`Front`] starts
//! [`rls`] and the router; the router its handlers; the handlers the context; the context
//! the callers; `bounds` and `listener` know nothing above them. The crates and their
//! dependency arrows: `docs/design.md`, "Layers".
//!
//! # The HTTP/JSON API
//!
//! Every operation under `/v1`, a session's events and the cluster's activity as server-sent events, the operator console
//! at `/ui`, a one-shot rate take, `/metrics`, `/healthz`
//! and `/readyz`. `docs/openapi.yaml` describes every route; a cluster test checks that it
//! lists exactly what [`served_routes`] serves.
//!
//! # One path to the log
//!
//! The HTTP layer implements no operation itself. Each handler turns its request into the
//! same [`weir_core::machine::Command`] or [`weir_proto::protocol::Query`] the binary protocol
//! carries and sends it through an internal [`weir_client::Client`] whose servers are this
//! node's client address first, then the other initial voters'. So a write goes client port
//! → proposer → log exactly as a CLI's does, and a read through the reader's quorum round.
//!
//! **A follower serves by forwarding**: its internal client follows the leader like any
//! client (the `NotLeader` redirect), and also as this node's own Raft learns it, so a
//! request to any node is answered by the leader and the caller never sees a redirect. A
//! request is re-sent to the next leader as soon as this node knows it, and answered 503
//! `NoLeader` ("try again, or another node") when no leader is found within
//! `FORWARD_RETRY_MAX` = 2 s (`forward.rs`).
//!
//! # Waiting and events
//!
//! An acquire with `wait` is held open until its ticket is granted, refused, or its
//! `timeout_ms` (at most [`WAIT_MS_MAX`]) passes; then it answers 202 `queued` and the
//! ticket stays queued (it is state in the log, not in the request). The wait, and the
//! event stream, read this node's own applied events (`events.rs`), which every node
//! computes identically from the log.
//!
//! # Limits before and after authentication
//!
//! Every request head must arrive within `HEADER_READ_TIMEOUT` (the connection is closed
//! otherwise); a body is at most [`BODY_BYTES_MAX`] bytes (413) and must arrive within
//! [`BODY_READ_TIMEOUT`] (408). A request refused 401 reads no body: at most
//! [`DRAIN_BYTES_MAX`] of it is dropped as it arrives, so the 401 can be read.
//!
//! # Errors
//!
//! JSON `{"error": NAME, "message": TEXT, ...}`, NAME being the refusal's name; `error.rs`
//! maps each to its status code.
//!
//! # Layout
//!
//! - `front.rs` — [`Front`]: HTTP, then gRPC, on the listeners the node bound.
//! - `rls/` — Envoy's rate-limit service ([`rls`]'s own doc).
//! - `router.rs` — the route table, the router, serving.
//! - `listener.rs` — the accept loop, TLS handshakes off it.
//! - `callers.rs` — bearer tokens: the 401 check and one internal client (and take
//!   session) per token.
//! - `context.rs` — [`HttpCtx`]: the callers, the applied state, Raft.
//! - `forward.rs` — a forwarded request follows the leader, and gives up after a bound.
//! - `error.rs` — [`ApiError`] and the body and path extractors that answer in it.
//! - `limits.rs`, `keys.rs`, `permits.rs`, `sessions.rs`, `runs.rs`, `halts.rs`,
//!   `cluster.rs` — the handlers, one file per resource.
//! - `events.rs` — a session's SSE stream and the wait of a long-polled acquire.
//! - `watch.rs` — the cluster-wide SSE stream the console follows (`GET /v1/events`).
//! - `queue.rs` — a limit's holders and waiters, paged.
//! - `overview.rs` — every halt, every tenant, and a limit's or tenant's last 15 minutes,
//!   from this node's own state (`history.rs` keeps the samples).
//! - `console.rs` — the operator console's page at `/ui` (built into the binary) and
//!   `/v1/whoami`.
//! - `metrics.rs` — `/metrics`.
//!
//! # TLS and tokens
//!
//! With `[tls]` the port is HTTPS with the client port's certificate (`listener.rs`). The
//! `Authorization: Bearer` token picks the internal client (`callers.rs`): each token has
//! its own, which sends that token in its hello over TLS verified against the node's CA, so
//! the client port authenticates it and authorizes each request as it does a binary
//! client's. Here a missing or unknown token is only answered 401 early; what a role may do
//! is decided there alone (a `Forbidden` failure, 403 here).
//!
//! # Caveats
//!
//! - The event stream reads this node's applied events directly, not through the client
//!   port; it checks the session's owner itself, against this node's machine (`events.rs`),
//!   so a follower that has not yet applied a just-opened session makes its stream wait up
//!   to a few seconds, then answers 404.
//! - A token this node knows but the leader does not (tables out of step between a
//!   SIGHUP on one node and on another) fails the forwarded hello: 401 `Unauthenticated`.

mod front;

// Envoy's rate-limit service (gRPC `ShouldRateLimit`) on `grpc_listen`.
pub mod rls;

mod router;

mod cluster;

mod console;

mod keys;

mod metrics;

mod permits;

mod queue;

mod runs;

mod watch;

mod events;

mod halts;

mod placement;

mod overview;

mod sessions;

mod limits;

mod context;

mod forward;

mod callers;

mod leaders;

mod history;

mod error;

mod listener;

pub mod bounds;

pub use bounds::{
    BODY_BYTES_MAX, BODY_READ_TIMEOUT, DRAIN_BYTES_MAX, DRAIN_TIMEOUT, WAIT_MS_MAX,
    WATCH_EVENTS_PER_SECOND_MAX,
};
pub use callers::{CALLERS_MAX, Caller, Callers, act_as};
pub use context::{HttpCtx, write_answer_hold};
pub use error::ApiError;
pub use front::Front;
pub use history::KEYED_SAMPLE_KEYS_MAX;
pub use listener::HttpListener;
pub use router::{HEADER_READ_TIMEOUT, router, serve_http, served_routes};
