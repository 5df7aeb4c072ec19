//! The planted missing fsync (`PLANTED(unsynced-log)`, [`crate::planted`]): a redb storage
//! backend that writes the log file as redb's own file backend does but never syncs it.
//!
//! Every commit still reaches the file (the kernel's page cache), so kill -9 of the node
//! loses nothing and no kill-only run can tell this build from a correct one; only a power
//! loss that drops unsynced writes (the harness's lost-fsync layer, `jepsen/src/lazyfs.rs`)
//! shows that the log acknowledged entries it had not made durable. Used only when that
//! plant is on; never in a default build's path.

use std::fs::File;
use std::ops::Bound;

use redb::backends::FileBackend;
use redb::{BackendError, DatabaseError, StorageBackend};

/// The error of the backend's I/O methods (redb 4 without its experimental API).
type BackendIoError = std::io::Error;

/// redb's file backend with `sync_data` a no-op: the bug.
#[derive(Debug)]
pub struct UnsyncedFile(FileBackend);

impl UnsyncedFile {
    pub fn new(file: File) -> Result<UnsyncedFile, DatabaseError> {
        Ok(UnsyncedFile(FileBackend::new(file)?))
    }
}

impl StorageBackend for UnsyncedFile {
    fn len(&self) -> Result<u64, BackendIoError> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        self.0.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        // PLANTED(unsynced-log): the commit is acknowledged without reaching the disk.
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        self.0.write(offset, data)
    }

    fn close(&self) -> Result<(), BackendIoError> {
        self.0.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}
