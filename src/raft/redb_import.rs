//! The import of an earlier Weir's log, `log.redb` (tables `entries: u64 -> bytes` of sealed
//! `WENT` frames, and `meta: str -> bytes` with `vote`, `committed` and `last_purged`), into
//! the WAL in `log/`, once, when [`super::log_store::LogStore::open`] finds it.
//!
//! Steps, each safe to cut by a crash:
//! 1. Read and verify everything: every entry as a WAL entry is verified ([`decode_entry`],
//!    under the key it was stored at), the indexes contiguous and above the purge point.
//!    Anything wrong refuses the start, naming `log.redb`; nothing is written.
//! 2. Write it all into a fresh `log.importing/` (one left by an import cut short is
//!    removed first), in writes of at most half a segment, close it, and rename it to
//!    `log/` (the parent directory synced): so `log/` appears whole or not at all.
//!
//! `log.redb` stays open for all of it, so redb's own file lock refuses a second process
//! starting on the same directory meanwhile.
//! 3. Rename `log.redb` to `log.redb.imported` (synced).
//!
//! A `log/` found beside `log.redb` is either the result of step 2 with step 3 cut short
//! (it holds exactly what `log.redb` holds: step 3 is finished), or blank (created by some
//! earlier start: removed, and the import made), or something else, which is refused: the
//! node does not guess which of two logs is its own.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::log_store::{LogStore, decode_entry};
use super::wal::{DirDisk, Record, SEGMENT_BYTES};
use super::{LogId, Vote};
use crate::codec;

const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// What `log.redb` holds, verified.
struct Old {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    /// Entry ids and their sealed frames, by index.
    entries: Vec<(LogId, Vec<u8>)>,
}

impl Old {
    fn summary(&self) -> (Option<LogId>, Option<Vote>, Option<LogId>) {
        let last = self.entries.last().map(|(id, _)| *id).or(self.purged);
        (last, self.vote, self.purged)
    }
}

fn read(db: &Database, path: &Path) -> Result<Old, String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let r = db.begin_read().map_err(|e| err(&e))?;
    let meta = r.open_table(META).map_err(|e| err(&e))?;
    let read_meta = |key: &str| -> Result<Option<Vec<u8>>, String> {
        Ok(meta
            .get(key)
            .map_err(|e| err(&e))?
            .map(|v| v.value().to_vec()))
    };
    let vote: Option<Vote> = read_meta("vote")?
        .map(|b| codec::decode(&b).map_err(|e| err(&format!("vote: {e}"))))
        .transpose()?;
    let committed: Option<LogId> = read_meta("committed")?
        .map(|b| codec::decode::<Option<LogId>>(&b).map_err(|e| err(&format!("committed: {e}"))))
        .transpose()?
        .flatten();
    let purged: Option<LogId> = read_meta("last_purged")?
        .map(|b| codec::decode(&b).map_err(|e| err(&format!("last_purged: {e}"))))
        .transpose()?;
    let table = r.open_table(ENTRIES).map_err(|e| err(&e))?;
    let mut entries: Vec<(LogId, Vec<u8>)> = vec![];
    for item in table.iter().map_err(|e| err(&e))? {
        let (k, v) = item.map_err(|e| err(&e))?;
        let index = k.value();
        let entry =
            decode_entry(index, v.value()).map_err(|e| err(&format!("log entry {index}: {e}")))?;
        let expected = match (entries.last(), purged) {
            (Some((last, _)), _) => Some(last.index + 1),
            (None, Some(p)) if index <= p.index => {
                return Err(err(&format!(
                    "log entry {index} is at or below the purge point {}",
                    p.index
                )));
            }
            (None, _) => None,
        };
        if let Some(want) = expected
            && want != index
        {
            return Err(err(&format!(
                "log entry {index} follows entry {}: the log has a hole",
                want - 1
            )));
        }
        entries.push((entry.log_id, v.value().to_vec()));
    }
    Ok(Old {
        vote,
        committed,
        purged,
        entries,
    })
}

/// Renames `from` to `to` and syncs their directory.
fn rename_synced(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::rename(from, to)
        .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    if let Some(parent) = to.parent() {
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    Ok(())
}

/// Imports `old` (a `log.redb`) into the log directory `dir` (module doc), `sync` as the
/// log's own (`false` only for the planted missing fsync).
pub fn import_once(old: &Path, dir: &Path, sync: bool) -> Result<(), String> {
    let imported = old.with_file_name("log.redb.imported");
    // Held open (with redb's own file lock) until the import is done: a second process
    // starting on this directory meanwhile is refused by redb, not let in to race.
    let db = Database::open(old).map_err(|e| format!("{}: {e}", old.display()))?;
    let o = read(&db, old)?;
    let open = |at: &Path| -> Result<LogStore, String> {
        let disk = DirDisk::new(at, sync).map_err(|e| format!("{}: {e}", at.display()))?;
        LogStore::open_disk(Box::new(disk), SEGMENT_BYTES)
    };
    if dir.exists() {
        let store = open(dir)?;
        if store.summary() == o.summary() && !store.is_blank() {
            drop(store);
            tracing::info!("log: {} was imported already; renaming it", old.display());
            return rename_synced(old, &imported);
        }
        if !store.is_blank() {
            return Err(format!(
                "{} and {} both hold a log: remove the one that is not this node's",
                old.display(),
                dir.display()
            ));
        }
        drop(store);
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let staging = dir.with_file_name("log.importing");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    }
    {
        let store = open(&staging)?;
        let mut records = vec![];
        if let Some(upto) = o.purged {
            records.push(Record::Purge(upto));
        }
        // In writes of about half a segment, so no segment grows past what the log writes
        // itself (the staging directory makes the pieces one import all the same).
        let mut bytes = 0;
        let write = |records: &[Record<'_>]| {
            store
                .write_now(records)
                .map_err(|e| format!("{}: importing {}: {e}", staging.display(), old.display()))
        };
        for (log_id, sealed) in &o.entries {
            if bytes + sealed.len() as u64 > SEGMENT_BYTES / 2 && !records.is_empty() {
                write(&records)?;
                records.clear();
                bytes = 0;
            }
            bytes += sealed.len() as u64;
            records.push(Record::Entry {
                log_id: *log_id,
                sealed,
            });
        }
        if let Some(vote) = &o.vote {
            records.push(Record::Vote(vote));
        }
        if o.committed.is_some() {
            records.push(Record::Committed(o.committed));
        }
        write(&records)?;
    }
    rename_synced(&staging, dir)?;
    rename_synced(old, &imported)?;
    drop(db);
    tracing::info!("log: imported {} into {}", old.display(), dir.display());
    Ok(())
}
