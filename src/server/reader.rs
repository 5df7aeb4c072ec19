//! Linearizable reads, batched: every read waiting when a round starts shares one
//! `ensure_linearizable` (a quorum round), then all are answered from the applied state.
//!
//! Invariants:
//! - A read is answered only from state applied at least up to the read index obtained
//!   after it arrived, so it sees every write acknowledged before it was sent.
//! - Every read handed in is answered once: its answer, `NotLeader`, or `Unavailable`.

use std::sync::Arc;

use openraft::error::{CheckIsLeaderError, RaftError};
use tokio::sync::{mpsc, oneshot, watch};

use super::proposer::known_leader;
use crate::machine::Machine;
use crate::protocol::{Answer, Failure, Query};
use crate::raft::Raft;
use crate::raft::state_store::Shared;

/// Reads waiting for a round, at most.
const QUEUE_MAX: usize = 65_536;
/// Reads answered by one round, at most (the rest wait for the next).
const ROUND_MAX: usize = 4_096;

struct Pending {
    query: Query,
    answer: oneshot::Sender<Result<Answer, Failure>>,
}

/// The handle readers use.
#[derive(Clone)]
pub struct Reader {
    tx: mpsc::Sender<Pending>,
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
    pub fn start(raft: Raft, shared: Arc<Shared>, shutdown: watch::Receiver<bool>) -> Reader {
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(run(raft, shared, rx, shutdown));
        Reader { tx }
    }

    /// A linearizable read.
    pub async fn read(&self, query: Query) -> Result<Answer, Failure> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .try_send(Pending { query, answer })
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

async fn run(
    raft: Raft,
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Pending>,
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
                let state = shared.lock();
                for p in round {
                    let _ = p.answer.send(Ok(answer(&state.machine, &p.query)));
                }
            }
            Err(e) => {
                let failure = match e {
                    RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_)) => {
                        Failure::NotLeader {
                            leader: known_leader(&raft),
                        }
                    }
                    RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)) => {
                        Failure::Unavailable(format!("no quorum: {q}"))
                    }
                    RaftError::Fatal(f) => Failure::Unavailable(f.to_string()),
                };
                for p in round {
                    let _ = p.answer.send(Err(failure.clone()));
                }
            }
        }
    }
}
