//! G8 for the log: a damaged entry inside a valid redb database is refused at open, naming
//! the file and the entry's index, never applied.

use openraft::RaftLogReader;
use redb::{Database, ReadableDatabase, TableDefinition};
use weir::raft::log_store::LogStore;

use super::TempDir;
use super::entries::entry;

const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn an_entry_damaged_in_place_is_refused_at_open_naming_the_file_and_index() {
    let dir = TempDir::new("logdamage");
    let path = dir.0.join("log.redb");
    rt().block_on(async {
        let mut log = LogStore::open(&path).unwrap();
        log.append_durably((1..=5).map(|i| entry(1, i, 3, i)).collect())
            .await
            .unwrap();
        assert_eq!(log.try_get_log_entries(1..=5).await.unwrap().len(), 5);
    });
    // Flip one byte deep inside entry 3's value, through redb: the database stays valid.
    {
        let db = Database::create(&path).unwrap();
        let mut value = {
            let r = db.begin_read().unwrap();
            let t = r.open_table(ENTRIES).unwrap();
            t.get(3).unwrap().unwrap().value().to_vec()
        };
        let at = value.len() - 5;
        value[at] ^= 0x01;
        let w = db.begin_write().unwrap();
        w.open_table(ENTRIES)
            .unwrap()
            .insert(3, value.as_slice())
            .unwrap();
        w.commit().unwrap();
    }
    let err = LogStore::open(&path)
        .err()
        .expect("a damaged entry is refused");
    assert!(err.contains("log.redb"), "names the file: {err}");
    assert!(err.contains("log entry 3"), "names the index: {err}");
    assert!(err.contains("checksum mismatch"), "says why: {err}");
}
