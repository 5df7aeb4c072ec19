//! G8 for snapshots: flipped bits, truncation, a foreign or future format, and bytes that
//! pass the checksum but break an invariant are all refused, each with a message naming it.

use weir_core::codec::{self, HEADER_BYTES};
use weir_core::machine::{Batch, Command, Leadership, Machine, SNAPSHOT_MAGIC, SNAPSHOT_VERSION};

use crate::sim::Sim;

fn busy_machine() -> Machine {
    let mut s = Sim::new();
    s.define("t", "db", 2, 1.5);
    let a = s.open(3_000);
    s.acquire(a, 1, "db");
    s.acquire(a, 2, "db");
    s.acquire(a, 3, "db");
    s.m
}

#[test]
fn every_flipped_bit_is_refused() {
    let bytes = busy_machine().snapshot();
    for i in 0..bytes.len() {
        for bit in [0, 3, 7] {
            let mut damaged = bytes.clone();
            damaged[i] ^= 1 << bit;
            let err = Machine::restore(&damaged).expect_err("a flipped bit must be refused");
            let text = err.to_string();
            assert!(
                [
                    "bad magic",
                    "unknown format version",
                    "declared length",
                    "truncated",
                    "trailing",
                    "checksum",
                    // The version flipped to another this build reads (7 to 6): the payload
                    // then does not decode as that version's.
                    "undecodable payload",
                ]
                .iter()
                .any(|w| text.contains(w)),
                "byte {i} bit {bit}: {text}"
            );
        }
    }
}

#[test]
fn truncated_snapshots_are_refused_at_every_length() {
    let bytes = busy_machine().snapshot();
    for len in 0..bytes.len() {
        let err = Machine::restore(&bytes[..len]).unwrap_err().to_string();
        assert!(err.starts_with("truncated"), "length {len}: {err}");
    }
    assert!(Machine::restore(&bytes).is_ok());
}

#[test]
fn a_wrong_version_or_kind_is_refused_by_name() {
    let bytes = busy_machine().snapshot();
    let payload = &bytes[HEADER_BYTES..];
    let future = codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION + 1, payload);
    assert_eq!(
        Machine::restore(&future).unwrap_err().to_string(),
        format!(
            "unknown format version {} (this build reads {SNAPSHOT_VERSION})",
            SNAPSHOT_VERSION + 1
        )
    );
    let foreign = codec::seal_frame(*b"WLOG", SNAPSHOT_VERSION, payload);
    assert_eq!(
        Machine::restore(&foreign).unwrap_err().to_string(),
        "bad magic: expected \"WSNP\", found \"WLOG\""
    );
}

#[test]
fn a_well_sealed_but_inconsistent_state_is_refused() {
    // Garbage payload with a valid checksum: refused by the decoder.
    let garbage = codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, &[0xff; 40]);
    assert!(
        Machine::restore(&garbage)
            .unwrap_err()
            .to_string()
            .starts_with("undecodable payload")
    );
    // A real state whose payload is edited to break an invariant, then resealed: the
    // invariant check names what is wrong.
    let m = busy_machine();
    let payload = m.snapshot()[HEADER_BYTES..].to_vec();
    let mut found = false;
    for i in 0..payload.len() {
        let mut edited = payload.clone();
        edited[i] = edited[i].wrapping_add(1);
        let sealed = codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, &edited);
        match Machine::restore(&sealed) {
            Err(codec::FrameError::Invalid(why)) => {
                assert!(!why.is_empty());
                found = true;
            }
            Err(codec::FrameError::Decode(_)) | Ok(_) => {}
            Err(other) => panic!("byte {i}: unexpected {other}"),
        }
    }
    assert!(
        found,
        "some single-byte edit breaks an invariant and is caught"
    );
}

#[test]
fn a_restored_machine_keeps_serving_where_it_left_off() {
    let m = busy_machine();
    let mut restored = Machine::restore(&m.snapshot()).unwrap();
    let batch = Batch {
        leadership: Leadership {
            term: 1,
            node: 1,
            incarnation: 0,
        },
        // A second after the snapshot: the bucket has refilled, and the release makes room.
        clock_ms: 1_001_000,
        wall_ms: 0,
        commands: vec![Command::Release {
            session: 1,
            ticket: 1,
        }],
    };
    let applied = restored.apply(m.applied_index() + 1, &batch);
    assert_eq!(
        applied.events.len(),
        1,
        "the waiter is granted after the restore"
    );
}

#[test]
fn every_edited_byte_of_a_snapshot_with_lean_keys_is_refused_or_restores_a_whole_machine() {
    use crate::sim::{ask, limit};
    let mut s = Sim::new();
    s.reply(limit("t", "api").rate(10.0).burst(2).keyed());
    let a = s.open(3_000);
    for (ticket, key) in ["carol", "alice", "bob", "dave"].into_iter().enumerate() {
        s.grant(ask(a, ticket as u64 + 1, "api").key(key).units(2));
    }
    s.grant(ask(a, 5, "api").key("erin"));
    // Bob's key waits, so it is a limit of its own; the others are lean (Erin's holds a
    // token, a number an edit can raise past the burst).
    s.reply(ask(a, 9, "api").key("bob"));
    let payload = s.m.snapshot()[HEADER_BYTES..].to_vec();
    let mut invalid = 0;
    for i in 0..payload.len() {
        for delta in [1, 0x80] {
            let mut edited = payload.clone();
            edited[i] = edited[i].wrapping_add(delta);
            let sealed = codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, &edited);
            match Machine::restore(&sealed) {
                Ok(mut m) => {
                    // Restored means whole: no bucket above its burst, and it applies on,
                    // time passing, and stays so.
                    for key in m.keys("t", "api").unwrap_or_default() {
                        let b = m.bucket_now("t", "api", Some(&key)).expect("a live key");
                        assert!(
                            b.tokens <= b.spec.burst,
                            "byte {i}: key {key} over its burst"
                        );
                    }
                    let batch = Batch {
                        leadership: Leadership::default(),
                        clock_ms: m.now_ms().saturating_add(1_000),
                        wall_ms: 0,
                        commands: vec![Command::Tick],
                    };
                    let next = m.applied_index().saturating_add(1);
                    if next > m.applied_index() {
                        m.apply(next, &batch);
                        m.check().unwrap_or_else(|e| panic!("byte {i}: {e}"));
                    }
                }
                Err(codec::FrameError::Invalid(_)) => invalid += 1,
                Err(codec::FrameError::Decode(_)) => {}
                Err(other) => panic!("byte {i}: unexpected {other}"),
            }
        }
    }
    assert!(invalid > 0, "some edit breaks an invariant and is caught");
}
