//! The Raft log on redb: entries, the vote, the committed id and the purge point, in
//! `log.redb`.
//!
//! Tables: `entries: u64 -> bytes` (an openraft entry encoded with the pinned codec and
//! sealed in a [`crate::codec`] frame of kind `b"WENT"`, so with its length and crc32c, keyed
//! by index) and `meta: str -> bytes` (`vote`, `committed`, `last_purged`).
//!
//! redb checksums its own pages, but a value can still be damaged inside a valid database
//! (a bug, a bad copy tool, a bit flipped in memory before the write): the frame makes every
//! entry prove itself. [`LogStore::open`] verifies every stored entry — frame, decode, key
//! equal to its index, at most [`ENTRY_COMMANDS_MAX`] commands, at most [`ENTRY_BYTES_MAX`]
//! bytes — and refuses to start on the first that fails, naming the file and the index
//! (G8), rather than let it be applied or found only when read.
//!
//! Invariants and the promises openraft relies on:
//! - Every write goes through the ordered writer ([`super::log_writer`]): one thread, jobs
//!   in the order asked, each group of queued jobs one redb transaction committed with
//!   `Durability::Immediate` (one fsync).
//! - `append` returns once its entries are in the in-memory tail, where readers find them,
//!   and calls its callback only after their transaction is durable. `save_vote`,
//!   `truncate` and `purge` return only once durable; each is atomic (`purge` writes
//!   `last_purged` and deletes in the same transaction). `save_committed` returns at once:
//!   the committed id is made durable with the next write or a few milliseconds later, so a
//!   crash may lose the newest one (openraft allows it), never leave it ahead of its entries.
//! - The log has no holes: entries are appended at the next index, truncated from an index
//!   to the end, purged from the start.
//! - Commits block on fsync, so they run on the writer thread, never on the Raft core; redb
//!   reads that miss the tail run on tokio's blocking pool.
//! - A decode failure of a stored entry is a `StorageError` naming the index: the node
//!   stops rather than serve from a damaged log (at open, the start is refused).
//! - `append` refuses an entry above [`ENTRY_BYTES_MAX`] encoded rather than store what it
//!   would refuse to read (the proposer never makes one; see `bounds`).

// openraft's traits fix the error type to its `StorageError`, which is large; boxing it
// is not ours to choose.
#![allow(clippy::result_large_err)]
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::EntryPayload;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, RaftLogReader, StorageIOError};
use redb::{Database, ReadableDatabase, ReadableTable, StorageBackend, TableDefinition};

use super::log_writer::{self, Flushed, Tail, Writer};
use super::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::bounds::{ENTRY_BYTES_MAX, ENTRY_COMMANDS_MAX};
use crate::codec::{self, FrameError};

pub(super) const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
pub(super) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// Frame kind of a stored entry.
const ENTRY_MAGIC: [u8; 4] = *b"WENT";
/// Version of a stored entry's payload layout (an openraft entry of [`TypeConfig`]).
const ENTRY_VERSION: u16 = 1;

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
pub(super) const LAST_PURGED: &str = "last_purged";

/// The log store. Cloning shares the database, the tail and the writer (the log reader is
/// a clone); the writer thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    /// Entries not yet durable, and the newest durable ones: read before redb.
    tail: Arc<Mutex<Tail>>,
    /// The one thread that writes `log.redb`.
    writer: Arc<Writer>,
}

/// The acknowledgment of an [`LogStore::append_queued`]: answers once its entries are durable.
pub struct Durable(tokio::sync::oneshot::Receiver<Result<(), StorageError>>);

impl Durable {
    /// Waits until the append is durable (`Ok`: acknowledged) or its commit failed.
    pub async fn wait(self) -> Result<(), StorageError> {
        self.0
            .await
            .map_err(|_| write_err(Damaged("log writer stopped".into())))?
    }
}

/// An entry as stored: its encoding sealed in a `WENT` frame.
fn seal_entry(entry: &Entry) -> Vec<u8> {
    seal_entry_payload(&codec::encode(entry))
}

/// An entry's encoding sealed in its `WENT` frame, as stored (public for the fuzz target,
/// which seals mutated payloads so they reach the decoder behind the checksum).
pub fn seal_entry_payload(payload: &[u8]) -> Vec<u8> {
    codec::seal_frame(ENTRY_MAGIC, ENTRY_VERSION, payload)
}

/// A stored entry's bytes, verified and decoded: the frame, the decode, the key it is stored
/// under (`index`), and the entry bounds. Every read of the log goes through it; public so
/// the fuzz target `log_entry` exercises exactly this path.
pub fn decode_entry(index: u64, bytes: &[u8]) -> Result<Entry, FrameError> {
    let payload = codec::open_frame(bytes, ENTRY_MAGIC, ENTRY_VERSION, ENTRY_BYTES_MAX as u64)?;
    let entry: Entry = codec::decode(payload)?;
    if entry.log_id.index != index {
        return Err(FrameError::Invalid(format!(
            "stored under index {index} but is entry {}",
            entry.log_id.index
        )));
    }
    if let EntryPayload::Normal(batch) = &entry.payload
        && batch.commands.len() > ENTRY_COMMANDS_MAX
    {
        return Err(FrameError::Invalid(format!(
            "{} commands, the bound is {ENTRY_COMMANDS_MAX}",
            batch.commands.len()
        )));
    }
    Ok(entry)
}

/// [`decode_entry`] as a storage error naming the index.
fn read_entry(index: u64, bytes: &[u8]) -> Result<Entry, StorageError> {
    decode_entry(index, bytes)
        .map_err(|e| read_err(Damaged(format!("log entry {index} in log.redb: {e}"))))
}

fn io_err(
    subject: ErrorSubject<u64>,
    verb: ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError {
    io_err(ErrorSubject::Logs, ErrorVerb::Read, e)
}

pub(super) fn write_err(e: impl std::error::Error + 'static) -> StorageError {
    io_err(ErrorSubject::Logs, ErrorVerb::Write, e)
}

/// A reason as an error value, for `AnyError`.
#[derive(Debug)]
struct Damaged(String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damaged {}

impl LogStore {
    /// Opens (or creates) `path` and verifies every stored entry. A file that is not a redb
    /// database, or is damaged, is refused with redb's reason; a damaged entry with its index.
    pub fn open(path: &Path) -> Result<LogStore, String> {
        let name = path.display().to_string();
        if crate::planted::is(crate::planted::Plant::UnsyncedLog) {
            // PLANTED(unsynced-log): the log's commits are never fsynced.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| format!("{name}: {e}"))?;
            let backend = super::unsynced_backend::UnsyncedFile::new(file)
                .map_err(|e| format!("{name}: {e}"))?;
            return LogStore::open_backend(backend, &name);
        }
        let db = Database::create(path).map_err(|e| format!("{name}: {e}"))?;
        LogStore::init(db, &name)
    }

    /// Opens (or creates) a log on `backend` (tests: a backend that simulates power loss),
    /// verifying it as [`LogStore::open`] does; `name` stands for the file in messages.
    pub fn open_backend(backend: impl StorageBackend, name: &str) -> Result<LogStore, String> {
        let db = Database::builder()
            .create_with_backend(backend)
            .map_err(|e| format!("{name}: {e}"))?;
        LogStore::init(db, name)
    }

    /// Creates the tables if missing, verifies every stored entry, then starts the writer
    /// thread (nothing is written before the log is known sound).
    fn init(db: Database, name: &str) -> Result<LogStore, String> {
        let w = db.begin_write().map_err(|e| format!("{name}: {e}"))?;
        w.open_table(ENTRIES).map_err(|e| format!("{name}: {e}"))?;
        w.open_table(META).map_err(|e| format!("{name}: {e}"))?;
        w.commit().map_err(|e| format!("{name}: {e}"))?;
        let r = db.begin_read().map_err(|e| format!("{name}: {e}"))?;
        let t = r.open_table(ENTRIES).map_err(|e| format!("{name}: {e}"))?;
        for item in t.iter().map_err(|e| format!("{name}: {e}"))? {
            let (k, v) = item.map_err(|e| format!("{name}: {e}"))?;
            decode_entry(k.value(), v.value())
                .map_err(|e| format!("{name}: log entry {}: {e}", k.value()))?;
        }
        drop(t);
        drop(r);
        let db = Arc::new(db);
        let tail = Arc::new(Mutex::new(Tail::default()));
        let writer = Writer::start(db.clone(), tail.clone())?;
        Ok(LogStore {
            db,
            tail,
            writer: Arc::new(writer),
        })
    }

    /// Each entry's stored bytes (sealed), keyed by index. An entry above
    /// [`ENTRY_BYTES_MAX`] encoded is refused, so nothing of the call is written.
    fn seal_all(entries: &[Entry]) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
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
            encoded.push((e.log_id.index, bytes));
        }
        Ok(encoded)
    }

    /// Appends `entries` and returns once they are durable: `Ok` here is the acknowledgment,
    /// the moment [`RaftLogStorage::append`] calls openraft's flush callback (both go
    /// through the same writer job and are answered after the same commit). An entry above
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
            .append(&self.tail, &entries, encoded, Flushed::Waiter(done))
            .await?;
        Ok(Durable(wait))
    }

    /// Runs `f` on the blocking pool (redb reads block; writes go to the writer thread).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(write_err)?
    }

    fn read_meta<T: serde::de::DeserializeOwned>(
        db: &Database,
        key: &str,
    ) -> Result<Option<T>, StorageError> {
        let r = db.begin_read().map_err(read_err)?;
        let t = r.open_table(META).map_err(read_err)?;
        let Some(v) = t.get(key).map_err(read_err)? else {
            return Ok(None);
        };
        codec::decode(v.value())
            .map(Some)
            .map_err(|e| read_err(Damaged(format!("log meta {key:?}: {e}"))))
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
        // The redb snapshot is begun under the tail's lock, so an entry the writer moves
        // out of the tail after its commit is in one or the other (log_writer's invariant).
        let (r, newer) = {
            let tail = log_writer::lock(&self.tail);
            if tail.covers(start) {
                return Ok(tail.range(start, end));
            }
            let r = self.db.begin_read().map_err(read_err)?;
            (r, tail.range(start, end))
        };
        // The tail holds the newest entries: redb is read only below its first.
        let end = newer.first().map(|e| e.log_id.index).or(end);
        self.blocking(move |_| {
            let t = r.open_table(ENTRIES).map_err(read_err)?;
            let iter = match end {
                Some(end) if end <= start => return Ok(newer),
                Some(end) => t.range(start..end),
                None => t.range(start..),
            }
            .map_err(read_err)?;
            let mut out = vec![];
            for item in iter {
                let (k, v) = item.map_err(read_err)?;
                out.push(read_entry(k.value(), v.value())?);
            }
            out.extend(newer);
            Ok(out)
        })
        .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        // When the tail holds entries its last is the log's last (log_writer's invariant).
        let tail_last = log_writer::lock(&self.tail).last_log_id();
        self.blocking(move |db| {
            let last_purged: Option<LogId> = LogStore::read_meta(db, LAST_PURGED)?;
            let r = db.begin_read().map_err(read_err)?;
            let t = r.open_table(ENTRIES).map_err(read_err)?;
            let last = match t.last().map_err(read_err)? {
                _ if tail_last.is_some() => tail_last,
                Some((k, v)) => Some(read_entry(k.value(), v.value())?.log_id),
                None => last_purged,
            };
            Ok(LogState {
                last_purged_log_id: last_purged,
                last_log_id: last,
            })
        })
        .await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.writer
            .meta(VOTE, codec::encode(vote))
            .await
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, Damaged(e.to_string())))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.blocking(|db| LogStore::read_meta(db, VOTE)).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not awaited to disk: the core calls this before every apply, and a third fsync in
        // series per operation buys nothing (a lagging committed id only re-applies less at
        // start; the leader's next commit brings the rest).
        self.writer.hint(COMMITTED, codec::encode(&committed)).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        self.blocking(|db| Ok(LogStore::read_meta::<Option<LogId>>(db, COMMITTED)?.flatten()))
            .await
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
            .append(&self.tail, &entries, encoded, Flushed::Raft(callback))
            .await
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.writer.truncate(&self.tail, log_id.index).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.writer
            .purge(&self.tail, log_id, codec::encode(&log_id))
            .await
    }
}
