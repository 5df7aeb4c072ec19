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
        let busy_held = held(&mut busy).await;
        drop((quiet, busy));

        let mut logs = LogStore::open_shared(&path, segment_bytes, &[0, 1], &[]).unwrap();
        assert_eq!(held(logs.get_mut(&0).unwrap()).await, quiet_held);
        assert_eq!(held(logs.get_mut(&1).unwrap()).await, busy_held);
    });
}

/// Each group's log in `groups/<g>/log/`, as a node of three groups kept them apart.
async fn logs_kept_apart(root: &Path) -> (Vec<(u32, PathBuf)>, BTreeMap<u32, Held>) {
    let mut apart = vec![];
    let mut want = BTreeMap::new();
    for g in 0..=2u32 {
        let path = root.join("groups").join(g.to_string()).join("log");
        let mut log = LogStore::open(&path).unwrap();
        let n = 4 + 3 * g as u64;
        log.append_durably((1..=n).map(|i| entry(1, i, 2, g as u64)).collect())
            .await
            .unwrap();
        log.save_vote(&Vote::new(1 + g as u64, 1)).await.unwrap();
        if g == 2 {
            log.purge(id(3)).await.unwrap();
        }
        want.insert(g, held(&mut log).await);
        apart.push((g, path));
    }
    (apart, want)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn the_logs_a_node_kept_apart_are_adopted_once_and_again_after_a_start_cut_short() {
    let dir = TempDir::new("shared-adopt");
    let shared = dir.0.join("groups").join("log");
    rt().block_on(async {
        let (apart, want) = logs_kept_apart(&dir.0).await;
        let saved = dir.0.join("saved-group-1-log");
        copy_dir(&apart[1].1, &saved);

        let mut logs = LogStore::open_shared(&shared, 4096, &[0, 1, 2], &apart).unwrap();
        for (g, held_apart) in &want {
            assert_eq!(
                &held(logs.get_mut(g).unwrap()).await,
                held_apart,
                "group {g}"
            );
        }
        assert!(
            apart.iter().all(|(_, p)| !p.exists()),
            "the adopted logs are removed"
        );
        // The adopted groups go on in the shared log.
        let one = logs.get_mut(&1).unwrap();
        one.append_durably(vec![entry(1, 8, 1, 9)]).await.unwrap();
        let mut want = want;
        want.insert(1, held(one).await);
        drop(logs);

        // A start cut short after group 1's adoption, before its log was removed, finds
        // the log apart again: adopted again, it is the group's truth, as it was.
        copy_dir(&saved, &apart[1].1);
        let mut again = want.clone();
        let mut log = LogStore::open(&apart[1].1).unwrap();
        again.insert(1, held(&mut log).await);
        drop(log);
        let mut logs = LogStore::open_shared(&shared, 4096, &[0, 1, 2], &apart[1..2]).unwrap();
        for (g, h) in &again {
            assert_eq!(&held(logs.get_mut(g).unwrap()).await, h, "group {g}");
        }
        assert!(!apart[1].1.exists());
        drop(logs);
        let mut logs = LogStore::open_shared(&shared, 4096, &[0, 1, 2], &[]).unwrap();
        for (g, h) in &again {
            assert_eq!(&held(logs.get_mut(g).unwrap()).await, h, "group {g}");
        }
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
