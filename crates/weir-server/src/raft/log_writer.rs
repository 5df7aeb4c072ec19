//! The log's ordered writer and its in-memory tails: every write to the log's WAL
//! ([`super::wal`]) goes through one thread, in the order the Raft core asked for it, and
//! the entries it has not yet made durable (plus a few recent durable ones) are kept in
//! memory so they can be read at once. A log shared by several Raft groups has one writer
//! for all of them, each job naming its group, and one tail per group.
//!
//! Why: openraft's `append` must return once the entries are *readable* and call its
//! callback once they are *durable*. Handing the entries to a dedicated thread instead of
//! running the write on tokio's blocking pool costs no pool wake-up per write, lets
//! several queued writes share one fsync (group commit), and lets replication read the
//! newest entries from memory instead of decoding them back out of the files.
//!
//! Invariants:
//! - One thread makes every write (in a simulation, one task of its runtime:
//!   [`crate::simulated`]); jobs are applied in the order they were queued, and
//!   all jobs of a group are one WAL write (one `pwrite`, one `fdatasync`), whatever Raft
//!   groups they are of: the groups of a shared log share its fsyncs. So a vote saved after an
//!   append is never on disk without that append's predecessors, and a vote saved before
//!   an append is on disk no later than the append (the core awaits `save_vote` before it
//!   appends again).
//! - A group is made durable with one fsync before anyone is answered. Nobody
//!   waits for a committed id (`SaveCommitted`, a hint for re-applying after a restart that
//!   openraft allows to lag): it is written after its entries, so it never names an entry
//!   the log lacks, and a group holding only hints waits up to `HINT_LINGER` (2 ms) for a job
//!   to share its fsync with, so it costs no fsync of its own under load.
//! - Callbacks and waiters are answered only after the group's sync returns: an append
//!   is *acknowledged* (openraft's flush callback, or `append_durably`'s return) only once
//!   durable, though it is readable from the tail before.
//! - Fail-stop: once a group's write or sync fails, every later job is answered with that
//!   error and nothing more is written. Appends return before their fsync, so later appends
//!   are already queued behind a failed one; writing them would leave a hole on disk (and
//!   after a failed fsync the kernel may have dropped the dirty pages: nothing written
//!   since can be trusted). In a log shared by several Raft groups, one failure stops
//!   them all: their records share the file. So does a damaged entry of a quiet group
//!   found while moving it out of the oldest segment (`wal`).
//! - The tail holds contiguous indexes and always ends at the log's last entry when it is
//!   not empty; entries not yet durable are its suffix and are never evicted; at most
//!   [`TAIL_DURABLE_KEPT`] durable entries are kept before them.
//! - The tail is changed, and a reader looks the WAL up, under one lock: an entry leaves
//!   the tail only after the WAL has it, so a reader sees it in one place or the other.

// openraft's traits fix the error type to its `StorageError`, which is large; boxing it
// is not ours to choose.
#![allow(clippy::result_large_err)]
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use openraft::storage::LogFlushed;
use tokio::sync::{mpsc, oneshot};

use super::log_error::write_err;
use super::wal::{Record, Wal};
use super::{Entry, GroupId, LogId, StorageError, TypeConfig, Vote};

/// How many durable entries the tail keeps for readers. Replication reads the entries it
/// was just told about, a few at most behind; 64 entries of at most
/// `bounds::ENTRY_COMMANDS_MAX` commands bound the memory to a few MiB.
pub const TAIL_DURABLE_KEPT: usize = 64;

/// How many jobs may wait for the writer. The Raft core awaits each append's flush before
/// the next, so the queue rarely holds more than an append, a vote and a committed id.
const JOBS_QUEUED_MAX: usize = 64;

/// How many queued jobs one write takes at most, so one group's write stays short.
const GROUP_JOBS_MAX: usize = 64;

/// How long a group of only hints (committed ids) waits for another job to share its fsync.
/// Under load an append is always queued; a sequential client's next append arrives a
/// round trip after the commit (a fraction of a millisecond). Past this the hint is made
/// durable alone, so an idle node's committed id is on disk within a few milliseconds.
const HINT_LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// The in-memory tail of the log.
#[derive(Default)]
pub struct Tail {
    /// Entries with contiguous indexes, oldest first.
    entries: VecDeque<Entry>,
    /// How many leading entries of `entries` are durable.
    durable: usize,
}

impl Tail {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|e| e.log_id.index)
    }

    /// The id of the log's last entry, if the tail holds any.
    pub fn last_log_id(&self) -> Option<LogId> {
        self.entries.back().map(|e| e.log_id)
    }

    /// Adds entries appended after the tail's last one.
    fn push(&mut self, entries: &[Entry]) {
        for e in entries {
            if let Some(last) = self.last_log_id() {
                assert_eq!(
                    e.log_id.index,
                    last.index + 1,
                    "log has no holes: append of {} after {}",
                    e.log_id,
                    last
                );
            }
            self.entries.push_back(e.clone());
        }
    }

    /// Drops entries from `since` to the end.
    fn truncate(&mut self, since: u64) {
        let Some(first) = self.first_index() else {
            return;
        };
        let keep = since.saturating_sub(first).min(self.entries.len() as u64) as usize;
        self.entries.truncate(keep);
        self.durable = self.durable.min(keep);
    }

    /// Drops entries up to and including `upto`.
    fn purge(&mut self, upto: u64) {
        let Some(first) = self.first_index() else {
            return;
        };
        let n = (upto + 1)
            .saturating_sub(first)
            .min(self.entries.len() as u64) as usize;
        self.entries.drain(..n);
        self.durable = self.durable.saturating_sub(n);
    }

    /// Marks the entries up to `log_id` durable, if the tail still holds that entry (a
    /// truncate may have removed it), then evicts durable entries over the kept number.
    fn flushed(&mut self, log_id: LogId) {
        let pos = self
            .first_index()
            .filter(|first| log_id.index >= *first)
            .map(|first| (log_id.index - first) as usize);
        if let Some(pos) = pos
            && self.entries.get(pos).is_some_and(|e| e.log_id == log_id)
        {
            self.durable = self.durable.max(pos + 1);
        }
        while self.durable > TAIL_DURABLE_KEPT {
            self.entries.pop_front();
            self.durable -= 1;
        }
    }

    /// The tail's entries in `start..end` (`end` `None`: to the last).
    pub fn range(&self, start: u64, end: Option<u64>) -> Vec<Entry> {
        let Some(first) = self.first_index() else {
            return vec![];
        };
        let from = start.saturating_sub(first).min(self.entries.len() as u64) as usize;
        let to = match end {
            Some(end) => end.saturating_sub(first).min(self.entries.len() as u64) as usize,
            None => self.entries.len(),
        };
        if to <= from {
            return vec![];
        }
        self.entries.range(from..to).cloned().collect()
    }

    /// Whether every entry at `start` or later that exists is in the tail.
    pub fn covers(&self, start: u64) -> bool {
        self.first_index().is_some_and(|first| start >= first)
    }
}

/// Who is told when an append is durable.
pub enum Flushed {
    /// openraft's flush callback ([`openraft::storage::RaftLogStorage::append`]).
    Raft(LogFlushed<TypeConfig>),
    /// A caller awaiting durability (`LogStore::append_durably`).
    Waiter(oneshot::Sender<Result<(), StorageError>>),
}

impl Flushed {
    fn complete(self, result: Result<(), StorageError>) {
        match self {
            Flushed::Raft(callback) => {
                callback.log_io_completed(result.map_err(|e| std::io::Error::other(e.to_string())))
            }
            // A waiter that gave up (its task was dropped) needs no answer.
            Flushed::Waiter(done) => {
                let _ = done.send(result);
            }
        }
    }
}

/// One write of a Raft group, in the order its core asked for it.
struct Job {
    group: GroupId,
    work: Work,
}

/// What a job writes.
enum Work {
    /// Sealed entries with their ids; `flushed` is told once they are durable, after
    /// `tail` (the group's) has marked them so.
    Append {
        entries: Vec<(LogId, Vec<u8>)>,
        last: LogId,
        tail: Arc<Mutex<Tail>>,
        flushed: Flushed,
    },
    /// Deletes entries from this index to the end.
    Truncate {
        since: u64,
        done: oneshot::Sender<Result<(), StorageError>>,
    },
    /// Records the purge point; entries up to it are gone.
    Purge {
        upto: LogId,
        done: oneshot::Sender<Result<(), StorageError>>,
    },
    /// Writes the vote durably.
    Vote {
        vote: Vote,
        done: oneshot::Sender<Result<(), StorageError>>,
    },
    /// Writes the committed id, which may be lost; nobody waits for it.
    Hint { committed: Option<LogId> },
}

/// The writer thread and the queue to it. Dropping it closes the queue and waits for the
/// thread to finish its last group, so the log is closed when it returns.
pub struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            // A panic on the writer thread already reported itself; the log is closed.
            let _ = thread.join();
        }
    }
}

/// The error a closed writer answers with: the node is shutting down or the writer died.
fn closed() -> StorageError {
    write_err(std::io::Error::other("log writer stopped"))
}

impl Writer {
    /// Starts the writer thread on `wal`, keeping each appending group's tail in step with
    /// what it writes (in a simulation, a task of the runtime: [`crate::simulated`]).
    pub fn start(wal: Arc<Wal>) -> Result<Writer, String> {
        let (tx, rx) = mpsc::channel(JOBS_QUEUED_MAX);
        if crate::simulated::on() {
            tokio::spawn(run_simulated(wal, rx));
            return Ok(Writer {
                jobs: Some(tx),
                thread: None,
            });
        }
        let thread = std::thread::Builder::new()
            .name("weir-log-writer".into())
            .spawn(move || run(&wal, rx))
            .map_err(|e| format!("log writer thread: {e}"))?;
        Ok(Writer {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    async fn send(&self, job: Job) -> Result<(), StorageError> {
        let jobs = self.jobs.as_ref().ok_or_else(closed)?;
        jobs.send(job).await.map_err(|_| closed())
    }

    async fn send_and_wait(
        &self,
        group: GroupId,
        work: impl FnOnce(oneshot::Sender<Result<(), StorageError>>) -> Work,
    ) -> Result<(), StorageError> {
        let (done, wait) = oneshot::channel();
        self.send(Job {
            group,
            work: work(done),
        })
        .await?;
        wait.await.map_err(|_| closed())?
    }

    /// Makes `entries` readable in `tail` (`group`'s) and queues their write; returns
    /// without waiting for the fsync. `encoded` is each entry's stored bytes, in the same
    /// order.
    pub async fn append(
        &self,
        group: GroupId,
        tail: &Arc<Mutex<Tail>>,
        entries: &[Entry],
        encoded: Vec<(LogId, Vec<u8>)>,
        flushed: Flushed,
    ) -> Result<(), StorageError> {
        let Some(last) = entries.last().map(|e| e.log_id) else {
            flushed.complete(Ok(()));
            return Ok(());
        };
        lock(tail).push(entries);
        self.send(Job {
            group,
            work: Work::Append {
                entries: encoded,
                last,
                tail: tail.clone(),
                flushed,
            },
        })
        .await
    }

    /// Deletes `group`'s entries from `since` on; returns once that is durable.
    pub async fn truncate(
        &self,
        group: GroupId,
        tail: &Mutex<Tail>,
        since: u64,
    ) -> Result<(), StorageError> {
        lock(tail).truncate(since);
        self.send_and_wait(group, |done| Work::Truncate { since, done })
            .await
    }

    /// Deletes `group`'s entries up to `upto` and records it as the purge point; returns
    /// once durable.
    pub async fn purge(
        &self,
        group: GroupId,
        tail: &Mutex<Tail>,
        upto: LogId,
    ) -> Result<(), StorageError> {
        lock(tail).purge(upto.index);
        self.send_and_wait(group, |done| Work::Purge { upto, done })
            .await
    }

    /// Writes `group`'s vote; returns once it is durable.
    pub async fn vote(&self, group: GroupId, vote: Vote) -> Result<(), StorageError> {
        self.send_and_wait(group, |done| Work::Vote { vote, done })
            .await
    }

    /// Queues `group`'s committed id, which may be lost on a crash; returns at once.
    pub async fn hint(&self, group: GroupId, committed: Option<LogId>) -> Result<(), StorageError> {
        self.send(Job {
            group,
            work: Work::Hint { committed },
        })
        .await
    }
}

/// Locks the tail. A panic while it was held means the tail may be inconsistent: a bug.
pub fn lock(tail: &Mutex<Tail>) -> MutexGuard<'_, Tail> {
    tail.lock().expect("log tail lock poisoned")
}

/// The writer thread: takes every queued job (up to a group), writes them in one durable
/// WAL write, updates the tail, then answers each.
fn run(wal: &Wal, mut rx: mpsc::Receiver<Job>) {
    // Only to wait for a job with a deadline (the hint's linger); nothing else runs on it.
    let timer = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("log writer: no timer ({e}); hints are written without waiting");
            return run_without_linger(wal, rx);
        }
    };
    let mut failed = None;
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        take_queued(&mut rx, &mut group);
        if failed.is_none() && group.iter().all(|j| matches!(j.work, Work::Hint { .. })) {
            // The timeout is made inside the runtime: its timer needs the runtime's context.
            let next = timer.block_on(async { tokio::time::timeout(HINT_LINGER, rx.recv()).await });
            if let Ok(Some(job)) = next {
                group.push(job);
                take_queued(&mut rx, &mut group);
            }
        }
        commit_group(wal, group, &mut failed);
    }
}

/// The writer loop without the hint's linger: each group is written at once.
fn run_without_linger(wal: &Wal, mut rx: mpsc::Receiver<Job>) {
    let mut failed = None;
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        take_queued(&mut rx, &mut group);
        commit_group(wal, group, &mut failed);
    }
}

/// The writer as a task of a simulation's runtime: the same groups as [`run`], and between a
/// group's write and its answers a simulated fsync ([`crate::simulated::SIMULATED_SYNC`]),
/// after which the disk makes the group durable ([`Wal::settle`]). A crash in that window
/// finds the group written and not durable, and nobody answered.
async fn run_simulated(wal: Arc<Wal>, mut rx: mpsc::Receiver<Job>) {
    let mut failed = None;
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        take_queued(&mut rx, &mut group);
        if failed.is_none()
            && group.iter().all(|j| matches!(j.work, Work::Hint { .. }))
            && let Ok(Some(job)) = tokio::time::timeout(HINT_LINGER, rx.recv()).await
        {
            group.push(job);
            take_queued(&mut rx, &mut group);
        }
        let result = write_group(&wal, &group, &mut failed);
        tokio::time::sleep(crate::simulated::SIMULATED_SYNC).await;
        wal.settle();
        answer_group(group, result);
    }
}

/// Moves the jobs already queued into `group`, up to a group's size.
fn take_queued(rx: &mut mpsc::Receiver<Job>, group: &mut Vec<Job>) {
    while group.len() < GROUP_JOBS_MAX {
        match rx.try_recv() {
            Ok(job) => group.push(job),
            Err(_) => break,
        }
    }
}

/// Writes a group durably, marks its entries durable in the tail, answers each job. After a
/// failed write (`failed` set) nothing is written and every job gets its error.
fn commit_group(wal: &Wal, group: Vec<Job>, failed: &mut Option<StorageError>) {
    let result = write_group(wal, &group, failed);
    answer_group(group, result);
}

/// Writes a group durably unless an earlier write failed (`failed` set, then kept).
fn write_group(
    wal: &Wal,
    group: &[Job],
    failed: &mut Option<StorageError>,
) -> Result<(), StorageError> {
    match failed {
        Some(e) => Err(e.clone()),
        None => {
            let started = std::time::Instant::now();
            let result = write(wal, group);
            crate::metrics::observe(&crate::metrics::get().fsync_seconds, started.elapsed());
            if let Err(e) = &result {
                tracing::error!("log writer: write failed, writing nothing more: {e}");
                *failed = Some(e.clone());
            }
            result
        }
    }
}

/// Marks a written group's entries durable in their tails and answers each of its jobs.
fn answer_group(group: Vec<Job>, result: Result<(), StorageError>) {
    if result.is_ok() {
        for job in &group {
            if let Work::Append { last, tail, .. } = &job.work {
                lock(tail).flushed(*last);
            }
        }
    }
    for job in group {
        let result = result.clone();
        match job.work {
            Work::Append { flushed, .. } => flushed.complete(result),
            Work::Truncate { done, .. } | Work::Purge { done, .. } | Work::Vote { done, .. } => {
                // A waiter that gave up (its task was dropped) needs no answer.
                let _ = done.send(result);
            }
            Work::Hint { .. } => {}
        }
    }
}

/// Writes a group in one durable WAL write.
fn write(wal: &Wal, group: &[Job]) -> Result<(), StorageError> {
    let mut records = vec![];
    for job in group {
        let of = job.group;
        match &job.work {
            Work::Append { entries, .. } => {
                records.extend(entries.iter().map(|(log_id, sealed)| {
                    (
                        of,
                        Record::Entry {
                            log_id: *log_id,
                            sealed,
                        },
                    )
                }))
            }
            Work::Truncate { since, .. } => records.push((of, Record::Truncate(*since))),
            Work::Purge { upto, .. } => records.push((of, Record::Purge(*upto))),
            Work::Vote { vote, .. } => records.push((of, Record::Vote(vote))),
            Work::Hint { committed } => records.push((of, Record::Committed(*committed))),
        }
    }
    wal.write(&records).map_err(write_err)
}

#[cfg(test)]
mod tests {
    use openraft::entry::RaftEntry;
    use openraft::{CommittedLeaderId, LogId};

    use super::{TAIL_DURABLE_KEPT, Tail};
    use crate::raft::Entry;

    fn id(term: u64, index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry::new_blank(id(term, index))
    }

    fn ids(entries: &[Entry]) -> Vec<(u64, u64)> {
        entries
            .iter()
            .map(|e| (e.log_id.leader_id.term, e.log_id.index))
            .collect()
    }

    #[test]
    fn entries_not_yet_durable_are_never_evicted() {
        let mut tail = Tail::default();
        let many = TAIL_DURABLE_KEPT as u64 * 2;
        tail.push(&(1..=many).map(|i| entry(1, i)).collect::<Vec<_>>());
        tail.flushed(id(1, many / 2));
        // Half are durable, half not: the tail still holds every entry not yet durable.
        assert!(tail.covers(many / 2 + 1));
        assert_eq!(tail.range(many / 2 + 1, None).len() as u64, many / 2);
        assert_eq!(
            tail.range(0, None).len(),
            TAIL_DURABLE_KEPT + many as usize / 2
        );
        tail.flushed(id(1, many));
        assert_eq!(tail.range(0, None).len(), TAIL_DURABLE_KEPT);
        assert_eq!(tail.last_log_id().map(|l| l.index), Some(many));
    }

    #[test]
    fn a_flush_of_a_truncated_entry_marks_nothing_durable() {
        let mut tail = Tail::default();
        tail.push(&[entry(1, 1), entry(1, 2), entry(1, 3)]);
        tail.truncate(2);
        tail.push(&[entry(2, 2), entry(2, 3)]);
        // The flush of the old (1, 3) append arrives after the truncate and the new append.
        tail.flushed(id(1, 3));
        assert_eq!(
            tail.durable, 0,
            "the new entries at 2 and 3 are not durable yet"
        );
        tail.flushed(id(1, 1));
        assert_eq!(tail.durable, 1);
        assert_eq!(ids(&tail.range(0, None)), vec![(1, 1), (2, 2), (2, 3)]);
    }

    #[test]
    fn range_and_purge_follow_indexes() {
        let mut tail = Tail::default();
        tail.push(&(10..20).map(|i| entry(1, i)).collect::<Vec<_>>());
        assert_eq!(ids(&tail.range(12, Some(14))), vec![(1, 12), (1, 13)]);
        assert!(tail.range(25, None).is_empty());
        assert!(!tail.covers(9));
        tail.purge(14);
        assert!(tail.covers(15) && !tail.covers(14));
        assert_eq!(tail.range(0, None).len(), 5);
        tail.purge(30);
        assert_eq!(tail.last_log_id(), None);
    }

    #[test]
    #[should_panic(expected = "log has no holes")]
    fn an_append_past_the_next_index_is_a_bug() {
        let mut tail = Tail::default();
        tail.push(&[entry(1, 1)]);
        tail.push(&[entry(1, 3)]);
    }
}
