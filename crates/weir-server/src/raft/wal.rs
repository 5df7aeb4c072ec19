//! The log's files: an append-only write-ahead log of checksummed groups in numbered segment
//! files under the data directory's `log/`, replayed into memory when the node starts.
//!
//! Why a log of its own and not a table in an embedded database: openraft makes every
//! write wait for two durable appends in series (the leader's, then a follower's), and with
//! the log in redb a commit of one small entry took 0.38–0.57 ms, most of it CPU in redb's
//! page allocator and copy-on-write B-tree, where appending the same bytes to a file and
//! calling `fdatasync` took 0.05–0.1 ms on the same disk (the figures, their commands and
//! the build they were measured on are in docs/benchmarks.md and docs/design.md, "Storage"). A Raft log is written only at its
//! end, truncated only from an index to its end and purged only from its start: an
//! append-only file fits it exactly (it is what etcd's WAL does).
//!
//! Layout. `log/` holds its `lock` file ([`LOCK_FILE`]) and segments named by a sequence
//! number (`00000000000000000001.wal`, …, 20 digits so they sort by name). A segment is a run of *groups*; the writer thread's one
//! write, made durable by one `fdatasync`, is one group (or several, if it is larger than
//! [`GROUP_BYTES_MAX`]):
//!
//! ```text
//! offset  size  field
//! 0       4     magic     b"WGRP"
//! 4       4     length    u32 little-endian, payload bytes that follow the header
//! 8       4     crc32c    of the payload
//! 12      4     crc32c    of bytes 0..12: the header proves itself before its length is used
//! 16      ..    payload   records, each a `weir_core::codec` frame
//! ```
//!
//! Records, by frame kind: `WENT` a log entry (sealed by [`super::log_entry`], so every
//! entry still proves itself when read), `WVOT` the vote, `WCOM` the committed id, `WTRN` a
//! truncation (entries from an index on are gone), `WPUR` a purge (the purge point; entries
//! up to it are gone), `WCKP` a checkpoint (vote, committed id and purge point as they stood
//! when the segment was begun), and `WGID` the Raft group the records after it belong to.
//!
//! One log, several Raft groups. A node of several groups keeps one log for all of them
//! (`server::groups_dir`), so a write of every group's queued jobs is one `pwrite` and one
//! `fdatasync`. Every record belongs to one Raft group: the lowest group the log hosts
//! (the *untagged* one) until a `WGID` names another, anew in every file group. A log of
//! one Raft group never writes a `WGID`, so its bytes are those of a log that knows no
//! groups. Each Raft group has its own entry indexes, vote, committed id and purge point; a
//! segment's checkpoint restates them for every Raft group (a `WGID` before each but the
//! untagged one's).
//!
//! Moves keep a quiet Raft group from holding the log. A segment is deleted only once no
//! live entry is in it, and a group that appends little never reaches a snapshot, so never
//! purges: its few entries would hold every segment after them, the other groups' too. So
//! when a segment is begun while the log holds [`RELOCATE_AFTER_SEGMENTS`] or more, the
//! groups whose live entries are in the oldest segment are written again, smallest first
//! while they fit in half a segment: for each, a truncation from index 0 (every live entry
//! of the group gone) and a copy of every live entry, in order, all inside one file group.
//! A file group is replayed whole or, torn, cut off whole, so replay sees the whole move or
//! none of it. [`Wal::adopt`] takes in the log of a group kept in a directory of its own,
//! when a node of several groups opens the shared log: a checkpoint, the truncation from
//! index 0 and the live entries, over as many writes of half a segment as they need (not
//! whole: until the log kept apart is marked adopted, a start cut short adopts it again).
//!
//! Invariants:
//! - Only the writer thread ([`super::log_writer`]) writes, through [`Wal::write`] (and,
//!   before the writer starts, the cut of a torn tail at open and [`Wal::adopt`]): one `pwrite` at the active
//!   segment's end, then one `fdatasync`; the in-memory state (the entry index, vote,
//!   committed id, purge point) changes only after the sync returns, so
//!   what [`Wal`] answers is durable. A failed write or sync is returned and the caller
//!   writes nothing more (fail-stop: the writer's invariant).
//! - Bytes once written are never rewritten: a segment grows at its end only. So a reader
//!   that located an entry may read it after the lock is released.
//! - Every segment's first record is a checkpoint. A segment is begun (created, the
//!   directory synced) before anything is written into it, and its first group carries the
//!   checkpoint and the records that did not fit the previous one.
//! - Segments are deleted only from the oldest, one durable removal at a time, and only
//!   while no live entry of any Raft group is in the segment. Replay loses nothing by it:
//!   an entry in the segment that is not live was purged (the later checkpoints restate
//!   the purge point) or truncated (by a record in it or later, and every entry the
//!   truncation removed is in it or earlier, so gone with it), and the newest checkpoint
//!   restates what the deleted segments' vote and committed records said.
//! - A Raft group's live entries have contiguous indexes, and their segments never
//!   decrease with the index (appends go to the active segment, a move takes them all): on
//!   replay an entry must follow the last live one of its group, else the log is refused;
//!   when none is live (a new log, or everything purged) any index may start it, as the
//!   Raft core appends after a snapshot.
//! - Damage (G8): at open every group, record and entry is verified. A group that fails is a
//!   torn write, cut off with a warning, only when it is the last thing in the newest
//!   segment and is *incomplete*: its header or its payload runs past the end of the file,
//!   or everything from it to the end is zero (a length made durable before the data). A
//!   torn write was never acknowledged: its sync had not returned. A complete group whose
//!   checksum fails is damage wherever it is (as etcd's WAL treats a CRC mismatch): the log
//!   is refused, naming the segment, the byte offset and the entry whose own checksum fails,
//!   rather than drop what may have been acknowledged.

// openraft's traits fix the error type to its `StorageError`, which is large; boxing it
// is not ours to choose.
#![allow(clippy::result_large_err)]
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::log_entry::{ENTRY_MAGIC, ENTRY_VERSION, decode_entry, open_entry};
use super::{GroupId, LogId, Vote};
use weir_core::bounds::ENTRY_BYTES_MAX;
use weir_core::codec::{self, FrameError, HEADER_BYTES};

/// The largest (and default) segment: a segment is closed and a new one begun before a write
/// would take it past its size (`raft.log_segment_bytes`, at most this).
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// Largest group payload; a larger write is split into several groups (one sync still).
pub const GROUP_BYTES_MAX: usize = 64 << 20;
/// A group's header.
pub const GROUP_HEADER_BYTES: usize = 16;
/// Largest segment file read at open (it is read whole). A segment is closed before a write
/// would take it past `SEGMENT_BYTES`, so it is at most that plus one write: at most
/// `log_writer`'s 64 jobs, each an append of `max_payload_entries` (default 64) entries of
/// at most `ENTRY_BYTES_MAX`, about 2 GiB at the defaults. A larger file is refused rather
/// than allocated.
const SEGMENT_READ_MAX: u64 = 4 << 30;
const GROUP_MAGIC: [u8; 4] = *b"WGRP";

const VOTE_MAGIC: [u8; 4] = *b"WVOT";
const COMMITTED_MAGIC: [u8; 4] = *b"WCOM";
const TRUNCATE_MAGIC: [u8; 4] = *b"WTRN";
const PURGE_MAGIC: [u8; 4] = *b"WPUR";
const CHECKPOINT_MAGIC: [u8; 4] = *b"WCKP";
const GROUP_ID_MAGIC: [u8; 4] = *b"WGID";
/// Version of every record kind but `WENT` (whose version [`super::log_entry`] owns).
const RECORD_VERSION: u16 = 1;
/// Largest payload of a record other than an entry (a vote, ids, a checkpoint: tens of bytes).
const META_BYTES_MAX: u64 = 1024;
/// From how many segments on a newly begun segment moves the quiet Raft groups out of the
/// oldest one (module doc). A busy group's snapshots purge its entries long before: 10,000
/// entries between snapshots are a fraction of one segment at the default size.
pub const RELOCATE_AFTER_SEGMENTS: usize = 4;

/// One segment file as the log needs it. Offsets are bytes from the file's start.
pub trait SegmentFile: Send + Sync {
    fn size(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; fewer bytes than asked is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Cuts the file to `len` (a torn tail, at open).
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes every write so far durable, with the file's length (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
}

/// The directory of segments (tests: a disk that loses power).
pub trait LogDisk: Send + Sync {
    /// The names of the files in the directory, in any order.
    fn list(&self) -> io::Result<Vec<String>>;
    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>>;
    /// Creates an empty file, which must not exist; its name is durable when this returns.
    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>>;
    /// Removes a file; the removal is durable when this returns (so removals reach the disk
    /// in the order they were made).
    fn remove(&self, name: &str) -> io::Result<()>;
    /// What `name` is called in messages.
    fn describe(&self, name: &str) -> String;
    /// Completes the syncs asked so far, for a disk whose syncs take simulated time
    /// ([`crate::sim::MemDisk`]); a real disk's `sync` is complete when it returns.
    fn settle(&self) {}
}

/// The lock file in a log directory: held (an exclusive `flock`) while a process has the log
/// open, so a second process on the same directory is refused instead of interleaving writes.
pub const LOCK_FILE: &str = "lock";

/// Segments in a directory of the filesystem.
pub struct DirDisk {
    dir: PathBuf,
    /// `false` only for `PLANTED(unsynced-log)`: syncs do nothing.
    sync: bool,
    /// Holds the directory's lock until dropped.
    _lock: std::fs::File,
}

impl DirDisk {
    /// The directory `dir`, created if missing (with its parent's entry synced), locked for
    /// this process: another process holding it is an error that says so.
    pub fn new(dir: &Path, sync: bool) -> io::Result<DirDisk> {
        if !dir.is_dir() {
            crate::private_files::create_dir_all(dir)?;
            if let Some(parent) = dir.parent() {
                sync_dir(parent, sync)?;
            }
        }
        let lock = crate::private_files::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(io::Error::other(format!(
                    "{} is held by another process: is another node running on this data directory?",
                    dir.join(LOCK_FILE).display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        Ok(DirDisk {
            dir: dir.to_path_buf(),
            sync,
            _lock: lock,
        })
    }
}

/// fsync of the directory `dir`: the entries made in it (a new segment's name, a removed
/// one's absence) are durable when it returns.
fn sync_dir(dir: &Path, sync: bool) -> io::Result<()> {
    // PLANTED(unsynced-dir): the log's directory fsyncs are skipped.
    if sync && !weir_core::planted::is(weir_core::planted::Plant::UnsyncedDir) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

struct DirFile {
    file: std::fs::File,
    sync: bool,
}

impl SegmentFile for DirFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, data, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

impl LogDisk for DirDisk {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = vec![];
        for e in std::fs::read_dir(&self.dir)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(name))?;
        Ok(Arc::new(DirFile {
            file,
            sync: self.sync,
        }))
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let file = crate::private_files::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.dir.join(name))?;
        sync_dir(&self.dir, self.sync)?;
        Ok(Arc::new(DirFile {
            file,
            sync: self.sync,
        }))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        match std::fs::remove_file(self.dir.join(name)) {
            // Removed already (by an earlier try whose directory sync failed): sync again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => other?,
        }
        sync_dir(&self.dir, self.sync)
    }

    fn describe(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// A segment's file name.
fn segment_name(seq: u64) -> String {
    format!("{seq:020}.wal")
}

/// A segment's sequence number from its file name, if it is one.
fn segment_seq(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A write of the log, as the writer thread hands it over.
pub enum Record<'a> {
    /// A sealed `WENT` frame and the entry's id.
    Entry {
        log_id: LogId,
        sealed: &'a [u8],
    },
    Vote(&'a Vote),
    Committed(Option<LogId>),
    /// Entries from this index to the end are gone.
    Truncate(u64),
    /// Entries up to and including this id are gone; it is the purge point.
    Purge(LogId),
}

/// Where a live entry's `WENT` frame is.
#[derive(Clone, Copy, Debug)]
struct Loc {
    log_id: LogId,
    seq: u64,
    offset: u64,
    len: u32,
}

struct Segment {
    seq: u64,
    file: Arc<dyn SegmentFile>,
    len: u64,
}

/// Vote, committed id and purge point: what a checkpoint restates.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    pub vote: Option<Vote>,
    pub committed: Option<LogId>,
    pub purged: Option<LogId>,
}

/// One Raft group's part of the log.
#[derive(Default)]
struct GroupLog {
    meta: Meta,
    /// Live entries, contiguous by index, oldest first.
    locs: VecDeque<Loc>,
}

impl GroupLog {
    fn last_index(&self) -> Option<u64> {
        self.locs.back().map(|l| l.log_id.index)
    }

    fn truncate(&mut self, since: u64) {
        while self.locs.back().is_some_and(|l| l.log_id.index >= since) {
            self.locs.pop_back();
        }
    }

    fn purge(&mut self, upto: LogId) {
        while self
            .locs
            .front()
            .is_some_and(|l| l.log_id.index <= upto.index)
        {
            self.locs.pop_front();
        }
        if self.meta.purged.is_none_or(|p| p.index < upto.index) {
            self.meta.purged = Some(upto);
        }
    }

    /// Adds an entry; `Err` names the break in the indexes.
    fn push(&mut self, loc: Loc) -> Result<(), String> {
        if let Some(last) = self.last_index()
            && loc.log_id.index != last + 1
        {
            return Err(format!(
                "entry {} follows entry {last}: the log has a hole or runs backwards",
                loc.log_id.index
            ));
        }
        self.locs.push_back(loc);
        Ok(())
    }

    /// The bytes of its live entries' frames.
    fn live_bytes(&self) -> u64 {
        self.locs.iter().map(|l| l.len as u64).sum()
    }
}

struct State {
    /// Every Raft group the log hosts, each with its part (empty until it writes).
    logs: BTreeMap<GroupId, GroupLog>,
    /// Oldest first; the last is the one written to. Never empty once open.
    segments: VecDeque<Segment>,
}

impl State {
    fn new(groups: &[GroupId]) -> State {
        State {
            logs: groups.iter().map(|g| (*g, GroupLog::default())).collect(),
            segments: VecDeque::new(),
        }
    }

    /// Group `group`'s part; a group the log does not host is a bug of the caller (every
    /// store is made from the log's own list, and replay refuses a stranger's records).
    fn log(&self, group: GroupId) -> &GroupLog {
        self.logs
            .get(&group)
            .unwrap_or_else(|| panic!("the log does not host Raft group {group}"))
    }

    fn log_mut(&mut self, group: GroupId) -> &mut GroupLog {
        self.logs
            .get_mut(&group)
            .unwrap_or_else(|| panic!("the log does not host Raft group {group}"))
    }

    /// Whether some live entry is in segment `seq`. A group's segments never decrease with
    /// the index (module doc), so its oldest live entry's segment is its oldest.
    fn holds(&self, seq: u64) -> bool {
        self.logs
            .values()
            .any(|log| log.locs.front().is_some_and(|l| l.seq <= seq))
    }
}

/// A Raft group's live entries, read to be written again by a move.
struct Move {
    group: GroupId,
    /// With it, the group's vote, committed id and purge point, restated before the copies
    /// (an adoption of a log kept apart: [`Wal::adopt`]).
    meta: Option<Meta>,
    frames: Vec<(LogId, Vec<u8>)>,
    /// Written inside one file group, so replay takes it whole or not at all (a move out of
    /// the oldest segment, which replaces live entries); else split as any records are (an
    /// adoption, which the log kept apart backs until the adoption is durable).
    whole: bool,
}

/// The write-ahead log. Shared by the writer thread (the only one that writes) and readers.
pub struct Wal {
    disk: Box<dyn LogDisk>,
    /// A new segment is begun before a write would take the active one past this.
    segment_bytes: u64,
    /// The Raft group whose records need no `WGID`: the lowest the log hosts.
    untagged: GroupId,
    state: Mutex<State>,
    /// Moves out of the oldest segment written since the log was opened.
    moves: std::sync::atomic::AtomicU64,
}

/// An entry found by [`Wal::locate`], read by [`Wal::read`] without the lock.
pub struct Located {
    file: Arc<dyn SegmentFile>,
    name: String,
    locs: Vec<Loc>,
}

/// Where one write goes: `file` (segment `seq`) at byte `at`; with `checkpoint`, the write
/// begins the segment and carries its checkpoint first; `created` is the segment begun for
/// it, recorded in the state once the write is durable; `moves`, the Raft groups written
/// again before the write's own records.
struct Placement {
    file: Arc<dyn SegmentFile>,
    seq: u64,
    at: u64,
    checkpoint: bool,
    created: Option<Arc<dyn SegmentFile>>,
    moves: Vec<Move>,
}

impl Wal {
    /// Opens the log of one Raft group ([`super::SOLE_GROUP`]) on `disk`, replaying and
    /// verifying every segment; creates the first segment of an empty log. A damaged log is
    /// refused with the segment and offset. `segment_bytes` is `raft.log_segment_bytes` (at
    /// most [`SEGMENT_BYTES`]; tests rotate sooner).
    pub fn open(disk: Box<dyn LogDisk>, segment_bytes: u64) -> Result<Wal, String> {
        Wal::open_groups(disk, segment_bytes, &[super::SOLE_GROUP])
    }

    /// Opens a log shared by the Raft groups `groups` (not empty), as [`Wal::open`] does;
    /// a record of a group not among them is refused.
    pub fn open_groups(
        disk: Box<dyn LogDisk>,
        segment_bytes: u64,
        groups: &[GroupId],
    ) -> Result<Wal, String> {
        let untagged = *groups.iter().min().expect("a log hosts a Raft group");
        // A move is written inside one file group of at most GROUP_BYTES_MAX: half a
        // segment must fit in one.
        let segment_bytes = segment_bytes.min(SEGMENT_BYTES);
        let mut seqs: Vec<u64> = vec![];
        for name in disk
            .list()
            .map_err(|e| format!("{}: {e}", disk.describe("")))?
        {
            match segment_seq(&name) {
                Some(seq) => seqs.push(seq),
                None if name == LOCK_FILE => {}
                None => {
                    return Err(format!(
                        "{}: not a log segment (the log directory holds only NNNN.wal files)",
                        disk.describe(&name)
                    ));
                }
            }
        }
        seqs.sort_unstable();
        let mut state = State::new(groups);
        let count = seqs.len();
        for (i, seq) in seqs.into_iter().enumerate() {
            let name = segment_name(seq);
            let file = disk
                .open(&name)
                .map_err(|e| format!("{}: {e}", disk.describe(&name)))?;
            let newest = i + 1 == count;
            let segment = replay(&mut state, untagged, seq, file, newest)
                .map_err(|e| format!("{}: {e}", disk.describe(&name)))?;
            state.segments.push_back(segment);
        }
        if state.segments.is_empty() {
            let name = segment_name(1);
            let file = disk
                .create(&name)
                .map_err(|e| format!("{}: {e}", disk.describe(&name)))?;
            state.segments.push_back(Segment {
                seq: 1,
                file,
                len: 0,
            });
        }
        crate::metrics::get()
            .log_segments
            .set(state.segments.len() as i64);
        Ok(Wal {
            disk,
            segment_bytes,
            untagged,
            state: Mutex::new(state),
            moves: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("log state lock poisoned")
    }

    /// The Raft groups the log hosts, lowest first.
    pub fn groups(&self) -> Vec<GroupId> {
        self.lock().logs.keys().copied().collect()
    }

    /// How many segment files the log has now.
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }

    /// How many groups were moved out of the oldest segment since the log was opened.
    pub fn moves(&self) -> u64 {
        self.moves.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Vote, committed id and purge point of `group`, as durable.
    pub fn meta(&self, group: GroupId) -> Meta {
        self.lock().log(group).meta.clone()
    }

    /// The id of `group`'s last live entry.
    pub fn last_log_id(&self, group: GroupId) -> Option<LogId> {
        self.lock().log(group).locs.back().map(|l| l.log_id)
    }

    /// `group`'s live entries with indexes in `start..end`, to read with [`Wal::read`].
    pub fn locate(&self, group: GroupId, start: u64, end: Option<u64>) -> Vec<Located> {
        locate_in(&self.lock(), group, start, end)
    }

    /// Reads and verifies located entries (blocking I/O), in index order. Entries next to
    /// each other in a file are read with one call.
    pub fn read(&self, located: Vec<Located>) -> Result<Vec<super::Entry>, String> {
        let mut out = vec![];
        for run in located {
            let mut i = 0;
            while i < run.locs.len() {
                // The longest stretch of frames that lie end to end.
                let mut j = i + 1;
                while j < run.locs.len()
                    && run.locs[j].offset == run.locs[j - 1].offset + run.locs[j - 1].len as u64
                {
                    j += 1;
                }
                let start = run.locs[i].offset;
                let end = run.locs[j - 1].offset + run.locs[j - 1].len as u64;
                let mut buf = vec![0u8; (end - start) as usize];
                run.file
                    .read_at(&mut buf, start)
                    .map_err(|e| format!("{}: {e}", self.disk.describe(&run.name)))?;
                for loc in &run.locs[i..j] {
                    let at = (loc.offset - start) as usize;
                    let entry = decode_entry(loc.log_id.index, &buf[at..at + loc.len as usize])
                        .map_err(|e| {
                            format!(
                                "{} at byte {}: log entry {}: {e}",
                                self.disk.describe(&run.name),
                                loc.offset,
                                loc.log_id.index
                            )
                        })?;
                    out.push(entry);
                }
                i = j;
            }
        }
        Ok(out)
    }

    /// `group`'s live entries' sealed frames as stored, each verified, in index order.
    pub fn live_frames(&self, group: GroupId) -> Result<Vec<(LogId, Vec<u8>)>, String> {
        let located = self.locate(group, 0, None);
        self.read_frames(located).map_err(|e| e.to_string())
    }

    /// Reads located entries' sealed frames as stored, each verified (its checksum and the
    /// id it was located by), to be written again.
    fn read_frames(&self, located: Vec<Located>) -> io::Result<Vec<(LogId, Vec<u8>)>> {
        let mut out = vec![];
        for run in located {
            for loc in run.locs {
                let mut frame = vec![0u8; loc.len as usize];
                let where_ = || format!("{} at byte {}", self.disk.describe(&run.name), loc.offset);
                run.file
                    .read_at(&mut frame, loc.offset)
                    .map_err(|e| io::Error::other(format!("{}: {e}", where_())))?;
                let stored = open_entry(&frame).map_err(|e| {
                    io::Error::other(format!("{}: log entry {}: {e}", where_(), loc.log_id.index))
                })?;
                if stored.log_id != loc.log_id {
                    return Err(io::Error::other(format!(
                        "{}: log entry {} found where {} was written",
                        where_(),
                        stored.log_id,
                        loc.log_id
                    )));
                }
                out.push((loc.log_id, frame));
            }
        }
        Ok(out)
    }

    /// Completes the disk's syncs asked so far ([`LogDisk::settle`]).
    pub fn settle(&self) {
        self.disk.settle();
    }

    /// Writes `records`, each of its Raft group, durably and in order: one write at the
    /// active segment's end (a new segment first if it would pass its segment size), one
    /// sync, then the in-memory state. `Err`: nothing may be assumed written; the caller
    /// writes nothing more.
    pub fn write(&self, records: &[(GroupId, Record<'_>)]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let estimate: usize = records
            .iter()
            .map(|(_, r)| record_len_estimate(r) + TAG_BYTES_MAX)
            .sum();
        let place = self.place_write(estimate)?;
        self.write_at(place, records, estimate)
    }

    /// Takes in the log of `group` as kept apart (its vote, committed id, purge point and
    /// live entries' sealed frames, in order), replacing whatever this log held of the group,
    /// durably, in writes of at most half a segment each. For a node's start, before the
    /// writer runs: until the log kept apart is marked adopted it is the group's truth, and
    /// adopting it again, whole or after a part, gives the same state.
    pub fn adopt(
        &self,
        group: GroupId,
        meta: Meta,
        frames: Vec<(LogId, Vec<u8>)>,
    ) -> io::Result<()> {
        let budget = (self.segment_bytes / 2).max(1) as usize;
        let mut chunks: Vec<Vec<(LogId, Vec<u8>)>> = vec![vec![]];
        let mut bytes = 0;
        for frame in frames {
            let last = chunks.last_mut().expect("a chunk");
            if !last.is_empty() && bytes + frame.1.len() > budget {
                chunks.push(vec![]);
                bytes = 0;
            }
            bytes += frame.1.len();
            chunks.last_mut().expect("a chunk").push(frame);
        }
        let mut chunks = chunks.into_iter();
        let first = chunks.next().expect("a chunk");
        let estimate: usize = first
            .iter()
            .map(|(_, f)| f.len() + TAG_BYTES_MAX)
            .sum::<usize>()
            + 4 * TAG_BYTES_MAX;
        let mut place = self.place_write(estimate)?;
        place.moves.push(Move {
            group,
            meta: Some(meta),
            frames: first,
            whole: false,
        });
        self.write_at(place, &[], estimate)?;
        for chunk in chunks {
            let records: Vec<(GroupId, Record<'_>)> = chunk
                .iter()
                .map(|(log_id, sealed)| {
                    (
                        group,
                        Record::Entry {
                            log_id: *log_id,
                            sealed,
                        },
                    )
                })
                .collect();
            self.write(&records)?;
        }
        Ok(())
    }

    /// Lays out and writes the moves of `place` and `records`, then notes them.
    fn write_at(
        &self,
        place: Placement,
        records: &[(GroupId, Record<'_>)],
        estimate: usize,
    ) -> io::Result<()> {
        let (buf, locs) = self.encode(&place, records, estimate);
        append_durably(place.file.as_ref(), &buf, place.at)?;
        self.note_written(place, records, locs, buf.len());
        Ok(())
    }

    /// Where a write of about `estimate` bytes goes: the active segment's end, or the start
    /// of a new segment, created now, when the write would take the active one past its
    /// segment size; a new segment moves the quiet groups out of the oldest (module doc).
    fn place_write(&self, estimate: usize) -> io::Result<Placement> {
        let (file, seq, at, begin, count) = {
            let state = self.lock();
            let active = state.segments.back().expect("an open log has a segment");
            (
                active.file.clone(),
                active.seq,
                active.len,
                active.len == 0,
                state.segments.len(),
            )
        };
        if !begin && at + estimate as u64 > self.segment_bytes {
            let seq = seq
                .checked_add(1)
                .ok_or_else(|| io::Error::other("log segment numbers are exhausted"))?;
            let moves = if count >= RELOCATE_AFTER_SEGMENTS {
                self.moves_out_of_oldest()?
            } else {
                vec![]
            };
            let name = segment_name(seq);
            let file = self.disk.create(&name)?;
            return Ok(Placement {
                file: file.clone(),
                seq,
                at: 0,
                checkpoint: true,
                created: Some(file),
                moves,
            });
        }
        Ok(Placement {
            file,
            seq,
            at,
            checkpoint: begin,
            created: None,
            moves: vec![],
        })
    }

    /// The Raft groups with live entries in the oldest segment, smallest first while their
    /// live entries together fit in half a segment, each read to be written again whole.
    fn moves_out_of_oldest(&self) -> io::Result<Vec<Move>> {
        let picked = {
            let state = self.lock();
            let oldest = state.segments[0].seq;
            let mut holding: Vec<(u64, GroupId)> = state
                .logs
                .iter()
                .filter(|(_, log)| log.locs.front().is_some_and(|l| l.seq == oldest))
                .map(|(group, log)| (log.live_bytes(), *group))
                .collect();
            holding.sort_unstable();
            let mut budget = self.segment_bytes / 2;
            let mut picked = vec![];
            for (bytes, group) in holding {
                if bytes > budget {
                    break;
                }
                budget -= bytes;
                picked.push((group, locate_in(&state, group, 0, None)));
            }
            picked
        };
        let mut moves = vec![];
        for (group, located) in picked {
            moves.push(Move {
                group,
                meta: None,
                frames: self.read_frames(located)?,
                whole: true,
            });
        }
        Ok(moves)
    }

    /// The bytes of one write: its file groups (a checkpoint for every Raft group first when
    /// the segment begins, then the moves), each at most [`GROUP_BYTES_MAX`] of payload
    /// unless one record or one whole move alone is larger, and where each entry lands.
    fn encode(
        &self,
        place: &Placement,
        records: &[(GroupId, Record<'_>)],
        estimate: usize,
    ) -> (Vec<u8>, Vec<(GroupId, Loc)>) {
        let mut enc = Encoder::new(self.untagged, place.seq, place.at, estimate);
        if place.checkpoint {
            let metas: Vec<(GroupId, Meta)> = {
                let state = self.lock();
                state
                    .logs
                    .iter()
                    .map(|(g, log)| (*g, log.meta.clone()))
                    .collect()
            };
            for (group, meta) in metas {
                let frame = seal_checkpoint(&meta);
                enc.room(frame.len());
                enc.frame(group, &frame, None);
            }
        }
        for mv in &place.moves {
            if mv.whole {
                let bytes: usize = mv.frames.iter().map(|(_, f)| f.len()).sum();
                enc.room(bytes + 3 * TAG_BYTES_MAX);
            }
            if let Some(meta) = &mv.meta {
                let frame = seal_checkpoint(meta);
                enc.room(frame.len());
                enc.frame(mv.group, &frame, None);
            }
            let gone = seal_meta(&Record::Truncate(0));
            if !mv.whole {
                enc.room(gone.len());
            }
            enc.frame(mv.group, &gone, None);
            for (log_id, frame) in &mv.frames {
                if !mv.whole {
                    enc.room(frame.len());
                }
                enc.frame(mv.group, frame, Some(*log_id));
            }
        }
        for (group, record) in records {
            match record {
                Record::Entry { log_id, sealed } => {
                    enc.room(sealed.len());
                    enc.frame(*group, sealed, Some(*log_id));
                }
                other => {
                    let frame = seal_meta(other);
                    enc.room(frame.len());
                    enc.frame(*group, &frame, None);
                }
            }
        }
        enc.finish()
    }

    /// The in-memory state after a durable write of `written` bytes at `place`: the new
    /// segment, if one was begun; the moves; every record, in order; the active segment's
    /// length; then the segments no live entry is in any more, deleted.
    fn note_written(
        &self,
        place: Placement,
        records: &[(GroupId, Record<'_>)],
        locs: Vec<(GroupId, Loc)>,
        written: usize,
    ) {
        let mut state = self.lock();
        if let Some(file) = place.created {
            state.segments.push_back(Segment {
                seq: place.seq,
                file,
                len: 0,
            });
        }
        let mut locs = locs.into_iter();
        // The core appends at the next index only (log_writer's Tail asserts it before the
        // write is queued), and a move copies a run that was contiguous: a break is a bug,
        // not an operating error.
        let mut push = |log: &mut GroupLog, group: GroupId| {
            let (at, loc) = locs.next().expect("one location per entry record");
            assert_eq!(at, group, "entry locations follow the records' order");
            if let Err(why) = log.push(loc) {
                panic!("log append out of order in Raft group {group}: {why}");
            }
        };
        for mv in &place.moves {
            if mv.whole {
                self.moves
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                crate::metrics::get().log_moves.inc();
            }
            let log = state.log_mut(mv.group);
            if let Some(meta) = &mv.meta {
                restate(log, meta);
            }
            log.truncate(0);
            for _ in &mv.frames {
                push(log, mv.group);
            }
        }
        for (group, record) in records {
            let log = state.log_mut(*group);
            match record {
                Record::Entry { .. } => push(log, *group),
                Record::Vote(v) => log.meta.vote = Some(**v),
                Record::Committed(c) => log.meta.committed = *c,
                Record::Truncate(since) => log.truncate(*since),
                Record::Purge(upto) => log.purge(*upto),
            }
        }
        let active = state.segments.back_mut().expect("a segment");
        active.len = place.at + written as u64;
        self.delete_unheld(&mut state);
        crate::metrics::get()
            .log_segments
            .set(state.segments.len() as i64);
    }

    /// Deletes the oldest segments while no live entry is in them (never the active one),
    /// oldest first, each removal durable before the next. A failed delete is logged and
    /// ends the round: the segment stays the oldest (a younger one deleted before it would
    /// leave a gap replay cannot cross) and is tried again after the next write. Nothing is
    /// lost by keeping it: replay drops its entries again.
    fn delete_unheld(&self, state: &mut State) {
        while state.segments.len() > 1 && !state.holds(state.segments[0].seq) {
            let name = segment_name(state.segments[0].seq);
            if let Err(e) = self.disk.remove(&name) {
                tracing::warn!(
                    "log: cannot delete {}, which holds no live entry (tried again after the \
                     next write): {e}",
                    self.disk.describe(&name)
                );
                return;
            }
            state.segments.pop_front();
        }
    }
}

/// `group`'s live entries in `start..end` in `state`, in runs of one segment each.
fn locate_in(state: &State, group: GroupId, start: u64, end: Option<u64>) -> Vec<Located> {
    let log = state.log(group);
    let Some(first) = log.locs.front().map(|l| l.log_id.index) else {
        return vec![];
    };
    let len = log.locs.len() as u64;
    let from = start.saturating_sub(first).min(len) as usize;
    let to = end.map_or(len, |e| e.saturating_sub(first).min(len)) as usize;
    let mut out: Vec<Located> = vec![];
    for loc in log.locs.range(from..to.max(from)) {
        match out.last_mut() {
            Some(run) if run.locs[0].seq == loc.seq => run.locs.push(*loc),
            _ => {
                let Some(segment) = state.segments.iter().find(|s| s.seq == loc.seq) else {
                    // A segment is deleted only once no live entry is in it.
                    unreachable!("live entry {} in a deleted segment", loc.log_id);
                };
                out.push(Located {
                    file: segment.file.clone(),
                    name: segment_name(loc.seq),
                    locs: vec![*loc],
                })
            }
        }
    }
    out
}

/// A checkpoint's restatement applied to a group's part: the vote and committed id as
/// stated, the purge point if it is further.
fn restate(log: &mut GroupLog, meta: &Meta) {
    log.meta.vote = meta.vote;
    log.meta.committed = meta.committed;
    if let Some(upto) = meta.purged {
        log.purge(upto);
    }
}

/// A `WGID` frame is at most this long (a header and a `u32`), and so is what a write
/// adds to a record to name its Raft group.
const TAG_BYTES_MAX: usize = HEADER_BYTES + 16;

/// One write's bytes as they are laid out: file groups of at most [`GROUP_BYTES_MAX`] of
/// payload, a `WGID` wherever the records' Raft group changes (and, in a new file group,
/// before the first record of any group but the untagged one), and where each entry lands.
struct Encoder {
    buf: Vec<u8>,
    /// Where the open file group's header is.
    start: usize,
    /// The Raft group the open file group's last record belongs to.
    current: GroupId,
    untagged: GroupId,
    seq: u64,
    at: u64,
    locs: Vec<(GroupId, Loc)>,
}

impl Encoder {
    fn new(untagged: GroupId, seq: u64, at: u64, estimate: usize) -> Encoder {
        let mut buf = Vec::with_capacity(estimate + GROUP_HEADER_BYTES + 128);
        buf.extend_from_slice(&[0u8; GROUP_HEADER_BYTES]);
        Encoder {
            buf,
            start: 0,
            current: untagged,
            untagged,
            seq,
            at,
            locs: vec![],
        }
    }

    /// Begins a new file group unless `bytes` more (and a tag) fit in the open one; an
    /// open one that holds nothing takes anything.
    fn room(&mut self, bytes: usize) {
        let payload = self.buf.len() - self.start - GROUP_HEADER_BYTES;
        if payload > 0 && payload + bytes + TAG_BYTES_MAX > GROUP_BYTES_MAX {
            seal_group(&mut self.buf, self.start);
            self.start = self.buf.len();
            self.buf.extend_from_slice(&[0u8; GROUP_HEADER_BYTES]);
            self.current = self.untagged;
        }
    }

    /// Adds a record of Raft group `group`; `entry`: it is that entry's frame.
    fn frame(&mut self, group: GroupId, frame: &[u8], entry: Option<LogId>) {
        if group != self.current {
            self.buf.extend_from_slice(&codec::seal_frame(
                GROUP_ID_MAGIC,
                RECORD_VERSION,
                &codec::encode(&group),
            ));
            self.current = group;
        }
        if let Some(log_id) = entry {
            self.locs.push((
                group,
                Loc {
                    log_id,
                    seq: self.seq,
                    offset: self.at + self.buf.len() as u64,
                    len: frame.len() as u32,
                },
            ));
        }
        self.buf.extend_from_slice(frame);
    }

    fn finish(mut self) -> (Vec<u8>, Vec<(GroupId, Loc)>) {
        seal_group(&mut self.buf, self.start);
        (self.buf, self.locs)
    }
}

fn seal_checkpoint(meta: &Meta) -> Vec<u8> {
    codec::seal_frame(CHECKPOINT_MAGIC, RECORD_VERSION, &codec::encode(meta))
}

/// One write of `buf` at byte `at` of `file`, then one sync: durable when this returns.
fn append_durably(file: &dyn SegmentFile, buf: &[u8], at: u64) -> io::Result<()> {
    file.write_at(buf, at)?;
    file.sync()
}

/// A record's frame length (an entry: exactly; others: at most).
fn record_len_estimate(record: &Record<'_>) -> usize {
    match record {
        Record::Entry { sealed, .. } => sealed.len(),
        _ => seal_meta(record).len(),
    }
}

/// A record other than an entry, sealed in its frame.
fn seal_meta(record: &Record<'_>) -> Vec<u8> {
    let (magic, payload) = match record {
        Record::Entry { sealed, .. } => return sealed.to_vec(),
        Record::Vote(v) => (VOTE_MAGIC, codec::encode(v)),
        Record::Committed(c) => (COMMITTED_MAGIC, codec::encode(c)),
        Record::Truncate(since) => (TRUNCATE_MAGIC, codec::encode(since)),
        Record::Purge(upto) => (PURGE_MAGIC, codec::encode(upto)),
    };
    codec::seal_frame(magic, RECORD_VERSION, &payload)
}

/// Fills in the header of the group that starts at `start` and runs to the end of `buf`.
fn seal_group(buf: &mut [u8], start: usize) {
    let payload = &buf[start + GROUP_HEADER_BYTES..];
    let len = payload.len() as u32;
    let crc = crc32c::crc32c(payload);
    let header = &mut buf[start..start + GROUP_HEADER_BYTES];
    header[0..4].copy_from_slice(&GROUP_MAGIC);
    header[4..8].copy_from_slice(&len.to_le_bytes());
    header[8..12].copy_from_slice(&crc.to_le_bytes());
    let header_crc = crc32c::crc32c(&header[0..12]);
    header[12..16].copy_from_slice(&header_crc.to_le_bytes());
}

/// Why a group could not be read, and whether it may be a torn write.
enum GroupError {
    /// Runs past the end of the file: torn if it is in the newest segment.
    Torn(String),
    Damaged(String),
}

/// The group at `at` of `bytes`: its payload and the offset after it.
fn read_group(bytes: &[u8], at: usize) -> Result<(&[u8], usize), GroupError> {
    let rest = &bytes[at..];
    if rest.len() < GROUP_HEADER_BYTES {
        return Err(GroupError::Torn(format!(
            "{} bytes at the end, a group header is {GROUP_HEADER_BYTES}",
            rest.len()
        )));
    }
    let header = &rest[..GROUP_HEADER_BYTES];
    let stored_header_crc = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    if header[0..4] != GROUP_MAGIC || crc32c::crc32c(&header[0..12]) != stored_header_crc {
        return Err(GroupError::Damaged(
            "not a group header (bad magic or header checksum)".into(),
        ));
    }
    let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
    if len > GROUP_BYTES_MAX {
        return Err(GroupError::Damaged(format!(
            "group of {len} bytes, the bound is {GROUP_BYTES_MAX}"
        )));
    }
    let end = at + GROUP_HEADER_BYTES + len;
    if end > bytes.len() {
        return Err(GroupError::Torn(format!(
            "group of {len} bytes runs past the end of the file"
        )));
    }
    let payload = &bytes[at + GROUP_HEADER_BYTES..end];
    let stored = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(payload);
    if computed != stored {
        return Err(GroupError::Damaged(format!(
            "group checksum mismatch: stored {stored:08x}, payload has {computed:08x}{}",
            first_bad_record(payload, at + GROUP_HEADER_BYTES)
        )));
    }
    Ok((payload, end))
}

/// The frame at `at` of `payload` (its kind and length from its header), and its end.
fn next_frame(payload: &[u8], at: usize) -> Result<([u8; 4], &[u8], usize), FrameError> {
    let rest = &payload[at..];
    if rest.len() < HEADER_BYTES {
        return Err(FrameError::TooShort { len: rest.len() });
    }
    let magic: [u8; 4] = rest[0..4].try_into().expect("4 bytes");
    let declared = u64::from_le_bytes(rest[6..14].try_into().expect("8 bytes"));
    let max = if magic == ENTRY_MAGIC {
        ENTRY_BYTES_MAX as u64
    } else {
        META_BYTES_MAX
    };
    if declared > max {
        return Err(FrameError::TooLarge { declared, max });
    }
    let end = HEADER_BYTES + declared as usize;
    if end > rest.len() {
        return Err(FrameError::Truncated {
            declared,
            actual: (rest.len() - HEADER_BYTES) as u64,
        });
    }
    Ok((magic, &rest[..end], at + end))
}

/// In a group that failed its checksum, the first record that fails its own, as words to
/// add to the message (empty if none does: the damage is elsewhere).
fn first_bad_record(payload: &[u8], payload_at: usize) -> String {
    let mut p = 0;
    while p < payload.len() {
        let Ok((magic, frame, next)) = next_frame(payload, p) else {
            return format!("; record at byte {} unreadable", payload_at + p);
        };
        let failed = if magic == ENTRY_MAGIC {
            codec::open_frame(frame, magic, ENTRY_VERSION, ENTRY_BYTES_MAX as u64).err()
        } else {
            codec::open_frame(frame, magic, RECORD_VERSION, META_BYTES_MAX).err()
        };
        if let Some(e) = failed {
            let what = match (magic == ENTRY_MAGIC)
                .then(|| entry_index_unverified(frame))
                .flatten()
            {
                Some(index) => format!("log entry {index}"),
                None => format!("record {:?}", String::from_utf8_lossy(&magic)),
            };
            return format!("; {what} at byte {}: {e}", payload_at + p);
        }
        p = next;
    }
    String::new()
}

/// The index an entry frame claims, read without trusting its checksum (for messages only).
fn entry_index_unverified(frame: &[u8]) -> Option<u64> {
    let entry: super::Entry = codec::decode(frame.get(HEADER_BYTES..)?).ok()?;
    Some(entry.log_id.index)
}

fn open_meta<T: serde::de::DeserializeOwned>(
    frame: &[u8],
    magic: [u8; 4],
) -> Result<T, FrameError> {
    codec::decode(codec::open_frame(
        frame,
        magic,
        RECORD_VERSION,
        META_BYTES_MAX,
    )?)
}

/// Replays one segment into `state` (records without a `WGID` are `untagged`'s); a torn
/// tail of the newest segment is cut off.
fn replay(
    state: &mut State,
    untagged: GroupId,
    seq: u64,
    file: Arc<dyn SegmentFile>,
    newest: bool,
) -> Result<Segment, String> {
    let bytes = read_segment(file.as_ref())?;
    let mut segment = Segment { seq, file, len: 0 };
    let mut at = 0;
    while at < bytes.len() {
        let (payload, end) = match read_group(&bytes, at) {
            Ok(group) => group,
            Err(e) => {
                cut_torn_write(&segment, &bytes, at, e, newest)?;
                break;
            }
        };
        replay_group(state, untagged, &segment, payload, at)?;
        at = end;
        segment.len = at as u64;
    }
    Ok(segment)
}

/// A segment's bytes, read whole; a file larger than any segment this log writes is refused.
fn read_segment(file: &dyn SegmentFile) -> Result<Vec<u8>, String> {
    let len = file.size().map_err(|e| e.to_string())?;
    if len > SEGMENT_READ_MAX {
        return Err(format!(
            "{len} bytes, more than any segment this log writes ({SEGMENT_READ_MAX})"
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_at(&mut bytes, 0).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The group at `at` of `bytes` could not be read (`e`): a torn write, when it is the newest
/// segment's tail (it runs past the end, or all from it on is zero), is cut off, durably;
/// anything else is damage, returned naming the byte.
fn cut_torn_write(
    segment: &Segment,
    bytes: &[u8],
    at: usize,
    e: GroupError,
    newest: bool,
) -> Result<(), String> {
    let torn = match &e {
        GroupError::Torn(_) => true,
        GroupError::Damaged(_) => bytes[at..].iter().all(|b| *b == 0),
    };
    let why = match e {
        GroupError::Torn(why) | GroupError::Damaged(why) => why,
    };
    if newest && torn {
        tracing::warn!(
            "log segment {}: a torn write at byte {at} ({why}), cut off: it was never acknowledged",
            segment_name(segment.seq)
        );
        segment
            .file
            .set_len(at as u64)
            .and_then(|()| segment.file.sync())
            .map_err(|e| format!("cutting the torn write at byte {at}: {e}"))?;
        return Ok(());
    }
    Err(format!("at byte {at}: {why}"))
}

/// Replays the records of the verified file group at `at` (its `payload`) into `state`,
/// in order, each of the Raft group the last `WGID` named (`untagged` before any); the
/// segment's first record must be a checkpoint or a `WGID`.
fn replay_group(
    state: &mut State,
    untagged: GroupId,
    segment: &Segment,
    payload: &[u8],
    at: usize,
) -> Result<(), String> {
    let payload_at = at + GROUP_HEADER_BYTES;
    let mut current = untagged;
    let mut p = 0;
    while p < payload.len() {
        let offset = payload_at + p;
        let (magic, frame, next) =
            next_frame(payload, p).map_err(|e| format!("at byte {offset}: record: {e}"))?;
        if at == 0 && p == 0 && magic != CHECKPOINT_MAGIC && magic != GROUP_ID_MAGIC {
            return Err(format!(
                "at byte 0: the segment does not begin with a checkpoint (found {:?})",
                String::from_utf8_lossy(&magic)
            ));
        }
        if magic == GROUP_ID_MAGIC {
            let group: GroupId =
                open_meta(frame, GROUP_ID_MAGIC).map_err(|e| format!("at byte {offset}: {e}"))?;
            if !state.logs.contains_key(&group) {
                return Err(format!(
                    "at byte {offset}: records of Raft group {group}, which this log does not \
                     host (it hosts {:?})",
                    state.logs.keys().collect::<Vec<_>>()
                ));
            }
            current = group;
        } else {
            replay_record(state.log_mut(current), segment, magic, frame, offset)?;
        }
        p = next;
    }
    Ok(())
}

/// Checks one record (its `frame`, of kind `magic`, at byte `offset` of the segment) and
/// applies it to its Raft group's part `log`: an entry follows the last live one, the
/// others set the vote, the committed id, a truncation, a purge or a checkpoint's
/// restatement.
fn replay_record(
    log: &mut GroupLog,
    segment: &Segment,
    magic: [u8; 4],
    frame: &[u8],
    offset: usize,
) -> Result<(), String> {
    let bad = |e: FrameError| format!("at byte {offset}: {e}");
    match magic {
        ENTRY_MAGIC => {
            let log_id = open_entry(frame).map_err(bad)?.log_id;
            log.push(Loc {
                log_id,
                seq: segment.seq,
                offset: offset as u64,
                len: frame.len() as u32,
            })
            .map_err(|why| format!("at byte {offset}: {why}"))?;
        }
        VOTE_MAGIC => log.meta.vote = Some(open_meta(frame, VOTE_MAGIC).map_err(bad)?),
        COMMITTED_MAGIC => log.meta.committed = open_meta(frame, COMMITTED_MAGIC).map_err(bad)?,
        TRUNCATE_MAGIC => {
            let since: u64 = open_meta(frame, TRUNCATE_MAGIC).map_err(bad)?;
            log.truncate(since);
        }
        PURGE_MAGIC => {
            let upto: LogId = open_meta(frame, PURGE_MAGIC).map_err(bad)?;
            log.purge(upto);
        }
        CHECKPOINT_MAGIC => {
            let meta: Meta = open_meta(frame, CHECKPOINT_MAGIC).map_err(bad)?;
            restate(log, &meta);
        }
        other => {
            return Err(format!(
                "at byte {offset}: unknown record kind {:?}",
                String::from_utf8_lossy(&other)
            ));
        }
    }
    Ok(())
}
