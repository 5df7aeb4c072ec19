//! The leader's proposer: batches many clients' commands into one log entry, stamps it with
//! the log clock, and hands each command's reply back to its sender.
//!
//! openraft 0.9 pays one fsync per `client_write`, so throughput is set by how many commands
//! share an entry. The proposer takes the first waiting command, everything else already
//! queued (up to `batch_max`), waits for an in-flight slot (at most `in_flight_max` entries
//! proposed and not yet applied), takes what arrived meanwhile, and proposes: under load the
//! batch grows by itself while the previous entry fsyncs.
//!
//! Stamps: `clock_ms` is this process's monotonic clock (ms since the proposer started) and
//! the leadership is (current term, this node), read when the batch is stamped. Batches are
//! submitted one at a time, in stamp order, so within one leadership the log carries
//! non-decreasing stamps at real-time rate — what the machine's log clock needs
//! (`machine` module doc).
//!
//! Ticks: while the machine has timed work (sessions, waiting rate tickets) and nothing was
//! proposed for `tick_ms`, the leader proposes a `Tick`, so leases expire and buckets serve
//! waiters without client traffic.
//!
//! Invariants:
//! - Every command handed in is answered exactly once: its reply, `NotLeader` (not
//!   applied), or `OutcomeUnknown` (proposed, fate unknown).
//! - The queue is bounded; a full queue answers `Unavailable` at once.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use openraft::ServerState;
use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use crate::config::ProposerConfig;
use crate::machine::{Batch, Command, Leadership, Reply};
use crate::protocol::Failure;
use crate::raft::state_store::Shared;
use crate::raft::{NodeId, Raft, Request};

/// Commands waiting for the proposer, at most. Past this, writers are told to back off.
const QUEUE_MAX: usize = 65_536;

/// How long a proposed entry may take to commit and apply before its commands are answered
/// `OutcomeUnknown`. Far above any healthy commit (milliseconds); an election takes about 1 s.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A command's answer: its reply and the index of its entry, or why it has none.
pub type Outcome = Result<(u64, Reply), Failure>;

struct Pending {
    command: Command,
    answer: oneshot::Sender<Outcome>,
}

/// The handle writers use.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Pending>,
}

impl Proposer {
    /// Starts the proposer task for `raft` (node `id`).
    pub fn start(
        id: NodeId,
        raft: Raft,
        shared: Arc<Shared>,
        config: ProposerConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Proposer {
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(run(id, raft, shared, config, rx, shutdown));
        Proposer { tx }
    }

    /// Proposes `command` and waits for its outcome.
    pub async fn propose(&self, command: Command) -> Outcome {
        let (answer, rx) = oneshot::channel();
        self.tx
            .try_send(Pending { command, answer })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => {
                    Failure::Unavailable("proposer queue full".into())
                }
                mpsc::error::TrySendError::Closed(_) => {
                    Failure::Unavailable("node shutting down".into())
                }
            })?;
        rx.await
            .unwrap_or_else(|_| Err(Failure::OutcomeUnknown("proposer stopped".into())))
    }
}

/// The leader this node knows of, as (id, client address).
pub fn known_leader(raft: &Raft) -> Option<(u64, String)> {
    let m = raft.metrics().borrow().clone();
    let leader = m.current_leader?;
    let addr = m
        .membership_config
        .nodes()
        .find(|(id, _)| **id == leader)
        .map(|(_, n)| n.client.clone())?;
    Some((leader, addr))
}

async fn run(
    id: NodeId,
    raft: Raft,
    shared: Arc<Shared>,
    config: ProposerConfig,
    mut rx: mpsc::Receiver<Pending>,
    mut shutdown: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let rate = clock_rate();
    let incarnation = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let in_flight = Arc::new(Semaphore::new(config.in_flight_max));
    let tick = Duration::from_millis(config.tick_ms);
    let mut last_proposed = Instant::now();
    loop {
        let mut batch: Vec<Pending> = Vec::new();
        tokio::select! {
            first = rx.recv() => match first {
                Some(p) => batch.push(p),
                None => return,
            },
            _ = tokio::time::sleep_until((last_proposed + tick).into()) => {}
            _ = shutdown.changed() => return,
        }
        drain(&mut rx, &mut batch, config.batch_max);
        let permit = in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        drain(&mut rx, &mut batch, config.batch_max);
        let metrics = raft.metrics().borrow().clone();
        if metrics.state != ServerState::Leader {
            if !batch.is_empty() {
                let failure = Failure::NotLeader {
                    leader: known_leader(&raft),
                };
                for p in batch {
                    let _ = p.answer.send(Err(failure.clone()));
                }
            }
            last_proposed = Instant::now();
            continue;
        }
        if batch.is_empty() {
            // The tick timer fired with nothing to send.
            let timed = shared.lock().machine.has_timed_work();
            last_proposed = Instant::now();
            if !timed {
                continue;
            }
        }
        let (commands, answers): (Vec<Command>, Vec<_>) = if batch.is_empty() {
            (vec![Command::Tick], vec![])
        } else {
            batch
                .into_iter()
                .map(|p| (p.command, Some(p.answer)))
                .unzip()
        };
        let stamp = Batch {
            leadership: Leadership {
                term: metrics.current_term,
                node: id,
                incarnation,
            },
            clock_ms: (started.elapsed().as_secs_f64() * 1_000.0 * rate) as u64,
            wall_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            commands,
        };
        last_proposed = Instant::now();
        let receiver = match raft.client_write_ff(Request::Batch(stamp)).await {
            Ok(r) => r,
            Err(fatal) => {
                let failure = Failure::Unavailable(format!("raft stopped: {fatal}"));
                for a in answers.into_iter().flatten() {
                    let _ = a.send(Err(failure.clone()));
                }
                return;
            }
        };
        let raft = raft.clone();
        tokio::spawn(async move {
            let result = tokio::time::timeout(COMMIT_TIMEOUT, receiver).await;
            drop(permit);
            let outcome: Result<(u64, Vec<Reply>), Failure> = match result {
                Ok(Ok(Ok(written))) => match written.data.applied {
                    Some(applied) => Ok((written.log_id.index, applied.replies)),
                    None => Err(Failure::OutcomeUnknown(
                        "entry applied without replies".into(),
                    )),
                },
                Ok(Ok(Err(ClientWriteError::ForwardToLeader(_)))) => Err(Failure::NotLeader {
                    leader: known_leader(&raft),
                }),
                Ok(Ok(Err(e))) => Err(Failure::OutcomeUnknown(e.to_string())),
                Ok(Err(_)) => Err(Failure::OutcomeUnknown(
                    "leadership lost while committing".into(),
                )),
                Err(_) => Err(Failure::OutcomeUnknown(format!(
                    "not committed within {COMMIT_TIMEOUT:?}"
                ))),
            };
            match outcome {
                Ok((index, replies)) => {
                    assert_eq!(replies.len(), answers.len().max(1), "one reply per command");
                    for (answer, reply) in answers.into_iter().zip(replies) {
                        if let Some(a) = answer {
                            let _ = a.send(Ok((index, reply)));
                        }
                    }
                }
                Err(failure) => {
                    for a in answers.into_iter().flatten() {
                        let _ = a.send(Err(failure.clone()));
                    }
                }
            }
        });
    }
}

/// A test hook for the partition harness's clock nemesis: `WEIR_TEST_CLOCK_RATE` (0.5 to
/// 2.0) scales this proposer's stamps, as a leader whose clock runs fast or slow would.
/// Unset, or out of range, it is 1. Nothing else reads it.
fn clock_rate() -> f64 {
    let rate = std::env::var("WEIR_TEST_CLOCK_RATE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok());
    match rate {
        Some(r) if (0.5..=2.0).contains(&r) => {
            tracing::warn!("WEIR_TEST_CLOCK_RATE = {r}: this node's log-clock stamps are skewed");
            r
        }
        _ => 1.0,
    }
}

/// Moves already-queued commands into `batch`, up to `max`.
fn drain(rx: &mut mpsc::Receiver<Pending>, batch: &mut Vec<Pending>, max: usize) {
    while batch.len() < max {
        match rx.try_recv() {
            Ok(p) => batch.push(p),
            Err(_) => break,
        }
    }
}

/// Maps a `RaftError` from a blocking write (membership) to a failure.
pub fn write_failure(
    raft: &Raft,
    e: RaftError<NodeId, ClientWriteError<NodeId, crate::raft::NodeAddr>>,
) -> Failure {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => Failure::NotLeader {
            leader: known_leader(raft),
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            Failure::BadRequest(e.to_string())
        }
        RaftError::Fatal(f) => Failure::Unavailable(f.to_string()),
    }
}
