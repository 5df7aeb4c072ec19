//! The snapshot: the whole [`Machine`] in the framed format, and the state digest.
//!
//! Bytes: a frame of kind `b"WSNP"` at [`SNAPSHOT_VERSION`] (see [`crate::codec`]) whose
//! payload is the machine encoded with the pinned bincode configuration. Every container in
//! the machine is ordered, every number an integer except the `per_second` rates, which
//! bincode writes as their exact IEEE-754 bits; so two machines in the same state encode to
//! the same bytes, and `encode(decode(b)) == b`.
//!
//! Decoding checks the frame (magic, version, length, crc32c), then the encoding, then every
//! invariant of the machine ([`Machine::check`]): damaged, truncated, foreign or
//! inconsistent bytes are refused with an error that names the problem, never half-loaded.

use super::state::Machine;
use crate::bounds::SNAPSHOT_BYTES_MAX;
use crate::codec::{self, FrameError};

/// Frame kind of a snapshot.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"WSNP";

/// The snapshot format this build writes and reads. Bump it with any change to the
/// machine's serialized types.
pub const SNAPSHOT_VERSION: u16 = 1;

impl Machine {
    /// The machine as snapshot bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, &codec::encode(self))
    }

    /// A machine from snapshot bytes, or why they were refused.
    pub fn restore(bytes: &[u8]) -> Result<Machine, FrameError> {
        let payload =
            codec::open_frame(bytes, SNAPSHOT_MAGIC, SNAPSHOT_VERSION, SNAPSHOT_BYTES_MAX)?;
        let machine: Machine = codec::decode(payload)?;
        machine.check().map_err(FrameError::Invalid)?;
        Ok(machine)
    }

    /// A digest of the state: equal on replicas at the same applied index.
    pub fn digest(&self) -> String {
        digest_of(&codec::encode(self))
    }
}

/// The digest of some bytes: 64-bit FNV-1a, as 16 hex digits. Not cryptographic; it exists
/// to show at a glance that replicas agree.
pub fn digest_of(bytes: &[u8]) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ b as u64).wrapping_mul(PRIME));
    format!("{hash:016x}")
}
