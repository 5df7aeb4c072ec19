//! Directory entries in the lost-fsync layer: a create, mkdir, rename, unlink or rmdir is
//! durable only once its directory is fsynced (`fsync` on a directory handle); a power loss
//! puts every directory back to its entries at its last fsync.
//!
//! What it keeps, beside the backing tree (which always holds the entries as they are now):
//! - A *saved listing* per directory changed since its last fsync: its entries (name →
//!   inode) as they were at that fsync, saved before the first change since (as a page's
//!   durable bytes are saved before its first write). A directory without one is durable as
//!   it is. An fsync of the directory drops its saved listing.
//! - The *removed directory* (`<backing>.removed`, beside the backing directory, on its
//!   filesystem): an object unlinked, rmdir'ed or replaced by a rename is kept there, under
//!   its inode number, for as long as a saved listing names it (a hard link of a file, so its
//!   contents and undo pages stay those of the same file; an empty directory with the removed
//!   one's mode). Once no saved listing names it, it is deleted.
//!
//! A power loss rebuilds the tree from the root: each directory's durable entries (its
//! saved listing, or its entries now), each named object moved from where it is now (the
//! backing tree or the removed directory) into a new tree beside the backing directory,
//! which then replaces it. So a file created and never dir-synced disappears (even if its
//! data was synced), a rename not dir-synced is undone (the old name back, with its durable
//! contents; a file it replaced back under its name), an unlink not dir-synced is undone,
//! and a directory made and never dir-synced disappears with everything in it.
//!
//! Invariants:
//! - A saved listing is taken before the first change of its directory since its last
//!   fsync, never after; a directory's entries change only through the layer.
//! - Every inode a saved listing names is in the backing tree or kept in the removed
//!   directory (deleted only when no saved listing, of a directory still in the tree or
//!   itself kept, names it): the power loss finds every object it must put back.
//! - An object kept in the removed directory is never changed by a process again (the kernel
//!   refuses to create in a removed directory; a handle still open on a removed file writes
//!   to the kept link, which is what the file was).
//!
//! What it does not model: a rename across two directories is undone or kept per directory
//! (a real filesystem journals it as one operation: if only one of the two was synced, the
//! object may come back under both names, as a hard link here); hard links, symlinks and
//! `O_TMPFILE` (the layer does not serve them, and Weir uses none); and the fsync of a new
//! file that some filesystems (ext4) let carry its directory entry along: here only the
//! directory's own fsync does.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::state::{Listing, State};

/// One object of the durable tree, at its place in it.
struct Placed {
    inode: u64,
    /// Relative to the tree's root.
    path: PathBuf,
    dir: bool,
}

/// `<backing>.<suffix>`, beside the backing directory (so on its filesystem: renames).
pub(super) fn beside(backing: &Path, suffix: &str) -> PathBuf {
    let mut name = backing.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

impl State {
    /// Where `inode` is now: in the backing tree, or kept in the removed directory.
    pub(super) fn location(&self, backing: &Path, removed: &Path, inode: u64) -> Option<PathBuf> {
        if let Some(path) = self.paths.get(&inode) {
            return Some(backing.join(path));
        }
        self.kept
            .get(&inode)
            .map(|_| removed.join(inode.to_string()))
    }

    /// The entries of the directory at `path` (relative to the backing root) as they are now.
    fn listing_now(&mut self, backing: &Path, path: &Path) -> io::Result<Listing> {
        let mut listing = Listing::new();
        for entry in std::fs::read_dir(backing.join(path))? {
            let name = entry?.file_name();
            let inode = self.inode_of(path.join(&name));
            listing.insert(name, inode);
        }
        Ok(listing)
    }

    /// Before an entry of directory `dir` changes: saves its durable entries, unless saved
    /// already since its last fsync.
    pub(super) fn entries_change(&mut self, backing: &Path, dir: u64) -> io::Result<()> {
        if self.listings.contains_key(&dir) {
            return Ok(());
        }
        let path = self
            .paths
            .get(&dir)
            .cloned()
            .ok_or(io::ErrorKind::NotFound)?;
        let listing = self.listing_now(backing, &path)?;
        self.listings.insert(dir, listing);
        Ok(())
    }

    /// The object at `path` is about to be removed or replaced by `op`: keeps it in the
    /// removed directory first (a hard link of a file, an empty directory with a directory's
    /// mode), then runs `op`; if `op` fails the kept copy is dropped again and nothing
    /// changes.
    pub(super) fn remove_keeping(
        &mut self,
        backing: &Path,
        removed: &Path,
        path: &Path,
        op: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let meta = std::fs::symlink_metadata(backing.join(path))?;
        let inode = self.inode_of(path.to_owned());
        let kept = removed.join(inode.to_string());
        let done = if meta.is_dir() {
            std::fs::DirBuilder::new()
                .mode(meta.permissions().mode() & 0o7777)
                .create(&kept)?;
            op().inspect_err(|_| {
                let _ = std::fs::remove_dir(&kept);
            })
        } else {
            std::fs::hard_link(backing.join(path), &kept)?;
            op().inspect_err(|_| {
                let _ = std::fs::remove_file(&kept);
            })
        };
        done?;
        self.inodes.remove(path);
        self.paths.remove(&inode);
        self.kept.insert(inode, meta.is_dir());
        Ok(())
    }

    /// Directory `dir` was fsynced: its entries as they are now are durable. Deletes what no
    /// saved listing names any more.
    pub(super) fn dir_synced(&mut self, removed: &Path, dir: u64) -> io::Result<()> {
        self.listings.remove(&dir);
        self.collect(removed)
    }

    /// Deletes every kept object no saved listing names (following kept directories' own
    /// saved listings), with what the layer remembered of it.
    fn collect(&mut self, removed: &Path) -> io::Result<()> {
        let mut named = HashSet::new();
        let mut dirs: Vec<u64> = self
            .listings
            .keys()
            .filter(|d| self.paths.contains_key(d))
            .copied()
            .collect();
        while let Some(dir) = dirs.pop() {
            for &inode in self.listings.get(&dir).into_iter().flat_map(|l| l.values()) {
                if named.insert(inode) && self.kept.contains_key(&inode) {
                    dirs.push(inode);
                }
            }
        }
        let unnamed: Vec<(u64, bool)> = self
            .kept
            .iter()
            .filter(|(inode, _)| !named.contains(*inode))
            .map(|(inode, dir)| (*inode, *dir))
            .collect();
        for (inode, dir) in unnamed {
            let path = removed.join(inode.to_string());
            if dir {
                std::fs::remove_dir(path)?;
            } else {
                std::fs::remove_file(path)?;
            }
            self.kept.remove(&inode);
            self.listings.remove(&inode);
            self.unsynced.remove(&inode);
        }
        Ok(())
    }

    /// The durable tree, parents before children, and how many entries differ from the tree
    /// as it is now (names back, gone, or naming another object).
    fn durable_tree(&mut self, backing: &Path, removed: &Path) -> io::Result<(Vec<Placed>, u64)> {
        let mut placed = vec![];
        let mut changed = 0;
        let mut seen_dirs = HashSet::from([fuser::INodeNo::ROOT.0]);
        let mut stack = vec![(fuser::INodeNo::ROOT.0, PathBuf::new())];
        while let Some((dir, at)) = stack.pop() {
            // A kept directory is empty now (only an empty one can be removed, and nothing
            // can be made in it since).
            let now = match self.paths.get(&dir).cloned() {
                Some(path) => self.listing_now(backing, &path)?,
                None => Listing::new(),
            };
            let durable = self
                .listings
                .get(&dir)
                .cloned()
                .unwrap_or_else(|| now.clone());
            changed += durable
                .iter()
                .filter(|(name, inode)| now.get(*name) != Some(inode))
                .count() as u64;
            changed += now
                .keys()
                .filter(|name| !durable.contains_key(*name))
                .count() as u64;
            for (name, inode) in durable {
                let location = self.location(backing, removed, inode).ok_or_else(|| {
                    io::Error::other(format!(
                        "lost-fsync layer: {} names inode {inode}, which it no longer keeps",
                        at.join(&name).display()
                    ))
                })?;
                let dir = std::fs::symlink_metadata(&location)?.is_dir();
                let path = at.join(&name);
                if dir && !seen_dirs.insert(inode) {
                    // Only a rename across directories, half synced, can name one directory
                    // twice: it comes back once.
                    continue;
                }
                if dir {
                    stack.push((inode, path.clone()));
                }
                placed.push(Placed { inode, path, dir });
            }
        }
        Ok((placed, changed))
    }

    /// Puts the backing tree back to the durable tree: builds it beside the backing
    /// directory from the objects where they are now, swaps it in, and empties the removed
    /// directory. Returns how many entries it put back. Called by the power loss after the
    /// files' data is back to its durable state.
    pub(super) fn rebuild(&mut self, backing: &Path, removed: &Path) -> io::Result<u64> {
        let (placed, changed) = self.durable_tree(backing, removed)?;
        let staging = beside(backing, "rebuilt");
        let old = beside(backing, "old");
        let _ = std::fs::remove_dir_all(&staging);
        let _ = std::fs::remove_dir_all(&old);
        std::fs::create_dir(&staging)?;
        std::fs::set_permissions(&staging, std::fs::metadata(backing)?.permissions())?;
        // The first place each inode took (a half-synced rename across directories can name
        // a file twice: the second place is a hard link of the first).
        let mut first: HashMap<u64, PathBuf> = HashMap::new();
        for p in &placed {
            let from = self
                .location(backing, removed, p.inode)
                .expect("durable_tree found it");
            let to = staging.join(&p.path);
            if p.dir {
                std::fs::create_dir(&to)?;
                std::fs::set_permissions(&to, std::fs::metadata(&from)?.permissions())?;
            } else if let Some(at) = first.get(&p.inode) {
                std::fs::hard_link(staging.join(at), &to)?;
            } else {
                std::fs::rename(&from, &to)?;
            }
            first.entry(p.inode).or_insert_with(|| p.path.clone());
        }
        std::fs::rename(backing, &old)?;
        std::fs::rename(&staging, backing)?;
        std::fs::remove_dir_all(&old)?;
        std::fs::remove_dir_all(removed)?;
        std::fs::create_dir(removed)?;
        // Each object keeps its inode number at its (first) durable place; the rest is gone.
        self.paths
            .retain(|inode, _| *inode == fuser::INodeNo::ROOT.0);
        self.inodes.retain(|path, _| path.as_os_str().is_empty());
        for (inode, path) in first {
            self.paths.insert(inode, path.clone());
            self.inodes.insert(path, inode);
        }
        self.kept.clear();
        self.listings.clear();
        Ok(changed)
    }
}
