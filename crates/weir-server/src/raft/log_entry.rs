//! A stored log entry's encoding: an openraft entry of [`TypeConfig`](super::TypeConfig) encoded with the
//! pinned codec and sealed in a [`weir_core::codec`] frame of kind `b"WENT"` (length,
//! version, crc32c). The one place the entry's frame kind and version are defined: the log
//! store seals entries with it, the WAL finds and verifies them with it, and the fuzz
//! target `log_entry` drives [`decode_entry`] exactly as a read does.
//!
//! Invariants:
//! - Every read of a stored entry goes through [`decode_entry`]: the frame, the decode, at
//!   most [`ENTRY_COMMANDS_MAX`] commands and [`ENTRY_BYTES_MAX`] bytes, and the index it
//!   was stored under. Nothing here panics on stored bytes.

use openraft::EntryPayload;

use super::Entry;
use weir_core::bounds::{ENTRY_BYTES_MAX, ENTRY_COMMANDS_MAX};
use weir_core::codec::{self, FrameError};

/// Frame kind of a stored entry.
pub const ENTRY_MAGIC: [u8; 4] = *b"WENT";
/// Version of a stored entry's payload layout (an openraft entry of [`TypeConfig`](super::TypeConfig)).
pub const ENTRY_VERSION: u16 = 1;

/// An entry as stored: its encoding sealed in a `WENT` frame.
pub fn seal_entry(entry: &Entry) -> Vec<u8> {
    seal_entry_payload(&codec::encode(entry))
}

/// An entry's encoding sealed in its `WENT` frame, as stored (public for the fuzz target,
/// which seals mutated payloads so they reach the decoder behind the checksum).
pub fn seal_entry_payload(payload: &[u8]) -> Vec<u8> {
    codec::seal_frame(ENTRY_MAGIC, ENTRY_VERSION, payload)
}

/// A stored entry's bytes, verified and decoded: the frame, the decode and the entry
/// bounds (not yet which index it should be: see [`decode_entry`]).
pub fn open_entry(bytes: &[u8]) -> Result<Entry, FrameError> {
    let payload = codec::open_frame(bytes, ENTRY_MAGIC, ENTRY_VERSION, ENTRY_BYTES_MAX as u64)?;
    let entry: Entry = codec::decode(payload)?;
    if let EntryPayload::Normal(batch) = &entry.payload
        && batch.commands.len() > ENTRY_COMMANDS_MAX
    {
        return Err(FrameError::Invalid(format!(
            "{} commands, the bound is {ENTRY_COMMANDS_MAX}",
            batch.commands.len()
        )));
    }
    Ok(entry)
}

/// A stored entry's bytes, verified and decoded as [`open_entry`] does, and found to be the
/// entry at `index`. Every read of a stored entry goes through it; public so the fuzz target
/// `log_entry` exercises exactly this path.
pub fn decode_entry(index: u64, bytes: &[u8]) -> Result<Entry, FrameError> {
    let entry = open_entry(bytes)?;
    if entry.log_id.index != index {
        return Err(FrameError::Invalid(format!(
            "stored under index {index} but is entry {}",
            entry.log_id.index
        )));
    }
    Ok(entry)
}
