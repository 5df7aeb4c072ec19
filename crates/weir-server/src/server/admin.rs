//! The requests about the node and the cluster rather than the limits: status, membership
//! changes and the snapshot-cost measurement. [`super::client_port`] dispatches them here.
//!
//! Invariants:
//! - Status and snapshot cost change nothing; they hold the state lock only to copy or
//!   encode, never across an await.
//! - Neither can slow the leader however often it is asked: status's digest comes from the
//!   [`super::digest::DigestCache`] (once per applied index, at most 5% of the lock's time,
//!   hashed off the lock); a snapshot-cost measurement runs one at a time, decodes on the
//!   blocking pool, and the next may start only 20 times its encoding's lock time later.
//! - A membership change is openraft's own (`change_membership`, answered once committed).
//!   A node is added as a learner first and promoted to voter only once it has caught up
//!   (its replication has matched the learner's own membership entry), so a new voter does
//!   not hold commits back while it copies the log. A learner that has not caught up within
//!   [`LEARNER_CATCH_UP`] (nobody listens at its address, or its certificate is not from the
//!   cluster CA, so the mutual-TLS handshake fails) never becomes a voter: it is removed
//!   again and the request is answered `BadRequest` saying why.
//! - A membership request is served only by the leader: another node answers `NotLeader`,
//!   naming the leader it knows. openraft judges "a change is in progress" before it judges
//!   leadership, so without this check a follower whose view of the membership is behind
//!   (a node just removed never learns that its removal committed) would refuse the
//!   request as in progress, and the client would not be sent on to the leader. On the
//!   leader, a change still in progress (the second step of a joint change) is waited out
//!   for at most [`IN_PROGRESS_WAIT`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use openraft::ChangeMembers;
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};

use super::ctx::Ctx;
use super::leader::{not_leader, write_failure};
use crate::raft::{NodeAddr, NodeId};
use weir_core::machine::Machine;
use weir_proto::protocol::{Failure, Member, NodeStatus, Response, SnapshotCost};

/// This node's status: Raft metrics and the applied state's digest.
pub async fn status(ctx: &Ctx) -> NodeStatus {
    let m = ctx.raft.metrics().borrow().clone();
    let (digest_applied, digest) = ctx.digest.digest(&ctx.state).await;
    let (applied, log_ms, sessions) = {
        let state = ctx.state.lock();
        (
            state.machine.applied_index(),
            state.machine.now_ms(),
            state.machine.session_count() as u64,
        )
    };
    let voters: BTreeSet<u64> = m.membership_config.voter_ids().collect();
    let matched: BTreeMap<u64, Option<u64>> = m
        .replication
        .as_ref()
        .map(|r| r.iter().map(|(id, l)| (*id, l.map(|l| l.index))).collect())
        .unwrap_or_default();
    let members = m
        .membership_config
        .nodes()
        .map(|(id, n)| Member {
            id: *id,
            peer: n.peer.clone(),
            client: n.client.clone(),
            voter: voters.contains(id),
            matched: matched.get(id).copied().flatten(),
        })
        .collect();
    NodeStatus {
        id: ctx.id,
        addr: ctx.client_addr.clone(),
        state: format!("{:?}", m.state),
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index.unwrap_or(0),
        snapshot_index: m.snapshot.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
        applied,
        digest,
        digest_applied,
        log_ms,
        sessions,
        rss_kib: rss_kib(),
        members,
    }
}

/// This process's resident set size, from /proc (Linux).
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// How long a new learner has to catch up before it is removed again. A reachable node
/// copies the log (or a snapshot, at most `SNAPSHOT_BYTES_MAX`) over loopback or a LAN in
/// well under this; the client's own retry deadline is about the same, so the answer
/// arrives while it still waits.
pub const LEARNER_CATCH_UP: Duration = Duration::from_secs(8);

/// How long a membership request on the leader waits for a change in progress to commit.
pub const IN_PROGRESS_WAIT: Duration = Duration::from_secs(5);

/// Runs one membership step (`step` calls openraft) where only the leader may: on another
/// node the answer is `NotLeader`; on the leader, a refusal because a change is in
/// progress is tried again every 100 ms for at most [`IN_PROGRESS_WAIT`].
async fn on_leader<T, F, Fut>(ctx: &Ctx, step: F) -> Result<T, Failure>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, RaftError<NodeId, ClientWriteError<NodeId, NodeAddr>>>>,
{
    let deadline = Instant::now() + IN_PROGRESS_WAIT;
    loop {
        let leads = {
            let m = ctx.raft.metrics();
            let m = m.borrow();
            m.current_leader == Some(m.id)
        };
        if !leads {
            return Err(not_leader(&ctx.raft));
        }
        match step().await {
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                ChangeMembershipError::InProgress(_),
            ))) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(write_failure(&ctx.raft, e)),
            Ok(r) => return Ok(r),
        }
    }
}

/// Adds node `id`: as a learner, waiting at most [`LEARNER_CATCH_UP`] until it has caught
/// up, then as a voter. A learner that does not catch up is removed and never votes.
/// The refusal of a membership change or a backup on a node of several groups: their
/// voters are the configured ones, the same in every group, and a backup holds one group.
pub fn one_group_only(groups: u32) -> Failure {
    Failure::BadRequest(format!(
        "this node hosts groups = {groups}: its groups' voters are the configured ones \
         (nodes are not added or removed), and a backup is of a node of one group"
    ))
}

pub async fn add_node(ctx: &Ctx, id: NodeId, node: NodeAddr) -> Response {
    let peer = node.peer.clone();
    let added = match on_leader(ctx, || ctx.raft.add_learner(id, node.clone(), false)).await {
        Ok(r) => r.log_id.index,
        Err(failure) => return Response::Failed(failure),
    };
    let caught_up = ctx
        .raft
        .wait(Some(LEARNER_CATCH_UP))
        .metrics(
            |m| {
                m.replication
                    .as_ref()
                    .and_then(|r| r.get(&id).copied().flatten())
                    .is_some_and(|matched| matched.index >= added)
            },
            "the learner has caught up",
        )
        .await;
    if caught_up.is_err() {
        let removal = ctx
            .raft
            .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false)
            .await;
        let removed = match removal {
            Ok(_) => "it was removed again".to_string(),
            Err(e) => format!("removing it again failed too ({e})"),
        };
        // A node that answered at all but refused names why; else it was not reached.
        let why = match crate::raft::network::refused_by(&peer) {
            Some(reason) => format!("it refused this cluster's connections: {reason}"),
            None => "unreachable, or its certificate is not from the cluster CA".into(),
        };
        return Response::Failed(Failure::BadRequest(format!(
            "node {id} at {peer} did not catch up as a learner within {LEARNER_CATCH_UP:?} \
             ({why}), so it was not made a voter; {removed}"
        )));
    }
    change_membership(ctx, ChangeMembers::AddVoterIds(BTreeSet::from([id]))).await
}

/// Removes voter `id`.
pub async fn remove_node(ctx: &Ctx, id: NodeId) -> Response {
    change_membership(ctx, ChangeMembers::RemoveVoters(BTreeSet::from([id]))).await
}

/// Makes one membership change through openraft on the leader, answered once it is
/// committed.
async fn change_membership(ctx: &Ctx, changes: ChangeMembers<NodeId, NodeAddr>) -> Response {
    match on_leader(ctx, || ctx.raft.change_membership(changes.clone(), false)).await {
        Ok(_) => Response::MembershipChanged,
        Err(failure) => Response::Failed(failure),
    }
}

/// Measures what a snapshot of this node's state costs: building it (the state frozen under
/// the lock, then encoded apart, as the snapshot builder does) and decoding and checking it
/// (on the blocking pool, as an install does). Changes nothing. One measurement at a time,
/// and the next only 20 times the last build's time later; others are answered
/// `Unavailable` at once.
pub async fn snapshot_cost(ctx: &Ctx) -> Response {
    let Ok(_one_at_a_time) = ctx.snapshot_cost.try_lock() else {
        return Response::Failed(Failure::Unavailable(
            "a snapshot measurement is already running".into(),
        ));
    };
    {
        let next_allowed = crate::lock::lock(&ctx.snapshot_cost_next);
        if let Some(t) = *next_allowed
            && Instant::now() < t
        {
            return Response::Failed(Failure::Unavailable(format!(
                "snapshot measurements are rate-limited; the next in {:?}",
                t - Instant::now()
            )));
        }
    }
    // As a snapshot is built: the state lock held only to freeze the state, the encode
    // apart from it, on the blocking pool with the decode (neither holds a runtime worker:
    // at ten million keys they take seconds).
    let started = Instant::now();
    let (applied, frozen) = {
        let state = ctx.state.lock();
        (state.machine.applied_index(), state.machine.freeze())
    };
    let measured = tokio::task::spawn_blocking(move || {
        let bytes = frozen.encode();
        let build = started.elapsed();
        let decoding = Instant::now();
        let restored = Machine::restore(&bytes).map(|_| bytes.len());
        (restored, build, decoding.elapsed())
    })
    .await;
    let Ok((restored, build, install)) = measured else {
        return Response::Failed(Failure::Unavailable("snapshot measurement failed".into()));
    };
    *crate::lock::lock(&ctx.snapshot_cost_next) = Some(Instant::now() + build * 20);
    match restored {
        Ok(len) => Response::SnapshotCost(SnapshotCost {
            applied,
            bytes: len as u64,
            build_us: build.as_micros() as u64,
            install_us: install.as_micros() as u64,
        }),
        Err(e) => Response::Failed(Failure::Unavailable(format!("own snapshot refused: {e}"))),
    }
}
