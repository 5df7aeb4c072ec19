//! Standing for election at once when a candidate's log is behind this node's (G9: a
//! stopped leader is replaced in one election, not three).
//!
//! openraft 0.9 has no pre-vote round, and a follower that refuses a vote because the
//! candidate's log is behind its own leaves its own term where it was. Under load the two
//! followers of a stopped leader are rarely at the same index. When the one behind times
//! out first, its candidacy cannot win; the one ahead waits out its own timer (the leader
//! lease plus an election timeout after it last heard the leader), then stands in the very
//! term the first candidate has voted itself in, and loses that round too when the first
//! candidate's id is the higher; only its next timeout wins. That is two seconds and more
//! from the stop, past a 3 s session's belief budget, and every holder loses its permit
//! (`docs/benchmarks.md`, "Seventh session", read from the kept logs of `--stall` runs).
//!
//! [`StandIn`] sees every vote this node answers ([`super::network::answer`]). When it
//! refuses a candidate whose last log id is below its own while it has accepted nothing
//! from a leader for a whole leader lease, this node is one that can win, and it stands at
//! once (openraft's `Trigger::elect`). If that round ends with it following the refused
//! candidate's vote (a term at or above the one it stood in, not granted by a quorum), it
//! stands again, above that vote; if it ends with it having voted for another candidate,
//! it leaves that one the election.
//!
//! Invariants:
//! - It never stands while a leader's AppendEntries or snapshot chunk was accepted within
//!   the leader lease (openraft's `election_timeout_max`; inside it openraft refuses every
//!   vote anyway): a leader that is alive for this node is not disrupted.
//! - It stands only as a follower (a leader or a candidate has nothing to gain), and only
//!   for a candidate whose vote is above every vote it knows: a request delayed past a
//!   later election (a node resumed after a stop reads those from its sockets) is no sign
//!   that the cluster lacks a leader.
//! - At most one stand-in runs on a node at a time, of at most [`ROUNDS`] rounds, each
//!   waited for at most the shortest election timeout; after that openraft's own timers
//!   are all that is left. It cannot loop.
//! - Safety is Raft's own: any node may stand at any time, and a vote is still granted only
//!   to a log at least as long as the voter's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::ServerState;
use openraft::raft::{VoteRequest, VoteResponse};

use super::{NodeId, Raft};

/// Most elections one stand-in starts: the first, one above a vote it learns in it, and one
/// more should a third candidate have raced them.
pub const ROUNDS: usize = 3;

/// Watches the votes this node answers and stands for election when a refused candidate's
/// log is behind (module doc).
pub struct StandIn {
    raft: Raft,
    /// openraft's leader lease: a follower refuses votes this long after it heard a leader.
    lease: Duration,
    /// Longest one round is waited for: the shortest election timeout.
    round_max: Duration,
    /// When this node last accepted an AppendEntries or a snapshot chunk from a leader.
    heard: Mutex<Option<Instant>>,
    /// A stand-in is under way.
    standing: AtomicBool,
}

impl StandIn {
    /// For `raft`, run with `config` (its lease is `election_timeout_max`).
    pub fn new(raft: Raft, config: &openraft::Config) -> Arc<StandIn> {
        Arc::new(StandIn {
            raft,
            lease: Duration::from_millis(config.election_timeout_max),
            round_max: Duration::from_millis(config.election_timeout_min),
            heard: Mutex::new(None),
            standing: AtomicBool::new(false),
        })
    }

    /// This node has just accepted an AppendEntries or a snapshot chunk from a leader.
    pub fn heard_leader(&self) {
        *self.heard.lock().expect("no panic holds the lock") = Some(Instant::now());
    }

    /// This node answered `request` with `response`: stands for election if that calls for
    /// it ([`calls_for_stand_in`]) and no stand-in is under way.
    pub fn answered(
        self: &Arc<Self>,
        request: &VoteRequest<NodeId>,
        response: &VoteResponse<NodeId>,
    ) {
        let heard_ago = self
            .heard
            .lock()
            .expect("no panic holds the lock")
            .map(|at| at.elapsed());
        let following = self.raft.metrics().borrow().state == ServerState::Follower;
        if !calls_for_stand_in(request, response, heard_ago, self.lease, following) {
            return;
        }
        if self.standing.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::info!(
            candidate = request.vote.leader_id.node_id,
            candidate_last_log = %summary(request.last_log_id.as_ref()),
            my_last_log = %summary(response.last_log_id.as_ref()),
            "refused a candidate whose log is behind, no leader heard for a lease: standing for election at once"
        );
        let me = self.clone();
        let candidate = request.vote.leader_id.node_id;
        tokio::spawn(async move {
            me.stand(candidate).await;
            me.standing.store(false, Ordering::Release);
        });
    }

    /// Up to [`ROUNDS`] elections, each started once the last ended with this node following
    /// the refused `candidate`'s vote, not yet granted by a quorum. Following any other
    /// node's vote ends it: this node granted that one, whose log is at least as long as its
    /// own, and standing above it would only unseat the leader it is about to be.
    async fn stand(&self, candidate: NodeId) {
        for round in 1..=ROUNDS {
            let term = self.raft.metrics().borrow().current_term;
            if self.raft.trigger().elect().await.is_err() {
                return;
            }
            let ended = self
                .raft
                .wait(Some(self.round_max))
                .metrics(
                    |m| m.current_term > term && m.state != ServerState::Candidate,
                    "a stand-in's election ends",
                )
                .await;
            let Ok(m) = ended else {
                tracing::info!(
                    round,
                    "stand-in: the election did not end in time; the timers go on"
                );
                return;
            };
            if m.state == ServerState::Leader || m.vote.is_committed() {
                tracing::info!(round, leader = ?m.current_leader, term = m.current_term, "stand-in: a leader is elected");
                return;
            }
            if m.vote.leader_id.node_id != candidate {
                tracing::info!(round, vote = %m.vote, "stand-in: voted for another candidate; leaving it the election");
                return;
            }
            tracing::info!(round, vote = %m.vote, "stand-in: lost to the refused candidate's vote; standing above it");
        }
    }
}

/// Whether answering `request` with `response` calls for standing at once: it was refused,
/// by log (this node's last log id is above the candidate's), the candidate's vote is above
/// every vote this node knows (not a request delayed past a later election: a node
/// resumed after a stop reads those from its sockets), this node follows, and it has heard
/// no leader for `lease` (`heard_ago`: since it last did, if ever).
pub fn calls_for_stand_in(
    request: &VoteRequest<NodeId>,
    response: &VoteResponse<NodeId>,
    heard_ago: Option<Duration>,
    lease: Duration,
    following: bool,
) -> bool {
    following
        && !response.vote_granted
        && response.last_log_id > request.last_log_id
        && response.vote < request.vote
        && heard_ago.is_none_or(|ago| ago >= lease)
}

fn summary(id: Option<&super::LogId>) -> String {
    match id {
        Some(id) => format!("{}-{}", id.leader_id, id.index),
        None => "none".into(),
    }
}

#[cfg(test)]
mod tests;
