//! One way to take a std mutex in the node: [`lock`], which takes the guard of a poisoned
//! mutex rather than panic.
//!
//! Every std mutex it is used on is held only to read, copy, insert or replace a value,
//! never across an await or a partial update, so a holder that panicked left the value
//! whole, and the node goes on serving (a node never panics on what a client sends). The
//! log's own locks (`raft::wal`, `raft::log_writer`) are not taken this way: a panic there
//! is a bug in the one writer, and they stop the node instead (fail-stop).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking the guard even if a holder panicked (module doc).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
