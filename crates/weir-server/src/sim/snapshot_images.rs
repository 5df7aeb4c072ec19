//! What a power loss leaves of the simulated nodes' snapshot files: [`SnapshotImages`].
//!
//! A simulated node keeps its snapshot files as real files in its directory, and tells
//! every durable step it takes on them (`crate::simulated::FileEvent`: a file's fsync, a
//! rename, a directory's fsync) to the hook [`SnapshotImages::hook`] makes. From those
//! steps this keeps, for every path they named, what a power loss leaves there: some bytes,
//! or no file. [`SnapshotImages::crash`] puts a directory's named paths back to that, as
//! the simulated log disk ([`super::MemDisk`]) goes back to its durable images.
//!
//! The model is POSIX's promise and no more: a file's data is durable at the file's fsync,
//! a name (a rename's new name, and the old one's absence) at its directory's fsync. So a
//! rename whose directory was not fsynced is undone by a crash, and a file renamed without
//! its data fsynced, then made durable by a directory fsync, is left empty.
//!
//! Invariants:
//! - A crash touches only paths some step named: the directory's other files are left as
//!   they are.
//! - What a path holds after a crash changes only at a directory's fsync (its names), or at
//!   a file's fsync under a name already durable with no rename onto or away from it
//!   pending.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::simulated::{FileEvent, FileHook};

/// The durable images of the snapshot files of every node of a simulation; clones share
/// them.
#[derive(Clone, Default)]
pub struct SnapshotImages {
    inner: Arc<Mutex<Images>>,
}

#[derive(Default)]
struct Images {
    /// Every path a step named.
    named: BTreeSet<PathBuf>,
    /// The data fsynced of the file each name holds now (it moves with a rename).
    synced: BTreeMap<PathBuf, Vec<u8>>,
    /// Renames since their directory's last fsync, oldest first.
    renamed: Vec<(PathBuf, PathBuf)>,
    /// What a crash leaves at a path: its bytes, or `None` for no file (a path not here
    /// has no durable name either).
    durable: BTreeMap<PathBuf, Option<Vec<u8>>>,
}

impl SnapshotImages {
    fn lock(&self) -> MutexGuard<'_, Images> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The hook to give `crate::simulated::set_file_hook`: every step it hears updates
    /// these images.
    pub fn hook(&self) -> FileHook {
        let images = self.clone();
        Box::new(move |event| images.note(event))
    }

    /// Takes one durable step into account.
    pub fn note(&self, event: FileEvent) {
        let mut images = self.lock();
        match event {
            FileEvent::Synced(path) => {
                // A file that cannot be read now has nothing of its own to keep.
                let bytes = std::fs::read(&path).unwrap_or_default();
                // The bytes are durable under the name at once only when the name already
                // holds this file durably: no rename onto or away from it is pending.
                let renaming = images
                    .renamed
                    .iter()
                    .any(|(from, to)| *from == path || *to == path);
                if !renaming
                    && let Some(durable) = images.durable.get_mut(&path).filter(|d| d.is_some())
                {
                    *durable = Some(bytes.clone());
                }
                images.synced.insert(path.clone(), bytes);
                images.named.insert(path);
            }
            FileEvent::Renamed { from, to } => {
                match images.synced.remove(&from) {
                    Some(bytes) => images.synced.insert(to.clone(), bytes),
                    None => images.synced.remove(&to),
                };
                images.named.insert(from.clone());
                images.named.insert(to.clone());
                images.renamed.push((from, to));
            }
            FileEvent::DirSynced(dir) => {
                let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut images.renamed)
                    .into_iter()
                    .partition(|(_, to)| to.parent() == Some(dir.as_path()));
                images.renamed = later;
                for (from, to) in now {
                    let data = images.synced.get(&to).cloned().unwrap_or_default();
                    images.durable.insert(from, None);
                    images.durable.insert(to, Some(data));
                }
            }
        }
    }

    /// A power loss under `dir`: every path a step named there goes back to what was
    /// durable (its bytes, or no file), and the steps not yet durable are forgotten.
    pub fn crash(&self, dir: &Path) -> std::io::Result<()> {
        let mut images = self.lock();
        let under = |p: &PathBuf| p.starts_with(dir);
        images.renamed.retain(|(_, to)| !under(to));
        images.synced.retain(|p, _| !under(p));
        let named: Vec<PathBuf> = images.named.iter().filter(|p| under(p)).cloned().collect();
        for path in named {
            match images.durable.get(&path).cloned() {
                Some(Some(bytes)) => {
                    std::fs::write(&path, &bytes)?;
                    images.synced.insert(path, bytes);
                }
                _ => match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::test_cluster::TempDir;

    /// A fresh directory, removed when dropped.
    fn scratch(name: &str) -> TempDir {
        let dir = TempDir::new(&format!("images-{name}"));
        std::fs::create_dir_all(&dir.0).unwrap();
        dir
    }

    /// Writes `bytes` as `tmp`, fsyncs it if `sync_file`, renames it over `file`, and fsyncs
    /// the directory if `sync_dir`: the snapshot file's steps.
    fn replace(images: &SnapshotImages, dir: &Path, bytes: &[u8], sync_file: bool, sync_dir: bool) {
        let (tmp, file) = (dir.join("snapshot.bin.tmp"), dir.join("snapshot.bin"));
        std::fs::write(&tmp, bytes).unwrap();
        if sync_file {
            images.note(FileEvent::Synced(tmp.clone()));
        }
        std::fs::rename(&tmp, &file).unwrap();
        images.note(FileEvent::Renamed {
            from: tmp,
            to: file,
        });
        if sync_dir {
            images.note(FileEvent::DirSynced(dir.to_owned()));
        }
    }

    fn read(dir: &Path) -> Option<Vec<u8>> {
        std::fs::read(dir.join("snapshot.bin")).ok()
    }

    #[test]
    fn a_replacement_with_every_fsync_survives_a_crash() {
        let tmp = scratch("synced");
        let dir = tmp.0.as_path();
        let images = SnapshotImages::default();
        replace(&images, dir, b"one", true, true);
        replace(&images, dir, b"two", true, true);
        images.crash(dir).unwrap();
        assert_eq!(read(dir).as_deref(), Some(&b"two"[..]));
        assert!(!dir.join("snapshot.bin.tmp").exists());
    }

    #[test]
    fn a_rename_whose_directory_was_not_fsynced_is_undone() {
        let tmp = scratch("undone");
        let dir = tmp.0.as_path();
        let images = SnapshotImages::default();
        replace(&images, dir, b"one", true, true);
        replace(&images, dir, b"two", true, false);
        images.crash(dir).unwrap();
        assert_eq!(read(dir).as_deref(), Some(&b"one"[..]));
    }

    #[test]
    fn without_any_fsync_the_first_snapshot_is_gone_after_a_crash() {
        let tmp = scratch("none");
        let dir = tmp.0.as_path();
        let images = SnapshotImages::default();
        replace(&images, dir, b"one", false, false);
        assert_eq!(read(dir).as_deref(), Some(&b"one"[..]));
        images.crash(dir).unwrap();
        assert_eq!(read(dir), None);
    }

    #[test]
    fn data_not_fsynced_under_a_durable_name_is_left_empty() {
        let tmp = scratch("empty");
        let dir = tmp.0.as_path();
        let images = SnapshotImages::default();
        replace(&images, dir, b"one", false, true);
        images.crash(dir).unwrap();
        assert_eq!(read(dir).as_deref(), Some(&b""[..]));
    }

    #[test]
    fn an_fsync_under_a_name_whose_rename_is_not_durable_leaves_the_old_file() {
        let tmp = scratch("pending");
        let dir = tmp.0.as_path();
        let images = SnapshotImages::default();
        replace(&images, dir, b"one", true, true);
        replace(&images, dir, b"two", true, false);
        std::fs::write(dir.join("snapshot.bin"), b"three").unwrap();
        images.note(FileEvent::Synced(dir.join("snapshot.bin")));
        images.crash(dir).unwrap();
        assert_eq!(read(dir).as_deref(), Some(&b"one"[..]));
    }

    #[test]
    fn a_crash_leaves_the_paths_no_step_named_and_other_directories_alone() {
        let (mine, theirs) = (scratch("mine"), scratch("other"));
        let (dir, other) = (mine.0.as_path(), theirs.0.as_path());
        let images = SnapshotImages::default();
        std::fs::write(dir.join("node.id"), b"1").unwrap();
        replace(&images, other, b"kept", true, false);
        images.crash(dir).unwrap();
        assert_eq!(std::fs::read(dir.join("node.id")).unwrap(), b"1");
        assert_eq!(read(other).as_deref(), Some(&b"kept"[..]));
    }
}
