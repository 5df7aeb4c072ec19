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
//! (`docs/benchmarks.md`, "Stalls", read from the kept logs of `--stall` runs).
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
//!   vote anyway), nor within the lease of granting a vote: a leader that is alive for this
//!   node, or a candidate it has just helped elect, is not disrupted. The last check is
//!   openraft's own record of when this node's vote was last set or renewed, read from the
//!   Raft core just before standing, so a reply that was slow to come back through the
//!   peer port does not mislead it. (Between that read and the election command reaching
//!   the core, a few µs of messages can still arrive; a leader heard in them is unseated,
//!   which Raft survives.)
//! - It stands only as a follower (a leader or a candidate has nothing to gain), and only
//!   for a candidate whose vote is above every vote it knows: a request delayed past a
//!   later election (a node resumed after a stop reads those from its sockets) is no sign
//!   that the cluster lacks a leader.
//! - At most one stand-in runs on a node at a time, of at most [`ROUNDS`] rounds, each
//!   waited for at most the shortest election timeout; after that openraft's own timers
//!   and the backstop are all that is left. It cannot loop.
//! - Safety is Raft's own: any node may stand at any time, and a vote is still granted only
//!   to a log at least as long as the voter's.
//!
//! **The backstop.** openraft 0.9 adds twice `election_timeout_max` to a node's election
//! timer once one of its candidacies is refused by a longer log, and clears that only when
//! its timer next starts an election (openraft's "seen greater log"; made to lapse upstream
//! in openraft#2087, after 0.9). A stand-in leaves exactly that mark on the refused
//! candidate, and on itself when it was once refused, so at the next stop of a leader both
//! followers could wait 1.8 s before standing (seen in a kept `--stall` run: 1,858 ms, one
//! round, both nodes marked). The backstop ([`StandIn::start`]) is this node's own election
//! timer without that delay: a follower, a voter, that has accepted nothing from a leader
//! and seen its vote unchanged for `election_timeout_max` (the lease) plus
//! `election_timeout_max` plus a random part of up to half `election_timeout_min` stands
//! once, then waits that long again. Before it stands it reads openraft's own record of
//! when the vote was last set or renewed (every accepted AppendEntries renews it, every
//! granted vote sets it), as openraft's timer does, so a follower whose Raft core was busy
//! and had not yet answered a live leader does not stand. An unmarked openraft timer (lease
//! plus at most `election_timeout_max`) fires first, so the backstop changes nothing but
//! the delay, and a node it makes stand with a shorter log is refused and answered by the
//! stand-in of the node ahead. It does not stand while a stand-in is under way. Its task
//! ends with the node (its shutdown begins or its sender is gone) or with the
//! Raft core (the metrics channel closes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use openraft::ServerState;
use openraft::raft::{VoteRequest, VoteResponse};

use super::{NodeId, Raft};
use crate::shutdown::Shutdown;

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
    /// When an answer to a leader's AppendEntries, or a snapshot chunk answered with the
    /// leader's own vote, last came back from this node's Raft core: a cheap first check;
    /// openraft's own record decides ([`StandIn::quiet_for`]).
    heard: Mutex<Option<Instant>>,
    /// A stand-in is under way.
    standing: AtomicBool,
    /// How long a follower waits, besides a random part, before the backstop makes it
    /// stand: the lease plus `election_timeout_max`.
    backstop_after: Duration,
    /// The backstop may start elections (tests turn it off with openraft's own timer).
    backstop_on: AtomicBool,
}

impl StandIn {
    /// For `raft`, run with `config` (its lease is `election_timeout_max`), with its
    /// backstop running (module doc) until `shutdown` begins (or its sender is dropped),
    /// or the Raft core ends.
    pub fn start(raft: Raft, config: &openraft::Config, shutdown: Shutdown) -> Arc<StandIn> {
        let lease = Duration::from_millis(config.election_timeout_max);
        let stand_in = Arc::new(StandIn {
            raft,
            lease,
            round_max: Duration::from_millis(config.election_timeout_min),
            heard: Mutex::new(None),
            standing: AtomicBool::new(false),
            backstop_after: lease + lease,
            backstop_on: AtomicBool::new(true),
        });
        tokio::spawn(stand_in.clone().backstop(shutdown));
        stand_in
    }

    /// Lets the backstop start elections (`true`, the default) or not. openraft's own
    /// timer has its switch in `Raft::runtime_config`; a test that turns that off for a
    /// node turns this off too.
    pub fn set_backstop(&self, on: bool) {
        self.backstop_on.store(on, Ordering::Release);
    }

    /// How long ago, by openraft's own record read in the Raft core, this node's vote was
    /// last set or renewed (a leader's AppendEntries renews it, a granted vote or an
    /// election sets it); `None` if never, `Err` if the core has stopped.
    async fn quiet_for(&self) -> Result<Option<Duration>, ()> {
        self.raft
            .with_raft_state(|s| s.vote_last_modified().map(|at| at.elapsed()))
            .await
            .map_err(|_| ())
    }

    /// This node has just accepted an AppendEntries or a snapshot chunk from a leader.
    pub fn heard_leader(&self) {
        *crate::lock::lock(&self.heard) = Some(Instant::now());
    }

    /// This node answered `request` with `response`: stands for election if that calls for
    /// it ([`calls_for_stand_in`]) and no stand-in is under way.
    pub fn answered(
        self: &Arc<Self>,
        request: &VoteRequest<NodeId>,
        response: &VoteResponse<NodeId>,
    ) {
        let heard_ago = crate::lock::lock(&self.heard).map(|at| at.elapsed());
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
            match me.quiet_for().await {
                Ok(Some(quiet)) if quiet < me.lease => tracing::info!(
                    quiet_ms = quiet.as_millis() as u64,
                    "stand-in: this node's vote was set or renewed within the lease; not standing"
                ),
                Ok(_) => me.stand(candidate).await,
                Err(()) => {}
            }
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

    /// The backstop's task (module doc): checks a few times per shortest election timeout
    /// whether this node has been a quiet follower for its deadline, and stands if so.
    async fn backstop(self: Arc<Self>, mut shutdown: Shutdown) {
        // The server metrics change only with the vote, state, leader or membership.
        let mut metrics = self.raft.server_metrics();
        let check = (self.round_max / 6).max(Duration::from_millis(5));
        let mut last_vote = metrics.borrow().vote;
        let mut quiet_since = Instant::now();
        let mut deadline = self.backstop_after + jitter(self.round_max / 2);
        loop {
            // Biased: a simulation replays only if the choice is the same every run.
            tokio::select! {
                biased;
                () = shutdown.begun() => return,
                changed = metrics.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(check) => {}
            }
            let (following, vote) = {
                let m = metrics.borrow();
                let voter = m
                    .membership_config
                    .membership()
                    .voter_ids()
                    .any(|id| id == m.id);
                (m.state == ServerState::Follower && voter, m.vote)
            };
            let now = Instant::now();
            if !following || vote != last_vote {
                last_vote = vote;
                quiet_since = now;
                continue;
            }
            let heard = *crate::lock::lock(&self.heard);
            let quiet_for = now - heard.map_or(quiet_since, |at| at.max(quiet_since));
            if quiet_for < deadline
                || !self.backstop_on.load(Ordering::Acquire)
                || self.standing.load(Ordering::Acquire)
            {
                continue;
            }
            // openraft's own record decides: its core may have renewed the vote for a
            // leader whose messages it had not yet answered.
            let quiet_for = match self.quiet_for().await {
                Err(()) => return,
                Ok(None) => quiet_for,
                Ok(Some(quiet)) if quiet < deadline => {
                    quiet_since = Instant::now()
                        .checked_sub(quiet)
                        .unwrap_or_else(Instant::now);
                    continue;
                }
                Ok(Some(quiet)) => quiet,
            };
            tracing::info!(
                quiet_ms = quiet_for.as_millis() as u64,
                vote = %vote,
                "backstop: no leader heard and no vote cast for the election timeout; standing"
            );
            if self.raft.trigger().elect().await.is_err() {
                return;
            }
            quiet_since = Instant::now();
            deadline = self.backstop_after + jitter(self.round_max / 2);
        }
    }
}

/// A random duration below `most` (zero if the OS gives no randomness: the backstop then
/// waits its bare deadline, which openraft's own timers stagger anyway).
fn jitter(most: Duration) -> Duration {
    let Some(random) = crate::simulated::random() else {
        return Duration::ZERO;
    };
    if most.is_zero() {
        return Duration::ZERO;
    }
    let nanos = most.as_nanos() as u64;
    Duration::from_nanos(random % nanos)
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
