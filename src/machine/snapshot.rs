//! The snapshot: [`SavedLimits`], the machine's state in the framed format, and the state
//! digest.
//!
//! `SavedLimits` is everything the machine keeps except the two indexes it derives from the
//! rest (session leases by expiry time, and the rated limits with waiters): those are
//! rebuilt on restore, so a snapshot cannot carry an index that disagrees with the state.
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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::clock::LogClock;
use super::command::{Fence, LimitId, SessionId};
use super::limit::Limit;
use super::session::{Session, SessionV3};
use super::state::Machine;
use super::tenant::Tenant;
use crate::bounds::SNAPSHOT_BYTES_MAX;
use crate::codec::{self, FrameError};

/// Frame kind of a snapshot.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"WSNP";

/// The snapshot format this build writes and reads. Bump it with any change to the
/// serialized types of [`SavedLimits`]. Version 2: the derived indexes and the log clock's
/// unread wall-clock stamp are no longer written. Version 3: refusals name their objects
/// (a finished ticket keeps its refusal), budget holds, and finished tickets' log times.
/// Version 4: a session keeps its owner. A version-3 snapshot still restores, its sessions
/// without owners (opened without authentication).
pub const SNAPSHOT_VERSION: u16 = 4;

/// The oldest snapshot version this build restores.
pub const SNAPSHOT_VERSION_V3: u16 = 3;

/// The machine's saved state: what a snapshot carries, field by field in this order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedLimits {
    pub(super) clock: LogClock,
    /// Index of the last entry applied; `None` before any (Raft's first entry is index 0).
    pub(super) applied: Option<u64>,
    /// The last fence handed out (0 before any).
    pub(super) last_fence: Fence,
    /// The last session id handed out.
    pub(super) last_session: SessionId,
    /// The last limit id handed out.
    pub(super) last_limit: LimitId,
    pub(super) sessions: BTreeMap<SessionId, Session>,
    pub(super) limits: BTreeMap<LimitId, Limit>,
    pub(super) tenants: BTreeMap<String, Tenant>,
}

/// [`SavedLimits`] as version 3 encoded it: the same fields, sessions without owners.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct SavedLimitsV3 {
    clock: LogClock,
    applied: Option<u64>,
    last_fence: Fence,
    last_session: SessionId,
    last_limit: LimitId,
    sessions: BTreeMap<SessionId, SessionV3>,
    limits: BTreeMap<LimitId, Limit>,
    tenants: BTreeMap<String, Tenant>,
}

impl From<SavedLimitsV3> for SavedLimits {
    fn from(v3: SavedLimitsV3) -> SavedLimits {
        SavedLimits {
            clock: v3.clock,
            applied: v3.applied,
            last_fence: v3.last_fence,
            last_session: v3.last_session,
            last_limit: v3.last_limit,
            sessions: v3
                .sessions
                .into_iter()
                .map(|(id, s)| (id, Session::from_v3(s)))
                .collect(),
            limits: v3.limits,
            tenants: v3.tenants,
        }
    }
}

impl Machine {
    /// The machine as snapshot bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        codec::seal_frame(
            SNAPSHOT_MAGIC,
            SNAPSHOT_VERSION,
            &codec::encode(self.saved()),
        )
    }

    /// A machine from snapshot bytes, or why they were refused.
    pub fn restore(bytes: &[u8]) -> Result<Machine, FrameError> {
        let saved: SavedLimits = match frame_version(bytes) {
            Some(SNAPSHOT_VERSION_V3) => {
                let payload = codec::open_frame(
                    bytes,
                    SNAPSHOT_MAGIC,
                    SNAPSHOT_VERSION_V3,
                    SNAPSHOT_BYTES_MAX,
                )?;
                codec::decode::<SavedLimitsV3>(payload)?.into()
            }
            _ => {
                let payload =
                    codec::open_frame(bytes, SNAPSHOT_MAGIC, SNAPSHOT_VERSION, SNAPSHOT_BYTES_MAX)?;
                codec::decode(payload)?
            }
        };
        let machine = Machine::from_saved(saved);
        machine.check().map_err(FrameError::Invalid)?;
        Ok(machine)
    }

    /// A digest of the state: equal on replicas at the same applied index.
    pub fn digest(&self) -> String {
        digest_of(&codec::encode(self.saved()))
    }
}

/// The version a frame's header declares, if the bytes are long enough to have one;
/// [`codec::open_frame`] then checks everything else.
fn frame_version(bytes: &[u8]) -> Option<u16> {
    let version = bytes.get(4..6)?;
    Some(u16::from_le_bytes([version[0], version[1]]))
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
    use crate::machine::{Acquire, Batch, Command, Leadership, Owner, Priority, Reply};

    fn entry(m: &mut Machine, index: u64, commands: Vec<Command>) -> Vec<Reply> {
        let batch = Batch {
            leadership: Leadership::default(),
            clock_ms: index * 10,
            wall_ms: 0,
            commands,
        };
        m.apply(index, &batch).replies
    }

    /// A machine's state in the version-3 format (sessions without owners), sealed.
    fn as_v3(m: &Machine) -> Vec<u8> {
        let saved = m.saved().clone();
        let v3 = SavedLimitsV3 {
            clock: saved.clock,
            applied: saved.applied,
            last_fence: saved.last_fence,
            last_session: saved.last_session,
            last_limit: saved.last_limit,
            sessions: saved
                .sessions
                .iter()
                .map(|(id, s)| (*id, s.to_v3()))
                .collect(),
            limits: saved.limits,
            tenants: saved.tenants,
        };
        codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION_V3, &codec::encode(&v3))
    }

    #[test]
    fn a_version_3_snapshot_restores_with_unowned_sessions() {
        let mut m = Machine::new();
        entry(
            &mut m,
            1,
            vec![
                Command::DefineLimit {
                    tenant: "t".into(),
                    name: "db".into(),
                    concurrent: 2,
                    per_second: 0.0,
                    burst: None,
                },
                Command::OpenSession { ttl_ms: 10_000 },
            ],
        );
        let acquire = Acquire {
            session: 1,
            ticket: 1,
            tenant: "t".into(),
            limit: "db".into(),
            units: 1,
            priority: Priority::default(),
            agent: None,
            wait: true,
        };
        let replies = entry(&mut m, 2, vec![Command::Acquire(acquire)]);
        assert!(matches!(replies[0], Reply::Granted { .. }), "{replies:?}");
        let bytes = as_v3(&m);
        assert_eq!(&bytes[4..6], &3u16.to_le_bytes());
        let restored = Machine::restore(&bytes).expect("a version-3 snapshot restores");
        assert_eq!(restored.session_owner(1), Some(None));
        // Nothing else changed: written again, it is the machine's own version-4 snapshot.
        assert_eq!(restored.snapshot(), m.snapshot());
    }

    #[test]
    fn a_version_4_snapshot_keeps_owners_and_a_damaged_version_3_one_is_refused() {
        let mut m = Machine::new();
        let open = Command::OpenSessionFor {
            ttl_ms: 10_000,
            owner: Some(Owner([9; 32])),
            nonce: 77,
        };
        entry(&mut m, 1, vec![open]);
        let restored = Machine::restore(&m.snapshot()).expect("restores");
        assert_eq!(restored.session_owner(77), Some(Some(Owner([9; 32]))));
        let mut damaged = as_v3(&m);
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        let err = Machine::restore(&damaged).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
    }
}
