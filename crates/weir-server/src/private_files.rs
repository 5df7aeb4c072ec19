//! A node's files at rest are its own: the data directory and every directory under it
//! are created `0700`, every file in them (the log's segments and lock, the snapshot,
//! `node.id`, `cluster.id`) and every backup `0600`, so that no other user of the machine
//! reads the limits, sessions, tenants and tokens' owners they hold. [`tighten`] brings a
//! directory made before (or by hand, or by a copy) to the same modes at start, and logs
//! what it changed.
//!
//! Invariants: nothing here widens a mode; it imports nothing of this crate.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of the data directory and the directories under it.
pub const DIR_MODE: u32 = 0o700;

/// Mode of every file a node writes.
pub const FILE_MODE: u32 = 0o600;

/// Open options that create a file `0600` (an existing file keeps its mode).
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(FILE_MODE);
    o
}

/// `File::create`, with the file `0600`.
pub fn create(path: &Path) -> io::Result<File> {
    options().write(true).create(true).truncate(true).open(path)
}

/// Replaces `dir/name` with `bytes`: temporary file (`name.tmp`), fsync, rename, fsync of
/// the directory.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// `create_dir_all`, each directory it makes `0700`.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Takes group and other permissions off `dir` and everything under it (symbolic links
/// are left alone); logs at WARN how many paths were looser, naming the first. A path that
/// cannot be changed is an error naming it.
pub fn tighten(dir: &Path) -> Result<(), String> {
    let mut changed = Vec::new();
    walk(dir, &mut changed).map_err(|(path, e)| format!("{path}: {e}"))?;
    if let Some((first, mode)) = changed.first() {
        tracing::warn!(
            "data directory {}: {} paths were readable by others (the first, {first}, was \
             {mode:o}); now {DIR_MODE:o} for directories and {FILE_MODE:o} for files",
            dir.display(),
            changed.len()
        );
    }
    Ok(())
}

fn walk(path: &Path, changed: &mut Vec<(String, u32)>) -> Result<(), (String, io::Error)> {
    let at = |e| (path.display().to_string(), e);
    let meta = std::fs::symlink_metadata(path).map_err(at)?;
    let mode = meta.permissions().mode() & 0o777;
    let wanted = if meta.is_dir() {
        DIR_MODE
    } else if meta.is_file() {
        FILE_MODE
    } else {
        return Ok(());
    };
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & wanted))
            .map_err(at)?;
        changed.push((path.display().to_string(), mode));
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(at)? {
            walk(&entry.map_err(at)?.path(), changed)?;
        }
    }
    Ok(())
}
