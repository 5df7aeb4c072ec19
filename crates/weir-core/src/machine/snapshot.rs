//! The snapshot: the machine's [`SavedLimits`] in the framed format, and the state digest.
//!
//! `SavedLimits` is everything the machine keeps except what it derives from the rest: the
//! lease-expiry index, the deadline index, the totals of the bounded items and each queue's
//! ranks. A restore rebuilds all four from the saved state, so a snapshot cannot carry an
//! index that disagrees with the state.
//!
//! Bytes: a frame of kind `b"WSNP"` at [`SNAPSHOT_VERSION`] (see [`crate::codec`]) whose
//! payload is `SavedLimits` encoded with the pinned bincode configuration. Every container
//! in it is ordered, every number an integer except the `per_second` rates, which bincode
//! writes as their exact IEEE-754 bits; so two machines in the same state encode to the same
//! bytes, and `encode(decode(b)) == b`.
//!
//! Decoding checks the frame (magic, version, length, crc32c), then the encoding, then every
//! invariant of the machine ([`Machine::check`]): damaged, truncated, foreign or
//! inconsistent bytes are refused with an error that names the problem, never half-loaded.
//! [`Machine::restore_from`] does the same from a reader (a node's snapshot file, a
//! snapshot received from the leader): the checksum streamed over the payload first, then
//! the decode through a buffer, so a snapshot of millions of keys is never held whole.

use super::saved::SavedLimits;
use super::saved_v5::SavedLimitsV5;
use super::saved_v6::SavedLimitsV6;
use super::saved_v7::SavedLimitsV7;
use super::saved_v8::SavedLimitsV8;
use super::saved_v9::SavedLimitsV9;
use super::state::Machine;
use crate::bounds::SNAPSHOT_BYTES_MAX;
use crate::codec::{self, FrameError, Payload, ReadPayload};
use std::io::{Read, Seek, SeekFrom, Write};

/// Frame kind of a snapshot.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"WSNP";

/// The snapshot format this build writes. Bump it with any change to the serialized types
/// of [`SavedLimits`]. Version 2: the derived indexes and the log clock's unread wall-clock
/// stamp are no longer written. Version 3: refusals name their objects (a finished ticket
/// keeps its refusal), budget holds, and finished tickets' log times. Version 4: a session
/// keeps its owner; every refusal names its object, and a waiter refused by a halt is kept
/// as `Finished::Halted`, and queues and rate refills carry new derived indexes. Version 5:
/// keyed limits (a limit's spec says whether it is keyed and in shadow mode; a limit keeps
/// its keys, or the definition it is a key of, and its shadow count) and tickets of several
/// parts. Version 6: a holder keeps its grant's log time, a waiter its fairness weight.
/// Version 7: token leases, appended after the tenants. Version 8: the lean keys of each
/// keyed definition, appended after the leases. Version 9: the tenants frozen by a move and
/// not yet dropped, appended after the lean keys. Version 10: the metadata group's
/// placements, appended after the frozen tenants.
/// This version, versions 9, 8, 7 and 6 and [`SNAPSHOT_VERSION_READ_MIN`] are read; an older snapshot is
/// refused naming both versions (its limits and tickets no longer decode as they were
/// written), and a newer one naming its version.
pub const SNAPSHOT_VERSION: u16 = 10;

/// The oldest snapshot version this build reads: version 5, converted on restore as
/// [`super::saved_v5`] says (version 6 as [`super::saved_v6`] says, version 7 as
/// [`super::saved_v7`] says, version 8 as [`super::saved_v8`] says, version 9 as
/// [`super::saved_v9`] says).
pub const SNAPSHOT_VERSION_READ_MIN: u16 = 5;

/// The versions [`Machine::restore`] reads, today's first.
const SNAPSHOT_VERSIONS_READ: [u16; 6] = [SNAPSHOT_VERSION, 9, 8, 7, 6, SNAPSHOT_VERSION_READ_MIN];

/// The machine a checked payload of `version` (one of [`SNAPSHOT_VERSIONS_READ`]) holds,
/// converted to today's state, its invariants checked.
fn restored(version: u16, payload: impl Payload) -> Result<Machine, FrameError> {
    let saved = match version {
        9 => payload.decode::<SavedLimitsV9>()?.upgrade(),
        8 => payload.decode::<SavedLimitsV8>()?.upgrade(),
        7 => payload.decode::<SavedLimitsV7>()?.upgrade(),
        6 => payload.decode::<SavedLimitsV6>()?.upgrade(),
        SNAPSHOT_VERSION_READ_MIN => payload.decode::<SavedLimitsV5>()?.upgrade(),
        SNAPSHOT_VERSION => payload.decode::<SavedLimits>()?,
        other => unreachable!("version {other} is not one this build reads"),
    };
    let machine = Machine::from_saved(saved);
    machine.check().map_err(FrameError::Invalid)?;
    Ok(machine)
}

/// The machine's saved state at one applied index, taken apart from the machine so that it
/// encodes while the machine applies on ([`Machine::freeze`]). Its bytes are exactly those
/// [`Machine::snapshot`] gave at that index: the same state, encoded the same way.
pub struct Frozen(SavedLimits);

impl Frozen {
    /// The snapshot bytes of the state frozen.
    pub fn encode(&self) -> Vec<u8> {
        seal(&self.0)
    }

    /// How many bytes [`Frozen::encode`] gives, counted without building them.
    pub fn encoded_len(&self) -> u64 {
        codec::sealed_len(&self.0)
    }

    /// Writes [`Frozen::encode`]'s bytes at `out`'s position through a buffer, never whole
    /// ([`codec::seal_frame_into`]): how many, and their crc32c.
    pub fn encode_into<W: Write + Seek>(&self, out: &mut W) -> std::io::Result<(u64, u32)> {
        codec::seal_frame_into(out, SNAPSHOT_MAGIC, SNAPSHOT_VERSION, &self.0)
    }
}

fn seal(saved: &SavedLimits) -> Vec<u8> {
    codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, &codec::encode(saved))
}

impl Machine {
    /// The machine as snapshot bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        seal(self.saved())
    }

    /// The saved state, cloned to be encoded apart ([`Frozen::encode`]), so a snapshot holds
    /// the caller's lock on the machine only for the clone. The lean keys, which may be
    /// millions, are shared whole, copied a chunk (and its path in the table's tree) only
    /// when the machine changes that chunk afterwards (`key_table`): the clone costs a
    /// reference a keyed definition there, and a copy of the rest of the state (sessions,
    /// tickets, limits, tenants).
    pub fn freeze(&self) -> Frozen {
        Frozen(self.saved().clone())
    }

    /// A machine from snapshot bytes (of this version, or of version 9, 8, 7, 6 or 5, converted), or
    /// why they were refused.
    pub fn restore(bytes: &[u8]) -> Result<Machine, FrameError> {
        // The version the frame says, when it is one this build reads: `open_frame` checks
        // the frame against it (and names today's version when it is another).
        let version = bytes
            .get(4..6)
            .map(|v| u16::from_le_bytes([v[0], v[1]]))
            .filter(|v| SNAPSHOT_VERSIONS_READ.contains(v))
            .unwrap_or(SNAPSHOT_VERSION);
        let payload = codec::open_frame(bytes, SNAPSHOT_MAGIC, version, SNAPSHOT_BYTES_MAX)?;
        restored(version, payload)
    }

    /// [`Machine::restore`] of the `len` bytes at `start` in `r`, never holding them: the
    /// frame is checked by streaming its payload through the checksum, then decoded from
    /// `r` through a buffer. The same versions are read and the same faults refused, with
    /// the same errors; a failing read is [`FrameError::Read`].
    pub fn restore_from<R: Read + Seek>(
        r: &mut R,
        start: u64,
        len: u64,
    ) -> Result<Machine, FrameError> {
        let header = codec::check_frame(
            r,
            start,
            len,
            SNAPSHOT_MAGIC,
            &SNAPSHOT_VERSIONS_READ,
            SNAPSHOT_BYTES_MAX,
        )?;
        r.seek(SeekFrom::Start(start + codec::HEADER_BYTES as u64))
            .map_err(|e| FrameError::Read(e.to_string()))?;
        let payload = ReadPayload {
            reader: r,
            len: header.payload_bytes,
        };
        restored(header.version, payload)
    }

    /// What the state holds, counted (`weir snapshot inspect`).
    pub fn contents(&self) -> SnapshotContents {
        let saved = self.saved();
        let mut c = SnapshotContents {
            applied: saved.applied,
            last_fence: saved.last_fence,
            tenants: saved.tenants.len() as u64,
            sessions: saved.sessions.len() as u64,
            ..SnapshotContents::default()
        };
        for limit in saved.limits.values() {
            if limit.is_key() {
                c.keys += 1;
            } else {
                c.limits += 1;
            }
            c.holders += limit.holders.len() as u64;
            c.queued += limit.queue.len() as u64;
        }
        c.keys += saved
            .lean_keys
            .values()
            .map(|t| t.len() as u64)
            .sum::<u64>();
        for tenant in saved.tenants.values() {
            c.runs += tenant.running.len() as u64;
            c.settlements += tenant.receipts.len() as u64;
            c.halts += tenant.halts.len() as u64;
        }
        c
    }

    /// A digest of the state: equal on replicas at the same applied index.
    pub fn digest(&self) -> String {
        digest_of(&codec::encode(self.saved()))
    }
}

/// What a machine state holds, counted: the figures `weir snapshot inspect` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotContents {
    /// Index of the last entry applied.
    pub applied: Option<u64>,
    /// The last fence handed out.
    pub last_fence: u64,
    pub tenants: u64,
    /// Limit definitions (a keyed limit counts once).
    pub limits: u64,
    /// Live keys of keyed limits.
    pub keys: u64,
    pub sessions: u64,
    /// Permits held, over every limit and key.
    pub holders: u64,
    /// Tickets waiting in queues.
    pub queued: u64,
    /// Runs holding a slot.
    pub runs: u64,
    /// Settlement receipts kept.
    pub settlements: u64,
    pub halts: u64,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Batch, Command, Leadership, Owner, Reply};

    fn entry(m: &mut Machine, index: u64, commands: Vec<Command>) -> Vec<Reply> {
        let batch = Batch {
            leadership: Leadership::default(),
            clock_ms: index * 10,
            wall_ms: 0,
            commands,
        };
        m.apply(index, &batch).replies
    }

    #[test]
    fn a_version_4_snapshot_is_refused_naming_both_versions() {
        let mut m = Machine::new();
        entry(&mut m, 1, vec![Command::OpenSession { ttl_ms: 10_000 }]);
        let mut bytes = m.snapshot();
        bytes[4..6].copy_from_slice(&4u16.to_le_bytes());
        let err = Machine::restore(&bytes).unwrap_err().to_string();
        assert!(
            err.contains("unknown format version 4 (this build reads 10)"),
            "{err}"
        );
    }

    #[test]
    fn a_snapshot_keeps_owners_and_a_damaged_one_is_refused() {
        let mut m = Machine::new();
        let open = Command::OpenSessionFor {
            ttl_ms: 10_000,
            owner: Some(Owner([9; 32])),
            nonce: 77,
        };
        entry(&mut m, 1, vec![open]);
        let restored = Machine::restore(&m.snapshot()).expect("restores");
        assert_eq!(restored.session_owner(77), Some(Some(Owner([9; 32]))));
        let mut damaged = m.snapshot();
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        let err = Machine::restore(&damaged).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
    }

    /// `restore_from` of bytes inside a larger reader: what `restore` gives of the bytes.
    fn restore_inside(bytes: &[u8]) -> Result<Machine, FrameError> {
        let mut around = b"before".to_vec();
        around.extend_from_slice(bytes);
        around.extend_from_slice(b"after");
        let mut r = std::io::Cursor::new(around);
        Machine::restore_from(&mut r, 6, bytes.len() as u64)
    }

    #[test]
    fn a_snapshot_restored_from_a_reader_is_the_one_restored_from_bytes() {
        let mut m = Machine::new();
        entry(&mut m, 1, vec![Command::OpenSession { ttl_ms: 10_000 }]);
        let bytes = m.snapshot();
        let restored = restore_inside(&bytes).expect("restores");
        assert_eq!(restored.snapshot(), bytes);
        assert_eq!(restored.digest(), m.digest());
        // Every damage is refused with the error the bytes' restore gives.
        let mut damaged = vec![];
        let mut flipped = bytes.clone();
        flipped[codec::HEADER_BYTES + 2] ^= 0x01;
        damaged.push(flipped);
        let mut version_4 = bytes.clone();
        version_4[4..6].copy_from_slice(&4u16.to_le_bytes());
        damaged.push(version_4);
        damaged.push(bytes[..bytes.len() - 1].to_vec());
        damaged.push(bytes[..10].to_vec());
        let mut longer = bytes.clone();
        longer.push(0);
        damaged.push(longer);
        let mut magic = bytes.clone();
        magic[0] = b'X';
        damaged.push(magic);
        for bad in damaged {
            let Err(expected) = Machine::restore(&bad) else {
                panic!("damaged bytes restored")
            };
            assert_eq!(restore_inside(&bad).err(), Some(expected));
        }
    }
}
