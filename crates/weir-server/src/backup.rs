//! The backup file (`weir snapshot save | inspect | restore`): one cluster's state at one
//! committed index, self-describing, and how a data directory of a new cluster is seeded
//! from it.
//!
//! A backup file is
//!
//! ```text
//! a sealed frame (weir_core::codec) of kind WBAK, version 1, whose payload is a
//!   BackupHeader (weir_proto::protocol): the source cluster's identity, the index, term
//!   and proposer of the last entry included, the members at that index, the length and
//!   CRC-32C of the snapshot that follows, and when it was taken;
//! then exactly snapshot_bytes bytes: the machine snapshot, a WSNP frame
//!   (weir_core::machine::snapshot), as every follower installs it.
//! ```
//!
//! Invariants:
//! - A file is written as `NAME.tmp` beside its destination, streamed chunk by chunk (one
//!   chunk in memory at a time), its length and CRC-32C checked against the header, then
//!   `fsync`ed, renamed over `NAME` and its directory `fsync`ed: a file under its final name
//!   is whole and verified.
//! - Reading checks the header frame (magic, version, length, checksum, decode), then that
//!   exactly `snapshot_bytes` follow with the header's CRC-32C, then (inspect, restore) that
//!   the snapshot restores and passes every invariant of the machine. Any failure names the
//!   file and what is wrong; nothing is seeded from a file that fails.
//! - Restore writes only into a directory that does not exist or is empty, and gives the new
//!   cluster an identity derived from the file (SHA-256 of the header frame and the
//!   snapshot's checksum): every node restored from one file agrees on it, and it is never
//!   the source cluster's, so a node of that cluster is refused by the restored ones
//!   ([`crate::raft::cluster_identity`]).
//! - Memory: the leader holds one encoded copy of its state while a backup is read
//!   (`server::backup_export`), and `save` one chunk (1 MiB) at a time. `inspect` and
//!   `restore` read the snapshot whole and restore it (one copy of the bytes and the
//!   machine), and `restore` encodes `snapshot.bin` from it (one more copy): a backup of
//!   the largest state the bounds allow needs about three times its size in memory there.
//! - A restored node's Raft state is a snapshot at the backup's log id with the membership
//!   of its own config's voters, an empty log, and a vote at the backup's term (for itself,
//!   not committed), so the first election of the new cluster runs in a later term than any
//!   entry the snapshot includes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use openraft::storage::RaftLogStorage;
use openraft::{CommittedLeaderId, Membership};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::private_files::write_atomically;
use crate::raft::cluster_identity::{ClusterId, write_cluster_id};
use crate::raft::log_store::LogStore;
use crate::raft::snapshot_file::{SNAPSHOT_FILE, encode_file};
use crate::raft::{LogId, NodeAddr, SnapshotMeta, StoredMembership, Vote};
use crate::server::data_dir::prepare_data_dir;
use weir_core::codec::{self, HEADER_BYTES};
use weir_core::machine::{Machine, SnapshotContents};
use weir_proto::protocol::BackupHeader;

/// Frame kind of a backup file's header.
pub const BACKUP_MAGIC: [u8; 4] = *b"WBAK";
/// Version of the header's payload and of the file's layout.
pub const BACKUP_VERSION: u16 = 1;
/// Largest header payload accepted: members are bounded by the cluster's size, so a few
/// KiB in practice; 1 MiB refuses a damaged length at once.
const HEADER_BYTES_MAX: u64 = 1 << 20;
/// Bytes read at a time while verifying.
const READ_CHUNK: usize = 8 << 20;

/// A backup file being written: see the module doc.
pub struct BackupWriter {
    path: PathBuf,
    tmp: PathBuf,
    file: std::fs::File,
    header: BackupHeader,
    written: u64,
    crc: u32,
}

impl BackupWriter {
    /// Creates `path`'s temporary file and writes the header.
    pub fn create(path: &Path, header: BackupHeader) -> Result<BackupWriter, String> {
        let name = path
            .file_name()
            .ok_or_else(|| format!("{}: not a file name", path.display()))?;
        let tmp = path.with_file_name(format!("{}.tmp", name.to_string_lossy()));
        let mut file =
            crate::private_files::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let frame = codec::seal_frame(BACKUP_MAGIC, BACKUP_VERSION, &codec::encode(&header));
        file.write_all(&frame)
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        Ok(BackupWriter {
            path: path.to_owned(),
            tmp,
            file,
            header,
            written: 0,
            crc: 0,
        })
    }

    /// Bytes of the snapshot written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends the next bytes of the snapshot.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), String> {
        if self.written + chunk.len() as u64 > self.header.snapshot_bytes {
            return Err(format!(
                "the leader sent more than the {} bytes its header announced",
                self.header.snapshot_bytes
            ));
        }
        self.file
            .write_all(chunk)
            .map_err(|e| format!("{}: {e}", self.tmp.display()))?;
        self.crc = crc32c::crc32c_append(self.crc, chunk);
        self.written += chunk.len() as u64;
        Ok(())
    }

    /// Checks length and checksum, syncs, and renames the file into place.
    pub fn finish(self) -> Result<(), String> {
        let h = &self.header;
        if self.written != h.snapshot_bytes || self.crc != h.snapshot_crc32c {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(format!(
                "the snapshot received ({} bytes, crc32c {:08x}) is not the one announced \
                 ({} bytes, crc32c {:08x})",
                self.written, self.crc, h.snapshot_bytes, h.snapshot_crc32c
            ));
        }
        let io = |e: std::io::Error| format!("{}: {e}", self.tmp.display());
        self.file.sync_all().map_err(io)?;
        drop(self.file);
        std::fs::rename(&self.tmp, &self.path).map_err(io)?;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("{}: {e}", dir.display()))
    }
}

/// A verified backup, read whole: its header, the header frame's bytes, and the snapshot.
pub struct Backup {
    pub header: BackupHeader,
    header_frame: Vec<u8>,
    pub snapshot: Vec<u8>,
    /// The snapshot restored and checked.
    pub machine: Machine,
}

/// What a backup holds, for `weir snapshot inspect`.
#[derive(serde::Serialize)]
pub struct Inspection {
    pub cluster: String,
    pub restored_cluster: String,
    pub index: u64,
    pub term: u64,
    pub leader: u64,
    pub members: Vec<weir_proto::protocol::BackupMember>,
    pub wall_ms: u64,
    pub file_bytes: u64,
    pub snapshot_bytes: u64,
    pub snapshot_crc32c: String,
    pub digest: String,
    pub contents: SnapshotContents,
}

/// Reads and verifies the backup file at `path`: every error names the file.
pub fn read_backup(path: &Path) -> Result<Backup, String> {
    let named = |what: String| format!("{}: {what}", path.display());
    let mut file = std::fs::File::open(path).map_err(|e| named(e.to_string()))?;
    let (header, header_frame) = read_header(&mut file).map_err(named)?;
    let mut snapshot = Vec::new();
    (&mut file)
        .take(header.snapshot_bytes.saturating_add(1))
        .read_to_end(&mut snapshot)
        .map_err(|e| named(e.to_string()))?;
    let more = file.read(&mut [0u8; 1]).map_err(|e| named(e.to_string()))?;
    if snapshot.len() as u64 != header.snapshot_bytes || more != 0 {
        return Err(named(format!(
            "the header announces a snapshot of {} bytes, the file holds {}{}",
            header.snapshot_bytes,
            snapshot.len(),
            if more != 0 { " and more" } else { "" }
        )));
    }
    let crc = crc32c::crc32c(&snapshot);
    if crc != header.snapshot_crc32c {
        return Err(named(format!(
            "snapshot checksum mismatch: the header says crc32c {:08x}, the bytes have {crc:08x}",
            header.snapshot_crc32c
        )));
    }
    let machine = Machine::restore(&snapshot).map_err(|e| named(format!("snapshot: {e}")))?;
    if machine.contents().applied != Some(header.index) {
        return Err(named(format!(
            "inconsistent: the header says index {}, the snapshot applied {:?}",
            header.index,
            machine.contents().applied
        )));
    }
    Ok(Backup {
        header,
        header_frame,
        snapshot,
        machine,
    })
}

/// Reads the header frame at the start of `file`.
fn read_header(file: &mut std::fs::File) -> Result<(BackupHeader, Vec<u8>), String> {
    let mut frame = vec![0u8; HEADER_BYTES];
    let got = read_up_to(file, &mut frame)?;
    frame.truncate(got);
    if got == HEADER_BYTES {
        let declared = u64::from_le_bytes(frame[6..14].try_into().expect("8 bytes"));
        let want = declared.min(HEADER_BYTES_MAX + 1) as usize;
        let mut payload = vec![0u8; want];
        let got = read_up_to(file, &mut payload)?;
        frame.extend_from_slice(&payload[..got]);
    }
    let payload = codec::open_frame(&frame, BACKUP_MAGIC, BACKUP_VERSION, HEADER_BYTES_MAX)
        .map_err(|e| format!("header: {e}"))?;
    let header: BackupHeader = codec::decode(payload).map_err(|e| format!("header: {e}"))?;
    Ok((header, frame))
}

/// Reads until `buf` is full or the file ends; the count read.
fn read_up_to(file: &mut std::fs::File, buf: &mut [u8]) -> Result<usize, String> {
    let mut got = 0;
    while got < buf.len() {
        let end = (got + READ_CHUNK).min(buf.len());
        match file.read(&mut buf[got..end]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(got)
}

impl Backup {
    /// The identity of every cluster restored from this file.
    pub fn restored_cluster(&self) -> ClusterId {
        let mut hash = Sha256::new();
        hash.update(b"weir restored cluster");
        hash.update(&self.header_frame);
        hash.update(self.header.snapshot_crc32c.to_le_bytes());
        let digest = hash.finalize();
        ClusterId(digest[..16].try_into().expect("16 of 32 bytes"))
    }

    /// What the file holds, for people and scripts.
    pub fn inspect(&self, file_bytes: u64) -> Inspection {
        let h = &self.header;
        Inspection {
            cluster: ClusterId(h.cluster).to_string(),
            restored_cluster: self.restored_cluster().to_string(),
            index: h.index,
            term: h.term,
            leader: h.leader,
            members: h.members.clone(),
            wall_ms: h.wall_ms,
            file_bytes,
            snapshot_bytes: h.snapshot_bytes,
            snapshot_crc32c: format!("{:08x}", h.snapshot_crc32c),
            digest: self.machine.digest(),
            contents: self.machine.contents(),
        }
    }

    /// The log id of the last entry the backup includes.
    fn log_id(&self) -> LogId {
        LogId::new(
            CommittedLeaderId::new(self.header.term, self.header.leader),
            self.header.index,
        )
    }

    /// Seeds `config`'s data directory (which must not exist or be empty) as node
    /// `config.id` of a new cluster whose voters are `config`'s: see the module doc.
    /// Returns the new cluster's identity.
    pub async fn restore(&self, config: &Config) -> Result<ClusterId, String> {
        let dir = &config.data_dir;
        refuse_occupied(dir)?;
        let voters = config.voters();
        if !voters.iter().any(|v| v.id == config.id) {
            return Err(format!(
                "node {} is not among the voters its config lists",
                config.id
            ));
        }
        prepare_data_dir(dir, config.id)?;
        let cluster = self.restored_cluster();
        write_cluster_id(dir, cluster)?;
        let ids: BTreeSet<u64> = voters.iter().map(|v| v.id).collect();
        let nodes: BTreeMap<u64, NodeAddr> = voters
            .iter()
            .map(|v| {
                let addr = NodeAddr {
                    peer: v.peer.clone(),
                    client: v.client.clone(),
                };
                (v.id, addr)
            })
            .collect();
        let last = self.log_id();
        let meta = SnapshotMeta {
            last_log_id: Some(last),
            last_membership: StoredMembership::new(Some(last), Membership::new(vec![ids], nodes)),
            snapshot_id: format!(
                "{}-{}-{}",
                last.leader_id.term, last.leader_id.node_id, last.index
            ),
        };
        write_atomically(dir, SNAPSHOT_FILE, &encode_file(&meta, &self.snapshot))
            .map_err(|e| format!("{}: {e}", dir.join(SNAPSHOT_FILE).display()))?;
        let mut log = LogStore::open(&dir.join("log"))?;
        log.save_vote(&Vote::new(self.header.term, config.id))
            .await
            .map_err(|e| format!("{}: {e}", dir.join("log").display()))?;
        Ok(cluster)
    }
}

/// Refuses a data directory that holds anything: a restore never mixes with other state.
fn refuse_occupied(dir: &Path) -> Result<(), String> {
    match std::fs::read_dir(dir).map(|mut entries| entries.next().is_some()) {
        Ok(true) => Err(format!(
            "{}: not empty: a restore seeds a new data directory, and this one holds files",
            dir.display()
        )),
        Ok(false) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}
