//! The other systems the bench compares Weir with (`--against etcd`, `--against redis`):
//! their programs found on PATH, each run in one temporary directory of its own, and
//! everything undone on drop.
//!
//! Invariant: once an [`External`] exists, dropping it (at the end of a run, on an error,
//! or when a ctrl-c ends the comparison's future) kills and reaps every process it started
//! and removes its directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The path of `program` on PATH, or an error saying which package installs it.
pub fn find_program(program: &str, package: &str) -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .ok_or_else(|| format!("{program} is not on PATH: install it (Debian: {package})"))
}

/// Processes started for a comparison, and the directory they work in.
pub struct External {
    dir: PathBuf,
    children: Vec<Child>,
}

impl External {
    /// A fresh, empty directory `weir-bench-<tag>-<pid>` under the temporary directory.
    pub fn new(tag: &str) -> Result<External, String> {
        let dir = std::env::temp_dir().join(format!("weir-bench-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(External {
            dir,
            children: vec![],
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts `command` with no input and no output, its stderr into `<log>` in the
    /// directory.
    pub fn spawn(&mut self, mut command: Command, log: &str) -> Result<(), String> {
        let path = self.dir.join(log);
        let log = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
        self.children.push(child);
        Ok(())
    }
}

impl Drop for External {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_external_leaves_no_process_and_no_directory() {
        let mut external = External::new("external-test").unwrap();
        let dir = external.dir().to_path_buf();
        std::fs::write(dir.join("data"), b"x").unwrap();
        let mut sleep = Command::new(find_program("sleep", "coreutils").unwrap());
        sleep.arg("30");
        external.spawn(sleep, "sleep.log").unwrap();
        let pid = external.children[0].id();
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        drop(external);
        assert!(!dir.exists(), "{} left behind", dir.display());
        // Reaped: the pid no longer names that child (a zombie would still be listed).
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(!stat.contains("(sleep)"), "{stat}");
    }

    #[test]
    fn a_missing_program_names_its_package() {
        let err = find_program("weir-no-such-program", "weir-pkg").unwrap_err();
        assert_eq!(
            err,
            "weir-no-such-program is not on PATH: install it (Debian: weir-pkg)"
        );
    }
}
