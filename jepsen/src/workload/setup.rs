//! What the workloads share (and `secure.rs` reads): the tenants, the limits and the
//! session TTL, and [`setup`],
//! which defines the limits before the run (the keyed ones of `keyed.rs` too).

use std::time::Duration;

use weir_client::Client;

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
    (super::cli::CLI_LIMIT, 1, 0.0, None),
];

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

/// The limit that guards the [`super::Resource`].
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

/// Defines the limits (retrying until the cluster answers): [`TENANT`]'s through `client`,
/// [`HALT_TENANT`]'s through `halty` (in a secure run each with its own tenant's token).
pub async fn setup(client: &Client, halty: &Client) -> Result<(), String> {
    for (name, concurrent, per_second, burst) in LIMITS {
        client
            .define_limit(TENANT, name, concurrent, per_second, burst)
            .await
            .map_err(|e| format!("define {name}: {e}"))?;
    }
    for definition in super::keyed::definitions() {
        let name = definition.name.clone();
        match client.define(definition).await {
            Ok(weir_core::machine::Reply::Refused(r)) => return Err(format!("define {name}: {r}")),
            Ok(_) => {}
            Err(e) => return Err(format!("define {name}: {e}")),
        }
    }
    halty
        .define_limit(HALT_TENANT, HALT_LIMIT, HALT_LIMIT_CAP, 0.0, None)
        .await
        .map_err(|e| format!("define {HALT_LIMIT}: {e}"))?;
    halty
        .define_limit(HALT_TENANT, HALT_QUEUE, 1, 0.0, None)
        .await
        .map_err(|e| format!("define {HALT_QUEUE}: {e}"))?;
    Ok(())
}
