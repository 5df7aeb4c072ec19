//! The stores under openraft's conformance suite, the data directory's refusals (G8), a
//! damaged log entry (G8) and power loss under the log (G3).

mod crash;
mod entries;
mod formats;
mod log_damage;
mod shared;

use std::path::{Path, PathBuf};

use openraft::testing::{StoreBuilder, Suite};
use weir_server::raft::log_store::LogStore;
use weir_server::raft::snapshot_file::SNAPSHOT_FILE;
use weir_server::raft::state_store::StateStore;
use weir_server::raft::{StorageError, TypeConfig};
use weir_server::server::{IDENTITY_FILE, prepare_data_dir};

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "weir-storage-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateStore, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateStore), StorageError> {
        let dir = TempDir::new("suite");
        let log = LogStore::open(&dir.0.join("log")).expect("open log");
        let sm = StateStore::open(&dir.0).expect("open state");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).unwrap();
}

/// The store of one group of a log three groups share.
struct SharedBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateStore, TempDir> for SharedBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateStore), StorageError> {
        let dir = TempDir::new("suite-shared");
        let mut logs =
            LogStore::open_shared(&dir.0.join("log"), 64 << 20, &[0, 1, 2], &[]).expect("open log");
        let sm = StateStore::open(&dir.0).expect("open state");
        Ok((dir, logs.remove(&1).expect("group 1"), sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_a_group_of_a_shared_log() {
    Suite::test_all(SharedBuilder).unwrap();
}

#[test]
fn a_damaged_snapshot_file_is_refused_by_name() {
    let dir = TempDir::new("snap");
    std::fs::write(
        dir.0.join(SNAPSHOT_FILE),
        b"WSST\x01\x00not really a snapshot",
    )
    .unwrap();
    let err = StateStore::open(&dir.0).err().expect("refused");
    assert!(err.contains("snapshot.bin"), "{err}");
    assert!(
        err.contains("truncated") || err.contains("declared length"),
        "{err}"
    );
}

#[test]
fn a_damaged_log_segment_is_refused_by_name() {
    let dir = TempDir::new("log");
    let log = dir.0.join("log");
    std::fs::create_dir_all(&log).unwrap();
    let segment = log.join("00000000000000000001.wal");
    std::fs::write(&segment, vec![0xab; 8192]).unwrap();
    let err = LogStore::open(&log).err().expect("refused");
    assert!(err.contains("00000000000000000001.wal"), "{err}");
    assert!(err.contains("at byte 0: not a group header"), "{err}");
}

#[test]
fn a_log_open_in_one_store_is_refused_to_a_second() {
    let dir = TempDir::new("log");
    let log = dir.0.join("log");
    let first = LogStore::open(&log).expect("open");
    let err = LogStore::open(&log).err().expect("refused");
    assert!(
        err.contains("is held by another process: is another node running on this data directory?"),
        "{err}"
    );
    drop(first);
    // The writer thread has stopped and the lock is released with the last clone.
    LogStore::open(&log).expect("open again once the first is closed");
}

#[test]
fn a_stray_file_in_the_log_directory_is_refused_by_name() {
    let dir = TempDir::new("log");
    let log = dir.0.join("log");
    std::fs::create_dir_all(&log).unwrap();
    std::fs::write(log.join("notes.txt"), b"x").unwrap();
    let err = LogStore::open(&log).err().expect("refused");
    assert!(err.contains("notes.txt: not a log segment"), "{err}");
}

fn label(dir: &Path, id: u64) {
    assert!(prepare_data_dir(dir, id).unwrap(), "first start");
}

#[test]
fn a_data_dir_belongs_to_one_node_and_is_never_started_over() {
    let root = TempDir::new("dir");
    let dir = root.0.join("node");
    label(&dir, 2);
    assert!(
        !prepare_data_dir(&dir, 2).unwrap(),
        "a restart is not a first start"
    );
    let err = prepare_data_dir(&dir, 3).unwrap_err();
    assert!(
        err.ends_with("this data directory belongs to node 2, not node 3"),
        "{err}"
    );
    // Files but no label: refused, not started empty over them.
    std::fs::remove_file(dir.join(IDENTITY_FILE)).unwrap();
    std::fs::write(dir.join("stray.bin"), b"x").unwrap();
    let err = prepare_data_dir(&dir, 2).unwrap_err();
    assert!(
        err.contains("node.id: missing") && err.contains("refusing to start"),
        "{err}"
    );
    // A damaged label names itself.
    std::fs::write(dir.join(IDENTITY_FILE), b"WNIDgarbage-garbage-garbage").unwrap();
    let err = prepare_data_dir(&dir, 2).unwrap_err();
    assert!(err.contains("node.id") && err.contains("version"), "{err}");
}

/// `save_committed` returns before its write; the writer makes it durable on its own within
/// milliseconds when no append comes to share the fsync (looked for in the segment while the
/// log is still open: closing it would write the hint anyway).
#[tokio::test]
async fn a_committed_id_saved_alone_reaches_the_disk() {
    use openraft::storage::RaftLogStorage;
    use openraft::{CommittedLeaderId, LogId};
    let dir = TempDir::new("committed");
    let path = dir.0.join("log");
    let committed: Option<LogId<u64>> = Some(LogId::new(CommittedLeaderId::new(3, 1), 7));
    let frame = weir_core::codec::seal_frame(*b"WCOM", 1, &weir_core::codec::encode(&committed));
    let mut log = LogStore::open(&path).expect("open log");
    log.save_committed(committed).await.unwrap();
    let segment = path.join("00000000000000000001.wal");
    let mut written = false;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let bytes = std::fs::read(&segment).unwrap();
        if bytes.windows(frame.len()).any(|w| w == frame.as_slice()) {
            written = true;
            break;
        }
    }
    assert!(written, "the committed id was not written within 2 s");
    drop(log);
    let mut log = LogStore::open(&path).expect("reopen log");
    assert_eq!(log.read_committed().await.unwrap(), committed);
}
