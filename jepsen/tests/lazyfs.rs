//! The lost-fsync layer itself (`weir_jepsen::lazyfs`): after a power loss every file holds
//! exactly what its last fsync made durable, and every directory exactly the entries its
//! last fsync made durable. These mount FUSE, so they need root and
//! `/dev/fuse` (CI has both); without root they say so and return.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use weir_jepsen::lazyfs::{LazyFs, Loss};

/// A fresh (backing, mountpoint) pair under the system's temporary directory.
fn dirs(name: &str) -> (PathBuf, PathBuf) {
    let root = std::env::temp_dir().join(format!("weir-lazyfs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    (root.join("backing"), root.join("mount"))
}

fn root() -> bool {
    // `id -u` rather than a libc call: the harness forbids unsafe code.
    let uid = std::process::Command::new("id")
        .arg("-u")
        .output()
        .expect("id runs");
    let root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    if !root {
        eprintln!("not root: the lost-fsync layer cannot be mounted, test not run");
    }
    root
}

/// The layer mounted over fresh directories; unmounted, and its directories removed, on
/// drop.
struct Mounted {
    fs: Option<LazyFs>,
    backing: PathBuf,
    mount: PathBuf,
}

impl Mounted {
    /// `None` without root (the test is then not run).
    fn new(name: &str) -> Option<Mounted> {
        if !root() {
            return None;
        }
        let (backing, mount) = dirs(name);
        let fs = LazyFs::mount(&backing, &mount).expect("mounts");
        Some(Mounted {
            fs: Some(fs),
            backing,
            mount,
        })
    }

    fn fs(&self) -> &LazyFs {
        self.fs.as_ref().expect("mounted until dropped")
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        drop(self.fs.take());
        let _ = std::fs::remove_dir_all(self.backing.parent().expect("a parent"));
    }
}

fn read(path: &std::path::Path) -> Vec<u8> {
    let mut bytes = vec![];
    File::open(path)
        .expect("opens")
        .read_to_end(&mut bytes)
        .expect("reads");
    bytes
}

#[test]
fn a_power_loss_leaves_exactly_the_synced_contents() {
    let Some(mounted) = Mounted::new("synced") else {
        return;
    };
    let (fs, backing, mount) = (mounted.fs(), &mounted.backing, &mounted.mount);
    let path = mount.join("log");
    let synced: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut f = File::create(&path).expect("creates");
        f.write_all(&synced).expect("writes");
        f.sync_data().expect("fdatasync");
        sync_dir(mount);
        // Unsynced: an overwrite inside the synced part, across a page boundary, and an
        // append past its end.
        f.write_all_at(&[0xEE; 300], 4000).expect("overwrites");
        f.write_all_at(&[0xAB; 5000], 10_000).expect("appends");
        assert_eq!(
            read(&path).len(),
            15_000,
            "the layer serves unsynced writes until the loss"
        );
        assert_eq!(read(&path)[4000], 0xEE);
    }
    let loss = fs.power_loss().expect("power loss");
    assert_eq!(
        loss,
        Loss {
            files: 1,
            pages: 2,
            bytes_cut: 5000,
            entries: 0
        }
    );
    assert_eq!(
        read(&path),
        synced,
        "through the mount: the synced contents exactly"
    );
    assert_eq!(
        read(&backing.join("log")),
        synced,
        "and in the backing file"
    );
}

#[test]
fn a_new_file_whose_entry_is_synced_comes_back_empty_unless_its_data_is_synced_too() {
    let Some(mounted) = Mounted::new("new") else {
        return;
    };
    let (fs, mount) = (mounted.fs(), &mounted.mount);
    std::fs::write(mount.join("lost"), b"never synced").expect("writes");
    let mut kept = File::create(mount.join("kept")).expect("creates");
    kept.write_all(b"synced").expect("writes");
    kept.sync_all().expect("fsync");
    kept.write_all(b" and more").expect("writes");
    drop(kept);
    std::fs::create_dir(mount.join("sub")).expect("mkdir");
    sync_dir(mount);
    std::fs::write(mount.join("sub/tmp"), b"renamed after its fsync").expect("writes");
    File::open(mount.join("sub/tmp"))
        .expect("opens")
        .sync_all()
        .expect("fsync");
    std::fs::rename(mount.join("sub/tmp"), mount.join("sub/final")).expect("renames");
    sync_dir(&mount.join("sub"));
    fs.power_loss().expect("power loss");
    assert_eq!(
        read(&mount.join("lost")),
        b"",
        "its entry synced, its data never: empty"
    );
    assert_eq!(read(&mount.join("kept")), b"synced");
    assert_eq!(read(&mount.join("sub/final")), b"renamed after its fsync");
    assert_eq!(names(&mount.join("sub")), ["final"]);
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("lists")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// fsync of a directory handle: its entries as they are now become durable.
fn sync_dir(dir: &Path) {
    File::open(dir).expect("opens").sync_all().expect("fsyncs");
}

/// A file at `path` with `bytes`, synced, its entry not.
fn synced_file(path: &Path, bytes: &[u8]) {
    let mut f = File::create(path).expect("creates");
    f.write_all(bytes).expect("writes");
    f.sync_all().expect("fsync");
}

#[test]
fn a_file_created_and_not_dir_synced_disappears_even_with_its_data_synced() {
    let Some(mounted) = Mounted::new("create") else {
        return;
    };
    let (fs, mount) = (mounted.fs(), &mounted.mount);
    synced_file(&mount.join("kept"), b"its entry synced");
    sync_dir(mount);
    synced_file(&mount.join("lost"), b"its data synced, its entry never");
    let loss = fs.power_loss().expect("power loss");
    assert_eq!(names(mount), ["kept"], "the unsynced entry is gone");
    assert_eq!(read(&mount.join("kept")), b"its entry synced");
    assert_eq!(loss.entries, 1);
    assert!(
        !mounted.backing.join("lost").exists(),
        "and from the backing directory"
    );
}

#[test]
fn a_rename_not_dir_synced_is_undone_with_the_replaced_file_back_and_one_dir_synced_sticks() {
    let Some(mounted) = Mounted::new("rename") else {
        return;
    };
    let (fs, mount) = (mounted.fs(), &mounted.mount);
    // The atomic replace: temporary file, fsync, rename over the old one; the directory's
    // fsync missing.
    synced_file(&mount.join("snapshot"), b"the old snapshot");
    sync_dir(mount);
    synced_file(&mount.join("snapshot.tmp"), b"the new snapshot");
    std::fs::rename(mount.join("snapshot.tmp"), mount.join("snapshot")).expect("renames");
    assert_eq!(read(&mount.join("snapshot")), b"the new snapshot");
    let loss = fs.power_loss().expect("power loss");
    assert_eq!(
        read(&mount.join("snapshot")),
        b"the old snapshot",
        "the replaced file is back under its name"
    );
    assert_eq!(names(mount), ["snapshot"]);
    assert_eq!(loss.entries, 1, "snapshot names the old file again");
    // A rename of a file whose entry was synced comes back under its old name.
    synced_file(&mount.join("a"), b"moved");
    sync_dir(mount);
    std::fs::rename(mount.join("a"), mount.join("b")).expect("renames");
    fs.power_loss().expect("power loss");
    assert_eq!(names(mount), ["a", "snapshot"]);
    assert_eq!(read(&mount.join("a")), b"moved");
    // With the directory's fsync, the same replace sticks.
    synced_file(&mount.join("snapshot.tmp"), b"the new snapshot");
    std::fs::rename(mount.join("snapshot.tmp"), mount.join("snapshot")).expect("renames");
    sync_dir(mount);
    fs.power_loss().expect("power loss");
    assert_eq!(read(&mount.join("snapshot")), b"the new snapshot");
    assert_eq!(names(mount), ["a", "snapshot"]);
}

#[test]
fn an_unlink_not_dir_synced_comes_back_with_its_durable_contents_and_one_dir_synced_sticks() {
    let Some(mounted) = Mounted::new("unlink") else {
        return;
    };
    let (fs, mount) = (mounted.fs(), &mounted.mount);
    std::fs::create_dir(mount.join("log")).expect("mkdir");
    sync_dir(mount);
    let segment = mount.join("log/1.wal");
    synced_file(&segment, b"durable");
    sync_dir(&mount.join("log"));
    OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("opens")
        .write_all(b" and not")
        .expect("writes");
    std::fs::remove_file(&segment).expect("unlinks");
    assert_eq!(names(&mount.join("log")), Vec::<String>::new());
    let loss = fs.power_loss().expect("power loss");
    assert_eq!(
        read(&segment),
        b"durable",
        "back, with its durable contents only"
    );
    assert_eq!((loss.entries, loss.bytes_cut), (1, 8));
    std::fs::remove_file(&segment).expect("unlinks");
    sync_dir(&mount.join("log"));
    let removed = PathBuf::from(format!(
        "{}.removed",
        mounted.backing.canonicalize().expect("exists").display()
    ));
    assert_eq!(
        names(&removed),
        Vec::<String>::new(),
        "nothing kept once the removal is durable"
    );
    fs.power_loss().expect("power loss");
    assert_eq!(names(&mount.join("log")), Vec::<String>::new());
}

#[test]
fn a_directory_made_and_not_dir_synced_disappears_with_its_files_and_an_rmdir_comes_back() {
    let Some(mounted) = Mounted::new("mkdir") else {
        return;
    };
    let (fs, mount) = (mounted.fs(), &mounted.mount);
    std::fs::create_dir(mount.join("kept")).expect("mkdir");
    std::fs::create_dir(mount.join("gone")).expect("mkdir");
    sync_dir(mount);
    std::fs::create_dir(mount.join("lost")).expect("mkdir");
    synced_file(
        &mount.join("lost/f"),
        b"synced, in a directory never synced in its parent",
    );
    sync_dir(&mount.join("lost"));
    synced_file(&mount.join("kept/f"), b"synced, and its directory too");
    sync_dir(&mount.join("kept"));
    std::fs::remove_dir(mount.join("gone")).expect("rmdir");
    fs.power_loss().expect("power loss");
    assert_eq!(
        names(mount),
        ["gone", "kept"],
        "the unsynced mkdir undone with its file, the unsynced rmdir undone"
    );
    assert_eq!(
        read(&mount.join("kept/f")),
        b"synced, and its directory too"
    );
    std::fs::remove_dir(mount.join("gone")).expect("rmdir");
    sync_dir(mount);
    fs.power_loss().expect("power loss");
    assert_eq!(names(mount), ["kept"], "a synced rmdir sticks");
}

#[test]
fn a_cut_since_the_last_sync_is_undone_and_a_second_loss_keeps_what_was_synced_between() {
    let Some(mounted) = Mounted::new("cut") else {
        return;
    };
    let (fs, mount) = (mounted.fs(), &mounted.mount);
    let path = mount.join("db");
    let first: Vec<u8> = (0..9000u32).map(|i| (i % 13) as u8).collect();
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("opens");
    f.write_all_at(&first, 0).expect("writes");
    f.sync_data().expect("fdatasync");
    sync_dir(mount);
    f.set_len(100).expect("cuts");
    f.set_len(20_000).expect("grows");
    f.write_all_at(b"unsynced", 19_000).expect("writes");
    fs.power_loss().expect("first power loss");
    assert_eq!(read(&path), first, "the cut and the growth are undone");
    // The node's next life: an fsync between two losses is kept by the second.
    let f = OpenOptions::new().write(true).open(&path).expect("opens");
    f.write_all_at(b"second life", 0).expect("writes");
    f.sync_data().expect("fdatasync");
    f.write_all_at(b"XXXXXX", 0).expect("writes");
    fs.power_loss().expect("second power loss");
    let mut expected = first.clone();
    expected[..11].copy_from_slice(b"second life");
    assert_eq!(read(&path), expected);
    assert_eq!(fs.losses(), 2);
}

#[test]
fn a_first_start_keeps_its_data_directory_and_identity_through_a_power_loss() {
    use weir_server::raft::cluster_identity::{ClusterId, read_cluster_id, write_cluster_id};
    use weir_server::server::data_dir::prepare_data_dir;
    let Some(mounted) = Mounted::new("first") else {
        return;
    };
    let (fs, mount) = (mounted.fs(), &mounted.mount);
    // The server's own code on the layer: the data directory made at a first start (its
    // entry in its parent), its node.id and cluster.id (each renamed into place).
    let dir = mount.join("data");
    assert_eq!(prepare_data_dir(&dir, 7), Ok(true), "a first start");
    let id = ClusterId::random().expect("an identity");
    write_cluster_id(&dir, id).expect("records the identity");
    let loss = fs.power_loss().expect("power loss");
    assert_eq!(loss.entries, 0, "every entry made durable: {loss:?}");
    assert_eq!(
        prepare_data_dir(&dir, 7),
        Ok(false),
        "the directory and its node.id survived: not a first start again"
    );
    assert_eq!(read_cluster_id(&dir), Ok(Some(id)));
    assert_eq!(names(&dir), ["cluster.id", "node.id"]);
}
