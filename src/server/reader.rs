//! Linearizable reads, batched: every read waiting when a round starts shares one
//! `ensure_linearizable` (a quorum round), then all are answered from the applied state.
//!
//! Invariants:
//! - A read is answered only from state applied at least up to the read index obtained
//!   after it arrived, so it sees every write acknowledged before it was sent.
//! - Every read handed in is answered once: its answer, `NotLeader`, or `Unavailable`.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::leader::read_failure;
use crate::machine::Machine;
use crate::protocol::{Answer, Failure, Query};
use crate::raft::Raft;
use crate::raft::state_store::AppliedState;

/// Reads waiting for a round, at most.
const QUEUE_MAX: usize = 65_536;
/// Reads answered by one round, at most (the rest wait for the next).
const ROUND_MAX: usize = 4_096;

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

/// Answers `query` from `machine`.
pub fn answer(machine: &Machine, query: &Query) -> Answer {
    match query {
        Query::Limit { tenant, name } => Answer::Limit(machine.limit_status(tenant, name)),
        Query::Limits { tenant } => Answer::Limits(machine.limits(tenant)),
        Query::ValidateFence {
            tenant,
            limit,
            fence,
        } => Answer::FenceHeld(machine.validate_fence(tenant, limit, *fence)),
        Query::Spent { tenant, period } => Answer::Spent(machine.spent(tenant, period)),
        Query::Running { tenant } => Answer::Running(machine.running(tenant)),
        Query::Halts { tenant } => Answer::Halts(machine.halts(tenant)),
        Query::Tenant { tenant } => Answer::Tenant(machine.tenant_status(tenant)),
    }
}

impl Reader {
    /// Starts the reader task for `raft`, answering from `state`.
    pub fn start(raft: Raft, state: Arc<AppliedState>, shutdown: watch::Receiver<bool>) -> Reader {
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(run(raft, state, rx, shutdown));
        Reader { tx }
    }

    /// A linearizable read.
    pub async fn read(&self, query: Query) -> Result<Answer, Failure> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .try_send(QueuedRead { query, answer })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => {
                    Failure::Unavailable("read queue full".into())
                }
                mpsc::error::TrySendError::Closed(_) => {
                    Failure::Unavailable("node shutting down".into())
                }
            })?;
        rx.await
            .unwrap_or_else(|_| Err(Failure::Unavailable("reader stopped".into())))
    }
}

/// The reader task: one leadership check per round, then every read of the round answered
/// from the applied state.
async fn run(
    raft: Raft,
    state: Arc<AppliedState>,
    mut rx: mpsc::Receiver<QueuedRead>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let mut round = Vec::new();
        tokio::select! {
            first = rx.recv() => match first {
                Some(p) => round.push(p),
                None => return,
            },
            _ = shutdown.changed() => return,
        }
        while round.len() < ROUND_MAX {
            match rx.try_recv() {
                Ok(p) => round.push(p),
                Err(_) => break,
            }
        }
        match raft.ensure_linearizable().await {
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
