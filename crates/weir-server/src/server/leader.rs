//! Who leads, as this node knows it, and openraft's errors turned into client [`Failure`]s
//! that point there. Shared by the proposer, the reader and the admin requests.
//!
//! `NotLeader` tells the client the request was not applied (see [`Failure`]). It is built
//! here from openraft's `ForwardToLeader` and, in the proposer, from its own check before
//! proposing. The server module's caveats say where openraft's `ForwardToLeader` for an
//! already proposed entry weakens that promise.

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};

use crate::raft::{NodeAddr, NodeId, Raft};
use weir_proto::protocol::Failure;

/// The leader this node knows of, as (id, client address). `None` while no leader is known
/// or the leader is not (yet) in this node's membership.
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

/// [`Failure::NotLeader`], naming the leader this node knows of.
pub fn not_leader(raft: &Raft) -> Failure {
    Failure::NotLeader {
        leader: known_leader(raft),
    }
}

/// Maps a `RaftError` from a blocking write (membership) to a failure.
pub fn write_failure(
    raft: &Raft,
    e: RaftError<NodeId, ClientWriteError<NodeId, NodeAddr>>,
) -> Failure {
    raft_failure(e, |e| match e {
        ClientWriteError::ForwardToLeader(_) => not_leader(raft),
        ClientWriteError::ChangeMembershipError(e) => Failure::BadRequest(e.to_string()),
    })
}

/// Maps a failed `ensure_linearizable` (the read path's leadership check) to a failure.
pub fn read_failure(
    raft: &Raft,
    e: RaftError<NodeId, CheckIsLeaderError<NodeId, NodeAddr>>,
) -> Failure {
    raft_failure(e, |e| match e {
        CheckIsLeaderError::ForwardToLeader(_) => not_leader(raft),
        CheckIsLeaderError::QuorumNotEnough(q) => Failure::Unavailable(format!("no quorum: {q}")),
    })
}

/// A `RaftError` as a failure: its API error through `api`; a fatal error (the Raft core
/// stopped) makes the node unavailable.
fn raft_failure<E>(e: RaftError<NodeId, E>, api: impl FnOnce(E) -> Failure) -> Failure {
    match e {
        RaftError::APIError(e) => api(e),
        RaftError::Fatal(f) => Failure::Unavailable(f.to_string()),
    }
}
