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
//! - Every write is one redb transaction committed with `Durability::Immediate`: one fsync.
//!   `save_vote` returns only once the vote is on disk; `append` calls its callback only
//!   after its transaction is durable; `truncate` and `purge` are each atomic (`purge` writes
//!   `last_purged` and deletes in the same transaction).
//! - The log has no holes: entries are appended at the next index, truncated from an index
//!   to the end, purged from the start.
//! - Commits block on fsync, so they run on tokio's blocking pool, never on the Raft core.
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
use std::sync::Arc;

use openraft::EntryPayload;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, RaftLogReader, StorageIOError};
use redb::{Database, ReadableDatabase, ReadableTable, StorageBackend, TableDefinition};

use super::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::bounds::{ENTRY_BYTES_MAX, ENTRY_COMMANDS_MAX};
use crate::codec::{self, FrameError};

const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// Frame kind of a stored entry.
const ENTRY_MAGIC: [u8; 4] = *b"WENT";
/// Version of a stored entry's payload layout (an openraft entry of [`TypeConfig`]).
const ENTRY_VERSION: u16 = 1;

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const LAST_PURGED: &str = "last_purged";

/// The log store. Cloning shares the database (the log reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
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

fn write_err(e: impl std::error::Error + 'static) -> StorageError {
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

    /// Creates the tables if missing and verifies every stored entry.
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
        Ok(LogStore { db: Arc::new(db) })
    }

    /// Appends `entries` in one durable transaction: what [`RaftLogStorage::append`] does
    /// before it calls openraft's flush callback, so `Ok` here is the acknowledgment. An
    /// entry above [`ENTRY_BYTES_MAX`] encoded is refused, nothing written.
    pub async fn append_durably(&mut self, entries: Vec<Entry>) -> Result<(), StorageError> {
        let mut encoded = Vec::with_capacity(entries.len());
        for e in &entries {
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
        self.blocking(move |db| {
            let w = db.begin_write().map_err(write_err)?;
            {
                let mut t = w.open_table(ENTRIES).map_err(write_err)?;
                for (index, bytes) in &encoded {
                    t.insert(*index, bytes.as_slice()).map_err(write_err)?;
                }
            }
            w.commit().map_err(write_err)
        })
        .await
    }

    /// Runs `f` on the blocking pool (redb reads and fsyncing commits block).
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

    fn write_meta<T: serde::Serialize>(
        db: &Database,
        key: &str,
        value: &T,
    ) -> Result<(), StorageError> {
        let w = db.begin_write().map_err(write_err)?;
        w.open_table(META)
            .map_err(write_err)?
            .insert(key, codec::encode(value).as_slice())
            .map_err(write_err)?;
        w.commit().map_err(write_err)
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
        self.blocking(move |db| {
            let r = db.begin_read().map_err(read_err)?;
            let t = r.open_table(ENTRIES).map_err(read_err)?;
            let iter = match end {
                Some(end) if end <= start => return Ok(vec![]),
                Some(end) => t.range(start..end),
                None => t.range(start..),
            }
            .map_err(read_err)?;
            let mut out = vec![];
            for item in iter {
                let (k, v) = item.map_err(read_err)?;
                out.push(read_entry(k.value(), v.value())?);
            }
            Ok(out)
        })
        .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        self.blocking(|db| {
            let last_purged: Option<LogId> = LogStore::read_meta(db, LAST_PURGED)?;
            let r = db.begin_read().map_err(read_err)?;
            let t = r.open_table(ENTRIES).map_err(read_err)?;
            let last = match t.last().map_err(read_err)? {
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
        let vote = *vote;
        self.blocking(move |db| LogStore::write_meta(db, VOTE, &vote))
            .await
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, Damaged(e.to_string())))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.blocking(|db| LogStore::read_meta(db, VOTE)).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.blocking(move |db| LogStore::write_meta(db, COMMITTED, &committed))
            .await
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
        let started = std::time::Instant::now();
        let result = self.append_durably(entries.into_iter().collect()).await;
        crate::metrics::observe(&crate::metrics::get().fsync_seconds, started.elapsed());
        match &result {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        result
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.blocking(move |db| {
            let w = db.begin_write().map_err(write_err)?;
            w.open_table(ENTRIES)
                .map_err(write_err)?
                .retain_in(log_id.index.., |_, _| false)
                .map_err(write_err)?;
            w.commit().map_err(write_err)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.blocking(move |db| {
            let w = db.begin_write().map_err(write_err)?;
            w.open_table(META)
                .map_err(write_err)?
                .insert(LAST_PURGED, codec::encode(&log_id).as_slice())
                .map_err(write_err)?;
            w.open_table(ENTRIES)
                .map_err(write_err)?
                .retain_in(..=log_id.index, |_, _| false)
                .map_err(write_err)?;
            w.commit().map_err(write_err)
        })
        .await
    }
}
