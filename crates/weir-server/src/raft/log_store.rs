//! The Raft log: entries, the vote, the committed id and the purge point, in the data
//! directory's `log/`, an append-only write-ahead log ([`super::wal`]). A node of several
//! Raft groups keeps one log for all of them ([`LogStore::open_shared`]): a store per group,
//! one WAL and one writer under them, so the groups share every fsync.
//!
//! Every entry is stored sealed in its own frame ([`super::log_entry`]: the pinned codec's
//! encoding, kind `b"WENT"`, length and crc32c), inside the WAL's checksummed groups: the
//! frame makes every entry prove itself wherever it is read. [`LogStore::open`] replays and
//! verifies every stored entry — frame, decode, at most `ENTRY_COMMANDS_MAX` commands, at
//! most [`ENTRY_BYTES_MAX`] bytes, indexes contiguous — and refuses to start on the first
//! that fails, naming the segment, the byte offset and the index (G8), rather than let it
//! be applied or found only when read.
//!
//! Invariants and the promises openraft relies on:
//! - Every write goes through the ordered writer ([`super::log_writer`]): one thread, jobs
//!   in the order asked, each group of queued jobs (of every Raft group the WAL hosts) one
//!   WAL write made durable with one `fdatasync`.
//! - A store reads and writes only its own Raft group's part of the WAL, and has the only
//!   tail of that group (the stores of a shared log are made together, one per group).
//! - A log kept apart (a group's own `log/`, as a node of several groups kept them before
//!   they shared one) is adopted whole into the shared log, durably; once every group's
//!   is, each is renamed `log.adopted` and the rename made durable, all before the writer
//!   starts; then they are removed. A start cut short before a rename is durable adopts
//!   that log again, which gives the same state (nothing was written since); a log marked
//!   adopted is never read again, however little of it a cut-short removal left.
//! - `append` returns once its entries are in the in-memory tail, where readers find them,
//!   and calls its callback only after their write is durable. `save_vote`, `truncate` and
//!   `purge` return only once durable; each is one record, so atomic. `save_committed`
//!   returns at once: the committed id is made durable with the next write or a few
//!   milliseconds later, so a crash may lose the newest one (openraft allows it), never
//!   leave it ahead of its entries (it is written after them).
//! - The log has no holes: entries are appended at the next index, truncated from an index
//!   to the end, purged from the start.
//! - Writes block on fsync, so they run on the writer thread, never on the Raft core; file
//!   reads that miss the tail run on tokio's blocking pool (inline in a simulation:
//!   [`crate::simulated::blocking`]).
//! - A verification failure of a stored entry is a `StorageError` naming the index: the
//!   node stops rather than serve from a damaged log (at open, the start is refused).
//! - `append` refuses an entry above [`ENTRY_BYTES_MAX`] encoded rather than store what it
//!   would refuse to read (the proposer never makes one; see `bounds`).

// openraft's traits fix the error type to its `StorageError`, which is large; boxing it
// is not ours to choose.
#![allow(clippy::result_large_err)]
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, RaftLogReader};

use super::log_entry::seal_entry;
use super::log_error::{Damaged, io_err, read_err, write_err};
use super::log_writer::{self, Flushed, Tail, Writer};
use super::wal::{DirDisk, LogDisk, Wal};
use super::{Entry, GroupId, LogId, SOLE_GROUP, StorageError, TypeConfig, Vote};
use weir_core::bounds::ENTRY_BYTES_MAX;
use weir_core::codec;

/// The log store of one Raft group. Cloning shares the WAL, the tail and the writer (the
/// log reader is a clone); the writer thread stops when the last store of its WAL is dropped.
#[derive(Clone)]
pub struct LogStore {
    wal: Arc<Wal>,
    /// The Raft group whose part of the WAL this is.
    group: GroupId,
    /// Entries not yet durable, and the newest durable ones: read before the WAL.
    tail: Arc<Mutex<Tail>>,
    /// The one thread that writes the WAL.
    writer: Arc<Writer>,
}

/// The acknowledgment of an [`LogStore::append_queued`]: answers once its entries are durable.
pub struct Durable(tokio::sync::oneshot::Receiver<Result<(), StorageError>>);

impl Durable {
    /// Waits until the append is durable (`Ok`: acknowledged) or its write failed.
    pub async fn wait(self) -> Result<(), StorageError> {
        self.0
            .await
            .map_err(|_| write_err(Damaged("log writer stopped".into())))?
    }
}

impl LogStore {
    /// Opens (or creates) the log in the directory `dir` (a data directory's `log/`),
    /// verifying every stored entry. A damaged log is refused naming the segment, the byte
    /// offset and, for an entry, its index.
    pub fn open(dir: &Path) -> Result<LogStore, String> {
        LogStore::open_sized(dir, super::wal::SEGMENT_BYTES)
    }

    /// [`LogStore::open`] with segments of `segment_bytes` (`raft.log_segment_bytes`, at
    /// most [`super::wal::SEGMENT_BYTES`]: a segment of any size up to that is read back).
    pub fn open_sized(dir: &Path, segment_bytes: u64) -> Result<LogStore, String> {
        // PLANTED(unsynced-log): the log's writes are never fsynced.
        let sync = !weir_core::planted::is(weir_core::planted::Plant::UnsyncedLog);
        let disk = DirDisk::new(dir, sync).map_err(|e| format!("{}: {e}", dir.display()))?;
        LogStore::open_disk(Box::new(disk), segment_bytes.min(super::wal::SEGMENT_BYTES))
    }

    /// Opens (or creates) a log on `disk` (tests: a disk that loses power, and segments of
    /// `segment_bytes` to rotate often; else [`super::wal::SEGMENT_BYTES`]), verifying it as
    /// [`LogStore::open`] does, then starts the writer thread (nothing is written before the
    /// log is known sound).
    pub fn open_disk(disk: Box<dyn LogDisk>, segment_bytes: u64) -> Result<LogStore, String> {
        let mut stores = LogStore::stores(Wal::open(disk, segment_bytes)?)?;
        Ok(stores
            .remove(&SOLE_GROUP)
            .expect("a log of one group hosts the sole group"))
    }

    /// Opens (or creates) the log that the Raft groups `groups` share in the directory `dir`
    /// (a data directory's `groups/log/`; segments of `segment_bytes`, at most
    /// [`super::wal::SEGMENT_BYTES`]), verifying it as [`LogStore::open`] does, and
    /// returns a store for each group. First, the log a group kept apart in its directory
    /// (`groups_dirs`: each group's `groups/<id>/`, whose `log/` an older layout wrote) is
    /// adopted into it, and marked adopted, then removed (module doc).
    pub fn open_shared(
        dir: &Path,
        segment_bytes: u64,
        groups: &[GroupId],
        group_dirs: &[(GroupId, PathBuf)],
    ) -> Result<BTreeMap<GroupId, LogStore>, String> {
        // PLANTED(unsynced-log): the log's writes are never fsynced.
        let sync = !weir_core::planted::is(weir_core::planted::Plant::UnsyncedLog);
        let disk = DirDisk::new(dir, sync).map_err(|e| format!("{}: {e}", dir.display()))?;
        let wal = Wal::open_groups(Box::new(disk), segment_bytes, groups)?;
        let mut apart: Vec<(GroupId, &PathBuf)> = vec![];
        for (group, gdir) in group_dirs {
            // A log that cannot be looked at is refused, not taken for absent: a later
            // start that saw it would adopt it over what this one wrote.
            let kept = gdir.join(KEPT_APART);
            if kept
                .try_exists()
                .map_err(|e| format!("{}: {e}", kept.display()))?
            {
                apart.push((*group, gdir));
            }
        }
        for (group, gdir) in &apart {
            adopt_apart(&wal, *group, &gdir.join(KEPT_APART), sync)?;
        }
        // Every adoption is durable: now each is marked for good, a rename made durable
        // before the writer starts (so before any write a later adoption would undo).
        for (group, gdir) in &apart {
            std::fs::rename(gdir.join(KEPT_APART), gdir.join(ADOPTED))
                .and_then(|()| match sync {
                    true => std::fs::File::open(gdir)?.sync_all(),
                    false => Ok(()),
                })
                .map_err(|e| {
                    format!(
                        "{}: marking group {group}'s log adopted: {e}",
                        gdir.join(KEPT_APART).display()
                    )
                })?;
        }
        for (group, gdir) in group_dirs {
            let adopted = gdir.join(ADOPTED);
            if adopted.exists()
                && let Err(e) = std::fs::remove_dir_all(&adopted)
            {
                // What is left is never read again: removing it is tried at every start.
                tracing::warn!(
                    "group {group}: cannot remove its adopted log {}: {e}",
                    adopted.display()
                );
            }
        }
        LogStore::stores(wal)
    }

    /// [`LogStore::open_shared`] on `disk`, with nothing kept apart (tests and the simulator).
    pub fn open_shared_disk(
        disk: Box<dyn LogDisk>,
        segment_bytes: u64,
        groups: &[GroupId],
    ) -> Result<BTreeMap<GroupId, LogStore>, String> {
        LogStore::stores(Wal::open_groups(disk, segment_bytes, groups)?)
    }

    /// A store for each group of `wal`, and the writer they share, started now (nothing is
    /// written by it before the log is known sound).
    fn stores(wal: Wal) -> Result<BTreeMap<GroupId, LogStore>, String> {
        let wal = Arc::new(wal);
        let writer = Arc::new(Writer::start(wal.clone())?);
        Ok(wal
            .groups()
            .into_iter()
            .map(|group| {
                let store = LogStore {
                    wal: wal.clone(),
                    group,
                    tail: Arc::new(Mutex::new(Tail::default())),
                    writer: writer.clone(),
                };
                (group, store)
            })
            .collect())
    }

    /// How many segment files the WAL under this store has now (every group's, if shared).
    pub fn segment_count(&self) -> usize {
        self.wal.segment_count()
    }

    /// How many groups the WAL under this store moved out of its oldest segment since it
    /// was opened ([`super::wal`]).
    pub fn moves(&self) -> u64 {
        self.wal.moves()
    }

    /// Each entry's stored bytes (sealed), keyed by id. An entry above [`ENTRY_BYTES_MAX`]
    /// encoded is refused, so nothing of the call is written.
    fn seal_all(entries: &[Entry]) -> Result<Vec<(LogId, Vec<u8>)>, StorageError> {
        let mut encoded = Vec::with_capacity(entries.len());
        for e in entries {
            let bytes = seal_entry(e);
            if bytes.len() - codec::HEADER_BYTES > ENTRY_BYTES_MAX {
                return Err(write_err(Damaged(format!(
                    "log entry {} is {} bytes, the bound is {ENTRY_BYTES_MAX}",
                    e.log_id.index,
                    bytes.len() - codec::HEADER_BYTES
                ))));
            }
            encoded.push((e.log_id, bytes));
        }
        Ok(encoded)
    }

    /// Appends `entries` and returns once they are durable: `Ok` here is the acknowledgment,
    /// the moment [`RaftLogStorage::append`] calls openraft's flush callback (both go
    /// through the same writer job and are answered after the same sync). An entry above
    /// [`ENTRY_BYTES_MAX`] encoded is refused, nothing written.
    pub async fn append_durably(&mut self, entries: Vec<Entry>) -> Result<(), StorageError> {
        self.append_queued(entries).await?.wait().await
    }

    /// Appends `entries` as [`RaftLogStorage::append`] does: readable when this returns,
    /// acknowledged when the returned [`Durable`] answers `Ok` (so several appends can be
    /// queued before the first is durable, as the Raft core queues them).
    pub async fn append_queued(&mut self, entries: Vec<Entry>) -> Result<Durable, StorageError> {
        let encoded = LogStore::seal_all(&entries)?;
        let (done, wait) = tokio::sync::oneshot::channel();
        self.writer
            .append(
                self.group,
                &self.tail,
                &entries,
                encoded,
                Flushed::Waiter(done),
            )
            .await?;
        Ok(Durable(wait))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => Some(i + 1),
            Bound::Excluded(&i) => Some(i),
            Bound::Unbounded => None,
        };
        if end.is_some_and(|end| end <= start) {
            return Ok(vec![]);
        }
        // The WAL is looked up under the tail's lock, so an entry the writer moves out of
        // the tail after its sync is in one or the other (log_writer's invariant).
        let (located, newer) = {
            let tail = log_writer::lock(&self.tail);
            if tail.covers(start) {
                return Ok(tail.range(start, end));
            }
            let newer = tail.range(start, end);
            // The tail holds the newest entries: the WAL is read only below its first.
            let below = newer.first().map(|e| e.log_id.index).or(end);
            (self.wal.locate(self.group, start, below), newer)
        };
        if located.is_empty() {
            return Ok(newer);
        }
        let wal = self.wal.clone();
        let mut out = crate::simulated::blocking(move || wal.read(located))
            .await
            .map_err(read_err)?
            .map_err(|e| read_err(Damaged(e)))?;
        out.extend(newer);
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        // When the tail holds entries its last is the log's last (log_writer's invariant).
        let tail_last = log_writer::lock(&self.tail).last_log_id();
        let purged = self.wal.meta(self.group).purged;
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: tail_last
                .or_else(|| self.wal.last_log_id(self.group))
                .or(purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.writer
            .vote(self.group, *vote)
            .await
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, Damaged(e.to_string())))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.wal.meta(self.group).vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not awaited to disk: the core calls this before every apply, and a third fsync in
        // series per operation buys nothing (a lagging committed id only re-applies less at
        // start; the leader's next commit brings the rest).
        self.writer.hint(self.group, committed).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.wal.meta(self.group).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let encoded = LogStore::seal_all(&entries)?;
        self.writer
            .append(
                self.group,
                &self.tail,
                &entries,
                encoded,
                Flushed::Raft(callback),
            )
            .await
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.writer
            .truncate(self.group, &self.tail, log_id.index)
            .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.writer.purge(self.group, &self.tail, log_id).await
    }
}

/// Where a group kept its log apart in its directory (a layout before the shared log).
pub const KEPT_APART: &str = "log";
/// What a log kept apart is renamed to once adopted: never read again, removed.
pub const ADOPTED: &str = "log.adopted";

/// Adopts into `wal`, as `group`'s, the log of one group kept apart in `dir`: opened and
/// verified as any log is, its vote, committed id, purge point and live entries written
/// into `wal` durably, in writes of at most half a segment ([`Wal::adopt`]).
fn adopt_apart(wal: &Wal, group: GroupId, dir: &Path, sync: bool) -> Result<(), String> {
    let disk = DirDisk::new(dir, sync).map_err(|e| format!("{}: {e}", dir.display()))?;
    let apart = Wal::open(Box::new(disk), super::wal::SEGMENT_BYTES)
        .map_err(|e| format!("group {group}'s log kept apart: {e}"))?;
    let frames = apart
        .live_frames(SOLE_GROUP)
        .map_err(|e| format!("group {group}'s log kept apart: {e}"))?;
    let entries = frames.len();
    wal.adopt(group, apart.meta(SOLE_GROUP), frames)
        .map_err(|e| format!("adopting group {group}'s log from {}: {e}", dir.display()))?;
    tracing::info!(
        "group {group}: its log in {} ({entries} live entries) adopted into the node's shared log",
        dir.display()
    );
    Ok(())
}
