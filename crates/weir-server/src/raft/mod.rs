//! openraft glue: the type configuration, the log store (a write-ahead log of its own), the
//! state-machine store, the peer transport, and the stand-in that makes a node ahead of a
//! refused candidate stand for election at once ([`stand_in`]).
//!
//! What the log carries (openraft's application data, `D`) is the machine's own [`Batch`]:
//! a leader-stamped list of commands. What applying an entry returns (openraft's `R`) is
//! `Option<`[`Applied`]`>`: the machine's replies and events for a batch, `None` for Raft's
//! own blank and membership entries. A normal entry's payload is encoded as the `Batch` itself,
//! with no wrapper, so its layout ([`weir_core::machine::command`]) is the format of AppendEntries
//! on the peer port and, inside a crc32c frame per entry ([`log_store`]), of the log's files.
//! A snapshot travels as files ([`snapshot_bytes`]): sent from `snapshot.bin`
//! ([`snapshot_file`]), received into a file of its own, never whole in memory.
//! Business refusals live inside the replies; a
//! `StorageError` means the disk broke its promise, and openraft stops the node on it.

pub mod activity;
pub mod cluster_identity;
pub mod in_process;
pub mod log_entry;
pub mod log_error;
pub mod log_store;
pub mod log_writer;
pub mod network;
pub mod peer_health;
pub mod snapshot_bytes;
pub mod snapshot_file;
pub mod stand_in;
pub mod state_store;
#[cfg(test)]
pub mod test_cluster;
pub mod wal;

use serde::{Deserialize, Serialize};

use weir_core::machine::{Applied, Batch};

/// A node's stable id, from its config. Never 0.
pub type NodeId = u64;

/// A Raft group's id within a node process: every peer frame names the group it is for
/// ([`network::PeerFrame`]). A node of one group hosts group [`SOLE_GROUP`].
pub type GroupId = u32;

/// The group a node of one group hosts, and the metadata group of a node of several.
pub const SOLE_GROUP: GroupId = 0;

/// What the cluster knows of a node: where its peers and its clients reach it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    /// The peer (Raft) port, `host:port`.
    pub peer: String,
    /// The client port, `host:port`.
    pub client: String,
}

openraft::declare_raft_types!(
    /// Weir's openraft type configuration.
    pub TypeConfig:
        D = Batch,
        R = Option<Applied>,
        NodeId = NodeId,
        Node = NodeAddr,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = snapshot_bytes::SnapshotBytes,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The Raft handle with Weir's types.
pub type Raft = openraft::Raft<TypeConfig>;

// openraft's generic types, fixed to Weir's configuration.
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, NodeAddr>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, NodeAddr>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
pub type Vote = openraft::Vote<NodeId>;
