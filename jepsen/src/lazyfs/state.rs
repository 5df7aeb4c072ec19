//! The layer's state: what it keeps of files (paths, inodes, handles, undo pages) and of
//! directories (saved listings, kept objects), under the one lock. Data only: `lazyfs.rs`
//! adds the methods on files and `dirs.rs` those on directory entries; this file imports
//! neither, so both read it from below.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

/// A directory's entries: name → inode.
pub(super) type Listing = BTreeMap<OsString, u64>;

/// A file changed since its last sync.
#[derive(Debug)]
pub(super) struct Unsynced {
    /// The file's length at its last sync (or when the layer first saw it).
    pub(super) durable_len: u64,
    /// Page number → that page's durable bytes (shorter than a page at the durable end).
    pub(super) undo: BTreeMap<u64, Vec<u8>>,
}

/// Everything the layer keeps; one lock, since the session runs one thread.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Inode number → its path relative to the backing directory ("" is the root).
    pub(super) paths: HashMap<u64, PathBuf>,
    /// The reverse of `paths`.
    pub(super) inodes: HashMap<PathBuf, u64>,
    pub(super) next_inode: u64,
    /// Open handles → (inode, the backing file).
    pub(super) handles: HashMap<u64, (u64, Arc<File>)>,
    pub(super) next_handle: u64,
    /// Inode → what it has unsynced. A file not here is durable as it is.
    pub(super) unsynced: HashMap<u64, Unsynced>,
    /// Directory inode → its entries at its last fsync, for a directory changed since. A
    /// directory not here is durable as it is.
    pub(super) listings: HashMap<u64, Listing>,
    /// Inode → whether it is a directory, for each object removed from the tree that a saved
    /// listing may still name: kept in the removed directory under its inode number.
    pub(super) kept: HashMap<u64, bool>,
    /// How many power losses the mount has had.
    pub(super) losses: u64,
}
