//! [`FrontDoors`]: the ports a node serves beside its own client and peer ports (HTTP/JSON,
//! Envoy's rate-limit service), started by whoever runs the node. They reach the cluster
//! through the client port like any client, or through its write path in this process
//! ([`Doors::writer`]: the same checks), so this crate never depends on them: the
//! caller of [`super::node::Node::start`] hands them in, and the node gives them what
//! [`Doors`] holds.
//!
//! Invariants:
//! - The node binds the front doors' listeners with its own ports, before Raft starts, so a
//!   taken port fails the start and nothing is served half-way; a front door only serves
//!   what it is given.
//! - A front door is started after Raft and before the client port serves, once per start.
//! - Every task a front door spawns holds the node's [`Shutdown`] and ends when it begins.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::net::TcpListener;
use weir_proto::tls::Connector;

use super::local_write::LocalWriter;
use crate::config::Config;
use crate::raft::state_store::AppliedState;
use crate::raft::{GroupId, Raft};
use crate::security::{Acceptor, Tokens};
use crate::shutdown::Shutdown;

/// What a node gives its front doors.
pub struct Doors {
    /// The HTTP port, bound, unless `http_listen` is empty.
    pub http: Option<TcpListener>,
    /// The gRPC port, bound, unless `grpc_listen` is empty.
    pub grpc: Option<TcpListener>,
    /// The client port's TLS end (plaintext without `[tls]`), for the HTTP port.
    pub client_acceptor: Acceptor,
    /// The internal clients' way into the client port: verified against the node's CA.
    pub internal_connector: Connector,
    /// The tokens the client port accepts, reloaded on SIGHUP.
    pub tokens: Arc<Tokens>,
    /// Every data group this node hosts, by id: the one group (0) of a node of one group,
    /// groups 1 to N of a node of several.
    pub groups: BTreeMap<GroupId, DoorGroup>,
    /// The group a front door's request speaks to when it names none (`node::client_group`).
    pub default_group: GroupId,
    /// The metadata group's applied state on a node of several groups, whose placements say
    /// which group decides a tenant; `None` on a node of one group.
    pub placements: Option<Arc<AppliedState>>,
    pub shutdown: Shutdown,
}

impl Doors {
    /// The default group's door.
    pub fn default_door(&self) -> &DoorGroup {
        &self.groups[&self.default_group]
    }
}

/// What a front door reaches of one group this node hosts.
#[derive(Clone)]
pub struct DoorGroup {
    /// This node's applied state of the group.
    pub state: Arc<AppliedState>,
    pub raft: Raft,
    /// The client port's write path to the group, in process: a front door on the group's
    /// leader writes through it without a loopback connection (`local_write.rs`).
    pub writer: LocalWriter,
}

/// Starts the ports a node serves beside its own.
pub trait FrontDoors: Send + Sync {
    /// Serves what `doors` holds, as `config` says; an error fails the node's start.
    fn start(&self, config: &Config, doors: Doors) -> Result<(), String>;
}
