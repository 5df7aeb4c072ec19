//! What the workloads share (and `secure.rs` reads): the tenants, the limits and the
//! session TTL (`workload/define.rs` defines the limits before the run). Constants only: it imports
//! nothing of the crate, so every workload and `secure.rs` read it from below, and it must
//! never import them back.

use std::time::Duration;

/// The harness's session TTL: short, so that a paused leader outlives it, and the shortest
/// that G9 promises to carry through a leader stall (the `stalls` checker holds it to that).
pub const TTL: Duration = Duration::from_secs(3);

/// The limits: (name, concurrent, per_second, burst).
pub const LIMITS: [(&str, u32, f64, Option<u64>); 8] = [
    ("mutex", 1, 0.0, None),
    ("three", 3, 0.0, None),
    ("rate", 0, 20.0, Some(5)),
    ("fenced", 1, 0.0, None),
    (QUEUE, 1, 0.0, None),
    (CRASH, 1, 0.0, None),
    (CUT, 1, 0.0, None),
    (CLI_LIMIT, 1, 0.0, None),
];

/// The rate limits that token-lease holders lease (`workload/leased.rs`): (name,
/// per_second, burst). `leased` has room for caps far above what a lease refills in a TTL,
/// so a lapsed lease's cap refunded stands out; `leased-fast` has a burst of 4, so a holder
/// spending its share of the rate where it should not stands out within a second.
pub const LEASED_LIMITS: [(&str, f64, u64); 2] = [("leased", 4.0, 40), ("leased-fast", 10.0, 4)];

/// The rate limit the Envoy holders ask nodes' `ShouldRateLimit` for (`workload/rls.rs`):
/// (name, per_second, burst). Its name is the one a ratelimit file's descriptor `rls: hot`
/// compiles to, so a request in domain [`TENANT`] with that one descriptor is decided on it;
/// each node leases it once it is hot there, three quarters of its burst shared among the
/// nodes, so each node's cap holds a take of two.
pub const RLS_LIMIT: (&str, f64, u64) = ("envoy:rls=hot", 10.0, 12);

/// The limit the CLI holder holds, with waiters behind it.
pub const CLI_LIMIT: &str = "cli";

/// The limit the cut client holds (its links faulted by the client nemeses) with waiters
/// behind it.
pub const CUT: &str = "cut";

/// The limit a client process holds when the nemesis kills it (kill -9).
pub const CRASH: &str = "crash";

/// The limit on which tickets queue before a fault and are judged after the heal.
pub const QUEUE: &str = "queue";

/// The limit of [`HALT_TENANT`] the admitters acquire while halts come and go, and its cap.
pub const HALT_LIMIT: &str = "gate";
pub const HALT_LIMIT_CAP: u32 = 4;

/// The limit of [`HALT_TENANT`] on which a ticket queues while halts come and go
/// (`halt_queue.rs`): one unit, so the waiter queues behind the blocker.
pub const HALT_QUEUE: &str = "hqueue";

/// The limit that guards the fenced workload's `Resource`.
pub const FENCED: &str = "fenced";

pub const TENANT: &str = "jepsen";

/// Process numbers of the final reads' parallel readers start above this (workload
/// processes are numbered from 1, ledger racers from 1,000, queuers from 20,000).
pub const FINAL_READERS: u64 = 10_000;
pub const HALT_TENANT: &str = "halty";
pub const HALT_AGENT: &str = "a";

/// The tenant whose `max_running` is raced (`ceilings.rs`).
pub const CEIL_TENANT: &str = "ceil";

/// The tenants the workloads act in: in a secure run each gets a `tenant:NAME` token.
pub const TENANTS: [&str; 3] = [TENANT, HALT_TENANT, CEIL_TENANT];
