//! One log shared by several Raft groups: a quiet group does not hold the log's segments,
//! and the logs a node of several groups kept apart are adopted into it once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use openraft::storage::RaftLogStorage;
use openraft::{CommittedLeaderId, LogId, RaftLogReader, Vote};
use weir_core::codec;
use weir_server::raft::log_store::LogStore;

use super::TempDir;
use super::entries::entry;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every entry `log` reads, encoded (to compare bytes), by index.
async fn read_all(log: &mut LogStore) -> BTreeMap<u64, Vec<u8>> {
    log.try_get_log_entries(0..)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.log_id.index, codec::encode(e)))
        .collect()
}

/// What a group's log holds: its entries, vote and purge point.
type Held = (BTreeMap<u64, Vec<u8>>, Option<Vote<u64>>, Option<u64>);

async fn held(log: &mut LogStore) -> Held {
    let purged = log
        .get_log_state()
        .await
        .unwrap()
        .last_purged_log_id
        .map(|p| p.index);
    (read_all(log).await, log.read_vote().await.unwrap(), purged)
}

fn id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

#[test]
fn a_quiet_group_is_moved_out_of_the_oldest_segment_so_the_log_stays_short() {
    let dir = TempDir::new("shared-quiet");
    let path = dir.0.join("log");
    let segment_bytes = 4096;
    rt().block_on(async {
        let mut logs = LogStore::open_shared(&path, segment_bytes, &[0, 1], &[]).unwrap();
        let mut quiet = logs.remove(&0).unwrap();
        let mut busy = logs.remove(&1).unwrap();
        quiet
            .append_durably((1..=3).map(|i| entry(1, i, 1, 0)).collect())
            .await
            .unwrap();
        quiet.save_vote(&Vote::new(1, 2)).await.unwrap();
        let quiet_held = held(&mut quiet).await;
        let mut last = 0;
        let mut most = 0;
        for round in 0..100u64 {
            let batch: Vec<_> = (last + 1..=last + 4)
                .map(|i| entry(1, i, 8, round))
                .collect();
            busy.append_durably(batch).await.unwrap();
            last += 4;
            if round % 5 == 4 {
                busy.purge(id(last - 2)).await.unwrap();
            }
            most = most.max(busy.segment_count());
        }
        // The busy group keeps at most 22 entries of about 600 bytes, three or four
        // segments, and a move waits for four; without moves the quiet group's three
        // entries hold every segment (34 of them).
        assert!(
            most <= 6,
            "the log grew to {most} segments: the quiet group's entries held the oldest"
        );
        assert!(busy.moves() > 0, "the quiet group was never moved");
        // The node's metric counts them (this process's other logs' moves too).
        assert!(weir_server::metrics::get().log_moves.get() >= busy.moves());
        let busy_held = held(&mut busy).await;
        drop((quiet, busy));

        let mut logs = LogStore::open_shared(&path, segment_bytes, &[0, 1], &[]).unwrap();
        assert_eq!(held(logs.get_mut(&0).unwrap()).await, quiet_held);
        assert_eq!(held(logs.get_mut(&1).unwrap()).await, busy_held);
    });
}

/// Each group's log in `groups/<g>/log/`, as a node of three groups kept them apart;
/// returns each group's directory and what its log holds.
async fn logs_kept_apart(root: &Path) -> (Vec<(u32, PathBuf)>, BTreeMap<u32, Held>) {
    let mut dirs = vec![];
    let mut want = BTreeMap::new();
    for g in 0..=2u32 {
        let gdir = root.join("groups").join(g.to_string());
        let mut log = LogStore::open(&gdir.join("log")).unwrap();
        let n = 4 + 3 * g as u64;
        log.append_durably((1..=n).map(|i| entry(1, i, 12, g as u64)).collect())
            .await
            .unwrap();
        log.save_vote(&Vote::new(1 + g as u64, 1)).await.unwrap();
        if g == 2 {
            log.purge(id(3)).await.unwrap();
        }
        want.insert(g, held(&mut log).await);
        dirs.push((g, gdir));
    }
    (dirs, want)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

async fn check_all(logs: &mut BTreeMap<u32, LogStore>, want: &BTreeMap<u32, Held>, when: &str) {
    for (g, h) in want {
        assert_eq!(
            &held(logs.get_mut(g).unwrap()).await,
            h,
            "group {g}, {when}"
        );
    }
}

#[test]
fn the_logs_a_node_kept_apart_are_adopted_once_and_never_again_once_marked() {
    let dir = TempDir::new("shared-adopt");
    let shared = dir.0.join("groups").join("log");
    // Segments of 4 KiB: group 2's adoption takes more than one write.
    let segment_bytes = 4096;
    rt().block_on(async {
        let (dirs, mut want) = logs_kept_apart(&dir.0).await;
        let saved = dir.0.join("saved-group-1-log");
        copy_dir(&dirs[1].1.join("log"), &saved);

        let mut logs = LogStore::open_shared(&shared, segment_bytes, &[0, 1, 2], &dirs).unwrap();
        check_all(&mut logs, &want, "adopted").await;
        for (g, gdir) in &dirs {
            assert!(!gdir.join("log").exists(), "group {g}'s log is still there");
            assert!(
                !gdir.join("log.adopted").exists(),
                "group {g}'s adopted log is still there"
            );
        }
        drop(logs);

        // A start cut short after the adoption, before group 1's log was marked adopted:
        // the log is adopted again, and the state is the same.
        copy_dir(&saved, &dirs[1].1.join("log"));
        let mut logs = LogStore::open_shared(&shared, segment_bytes, &[0, 1, 2], &dirs).unwrap();
        check_all(&mut logs, &want, "adopted again").await;
        assert!(!dirs[1].1.join("log").exists());

        // The groups go on in the shared log; a log marked adopted, left by a removal cut
        // short, is never read again: it undoes nothing acknowledged since.
        let one = logs.get_mut(&1).unwrap();
        one.append_durably(vec![entry(1, 8, 1, 9)]).await.unwrap();
        want.insert(1, held(one).await);
        drop(logs);
        copy_dir(&saved, &dirs[1].1.join("log.adopted"));
        let mut logs = LogStore::open_shared(&shared, segment_bytes, &[0, 1, 2], &dirs).unwrap();
        check_all(&mut logs, &want, "with an adopted log left over").await;
        assert!(
            !dirs[1].1.join("log.adopted").exists(),
            "the leftover is removed"
        );
        drop(logs);
        let mut logs = LogStore::open_shared(&shared, segment_bytes, &[0, 1, 2], &[]).unwrap();
        check_all(&mut logs, &want, "reopened").await;
    });
}

#[test]
fn a_shared_log_refuses_records_of_a_group_it_does_not_host() {
    let dir = TempDir::new("shared-stranger");
    let path = dir.0.join("log");
    rt().block_on(async {
        let mut logs = LogStore::open_shared(&path, 4096, &[0, 1, 2], &[]).unwrap();
        logs.get_mut(&2)
            .unwrap()
            .append_durably(vec![entry(1, 1, 1, 0)])
            .await
            .unwrap();
    });
    let err = LogStore::open_shared(&path, 4096, &[0, 1], &[])
        .err()
        .expect("refused");
    assert!(
        err.contains("records of Raft group 2, which this log does not host"),
        "{err}"
    );
}
