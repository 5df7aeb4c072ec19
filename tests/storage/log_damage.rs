//! The log's files: a damaged entry is refused at open naming the segment, the byte and the
//! index (G8); a torn write at the end is cut off and nothing acknowledged goes with it;
//! segments rotate and purged ones are deleted.

use openraft::storage::RaftLogStorage;
use openraft::{CommittedLeaderId, LogId, RaftLogReader, Vote};
use weir_core::codec;
use weir_server::raft::log_entry::seal_entry_payload;
use weir_server::raft::log_store::LogStore;
use weir_server::raft::wal::DirDisk;

use super::TempDir;
use super::entries::entry;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const FIRST_SEGMENT: &str = "00000000000000000001.wal";

/// A log in `dir` holding entries 1..=n of term 1, each appended (and made durable) alone.
fn log_with(dir: &std::path::Path, n: u64) {
    rt().block_on(async {
        let mut log = LogStore::open(dir).unwrap();
        for i in 1..=n {
            log.append_durably(vec![entry(1, i, 3, i)]).await.unwrap();
        }
    });
}

/// A log of five entries in a fresh directory: the directory (removed on drop), the log and
/// its first segment.
fn five_entries(tag: &str) -> (TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = TempDir::new(tag);
    let log = dir.0.join("log");
    log_with(&log, 5);
    let segment = log.join(FIRST_SEGMENT);
    (dir, log, segment)
}

fn indexes(dir: &std::path::Path) -> Vec<u64> {
    rt().block_on(async {
        let mut log = LogStore::open(dir).unwrap();
        let entries = log.try_get_log_entries(0..).await.unwrap();
        entries.iter().map(|e| e.log_id.index).collect()
    })
}

/// The segment files in the log directory `dir`, sorted.
fn segment_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".wal"))
        .collect();
    names.sort();
    names
}

#[test]
fn an_entry_damaged_in_place_is_refused_at_open_naming_the_segment_byte_and_index() {
    let (_dir, log, segment) = five_entries("logdamage");
    let mut bytes = std::fs::read(&segment).unwrap();
    let sealed = seal_entry_payload(&codec::encode(&entry(1, 3, 3, 3)));
    let at = bytes
        .windows(sealed.len())
        .position(|w| w == sealed.as_slice())
        .expect("entry 3 is stored as sealed");
    bytes[at + sealed.len() - 5] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    let err = LogStore::open(&log)
        .err()
        .expect("a damaged entry is refused");
    assert!(err.contains(FIRST_SEGMENT), "names the segment: {err}");
    assert!(
        err.contains(&format!("log entry 3 at byte {at}")),
        "names the index and where: {err}"
    );
    assert!(err.contains("checksum mismatch"), "says why: {err}");
}

#[test]
fn a_torn_write_at_the_end_is_cut_off_and_the_log_goes_on() {
    let (_dir, log, segment) = five_entries("logtorn");
    let len = std::fs::metadata(&segment).unwrap().len();
    // Entry 5 was the last write, a group of its own: cut 7 bytes off it.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(len - 7).unwrap();
    drop(file);
    assert_eq!(indexes(&log), vec![1, 2, 3, 4], "the torn group is gone");
    assert!(
        std::fs::metadata(&segment).unwrap().len() < len - 7,
        "the torn bytes were cut from the file"
    );
    // The log goes on from there, and reopens whole.
    rt().block_on(async {
        let mut store = LogStore::open(&log).unwrap();
        store
            .append_durably(vec![entry(2, 5, 1, 50)])
            .await
            .unwrap();
    });
    assert_eq!(indexes(&log), vec![1, 2, 3, 4, 5]);
    // A tail of zeros (a length made durable before its data) is torn too.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len + 300).unwrap();
    drop(file);
    assert_eq!(indexes(&log), vec![1, 2, 3, 4, 5]);
    // Garbage after the end is not a torn write: refused.
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(b"WGRP this is not a group header at all");
    std::fs::write(&segment, &bytes).unwrap();
    let err = LogStore::open(&log).err().expect("refused");
    assert!(
        err.contains(&format!("at byte {}: not a group header", bytes.len() - 38)),
        "{err}"
    );
}

#[test]
fn segments_rotate_and_a_purge_deletes_the_oldest_only_once_all_their_entries_are_purged() {
    let dir = TempDir::new("logrotate");
    let path = dir.0.join("log");
    let open = || {
        let disk = DirDisk::new(&path, true).unwrap();
        LogStore::open_disk(Box::new(disk), 2048).unwrap()
    };
    let segments = || segment_names(&path);
    let id = |term, index| LogId::new(CommittedLeaderId::new(term, 1), index);
    rt().block_on(async {
        let mut log = open();
        log.save_vote(&Vote::new(4, 2)).await.unwrap();
        for i in 1..=40 {
            log.append_durably(vec![entry(1, i, 4, i)]).await.unwrap();
        }
        // A truncation recorded in a later segment than the entries it removes.
        log.truncate(id(1, 30)).await.unwrap();
        for i in 30..=45 {
            log.append_durably(vec![entry(2, i, 4, i)]).await.unwrap();
        }
        log.save_committed(Some(id(2, 44))).await.unwrap();
    });
    let before = segments();
    assert!(
        before.len() >= 5,
        "rotated into several segments: {before:?}"
    );
    assert_eq!(before[0], FIRST_SEGMENT);
    rt().block_on(async {
        let mut log = open();
        log.purge(id(1, 20)).await.unwrap();
    });
    let after = segments();
    assert!(
        after.len() < before.len() && !after.contains(&FIRST_SEGMENT.to_string()),
        "the oldest segments went: {before:?} -> {after:?}"
    );
    assert!(
        after.len() >= 2,
        "segments with live entries stay: {after:?}"
    );
    // Reopened from what is left, nothing changed: vote, committed, purge point, entries.
    rt().block_on(async {
        let mut log = open();
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(4, 2)));
        assert_eq!(log.read_committed().await.unwrap(), Some(id(2, 44)));
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(id(1, 20)));
        assert_eq!(state.last_log_id, Some(id(2, 45)));
        let entries = log.try_get_log_entries(0..).await.unwrap();
        let ids: Vec<(u64, u64)> = entries
            .iter()
            .map(|e| (e.log_id.leader_id.term, e.log_id.index))
            .collect();
        let want: Vec<(u64, u64)> = (21..30)
            .map(|i| (1, i))
            .chain((30..=45).map(|i| (2, i)))
            .collect();
        assert_eq!(ids, want);
        // Purging past everything empties the log but keeps its last id as the purge point.
        log.purge(id(2, 45)).await.unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(id(2, 45)));
    });
    assert_eq!(segments().len(), 1, "only the active segment is left");
    rt().block_on(async {
        let mut log = open();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(id(2, 45)));
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(4, 2)));
        log.append_durably(vec![entry(3, 46, 1, 1)]).await.unwrap();
    });
}

/// A directory whose next segment removal fails once (a failed unlink or directory sync).
struct FailOneRemove {
    inner: DirDisk,
    fail_next: std::sync::atomic::AtomicBool,
}

impl weir_server::raft::wal::LogDisk for FailOneRemove {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.inner.list()
    }
    fn open(
        &self,
        name: &str,
    ) -> std::io::Result<std::sync::Arc<dyn weir_server::raft::wal::SegmentFile>> {
        self.inner.open(name)
    }
    fn create(
        &self,
        name: &str,
    ) -> std::io::Result<std::sync::Arc<dyn weir_server::raft::wal::SegmentFile>> {
        self.inner.create(name)
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        if self
            .fail_next
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(std::io::Error::other("injected: remove failed"));
        }
        self.inner.remove(name)
    }
    fn describe(&self, name: &str) -> String {
        self.inner.describe(name)
    }
}

#[test]
fn a_failed_segment_delete_keeps_it_oldest_and_the_next_purge_deletes_it() {
    let dir = TempDir::new("logfaildelete");
    let path = dir.0.join("log");
    let id = |term, index| LogId::new(CommittedLeaderId::new(term, 1), index);
    let segments = || segment_names(&path);
    rt().block_on(async {
        let disk = FailOneRemove {
            inner: DirDisk::new(&path, true).unwrap(),
            fail_next: std::sync::atomic::AtomicBool::new(true),
        };
        let mut log = LogStore::open_disk(Box::new(disk), 2048).unwrap();
        for i in 1..=40 {
            log.append_durably(vec![entry(1, i, 4, i)]).await.unwrap();
        }
        let before = segments();
        assert!(before.len() >= 4, "{before:?}");
        // The first removal fails: nothing younger may go before it.
        log.purge(id(1, 30)).await.unwrap();
        assert_eq!(segments(), before, "no segment deleted past a failed one");
        // The next purge deletes it and those after it.
        log.purge(id(1, 31)).await.unwrap();
        let after = segments();
        assert!(
            after.len() < before.len() && !after.contains(&FIRST_SEGMENT.to_string()),
            "{before:?} -> {after:?}"
        );
    });
    let mut entries = indexes(&path);
    entries.sort();
    assert_eq!(entries, (32..=40).collect::<Vec<u64>>());
}
