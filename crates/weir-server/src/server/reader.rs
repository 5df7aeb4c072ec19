//! Linearizable reads, batched: every read waiting when a round starts shares one
//! `ensure_linearizable` (a quorum round), then all are answered from the applied state.
//!
//! Invariants:
//! - A read is answered only from state applied at least up to the read index obtained
//!   after it arrived, so it sees every write acknowledged before it was sent.
//! - After a restart, no read is answered before the state is applied up to the log's last
//!   index at the start ([`Reader::start`]'s `startup_last`). openraft resumes a node that
//!   was leader as leader at once, in the same term and without a new blank entry, and its
//!   read index is then the commit index it loaded from disk — a hint this node writes
//!   without waiting for the disk (`log_store`'s `save_committed`), so it can lag. Reads
//!   answered from that index missed writes the node had acknowledged before it was killed
//!   (a recorded harness run: a fence validated as held 40 ms after its release was
//!   acknowledged, by a leader restarted in a rolling restart). Every write acknowledged
//!   before the restart is in the log it started with, so once that is applied no read
//!   can miss one; from then on the commit index is this leadership's own.
//! - Every read handed in is answered once: its answer, `NotLeader`, or `Unavailable`.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::leader::read_failure;
use super::queue::enqueue;
use crate::raft::Raft;
use crate::raft::state_store::AppliedState;
use crate::shutdown::Shutdown;
use weir_core::bounds::READ_QUEUE_MAX;
use weir_core::machine::Machine;
use weir_proto::protocol::{Answer, Failure, Query};

/// Reads answered by one round, at most (the rest wait for the next).
const ROUND_MAX: usize = 4_096;
/// How long a round after a restart waits for the startup log to be applied before its
/// reads are answered `Unavailable` (the client retries them).
const CATCH_UP_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// A read waiting for a round, with where its answer goes.
struct QueuedRead {
    query: Query,
    answer: oneshot::Sender<Result<Answer, Failure>>,
}

/// The handle readers use.
#[derive(Clone)]
pub struct Reader {
    tx: mpsc::Sender<QueuedRead>,
}

/// Answers `query` from `machine`. A limit named as a ratelimit file wrote it
/// (`envoy:path=/beta`) is found under its escaped name (`Machine::limit_as_written`).
pub fn answer(machine: &Machine, query: &Query) -> Answer {
    let named = |tenant: &str, name: &str| {
        machine
            .limit_as_written(tenant, name)
            .unwrap_or_else(|| name.to_owned())
    };
    match query {
        Query::Limit { tenant, name } => {
            Answer::Limit(machine.limit_status(tenant, &named(tenant, name)))
        }
        Query::Limits {
            tenant,
            prefix,
            after,
            max,
        } => Answer::Limits(machine.limits_page(tenant, prefix, after.as_deref(), *max)),
        Query::ValidateFence {
            tenant,
            limit,
            fence,
        } => Answer::FenceHeld(machine.validate_fence(tenant, limit, *fence)),
        Query::Spent { tenant, period } => Answer::Spent(machine.spent(tenant, period)),
        Query::Running { tenant } => Answer::Running(machine.running(tenant)),
        Query::Halts { tenant } => Answer::Halts(machine.halts(tenant)),
        Query::Tenant { tenant } => Answer::Tenant(machine.tenant_status(tenant)),
        Query::LimitsChange {
            tenant,
            definitions,
            prune,
        } => Answer::LimitsChange(machine.apply_dry_run(tenant, definitions, *prune)),
        Query::Key { tenant, name, key } => {
            Answer::Key(machine.key_status(tenant, &named(tenant, name), key))
        }
        Query::Keys {
            tenant,
            name,
            after,
            limit,
        } => {
            Answer::Keys(machine.keys_page(tenant, &named(tenant, name), after.as_deref(), *limit))
        }
        Query::Holders {
            tenant,
            name,
            after,
            max,
        } => Answer::Holders(machine.holders(tenant, &named(tenant, name), *after, *max)),
        Query::Waiters {
            tenant,
            name,
            after,
            max,
        } => Answer::Waiters(machine.waiters(tenant, &named(tenant, name), *after, *max)),
    }
}

impl Reader {
    /// Starts the reader task for `raft`, answering from `state`. `startup_last` is the
    /// log's last index when this node started (before Raft loaded it): no read is answered
    /// before it is applied (module doc).
    pub fn start(
        raft: Raft,
        state: Arc<AppliedState>,
        startup_last: Option<u64>,
        shutdown: Shutdown,
    ) -> Reader {
        let (tx, rx) = mpsc::channel(READ_QUEUE_MAX);
        tokio::spawn(run(raft, state, startup_last, rx, shutdown));
        Reader { tx }
    }

    /// A linearizable read.
    pub async fn read(&self, query: Query) -> Result<Answer, Failure> {
        let (answer, rx) = oneshot::channel();
        enqueue(&self.tx, QueuedRead { query, answer }, "read queue")?;
        rx.await
            .unwrap_or_else(|_| Err(Failure::Unavailable("reader stopped".into())))
    }
}

/// The reader task: one leadership check per round, then every read of the round answered
/// from the applied state.
async fn run(
    raft: Raft,
    state: Arc<AppliedState>,
    startup_last: Option<u64>,
    mut rx: mpsc::Receiver<QueuedRead>,
    mut shutdown: Shutdown,
) {
    // Cleared once the log this node started with is applied (module doc).
    let mut catching_up = startup_last;
    loop {
        let mut round = Vec::new();
        // Biased: a simulation replays only if the choice is the same every run.
        tokio::select! {
            biased;
            () = shutdown.begun() => return,
            first = rx.recv() => match first {
                Some(p) => round.push(p),
                None => return,
            },
        }
        while round.len() < ROUND_MAX {
            match rx.try_recv() {
                Ok(p) => round.push(p),
                Err(_) => break,
            }
        }
        let checked = raft.ensure_linearizable().await;
        if checked.is_ok()
            && let Some(last) = catching_up
        {
            let caught_up = raft
                .wait(Some(CATCH_UP_MAX))
                .applied_index_at_least(Some(last), "reads after a restart")
                .await;
            if caught_up.is_err() {
                for p in round {
                    let _ = p.answer.send(Err(Failure::Unavailable(format!(
                        "restarted: the log up to index {last} is not applied yet"
                    ))));
                }
                continue;
            }
            catching_up = None;
        }
        match checked {
            Ok(_) => {
                let state = state.lock();
                for p in round {
                    let _ = p.answer.send(Ok(answer(&state.machine, &p.query)));
                }
            }
            Err(e) => {
                let failure = read_failure(&raft, e);
                for p in round {
                    let _ = p.answer.send(Err(failure.clone()));
                }
            }
        }
    }
}
