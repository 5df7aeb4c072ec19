//! The data directory and the identity file that says which node it belongs to.
//!
//! A data directory holds `node.id` (this file's concern), `cluster.id` (the cluster its
//! Raft state belongs to, [`crate::raft::cluster_identity`]), `log/` (the Raft log,
//! [`crate::raft::log_store`]) and
//! `snapshot.bin` (the latest snapshot, [`crate::raft::snapshot_file`]).
//!
//! Invariants:
//! - The directory is `0700` and its files `0600` ([`crate::private_files`]): created so,
//!   and tightened at every start (logged) when found looser.
//! - A directory with files but no `node.id`, or with another node's `node.id`, is refused:
//!   a node never starts empty over existing data.
//! - The directory is created (its entry in its parent fsynced), with its `node.id`
//!   (written, fsynced, renamed into place, the directory fsynced), only on a first start,
//!   and that first start is reported to the caller. It does not decide who initializes the
//!   cluster: Raft's own state does ([`super::node`]), so a first start that failed after
//!   labelling the directory still founds the cluster on the next start, and a restarted
//!   node whose Raft holds a vote, a log or a membership simply rejoins.

use std::path::Path;

use crate::private_files::write_atomically;
use weir_core::codec;

/// The identity file's name in the data directory.
pub const IDENTITY_FILE: &str = "node.id";
/// Frame kind of the identity file.
const IDENTITY_MAGIC: [u8; 4] = *b"WNID";
/// Version of the identity file's payload layout (one `u64`, the node id).
const IDENTITY_VERSION: u16 = 1;
/// Largest identity payload accepted: a varint `u64` is at most 9 bytes; 64 leaves room and
/// still refuses a damaged length at once.
const IDENTITY_BYTES_MAX: u64 = 64;

/// Prepares `dir` for node `id`: returns whether this is the node's first start. Refuses a
/// foreign, damaged or unlabelled non-empty directory with a message naming the file.
pub fn prepare_data_dir(dir: &Path, id: u64) -> Result<bool, String> {
    let label = dir.join(IDENTITY_FILE);
    match std::fs::read(&label) {
        Ok(bytes) => {
            let owner = read_identity(&bytes).map_err(|e| format!("{}: {e}", label.display()))?;
            if owner != id {
                return Err(format!(
                    "{}: this data directory belongs to node {owner}, not node {id}",
                    label.display()
                ));
            }
            // Only a directory labelled as this node's is walked: never one it refuses.
            crate::private_files::tighten(dir)?;
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            refuse_unlabelled_data(dir, &label)?;
            create_durably(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let bytes = codec::seal_frame(IDENTITY_MAGIC, IDENTITY_VERSION, &codec::encode(&id));
            write_atomically(dir, IDENTITY_FILE, &bytes)
                .map_err(|e| format!("{}: {e}", label.display()))?;
            crate::private_files::tighten(dir)?;
            Ok(true)
        }
        Err(e) => Err(format!("{}: {e}", label.display())),
    }
}

/// Creates `dir` if missing, with its entry in its parent fsynced: else a power loss soon
/// after the first start could take the directory, and the identity, vote and log in it,
/// with it.
fn create_durably(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    crate::private_files::create_dir_all(dir)?;
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::File::open(parent)?.sync_all(),
        _ => std::fs::File::open(".")?.sync_all(),
    }
}

/// The node id an identity file names, once its frame checks out.
fn read_identity(bytes: &[u8]) -> Result<u64, codec::FrameError> {
    let payload = codec::open_frame(bytes, IDENTITY_MAGIC, IDENTITY_VERSION, IDENTITY_BYTES_MAX)?;
    codec::decode(payload)
}

/// Refuses `dir` if it exists and holds anything while its identity file `label` is missing.
fn refuse_unlabelled_data(dir: &Path, label: &Path) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    let occupied = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .next()
        .is_some();
    if occupied {
        return Err(format!(
            "{}: missing, but {} holds other files: refusing to start over data that is not \
             this node's",
            label.display(),
            dir.display()
        ));
    }
    Ok(())
}
