//! The import of an earlier Weir's log, `log.redb` (tables `entries: u64 -> bytes` of sealed
//! `WENT` frames, and `meta: str -> bytes` with `vote`, `committed` and `last_purged`), into
//! a fresh WAL, once, when [`super::log_store::LogStore::open`] finds it.
//!
//! Invariants: every entry is verified as a WAL entry is ([`decode_entry`], under the key it
//! was stored at) before anything is written; the import is one durable write, so a crash
//! during it leaves a fresh log and `log.redb` still in place, and the next start imports
//! again (the caller renames `log.redb` only after this returns).

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::log_store::{LogStore, decode_entry};
use super::wal::Record;
use super::{LogId, Vote};
use crate::codec;

const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// Imports `path` into `store`, whose log must be empty.
pub fn import(path: &Path, store: &LogStore) -> Result<(), String> {
    let name = path.display().to_string();
    let err = |e: &dyn std::fmt::Display| format!("{name}: {e}");
    let db = Database::open(path).map_err(|e| err(&e))?;
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
    let mut entries = vec![];
    for item in table.iter().map_err(|e| err(&e))? {
        let (k, v) = item.map_err(|e| err(&e))?;
        let entry = decode_entry(k.value(), v.value())
            .map_err(|e| err(&format!("log entry {}: {e}", k.value())))?;
        entries.push((entry.log_id, v.value().to_vec()));
    }
    let mut records = vec![];
    if let Some(upto) = purged {
        records.push(Record::Purge(upto));
    }
    records.extend(entries.iter().map(|(log_id, sealed)| Record::Entry {
        log_id: *log_id,
        sealed,
    }));
    if let Some(vote) = &vote {
        records.push(Record::Vote(vote));
    }
    if committed.is_some() {
        records.push(Record::Committed(committed));
    }
    store
        .write_now(&records)
        .map_err(|e| err(&format!("importing: {e}")))
}
