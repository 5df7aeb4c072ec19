//! Peers in one process: openraft's network traits over a [`Transport`] that the caller
//! implements, so the nodes of a simulation (`crate::sim`, delays, losses, partitions,
//! stalls) or of a test cluster ([`super::test_cluster`], links cut and healed) exchange
//! their Raft messages exactly as it decides, each answered by the receiving node's own
//! peer answer ([`super::network::answer`]).
//!
//! Every call is bounded by openraft's deadline for it (`RPCOption::hard_ttl`), as the real
//! peer transport's calls are ([`crate::raft::network`]): a message the transport holds
//! past it is a timeout, one it loses is unreachable.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use super::network::{PeerRequest, PeerResponse};
use super::{NodeAddr, NodeId, TypeConfig};

/// A peer request on its way: resolves to the answer, or `None` when it or the answer was
/// lost.
pub type Carried = Pin<Box<dyn Future<Output = Option<PeerResponse>> + Send>>;

/// A peer request's way to its node and the answer's way back, as the caller decides.
pub trait Transport: Send + Sync + 'static {
    /// Carries `request` from node `from` to node `to` and its answer back: `None` when
    /// either was lost (the sender sees the peer unreachable).
    fn send(&self, from: NodeId, to: NodeId, request: PeerRequest) -> Carried;
}

/// One node's side of the network: it makes a link to each peer openraft asks for.
pub struct Dialer {
    pub from: NodeId,
    pub net: Arc<dyn Transport>,
}

pub struct Link {
    from: NodeId,
    to: NodeId,
    net: Arc<dyn Transport>,
}

impl RaftNetworkFactory<TypeConfig> for Dialer {
    type Network = Link;

    async fn new_client(&mut self, to: NodeId, _: &NodeAddr) -> Link {
        Link {
            from: self.from,
            to,
            net: self.net.clone(),
        }
    }
}

#[derive(Debug)]
struct Lost;

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the in-process network lost the message or its answer")
    }
}

impl std::error::Error for Lost {}

type Failed<E> = RPCError<NodeId, NodeAddr, E>;

impl Link {
    async fn call<E: std::error::Error>(
        &self,
        request: PeerRequest,
        kind: RPCTypes,
        option: &RPCOption,
    ) -> Result<PeerResponse, Failed<E>> {
        let ttl = option.hard_ttl();
        match tokio::time::timeout(ttl, self.net.send(self.from, self.to, request)).await {
            Ok(Some(response)) => Ok(response),
            Ok(None) => Err(RPCError::Unreachable(Unreachable::new(&Lost))),
            Err(_) => Err(RPCError::Timeout(Timeout {
                action: kind,
                id: self.from,
                target: self.to,
                timeout: ttl,
            })),
        }
    }
}

/// An answer of another kind than the request's: a bug of the caller's transport.
fn wrong_kind<E: std::error::Error>() -> Failed<E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "the in-process peer answered another kind of request",
    )))
}

impl RaftNetwork<TypeConfig> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, Failed<RaftError<NodeId>>> {
        let request = PeerRequest::AppendEntries(rpc);
        match self.call(request, RPCTypes::AppendEntries, &option).await? {
            PeerResponse::AppendEntries(r) => r.map_err(|e| RemoteError::new(self.to, e).into()),
            _ => Err(wrong_kind()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, Failed<RaftError<NodeId, InstallSnapshotError>>>
    {
        let request = PeerRequest::InstallSnapshot(rpc);
        match self
            .call(request, RPCTypes::InstallSnapshot, &option)
            .await?
        {
            PeerResponse::InstallSnapshot(r) => r.map_err(|e| RemoteError::new(self.to, e).into()),
            _ => Err(wrong_kind()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, Failed<RaftError<NodeId>>> {
        match self
            .call(PeerRequest::Vote(rpc), RPCTypes::Vote, &option)
            .await?
        {
            PeerResponse::Vote(r) => r.map_err(|e| RemoteError::new(self.to, e).into()),
            _ => Err(wrong_kind()),
        }
    }
}
