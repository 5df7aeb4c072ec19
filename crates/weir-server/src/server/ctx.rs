//! [`Ctx`]: what a client connection needs of the node — its identity, the Raft, applied
//! state, proposer and reader of the group it speaks to (one `Ctx` per group the node
//! hosts; a plain hello speaks to `node::client_group`), the metadata group's placements on
//! a node of several groups ([`Metadata`]), the port's TLS and tokens, and the caches of the
//! admin requests. Built once by [`super::node`]; shared by `Arc` with the client port
//! ([`super::client_port`]), the admin requests ([`super::admin`]) and the heartbeats
//! ([`super::heartbeat`]), none of which import each other for it.

use std::sync::Arc;

use super::backup_slot::BackupSlot;
use super::digest::DigestCache;
use super::proposer::Proposer;
use super::reader::Reader;
use crate::raft::cluster_identity::ClusterIdentity;
use crate::raft::state_store::AppliedState;
use crate::raft::{GroupId, NodeId, Raft};
use crate::security::{Acceptor, Tokens};

/// The metadata group of a node of several groups, as every group's connections see it:
/// the placements requests are routed by, and where a `PlaceTenant` is proposed
/// ([`super::routing`]).
#[derive(Clone)]
pub struct Metadata {
    pub raft: Raft,
    pub state: Arc<AppliedState>,
    pub proposer: Proposer,
    /// The default data group's applied state: a tenant it holds that no placement names
    /// lives there from before placements existed ([`super::routing::place_tenant`]).
    pub default_state: Arc<AppliedState>,
}

/// What a connection needs of the node, for the group it speaks to.
pub struct Ctx {
    pub id: NodeId,
    pub client_addr: String,
    /// The group this context serves: its Raft, state, proposer and reader below.
    pub group: GroupId,
    /// The metadata group, on a node of several groups; `None` on a node of one, where
    /// every tenant lives in its one group and nothing is routed.
    pub metadata: Option<Metadata>,
    pub raft: Raft,
    /// The applied state: local reads, status, and the event feed for pushes.
    pub state: Arc<AppliedState>,
    pub proposer: Proposer,
    pub reader: Reader,
    /// The node's `groups`: the groups above serve, and with 2 or more, membership changes
    /// and backups are refused ([`super::admin::one_group_only`]).
    pub groups: u32,
    /// TLS for the port, or plaintext.
    pub acceptor: Acceptor,
    /// The tokens accepted, reloaded on SIGHUP.
    pub tokens: Arc<Tokens>,
    /// The status digest, cached per applied index ([`super::digest`]).
    pub digest: DigestCache,
    /// Held while a snapshot-cost measurement runs: one at a time.
    pub snapshot_cost: tokio::sync::Mutex<()>,
    /// When the next snapshot-cost measurement may start.
    pub snapshot_cost_next: std::sync::Mutex<Option<std::time::Instant>>,
    /// The cluster this node belongs to: named in every backup.
    pub identity: Arc<ClusterIdentity>,
    /// The backup held for its chunks (served by [`super::backup_export`]).
    pub backup: BackupSlot,
}
