//! A filesystem that loses what was not fsynced: the power-loss fault's disk (after
//! LazyFS).
//!
//! kill -9 keeps the kernel's page cache, so a node that forgot an fsync still finds its
//! writes after a restart, and a missing fsync is invisible. [`LazyFs`] is a FUSE filesystem
//! mounted on a node's data directory that passes everything to a backing directory and
//! remembers, per file, what the file looked like at its last `fsync`/`fdatasync`. A
//! [`LazyFs::power_loss`] — called while the node is dead, after kill -9 and its reaping —
//! puts every file back to exactly that: the bytes written since are gone, a file grown
//! since is cut back, a file cut since is restored. The node then restarts on what it had
//! made durable, and nothing else.
//!
//! How it keeps the durable image: writes go through to the backing file at once (so reads
//! are plain reads), but before the first write since the last sync touches a 4 KiB page
//! that lies inside the durable length, the page's durable bytes are saved (an undo page).
//! A power loss writes the undo pages back and sets the length to the durable one. An
//! `fsync` or `fdatasync` of any handle of a file syncs the backing file and forgets that
//! file's undo pages: the file as it is now is durable (both calls make the size durable
//! too, which is what `fdatasync` promises for the data that follows).
//!
//! Directory entries the same way ([`dirs`]): a create, mkdir, rename, unlink or rmdir is
//! durable only once its directory is fsynced; a power loss puts every directory back to its
//! entries at its last fsync (a file created and not dir-synced disappears, a rename not
//! dir-synced is undone, an unlink not dir-synced comes back with its durable contents). A
//! file created, its entry made durable and its data never synced comes back empty (its
//! durable length is 0), the classic zero-length file after a crash. Weir's data directory
//! holds `log/`, segment files appended with `pwrite` and made durable with `fdatasync`
//! after each write (a new segment's name and a removed one's with a directory fsync), and
//! `snapshot.bin`, `node.id` and `cluster.id`, each replaced by write, fsync, rename,
//! directory fsync: this layer judges all of it.
//!
//! What the model takes as given:
//! - The kernel caches nothing of the layer's files: every open is `FOPEN_DIRECT_IO` and
//!   attributes and entries have a time-to-live of zero, so what a restarted node reads is
//!   what the backing files hold after the power loss.
//! - Locks (the log's `flock` on `log/lock`) are the kernel's local ones (the layer does not claim
//!   POSIX locks), released when the holder dies.
//! - Metadata other than entries and sizes (modes, times) is durable at once.
//!
//! Invariants:
//! - A file's undo pages all lie below its durable length, and each holds the durable bytes
//!   of its page (up to the durable length): a page is saved before its first change since
//!   the last sync, never after.
//! - A power loss is called only while no process uses the mount (the node is dead and
//!   reaped): kill -9 cannot leave a write half-applied, since the kernel waits for the
//!   answer to a request it has sent before the process may exit.
//! - Never in a node's own code: this is the harness's disk, in the harness's process.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

mod dirs;
mod state;

use state::{State, Unsynced};

/// The granularity of undo pages: the page size, so one write of a page saves one page.
const PAGE_BYTES: u64 = 4096;

/// Attributes and entries are never cached by the kernel: a power loss changes sizes and
/// contents behind its back.
const TTL: Duration = Duration::ZERO;

/// What a power loss undid, for the history.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Loss {
    /// Files put back to their last synced state.
    pub files: u64,
    /// Pages whose unsynced contents were replaced by their durable ones.
    pub pages: u64,
    /// Bytes cut off files that had grown since their last sync.
    pub bytes_cut: u64,
    /// Directory entries put back to their state at their directory's last sync: names that
    /// came back, disappeared, or name another file again.
    pub entries: u64,
}

/// The filesystem as the FUSE session sees it.
struct Layer {
    backing: PathBuf,
    /// Where removed objects are kept (`<backing>.removed`, see [`dirs`]).
    removed: PathBuf,
    state: Arc<Mutex<State>>,
}

/// A mounted layer: unmounted on drop.
pub struct LazyFs {
    backing: PathBuf,
    removed: PathBuf,
    mountpoint: PathBuf,
    state: Arc<Mutex<State>>,
    session: Option<BackgroundSession>,
}

impl std::fmt::Debug for LazyFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyFs")
            .field("backing", &self.backing)
            .field("mountpoint", &self.mountpoint)
            .finish()
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock is a bug of this layer; the state is still the best
    // account of what is unsynced, so go on with it.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl LazyFs {
    /// Mounts a layer on `mountpoint` (created if missing, must be empty) over `backing`
    /// (created if missing). Needs root and `/dev/fuse`.
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<LazyFs> {
        std::fs::create_dir_all(backing)?;
        std::fs::create_dir_all(mountpoint)?;
        let backing = backing.canonicalize()?;
        let removed = dirs::beside(&backing, "removed");
        let _ = std::fs::remove_dir_all(&removed);
        std::fs::create_dir(&removed)?;
        let mut state = State {
            next_inode: 2,
            next_handle: 1,
            ..State::default()
        };
        state.paths.insert(INodeNo::ROOT.0, PathBuf::new());
        state.inodes.insert(PathBuf::new(), INodeNo::ROOT.0);
        let state = Arc::new(Mutex::new(state));
        let layer = Layer {
            backing: backing.clone(),
            removed: removed.clone(),
            state: state.clone(),
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("weir-lazyfs".into()),
            MountOption::Subtype("lazyfs".into()),
        ];
        let session = fuser::spawn_mount(layer, mountpoint, &config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "mounting the lost-fsync layer on {}: {e}",
                    mountpoint.display()
                ),
            )
        })?;
        Ok(LazyFs {
            backing,
            removed,
            mountpoint: mountpoint.to_owned(),
            state,
            session: Some(session),
        })
    }

    /// The directory the layer serves.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The directory holding the files (after a power loss, exactly their durable state).
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// How many power losses this mount has had.
    pub fn losses(&self) -> u64 {
        lock(&self.state).losses
    }

    /// Drops every write and every directory change not fsynced: each file back to its
    /// state at its last sync, each directory to its entries at its last sync. Call it only
    /// while no process uses the mount (see the module's invariants).
    pub fn power_loss(&self) -> io::Result<Loss> {
        let mut state = lock(&self.state);
        let mut loss = Loss::default();
        let unsynced = std::mem::take(&mut state.unsynced);
        for (inode, file) in unsynced {
            // In the tree or kept as removed; one deleted for good was forgotten with it.
            let Some(path) = state.location(&self.backing, &self.removed, inode) else {
                continue;
            };
            let backing = OpenOptions::new().write(true).open(path)?;
            for (page, bytes) in &file.undo {
                backing.write_all_at(bytes, page * PAGE_BYTES)?;
            }
            let len = backing.metadata()?.len();
            loss.bytes_cut += len.saturating_sub(file.durable_len);
            backing.set_len(file.durable_len)?;
            loss.files += 1;
            loss.pages += file.undo.len() as u64;
        }
        loss.entries = state.rebuild(&self.backing, &self.removed)?;
        // The dead process's handles: a late release finds nothing, which is fine.
        state.handles.clear();
        state.losses += 1;
        Ok(loss)
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        if let Some(session) = self.session.take()
            && session.umount_and_join().is_err()
        {
            // Busy (a file still open, a process still inside): detach it, so no mount is
            // left behind the run; the kernel ends it when its last user goes.
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .status();
        }
        // What was kept for a power loss means nothing once unmounted.
        let _ = std::fs::remove_dir_all(&self.removed);
    }
}

/// The durable bytes of `page` of `file`, up to `durable_len`.
fn read_page(file: &File, page: u64, durable_len: u64) -> io::Result<Vec<u8>> {
    let start = page * PAGE_BYTES;
    let end = ((page + 1) * PAGE_BYTES).min(durable_len);
    let mut bytes = vec![0; (end - start) as usize];
    file.read_exact_at(&mut bytes, start)?;
    Ok(bytes)
}

impl State {
    /// Before bytes `[start, end)` of `inode` change: saves the durable bytes of every page
    /// of that range that lies below the durable length and is not saved yet.
    fn save(&mut self, inode: u64, file: &File, start: u64, end: u64) -> io::Result<()> {
        let current_len = file.metadata()?.len();
        let unsynced = self.unsynced.entry(inode).or_insert(Unsynced {
            durable_len: current_len,
            undo: BTreeMap::new(),
        });
        let end = end.min(unsynced.durable_len);
        if start >= end {
            return Ok(());
        }
        for page in start / PAGE_BYTES..end.div_ceil(PAGE_BYTES) {
            if !unsynced.undo.contains_key(&page) {
                let bytes = read_page(file, page, unsynced.durable_len)?;
                unsynced.undo.insert(page, bytes);
            }
        }
        Ok(())
    }

    /// Sets the length of `inode`'s file, saving what a cut removes.
    fn set_len(&mut self, inode: u64, file: &File, len: u64) -> io::Result<()> {
        let current_len = file.metadata()?.len();
        self.save(inode, file, len, current_len.max(len))?;
        file.set_len(len)
    }

    fn inode_of(&mut self, path: PathBuf) -> u64 {
        if let Some(inode) = self.inodes.get(&path) {
            return *inode;
        }
        let inode = self.next_inode;
        self.next_inode += 1;
        self.paths.insert(inode, path.clone());
        self.inodes.insert(path, inode);
        inode
    }

    /// Renames `from` to `to` in the tables, with everything under it.
    fn rename(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .inodes
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (path, inode) in moved {
            let rest = path.strip_prefix(from).expect("filtered on the prefix");
            let new = if rest.as_os_str().is_empty() {
                to.to_owned()
            } else {
                to.join(rest)
            };
            self.inodes.remove(&path);
            self.inodes.insert(new.clone(), inode);
            self.paths.insert(inode, new);
        }
    }
}

fn attr(inode: u64, meta: &std::fs::Metadata) -> FileAttr {
    let time = |secs: i64, nanos: i64| {
        if secs >= 0 {
            UNIX_EPOCH + Duration::new(secs as u64, nanos as u32)
        } else {
            UNIX_EPOCH
        }
    };
    FileAttr {
        ino: INodeNo(inode),
        size: meta.len(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::from_std(meta.file_type()).unwrap_or(FileType::RegularFile),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: PAGE_BYTES as u32,
        flags: 0,
    }
}

impl Layer {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The relative path of `inode`, or ENOENT.
    fn path(&self, inode: INodeNo) -> Result<PathBuf, Errno> {
        self.state()
            .paths
            .get(&inode.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(parent)?.join(name))
    }

    /// Unlink or rmdir (`remove`) of `name` in `parent`: removed from the backing directory,
    /// and kept for a power loss until `parent` is synced ([`dirs`]).
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
        remove: fn(PathBuf) -> io::Result<()>,
    ) {
        let result = (|| -> Result<(), Errno> {
            let path = self.child(parent, name)?;
            let mut state = self.state();
            state.entries_change(&self.backing, parent.0)?;
            let target = self.backing.join(&path);
            state.remove_keeping(&self.backing, &self.removed, &path, || remove(target))?;
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn entry(&self, path: PathBuf) -> Result<FileAttr, Errno> {
        let meta = std::fs::symlink_metadata(self.backing.join(&path))?;
        let inode = self.state().inode_of(path);
        Ok(attr(inode, &meta))
    }

    fn handle(&self, fh: FileHandle) -> Result<(u64, Arc<File>), Errno> {
        self.state().handles.get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn open_backing(&self, path: &Path, flags: i32, create: Option<u32>) -> io::Result<File> {
        let mode = flags & libc::O_ACCMODE;
        let mut options = OpenOptions::new();
        options
            // Always readable: the first change of a page reads its durable bytes.
            .read(true)
            .write(mode == libc::O_WRONLY || mode == libc::O_RDWR)
            // O_APPEND would make the backing ignore the offsets the kernel sends, and
            // O_TRUNC would cut without saving: both are done here instead.
            .custom_flags(
                flags
                    & !(libc::O_APPEND
                        | libc::O_TRUNC
                        | libc::O_ACCMODE
                        | libc::O_CREAT
                        | libc::O_EXCL),
            );
        if let Some(perm) = create {
            options.create(true).mode(perm);
            if flags & libc::O_EXCL != 0 {
                options.create_new(true);
            }
        }
        if flags & libc::O_TRUNC != 0 && mode == libc::O_RDONLY {
            options.write(true);
        }
        options.open(self.backing.join(path))
    }

    /// Opens `inode` (at `path`) and registers a handle, applying O_TRUNC through the undo.
    fn register(&self, inode: u64, file: File, flags: i32) -> Result<FileHandle, Errno> {
        let mut state = self.state();
        if flags & libc::O_TRUNC != 0 {
            state.set_len(inode, &file, 0)?;
        }
        let handle = state.next_handle;
        state.next_handle += 1;
        state.handles.insert(handle, (inode, Arc::new(file)));
        Ok(FileHandle(handle))
    }
}

impl Filesystem for Layer {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name).and_then(|p| self.entry(p)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.path(ino).and_then(|p| self.entry(p)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = (|| -> Result<FileAttr, Errno> {
            let path = self.path(ino)?;
            if let Some(mode) = mode {
                std::fs::set_permissions(
                    self.backing.join(&path),
                    std::fs::Permissions::from_mode(mode & 0o7777),
                )?;
            }
            if let Some(len) = size {
                let file = match fh.and_then(|fh| self.handle(fh).ok()) {
                    Some((_, file)) => file,
                    None => Arc::new(
                        OpenOptions::new()
                            .read(true)
                            .write(true)
                            .open(self.backing.join(&path))?,
                    ),
                };
                self.state().set_len(ino.0, &file, len)?;
            }
            self.entry(path)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = (|| -> Result<FileAttr, Errno> {
            let path = self.child(parent, name)?;
            self.state().entries_change(&self.backing, parent.0)?;
            std::fs::DirBuilder::new()
                .mode(mode & !umask & 0o7777)
                .create(self.backing.join(&path))?;
            self.entry(path)
        })();
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply, std::fs::remove_file::<PathBuf>);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply, std::fs::remove_dir::<PathBuf>);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = (|| -> Result<(), Errno> {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            let (source, target) = (self.backing.join(&from), self.backing.join(&to));
            std::fs::symlink_metadata(&source)?;
            if from == to {
                return Ok(());
            }
            let mut state = self.state();
            state.entries_change(&self.backing, parent.0)?;
            state.entries_change(&self.backing, newparent.0)?;
            if std::fs::symlink_metadata(&target).is_ok() {
                // The object it replaces is kept until the directory is synced.
                state.remove_keeping(&self.backing, &self.removed, &to, || {
                    std::fs::rename(&source, &target)
                })?;
            } else {
                std::fs::rename(&source, &target)?;
            }
            state.rename(&from, &to);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = (|| -> Result<FileHandle, Errno> {
            let path = self.path(ino)?;
            let file = self.open_backing(&path, flags.0, None)?;
            self.register(ino.0, file, flags.0)
        })();
        match result {
            Ok(fh) => reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = (|| -> Result<(FileAttr, FileHandle), Errno> {
            let path = self.child(parent, name)?;
            let existed = self.backing.join(&path).exists();
            if !existed {
                self.state().entries_change(&self.backing, parent.0)?;
            }
            let file = self.open_backing(&path, flags, Some(mode & !umask & 0o7777))?;
            let attr = self.entry(path)?;
            if !existed {
                // A new file's durable length is 0: its data is lost unless synced.
                self.state().unsynced.insert(
                    attr.ino.0,
                    Unsynced {
                        durable_len: 0,
                        undo: BTreeMap::new(),
                    },
                );
            }
            let fh = self.register(attr.ino.0, file, flags)?;
            Ok((attr, fh))
        })();
        match result {
            Ok((attr, fh)) => {
                reply.created(&TTL, &attr, Generation(0), fh, FopenFlags::FOPEN_DIRECT_IO)
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = (|| -> Result<Vec<u8>, Errno> {
            let (_, file) = self.handle(fh)?;
            let mut bytes = vec![0; size as usize];
            let mut filled = 0;
            while filled < bytes.len() {
                let n = file.read_at(&mut bytes[filled..], offset + filled as u64)?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            bytes.truncate(filled);
            Ok(bytes)
        })();
        match result {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = (|| -> Result<u32, Errno> {
            let (inode, file) = self.handle(fh)?;
            let mut state = self.state();
            state.save(inode, &file, offset, offset + data.len() as u64)?;
            file.write_all_at(data, offset)?;
            Ok(data.len() as u32)
        })();
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() makes nothing durable.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.state().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = (|| -> Result<(), Errno> {
            let (_, file) = self.handle(fh)?;
            let mut state = self.state();
            file.sync_all()?;
            // The whole file as it is now is durable, whichever handle wrote it.
            state.unsynced.remove(&ino.0);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = (|| -> Result<Vec<(u64, FileType, std::ffi::OsString)>, Errno> {
            let path = self.path(ino)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (INodeNo::ROOT.0, FileType::Directory, "..".into()),
            ];
            let mut names: Vec<_> =
                std::fs::read_dir(self.backing.join(&path))?.collect::<io::Result<Vec<_>>>()?;
            names.sort_by_key(|e| e.file_name());
            for entry in names {
                let kind = FileType::from_std(entry.file_type()?).unwrap_or(FileType::RegularFile);
                let inode = self.state().inode_of(path.join(entry.file_name()));
                entries.push((inode, kind, entry.file_name()));
            }
            Ok(entries)
        })();
        match result {
            Ok(entries) => {
                for (i, (inode, kind, name)) in
                    entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(inode), i as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = (|| -> Result<(), Errno> {
            let path = self.path(ino)?;
            let mut state = self.state();
            std::fs::File::open(self.backing.join(path))?.sync_all()?;
            // Its entries as they are now are durable.
            state.dir_synced(&self.removed, ino.0)?;
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Room enough to never matter; nothing in Weir reads it.
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}
