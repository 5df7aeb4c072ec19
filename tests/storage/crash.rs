//! G3 under the log: every acknowledged write survives a power loss at any point.
//!
//! [`CrashDisk`] is a redb [`StorageBackend`] in memory that keeps, beside the durable bytes,
//! the writes not yet synced (what an OS page cache holds). Reads see both; `sync_data`
//! makes them durable; a power loss keeps only the durable bytes. A fuse counts backend calls
//! and cuts the power at a random one, so the loss lands anywhere: between transactions, in
//! the middle of a commit's writes, between a commit's writes and its sync.
//!
//! Each round reopens the log on what survived the previous round's power loss, checks that
//! every append, truncation and vote acknowledged before it is there (an append counts as
//! acknowledged when [`LogStore::append_durably`] returns `Ok`, or the `Durable` of an
//! [`LogStore::append_queued`] answers `Ok`, which is exactly when `append` calls openraft's
//! flush callback; queued appends are readable before that), then runs a random workload
//! until the power goes. Seeded and bounded: the same seed replays the same rounds.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use openraft::storage::RaftLogStorage;
use openraft::{CommittedLeaderId, LogId, RaftLogReader, Vote};
use redb::StorageBackend;
use weir::codec;
use weir::raft::Entry;
use weir::raft::log_store::LogStore;

use super::entries::entry;

/// The seed of the rounds below; change it to explore, keep it to replay.
const SEED: u64 = 0x5eed_0f10_5eed;
/// Rounds of open, check, work, power loss.
const ROUNDS: usize = 40;
/// Backend calls before the power goes, at most (drawn per round in `0..FUSE_MAX`).
const FUSE_MAX: u64 = 400;
/// Operations of one round's workload, at most.
const OPS_MAX: usize = 60;

/// One unsynced change.
#[derive(Debug)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Disk {
    /// What survives a power loss.
    durable: Vec<u8>,
    /// What reads see: `durable` with `unsynced` applied.
    volatile: Vec<u8>,
    /// Changes since the last sync, in order.
    unsynced: Vec<Op>,
    /// Backend calls left before the power goes; `None`: never.
    fuse: Option<u64>,
    /// The power went: every later call fails and changes nothing.
    dead: bool,
}

impl Disk {
    /// Burns one call of the fuse; `Err` once the power is gone.
    fn tick(&mut self) -> std::io::Result<()> {
        if self.dead {
            return Err(std::io::Error::other("power lost"));
        }
        match &mut self.fuse {
            Some(0) => {
                self.dead = true;
                Err(std::io::Error::other("power lost"))
            }
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// A disk that can lose power; clones share it.
#[derive(Clone, Debug, Default)]
struct CrashDisk(Arc<Mutex<Disk>>);

impl CrashDisk {
    /// A disk holding `image` durably, losing power after `fuse` backend calls.
    fn new(image: &[u8], fuse: Option<u64>) -> CrashDisk {
        CrashDisk(Arc::new(Mutex::new(Disk {
            durable: image.to_vec(),
            volatile: image.to_vec(),
            unsynced: vec![],
            fuse,
            dead: false,
        })))
    }

    fn disk(&self) -> std::sync::MutexGuard<'_, Disk> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts the power (if the fuse has not) and returns what survived.
    fn power_loss(&self) -> (Vec<u8>, usize) {
        let mut d = self.disk();
        d.dead = true;
        (d.durable.clone(), d.unsynced.len())
    }
}

fn write_at(bytes: &mut [u8], offset: u64, data: &[u8]) -> std::io::Result<()> {
    let at = offset as usize;
    let end = at + data.len();
    if end > bytes.len() {
        return Err(std::io::Error::other("write past the end"));
    }
    bytes[at..end].copy_from_slice(data);
    Ok(())
}

impl StorageBackend for CrashDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.disk().volatile.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let d = self.disk();
        let at = offset as usize;
        let source = d
            .volatile
            .get(at..at + out.len())
            .ok_or_else(|| std::io::Error::other("read past the end"))?;
        out.copy_from_slice(source);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let mut d = self.disk();
        d.tick()?;
        d.volatile.resize(len as usize, 0);
        d.unsynced.push(Op::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        let mut d = self.disk();
        d.tick()?;
        let ops = std::mem::take(&mut d.unsynced);
        for op in ops {
            match op {
                Op::SetLen(len) => d.durable.resize(len as usize, 0),
                Op::Write(offset, data) => write_at(&mut d.durable, offset, &data)?,
            }
        }
        debug_assert_eq!(d.durable, d.volatile);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut d = self.disk();
        d.tick()?;
        write_at(&mut d.volatile, offset, data)?;
        d.unsynced.push(Op::Write(offset, data.to_vec()));
        Ok(())
    }
}

/// xorshift64*: a seeded generator with no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// What was acknowledged: the entries by index (encoded, to compare bytes) and the vote.
#[derive(Default)]
struct Acked {
    entries: BTreeMap<u64, Vec<u8>>,
    vote: Option<Vote<u64>>,
}

/// Opens a copy of `image` (never losing power) and checks every acknowledged write is in
/// it; returns the last index present, and adopts into `acked` the entries that became
/// durable though their acknowledgment was lost (the log has them now, and keeps them).
async fn check(image: &[u8], acked: &mut Acked, round: usize) -> u64 {
    let mut log = LogStore::open_backend(CrashDisk::new(image, None), "log.redb")
        .unwrap_or_else(|e| panic!("round {round}: the log does not open after power loss: {e}"));
    let present = log.try_get_log_entries(0..).await.unwrap();
    let present: BTreeMap<u64, Vec<u8>> = present
        .iter()
        .map(|e| (e.log_id.index, codec::encode(e)))
        .collect();
    for (index, bytes) in &acked.entries {
        assert_eq!(
            present.get(index),
            Some(bytes),
            "round {round}: acknowledged entry {index} lost or changed by a power loss"
        );
    }
    let indexes: Vec<u64> = present.keys().copied().collect();
    assert!(
        indexes.windows(2).all(|w| w[1] == w[0] + 1),
        "round {round}: the log has holes: {indexes:?}"
    );
    let vote = log.read_vote().await.unwrap();
    assert!(
        vote >= acked.vote,
        "round {round}: acknowledged vote {:?} lost, found {vote:?}",
        acked.vote
    );
    acked.vote = vote;
    acked.entries = present;
    acked.entries.keys().last().copied().unwrap_or(0)
}

/// One to four entries after `last`, and their encodings (to compare bytes).
fn batch(rng: &mut Rng, term: u64, last: u64) -> (Vec<Entry>, Vec<(u64, Vec<u8>)>) {
    let n = rng.below(4) + 1;
    let entries: Vec<Entry> = (last + 1..=last + n)
        .map(|i| entry(term, i, 1 + rng.below(40) as usize, rng.below(1 << 20)))
        .collect();
    let encoded = entries
        .iter()
        .map(|e| (e.log_id.index, codec::encode(e)))
        .collect();
    (entries, encoded)
}

#[test]
fn every_acknowledged_log_write_survives_power_loss_at_random_points() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rng = Rng(SEED);
    let mut image = Vec::new();
    let mut acked = Acked::default();
    let mut cut_mid_work = 0;
    let mut cut_with_unsynced = 0;
    let mut appended = 0;
    rt.block_on(async {
        for round in 0..ROUNDS {
            let mut last = check(&image, &mut acked, round).await;
            let disk = CrashDisk::new(&image, Some(rng.below(FUSE_MAX)));
            let mut term = acked.vote.map_or(1, |v| v.leader_id.term.max(1));
            if let Ok(mut log) = LogStore::open_backend(disk.clone(), "log.redb") {
                for _ in 0..rng.below(OPS_MAX as u64) + 1 {
                    let ok = match rng.below(10) {
                        0 if last > 1 => {
                            let from = last - rng.below(last.min(4));
                            let at = LogId::new(CommittedLeaderId::new(term, 1), from);
                            let ok = log.truncate(at).await.is_ok();
                            if ok {
                                acked.entries.retain(|&i, _| i < from);
                                last = from - 1;
                            }
                            ok
                        }
                        1 => {
                            term += 1;
                            let vote = Vote::new(term, 1 + rng.below(3));
                            let ok = log.save_vote(&vote).await.is_ok();
                            if ok {
                                acked.vote = Some(vote);
                            }
                            ok
                        }
                        // Several appends queued before the first is durable, as the Raft
                        // core queues them: each counts once its own `Durable` answers.
                        2 | 3 => {
                            let mut queued = vec![];
                            let mut ok = true;
                            for _ in 0..rng.below(4) + 2 {
                                let (entries, encoded) = batch(&mut rng, term, last);
                                let n = entries.len() as u64;
                                match log.append_queued(entries).await {
                                    Ok(durable) => queued.push((durable, encoded)),
                                    Err(_) => {
                                        ok = false;
                                        break;
                                    }
                                }
                                last += n;
                            }
                            for (durable, encoded) in queued {
                                if durable.wait().await.is_ok() {
                                    appended += encoded.len();
                                    acked.entries.extend(encoded);
                                } else {
                                    ok = false;
                                }
                            }
                            ok
                        }
                        _ => {
                            let (entries, encoded) = batch(&mut rng, term, last);
                            let n = entries.len() as u64;
                            let ok = log.append_durably(entries).await.is_ok();
                            if ok {
                                acked.entries.extend(encoded);
                                last += n;
                                appended += n as usize;
                            }
                            ok
                        }
                    };
                    if !ok {
                        cut_mid_work += 1;
                        break;
                    }
                }
            }
            let (survived, unsynced) = disk.power_loss();
            if unsynced > 0 {
                cut_with_unsynced += 1;
            }
            image = survived;
        }
        check(&image, &mut acked, ROUNDS).await;
    });
    eprintln!(
        "{ROUNDS} rounds: {appended} entries acknowledged, power cut mid-workload in \
         {cut_mid_work}, with unsynced writes dropped in {cut_with_unsynced}"
    );
    // A fault that never fired proves nothing.
    assert!(
        cut_mid_work >= ROUNDS / 4,
        "the fuse fired mid-workload in {cut_mid_work} rounds"
    );
    assert!(
        cut_with_unsynced >= ROUNDS / 4,
        "unsynced writes dropped in {cut_with_unsynced}"
    );
    assert!(appended >= 50, "only {appended} entries acknowledged");
}
