//! The log's errors as openraft's [`StorageError`], which its storage traits require: one
//! constructor per subject and verb the log store and its writer report, and [`Damaged`],
//! a reason carried as an error value.

// openraft's traits fix the error type to its `StorageError`, which is large; boxing it
// is not ours to choose.
#![allow(clippy::result_large_err)]

use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};

use super::StorageError;

/// A failed `verb` on `subject`, with `e` as its source.
pub fn io_err(
    subject: ErrorSubject<u64>,
    verb: ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

/// A failed read of the log's entries.
pub fn read_err(e: impl std::error::Error + 'static) -> StorageError {
    io_err(ErrorSubject::Logs, ErrorVerb::Read, e)
}

/// A failed write of the log's entries.
pub fn write_err(e: impl std::error::Error + 'static) -> StorageError {
    io_err(ErrorSubject::Logs, ErrorVerb::Write, e)
}

/// A reason as an error value, for `AnyError`.
#[derive(Debug)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damaged {}
