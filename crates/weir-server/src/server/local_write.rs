//! [`LocalWriter`]: the client port's write path for a front door in the same process (the
//! Envoy service), without the loopback hop through an internal client: the checks
//! [`super::client_port`] makes of a write, with the same functions, in its order — the
//! principal's role ([`authorize()`]), the tenant's group ([`route_in`]: a node of several
//! groups proposes here only for the tenants of the group it writes to), then
//! [`edge::screen_write`] (the command's arguments, the session's owner with one quorum
//! round for a session not applied here yet, an open bound to its principal) — then the
//! proposer.
//!
//! Invariants: a write refused by a check is never proposed; a write answered `NotLeader`
//! was never proposed either (the proposer's rule), so its caller may send it through the
//! leader's client port instead. Never a second authorization rule: the client port's
//! functions, called with the principal the front door authenticated.

use std::sync::Arc;

use weir_core::machine::{Command, Reply};
use weir_proto::protocol::{Failure, Request};

use super::ctx::Metadata;
use super::edge;
use super::proposer::Proposer;
use super::routing::route_in;
use crate::raft::state_store::AppliedState;
use crate::raft::{GroupId, Raft};
use crate::security::{Principal, authorize};

/// Writes through this node's proposer as the client port does (module doc).
#[derive(Clone)]
pub struct LocalWriter {
    pub(super) proposer: Proposer,
    pub(super) state: Arc<AppliedState>,
    pub(super) raft: Raft,
    /// The group it writes to, and the metadata group it routes by (a node of several).
    pub(super) group: GroupId,
    pub(super) metadata: Option<Metadata>,
}

impl LocalWriter {
    /// Writes `command` for `principal`: the machine's reply, or the failure the client
    /// port would answer (`NotLeader` on a node that does not lead).
    pub async fn write(&self, principal: &Principal, command: Command) -> Result<Reply, Failure> {
        let request = Request::Write(command);
        authorize(&principal.role, &request).map_err(Failure::Forbidden)?;
        route_in(self.metadata.as_ref(), self.group, &request)?;
        let Request::Write(command) = request else {
            unreachable!("a write was made above");
        };
        let command = edge::screen_write(&self.raft, &self.state, principal, command).await?;
        let (_, reply) = self.proposer.propose(command).await?;
        crate::metrics::get().replied(&reply);
        Ok(reply)
    }
}
