//! Where each Raft group a node hosts keeps its log and snapshot in the data directory.
//!
//! - `groups = 1` (the default): the one group, [`SOLE_GROUP`], keeps `log/` and
//!   `snapshot.bin` at the top of the data directory, as a node of one group always has.
//! - `groups = N` (2 or more): the metadata group 0 and data groups 1 to N, each in
//!   `groups/<id>/` with its own `snapshot.bin`, and one log for all of them in
//!   `groups/log/` (`raft::wal`: its records name their group), so a write of every group's
//!   queued jobs is one fsync. A `groups/<id>/log/` (each group's own log, as a data
//!   directory of an older layout keeps them) is adopted into the shared log at start and
//!   removed (`raft::log_store`).
//!
//! Invariant: a data directory keeps the count of groups it was created with. A start with
//! another count is refused, naming both, before any log is opened: a group left out would
//! lose its state silently, and a group added to a running cluster would be founded by no
//! one (only a first start founds). What is looked at: a log at the top (one group), and
//! the numbered directories under `groups/`. A `groups/` whose directories are a partial
//! set and hold no log yet (a first start stopped while creating them) is completed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::raft::{GroupId, SOLE_GROUP};

/// The directory under the data directory that holds one directory per group.
pub const GROUPS_DIR: &str = "groups";

/// The shared log's directory under [`GROUPS_DIR`].
pub const SHARED_LOG: &str = "log";

/// The log the groups of a node of several share, in the data directory `dir`.
pub fn shared_log_dir(dir: &Path) -> PathBuf {
    dir.join(GROUPS_DIR).join(SHARED_LOG)
}

/// Each group the node hosts with its directory, lowest id first, for a node configured
/// with `groups`: creates the group directories on a first start, refuses a directory made
/// for another count (module doc).
pub fn group_dirs(dir: &Path, groups: u32) -> Result<Vec<(GroupId, PathBuf)>, String> {
    let found = numbered_dirs(&dir.join(GROUPS_DIR))?;
    let top_log = dir.join("log").exists();
    let found_count = || match found.len() {
        0 => "one group (its log at the top of the directory)".to_string(),
        n => format!("groups = {}", n - 1),
    };
    if groups == 1 {
        if !found.is_empty() {
            return Err(changed(dir, &found_count(), groups));
        }
        return Ok(vec![(SOLE_GROUP, dir.to_path_buf())]);
    }
    let wanted: BTreeSet<GroupId> = (0..=groups).collect();
    let any_log = shared_log_dir(dir).exists()
        || found
            .iter()
            .any(|g| group_dir(dir, *g).join("log").exists());
    if top_log || (found != wanted && any_log) || !found.is_subset(&wanted) {
        let was = if top_log {
            "one group (its log at the top of the directory)".to_string()
        } else {
            format!("groups {found:?}")
        };
        return Err(changed(dir, &was, groups));
    }
    let mut dirs = Vec::new();
    for g in wanted {
        let path = group_dir(dir, g);
        crate::private_files::create_dir_all(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        dirs.push((g, path));
    }
    for settled in [dir.join(GROUPS_DIR), dir.to_path_buf()] {
        std::fs::File::open(&settled)
            .and_then(|f| f.sync_all())
            .map_err(|e| format!("{}: {e}", settled.display()))?;
    }
    Ok(dirs)
}

/// The directory of group `g` in a data directory of several groups.
pub fn group_dir(dir: &Path, g: GroupId) -> PathBuf {
    dir.join(GROUPS_DIR).join(g.to_string())
}

/// The refusal of a start whose `groups` differs from the data directory's.
fn changed(dir: &Path, was: &str, groups: u32) -> String {
    format!(
        "{}: this data directory holds {was}, but the config says groups = {groups}: a data \
         directory keeps the groups it was created with (start with its count, or on a new \
         directory)",
        dir.display()
    )
}

/// The ids of the numbered directories in `dir` (none if it does not exist); anything
/// else in it but the shared log is an error naming it.
fn numbered_dirs(dir: &Path) -> Result<BTreeSet<GroupId>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut ids = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name();
        if name == SHARED_LOG && entry.path().is_dir() {
            continue;
        }
        let id = name
            .to_str()
            .and_then(|n| n.parse::<GroupId>().ok())
            .filter(|id| id.to_string() == name.to_string_lossy());
        match id {
            Some(id) if entry.path().is_dir() => {
                ids.insert(id);
            }
            _ => {
                return Err(format!(
                    "{}: not a group's directory (a group's is named by its number)",
                    entry.path().display()
                ));
            }
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::test_cluster::TempDir;

    #[test]
    fn one_group_keeps_the_top_of_the_directory_and_several_get_their_own() {
        let one = TempDir::new("groups-dir-one");
        assert_eq!(group_dirs(&one.0, 1).unwrap(), vec![(0, one.0.clone())]);
        assert!(!one.0.join(GROUPS_DIR).exists());
        let three = TempDir::new("groups-dir-three");
        std::fs::create_dir_all(&three.0).unwrap();
        let dirs = group_dirs(&three.0, 3).unwrap();
        let want: Vec<(GroupId, PathBuf)> = (0..=3)
            .map(|g| (g, three.0.join("groups").join(g.to_string())))
            .collect();
        assert_eq!(dirs, want);
        assert!(dirs.iter().all(|(_, d)| d.is_dir()));
        // Started again with the same count: the same directories.
        std::fs::create_dir_all(want[1].1.join("log")).unwrap();
        assert_eq!(group_dirs(&three.0, 3).unwrap(), want);
        // The log the groups share sits beside their directories.
        std::fs::create_dir_all(shared_log_dir(&three.0)).unwrap();
        assert_eq!(group_dirs(&three.0, 3).unwrap(), want);
    }

    #[test]
    fn a_changed_count_of_groups_is_refused_naming_both() {
        let dir = TempDir::new("groups-dir-changed");
        std::fs::create_dir_all(dir.0.join("log")).unwrap();
        let err = group_dirs(&dir.0, 2).unwrap_err();
        assert!(
            err.ends_with(
                "this data directory holds one group (its log at the top of the directory), \
                 but the config says groups = 2: a data directory keeps the groups it was \
                 created with (start with its count, or on a new directory)"
            ),
            "{err}"
        );
        assert!(!dir.0.join(GROUPS_DIR).exists(), "refused, yet created");

        let several = TempDir::new("groups-dir-several");
        std::fs::create_dir_all(&several.0).unwrap();
        group_dirs(&several.0, 2).unwrap();
        std::fs::create_dir_all(group_dir(&several.0, 2).join("log")).unwrap();
        let err = group_dirs(&several.0, 1).unwrap_err();
        assert!(
            err.contains("holds groups = 2, but the config says groups = 1"),
            "{err}"
        );
        let err = group_dirs(&several.0, 3).unwrap_err();
        assert!(
            err.contains("holds groups {0, 1, 2}, but the config says groups = 3"),
            "{err}"
        );
        let err = group_dirs(&several.0, 2).map(|_| ());
        assert_eq!(err, Ok(()));
        // Fewer groups than the directory holds: refused even though 0..=1 exist.
        let err = group_dirs(&several.0, 1).unwrap_err();
        assert!(err.contains("groups = 2"), "{err}");
    }

    #[test]
    fn a_first_start_stopped_while_creating_groups_is_completed() {
        let dir = TempDir::new("groups-dir-partial");
        std::fs::create_dir_all(group_dir(&dir.0, 0)).unwrap();
        std::fs::create_dir_all(group_dir(&dir.0, 1)).unwrap();
        assert_eq!(group_dirs(&dir.0, 2).unwrap().len(), 3);
        std::fs::write(dir.0.join(GROUPS_DIR).join("junk"), b"").unwrap();
        let err = group_dirs(&dir.0, 2).unwrap_err();
        assert!(
            err.ends_with("junk: not a group's directory (a group's is named by its number)"),
            "{err}"
        );
    }
}
