//! The client workloads, each a set of processes recording into the history, one file
//! each: permits on limits of concurrency 1 and 3, ten clients each, some holding past the
//! TTL (belief intervals, [`permits`]); rate takes of 1–3 tokens ([`takes`]);
//! reserve/settle with retries and conflicting payloads raced and sent after known and
//! unknown outcomes ([`ledger`]); halts on tenant and agent scope set and cleared while
//! other processes reserve and acquire in their scope (`halts.rs`: [`halter`],
//! [`admitter`]), and a ticket queued behind a blocker in that scope ([`halt_queue`]); `max_running` raced with reserves (`ceilings.rs`); readers validating
//! others' fences through every node ([`reader`]); tickets queued before each fault and
//! judged after its heal ([`Queued`]); and fenced actions on a downstream [`Resource`]
//! guarded by a limit of concurrency 1 — one of whose clients the nemesis can pause
//! ([`ClientPause`], [`fenced`]); and the cut client, the one process whose links the
//! client fronts fault, holding a limit of concurrency 1 with waiters behind it
//! ([`cut_holder`], [`CutClient`]); requests of several parts on keyed limits, whose bucket
//! keys are drained after the last heal ([`keyed`]); and, when asked for, permit holders
//! running the Python client in processes of their own beside the Rust ones
//! ([`python_holder`]); and, with the cut client, a holder that holds through the CLI
//! (`weir acquire -- COMMAND`, [`cli_holder`]); and, when asked for, token-lease holders
//! deciding takes locally beside cluster takers on the leased rate limits ([`lease_holder`],
//! [`cluster_taker`]); and, when asked for, Envoy holders calling the nodes'
//! `ShouldRateLimit`, which the nodes decide from leases of their own ([`rls_holder`]). `setup.rs` holds the limits they share (`define.rs` defines them before the run), `process.rs` what each process is given; `acquire.rs` the
//! recorded acquire, release and belief end they share; `belief.rs` how a holder works on a
//! permit as an application does (each step checked, raced against `lost()`) and records
//! when it was told the permit may be lost.

mod acquire;
mod belief;
mod ceilings;
mod cli;
mod cut;
mod define;
mod fenced;
mod halt_queue;
mod go;
mod halts;
pub mod keyed;
mod leased;
mod rls;
mod ledger;
mod permits;
mod process;
mod python;
mod queued;
mod reader;
mod takes;
mod ts;

pub use crate::setup::{
    CEIL_TENANT, CLI_LIMIT, CRASH, CUT, FENCED, FINAL_READERS, HALT_AGENT, HALT_LIMIT,
    HALT_LIMIT_CAP, HALT_TENANT, LEASED_LIMITS, LIMITS, QUEUE, TENANT, TENANTS, TTL,
};
pub use acquire::{acquire_as, release_recorded};
pub use ceilings::{ceiling_admitter, ceiling_setter};
pub use cli::{COMMAND_FLAG, cli_holder, command_main};
pub use cut::{CutClient, cut_holder};
pub use define::setup;
pub use fenced::{ClientPause, Resource, fenced, spawn_pausable};
pub use go::{GoHolders, go_holder};
pub use halt_queue::halt_queue;
pub use halts::{OTHER_AGENT, admitter, halter};
pub use leased::{LeaseHolders, cluster_taker, lease_holder, lease_of, python_lease_holder};
pub use ledger::ledger;
pub use permits::permits;
pub use process::Process;
pub use python::{PythonHolders, python_holder};
pub use queued::Queued;
pub use reader::reader;
pub use rls::rls_holder;
pub use takes::takes;
pub use ts::{TsHolders, ts_holder};
