//! A log disk in memory that loses power: [`MemDisk`], the simulated disk under a simulated
//! node's write-ahead log ([`crate::raft::wal::LogDisk`]).
//!
//! Every file keeps two images: what reads see (every write so far) and what survives a
//! crash (the durable image). Writes and length changes since the last completed sync are
//! kept in order as pending operations. A `sync` asks for every operation before it; the
//! ask completes at [`LogDisk::settle`], which the simulated log writer calls after the
//! simulated fsync's time, and only then are they durable. [`MemDisk::crash`] is a power
//! loss: every file goes back to its durable image, and with a tear the oldest pending
//! write survives in part, as a write cut off mid-sector would.
//!
//! Names: a created file's name is durable when the call returns (the trait's promise, which
//! the real disk keeps with a directory fsync). A removed file is gone for reads at once and
//! gone from the disk at the next settle: the log removes a segment right after the sync
//! that makes its purge record durable, and that sync completes only at the settle, so a
//! crash before it keeps both the segment and the old purge point, as a real disk would.
//! Under `PLANTED(unsynced-dir)` neither a creation nor a removal is ever durable (a crash
//! undoes them); under `PLANTED(unsynced-log)` a sync asks for nothing, as the planted
//! real disk's does nothing.
//!
//! Invariants:
//! - A file's durable image changes only at a settle (the pending operations a sync asked
//!   for, in order) or at a crash (a torn write).
//! - After a crash nothing opened before it reads, writes, creates, removes or settles:
//!   each file handle, and the disk a node's log was given ([`MemDisk::bound`]), carries the
//!   disk's generation, and a crash starts a new one, so a killed node's log writer, which
//!   may outlive the node by a few jobs, cannot write into its successor's disk.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::raft::wal::{LogDisk, SegmentFile};
use weir_core::planted::{self, Plant};

/// A simulated log directory; clones share it, and it outlives the node that uses it.
#[derive(Clone, Default)]
pub struct MemDisk {
    inner: Arc<Mutex<Disk>>,
    /// The generation a node's log was given this disk in ([`MemDisk::bound`]): after a
    /// crash it does nothing more. `None` for the simulation's own handle.
    bound: Option<u64>,
}

#[derive(Default)]
struct Disk {
    /// Bumped by each crash: handles from before it are dead.
    generation: u64,
    files: BTreeMap<String, Arc<Mutex<File>>>,
    /// Names whose existence is durable (every name, unless a plant skips directory syncs).
    durable_names: BTreeSet<String>,
    /// Files removed and not yet settled (or never, under the unsynced-dir plant), which a
    /// crash brings back.
    removed: BTreeMap<String, Arc<Mutex<File>>>,
    /// Orders pending writes across files, so a crash can tear the oldest.
    next_op: u64,
}

#[derive(Default)]
struct File {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Operations since the last settle, oldest first, with their disk-wide order.
    pending: Vec<(u64, Op)>,
    /// How many of `pending` a sync has asked for.
    asked: usize,
}

#[derive(Clone)]
enum Op {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

fn apply(image: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { offset, bytes } => {
            let start = *offset as usize;
            let end = start + bytes.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[start..end].copy_from_slice(bytes);
        }
        Op::SetLen(len) => image.resize(*len as usize, 0),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::lock::lock(m)
}

fn lost_power() -> io::Error {
    io::Error::other("the simulated disk lost power since this was opened")
}

impl MemDisk {
    pub fn new() -> MemDisk {
        MemDisk::default()
    }

    /// This disk as a node's log gets it: dead from the next crash on.
    pub fn bound(&self) -> MemDisk {
        MemDisk {
            inner: self.inner.clone(),
            bound: Some(lock(&self.inner).generation),
        }
    }

    /// The disk, unless this handle is bound to a generation a crash has ended.
    fn live(&self) -> io::Result<MutexGuard<'_, Disk>> {
        let disk = lock(&self.inner);
        if self.bound.is_some_and(|g| g != disk.generation) {
            return Err(lost_power());
        }
        Ok(disk)
    }

    /// A power loss: every file returns to its durable image and every pending operation is
    /// gone; with `tear: Some(n)`, the first `n` bytes of the oldest pending write (of any
    /// file) reach the disk first. Handles opened before the crash are dead from now on.
    pub fn crash(&self, tear: Option<usize>) {
        let mut disk = lock(&self.inner);
        disk.generation += 1;
        let removed = std::mem::take(&mut disk.removed);
        for (name, file) in removed {
            disk.files.insert(name, file);
        }
        let durable_names = disk.durable_names.clone();
        disk.files.retain(|name, _| durable_names.contains(name));
        let oldest = disk
            .files
            .values()
            .filter_map(|f| {
                lock(f).pending.iter().find_map(|(order, op)| match op {
                    Op::Write { .. } => Some((*order, f.clone())),
                    Op::SetLen(_) => None,
                })
            })
            .min_by_key(|(order, _)| *order);
        let torn = tear.zip(oldest).and_then(|(n, (order, file))| {
            let f = lock(&file);
            f.pending
                .iter()
                .find(|(o, _)| *o == order)
                .and_then(|(_, op)| match op {
                    Op::Write { offset, bytes } => Some((
                        file.clone(),
                        Op::Write {
                            offset: *offset,
                            bytes: bytes[..n.min(bytes.len())].to_vec(),
                        },
                    )),
                    Op::SetLen(_) => None,
                })
        });
        for file in disk.files.values() {
            let mut f = lock(file);
            f.pending.clear();
            f.asked = 0;
            f.data = f.durable.clone();
        }
        if let Some((file, op)) = torn {
            let mut f = lock(&file);
            apply(&mut f.durable, &op);
            f.data = f.durable.clone();
        }
    }

    /// Every file's name and what reads of it see now (for tests and traces).
    pub fn contents(&self) -> BTreeMap<String, Vec<u8>> {
        let disk = lock(&self.inner);
        disk.files
            .iter()
            .map(|(name, f)| (name.clone(), lock(f).data.clone()))
            .collect()
    }

    fn handle(&self, disk: &Disk, file: Arc<Mutex<File>>) -> Arc<dyn SegmentFile> {
        Arc::new(Handle {
            disk: self.inner.clone(),
            generation: disk.generation,
            file,
        })
    }
}

/// One open file of a [`MemDisk`].
struct Handle {
    disk: Arc<Mutex<Disk>>,
    generation: u64,
    file: Arc<Mutex<File>>,
}

impl Handle {
    /// The file, unless a crash since this handle was opened killed it.
    fn live(&self) -> io::Result<MutexGuard<'_, File>> {
        if lock(&self.disk).generation != self.generation {
            return Err(lost_power());
        }
        Ok(lock(&self.file))
    }

    fn push(&self, op: Op) -> io::Result<()> {
        let order = {
            let mut disk = lock(&self.disk);
            if disk.generation != self.generation {
                return Err(lost_power());
            }
            disk.next_op += 1;
            disk.next_op
        };
        let mut f = lock(&self.file);
        apply(&mut f.data, &op);
        f.pending.push((order, op));
        Ok(())
    }
}

impl SegmentFile for Handle {
    fn size(&self) -> io::Result<u64> {
        Ok(self.live()?.data.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let f = self.live()?;
        let start = offset as usize;
        let Some(bytes) = f.data.get(start..start + buf.len()) else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the simulated file",
            ));
        };
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.push(Op::Write {
            offset,
            bytes: data.to_vec(),
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.push(Op::SetLen(len))
    }

    fn sync(&self) -> io::Result<()> {
        let mut f = self.live()?;
        // PLANTED(unsynced-log): a sync asks for nothing.
        if !planted::is(Plant::UnsyncedLog) {
            f.asked = f.pending.len();
        }
        Ok(())
    }
}

impl LogDisk for MemDisk {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.live()?.files.keys().cloned().collect())
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let disk = self.live()?;
        let Some(file) = disk.files.get(name).cloned() else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name}: no such simulated file"),
            ));
        };
        Ok(self.handle(&disk, file))
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let mut disk = self.live()?;
        if disk.files.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{name}: the simulated file exists"),
            ));
        }
        let file = Arc::new(Mutex::new(File::default()));
        disk.files.insert(name.to_string(), file.clone());
        disk.removed.remove(name);
        // PLANTED(unsynced-dir): the new name is never made durable.
        if !planted::is(Plant::UnsyncedDir) {
            disk.durable_names.insert(name.to_string());
        }
        Ok(self.handle(&disk, file))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut disk = self.live()?;
        let Some(file) = disk.files.remove(name) else {
            return Ok(());
        };
        // Durable at the next settle (module doc); a crash before it brings the file back.
        disk.removed.insert(name.to_string(), file);
        Ok(())
    }

    fn describe(&self, name: &str) -> String {
        format!("simulated:{name}")
    }

    fn settle(&self) {
        let Ok(mut disk) = self.live() else {
            return;
        };
        // PLANTED(unsynced-dir): removals are never made durable.
        if !planted::is(Plant::UnsyncedDir) {
            let removed = std::mem::take(&mut disk.removed);
            for name in removed.keys() {
                disk.durable_names.remove(name);
            }
        }
        for file in disk.files.values() {
            let mut f = lock(file);
            let asked = f.asked;
            let done: Vec<(u64, Op)> = f.pending.drain(..asked).collect();
            for (_, op) in &done {
                apply(&mut f.durable, op);
            }
            f.asked = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(disk: &MemDisk, name: &str) -> Vec<u8> {
        disk.contents()[name].clone()
    }

    #[test]
    fn a_crash_keeps_what_was_settled_and_loses_the_rest() {
        let disk = MemDisk::new();
        let f = disk.create("a").unwrap();
        f.write_at(b"hello", 0).unwrap();
        f.sync().unwrap();
        disk.settle();
        f.write_at(b" world", 5).unwrap();
        f.sync().unwrap();
        // Asked, not settled: the simulated fsync had not returned.
        assert_eq!(bytes(&disk, "a"), b"hello world");
        disk.crash(None);
        assert_eq!(bytes(&disk, "a"), b"hello");
        let err = f.write_at(b"!", 5).unwrap_err();
        assert!(err.to_string().contains("lost power"), "{err}");
        let g = disk.open("a").unwrap();
        let mut buf = [0u8; 5];
        g.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"hello");
    }

    #[test]
    fn a_write_after_the_sync_is_not_made_durable_by_it() {
        let disk = MemDisk::new();
        let f = disk.create("a").unwrap();
        f.write_at(b"one", 0).unwrap();
        f.sync().unwrap();
        f.write_at(b"two", 3).unwrap();
        disk.settle();
        disk.crash(None);
        assert_eq!(bytes(&disk, "a"), b"one");
    }

    #[test]
    fn a_torn_crash_keeps_a_prefix_of_the_oldest_pending_write() {
        let disk = MemDisk::new();
        let a = disk.create("a").unwrap();
        let b = disk.create("b").unwrap();
        a.write_at(b"0123456789", 0).unwrap();
        b.write_at(b"abcdef", 0).unwrap();
        disk.crash(Some(4));
        assert_eq!(bytes(&disk, "a"), b"0123");
        assert_eq!(bytes(&disk, "b"), b"");
    }

    #[test]
    fn lengths_follow_writes_and_cuts_in_order() {
        let disk = MemDisk::new();
        let f = disk.create("a").unwrap();
        f.write_at(b"abcdef", 0).unwrap();
        f.set_len(2).unwrap();
        f.write_at(b"Z", 4).unwrap();
        f.sync().unwrap();
        disk.settle();
        disk.crash(None);
        assert_eq!(bytes(&disk, "a"), b"ab\0\0Z");
        assert_eq!(disk.open("a").unwrap().size().unwrap(), 5);
    }

    #[test]
    fn a_name_is_durable_when_created_and_a_removal_at_the_next_settle() {
        let disk = MemDisk::new();
        disk.create("a").unwrap();
        disk.create("b").unwrap();
        disk.remove("a").unwrap();
        assert_eq!(
            disk.list().unwrap(),
            vec!["b".to_string()],
            "gone for reads at once"
        );
        disk.crash(None);
        assert_eq!(
            disk.list().unwrap(),
            vec!["a".to_string(), "b".to_string()],
            "not settled"
        );
        disk.remove("a").unwrap();
        disk.settle();
        disk.crash(None);
        assert_eq!(disk.list().unwrap(), vec!["b".to_string()]);
        assert!(disk.create("b").is_err(), "a name is not created twice");
        let err = disk.open("a").err().expect("gone");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_disk_bound_before_a_crash_does_nothing_after_it() {
        let disk = MemDisk::new();
        let old = disk.bound();
        let f = old.create("a").unwrap();
        f.write_at(b"kept", 0).unwrap();
        f.sync().unwrap();
        old.settle();
        f.write_at(b" lost", 4).unwrap();
        f.sync().unwrap();
        disk.crash(None);
        for err in [
            old.create("b").err(),
            old.open("a").err(),
            old.remove("a").err(),
            old.list().err(),
        ] {
            assert!(err.expect("refused").to_string().contains("lost power"));
        }
        let new = disk.bound();
        let g = new.open("a").unwrap();
        g.write_at(b"!", 4).unwrap();
        g.sync().unwrap();
        old.settle();
        disk.crash(None);
        assert_eq!(
            bytes(&disk, "a"),
            b"kept",
            "the old node's settle made nothing durable"
        );
    }
}
