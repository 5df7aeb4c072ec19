//! The cluster identity: which cluster a data directory's Raft state belongs to, kept in the
//! data directory's `cluster.id` and carried by every peer connection's hello
//! ([`super::network`]), so that a node of one cluster never votes in, or takes entries from,
//! another.
//!
//! Where an identity comes from:
//! - **Founded**: the node that initializes a new cluster draws 16 random bytes first.
//! - **Adopted**: a node with no Raft state and no identity (a new member waiting to be
//!   contacted) takes the identity of the first peer that says hello to it.
//! - **Restored**: `weir snapshot restore` derives it from the backup file
//!   (`backup.rs`), the same for every node restored from that file, and never equal
//!   to the identity of the cluster the backup was taken from.
//! - **Unrecorded**: a data directory written before identities existed holds Raft state but
//!   no `cluster.id`; it is given [`ClusterId::UNRECORDED`] (all zeros) at start, which every
//!   node of such a cluster shares and no founded or restored identity equals.
//!
//! Invariants:
//! - Once recorded (`cluster.id` written atomically and synced), a node's identity never
//!   changes while the data directory lives.
//! - A node answers a peer's hello only when both identities are equal; a refusal names both.
//! - Only a node without Raft state adopts: a node that holds a log, a vote or a snapshot
//!   always has an identity before it serves peers.
//!
//! `cluster.id` is a sealed frame ([`weir_core::codec`]) of kind `WCID`, version 1, whose
//! payload is the 16 bytes (a bincode `[u8; 16]`: 16 bytes as they are).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::private_files::write_atomically;
use weir_core::codec::{self, FrameError};

/// The identity file's name in the data directory.
pub const CLUSTER_ID_FILE: &str = "cluster.id";
/// Frame kind of the identity file.
pub const CLUSTER_ID_MAGIC: [u8; 4] = *b"WCID";
/// Version of its payload (16 bytes).
pub const CLUSTER_ID_VERSION: u16 = 1;
/// Largest payload accepted: 16 bytes, as bincode writes a `[u8; 16]`.
const CLUSTER_ID_BYTES_MAX: u64 = 16;

/// A cluster's identity: 16 bytes, shown as 32 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterId(pub [u8; 16]);

impl ClusterId {
    /// The identity of a cluster whose data predates recorded identities.
    pub const UNRECORDED: ClusterId = ClusterId([0; 16]);

    /// A new random identity, for a cluster being founded.
    pub fn random() -> Result<ClusterId, String> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| format!("no randomness from the OS: {e}"))?;
        Ok(ClusterId(bytes))
    }

    /// Parses 32 hex digits.
    pub fn parse(text: &str) -> Option<ClusterId> {
        if text.len() != 32 || !text.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(ClusterId(bytes))
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The sealed bytes of `cluster.id` for `id`.
pub fn encode_cluster_id(id: ClusterId) -> Vec<u8> {
    codec::seal_frame(CLUSTER_ID_MAGIC, CLUSTER_ID_VERSION, &codec::encode(&id.0))
}

/// The identity in `cluster.id` bytes, once its frame checks out.
pub fn decode_cluster_id(bytes: &[u8]) -> Result<ClusterId, FrameError> {
    let payload = codec::open_frame(
        bytes,
        CLUSTER_ID_MAGIC,
        CLUSTER_ID_VERSION,
        CLUSTER_ID_BYTES_MAX,
    )?;
    codec::decode(payload).map(ClusterId)
}

/// Reads `dir/cluster.id`: `None` when absent; a damaged file is an error naming it.
pub fn read_cluster_id(dir: &Path) -> Result<Option<ClusterId>, String> {
    let path = dir.join(CLUSTER_ID_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => decode_cluster_id(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `dir/cluster.id` atomically.
pub fn write_cluster_id(dir: &Path, id: ClusterId) -> Result<(), String> {
    write_atomically(dir, CLUSTER_ID_FILE, &encode_cluster_id(id))
        .map_err(|e| format!("{}: {e}", dir.join(CLUSTER_ID_FILE).display()))
}

/// A node's identity, shared by its peer transport (both ends) and its admin requests.
pub struct ClusterIdentity {
    dir: PathBuf,
    /// `None` only while the node has no Raft state and has met no peer.
    id: Mutex<Option<ClusterId>>,
}

impl ClusterIdentity {
    /// The identity recorded in `dir`, if any.
    pub fn open(dir: &Path) -> Result<ClusterIdentity, String> {
        Ok(ClusterIdentity {
            dir: dir.to_owned(),
            id: Mutex::new(read_cluster_id(dir)?),
        })
    }

    /// An identity held in memory only (tests of the transport).
    pub fn fixed(dir: &Path, id: Option<ClusterId>) -> ClusterIdentity {
        ClusterIdentity {
            dir: dir.to_owned(),
            id: Mutex::new(id),
        }
    }

    /// The identity, if the node has one.
    pub fn get(&self) -> Option<ClusterId> {
        *crate::lock::lock(&self.id)
    }

    /// Records `id` unless the node already has an identity; returns the node's identity
    /// afterwards (the one it had, or `id`).
    pub fn record(&self, id: ClusterId) -> Result<ClusterId, String> {
        let mut held = crate::lock::lock(&self.id);
        if let Some(own) = *held {
            return Ok(own);
        }
        write_cluster_id(&self.dir, id)?;
        *held = Some(id);
        Ok(id)
    }

    /// Whether a peer of identity `theirs` may talk to this node; adopts `theirs` when this
    /// node has none (see the module doc for why only a node without state is in that case).
    pub fn admit(&self, theirs: ClusterId, peer: u64) -> Result<ClusterId, String> {
        let own = self.record(theirs)?;
        if own != theirs {
            return Err(format!(
                "node {peer} belongs to cluster {theirs}, this node to cluster {own}: \
                 refused (a node of another cluster, such as the one a backup was taken \
                 from, cannot join this one)"
            ));
        }
        Ok(own)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_file_reads_back_and_a_damaged_one_names_what_is_wrong() {
        let id = ClusterId([7; 16]);
        let bytes = encode_cluster_id(id);
        assert_eq!(bytes.len(), 18 + 16);
        assert_eq!(decode_cluster_id(&bytes).unwrap(), id);
        let mut damaged = bytes.clone();
        damaged[20] ^= 1;
        assert!(
            decode_cluster_id(&damaged)
                .unwrap_err()
                .to_string()
                .contains("checksum")
        );
        let mut newer = bytes;
        newer[4..6].copy_from_slice(&2u16.to_le_bytes());
        let err = decode_cluster_id(&newer).unwrap_err().to_string();
        assert!(
            err.contains("unknown format version 2 (this build reads 1)"),
            "{err}"
        );
        assert_eq!(ClusterId::parse(&id.to_string()), Some(id));
    }

    #[test]
    fn a_node_admits_its_own_cluster_adopts_when_it_has_none_and_refuses_another() {
        let dir = std::env::temp_dir().join(format!("weir-cluster-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ours = ClusterId([1; 16]);
        let theirs = ClusterId([2; 16]);
        let fresh = ClusterIdentity::open(&dir).unwrap();
        assert_eq!(fresh.get(), None);
        assert_eq!(fresh.admit(ours, 1).unwrap(), ours);
        assert_eq!(
            read_cluster_id(&dir).unwrap(),
            Some(ours),
            "adopted durably"
        );
        let err = ClusterIdentity::open(&dir)
            .unwrap()
            .admit(theirs, 4)
            .unwrap_err();
        assert!(
            err.contains(&theirs.to_string()) && err.contains(&ours.to_string()),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
