//! Sessions that belong to their opener (G10), as the machine keeps them: an
//! `OpenSessionFor` records its owner and takes its id from the entry's nonce; the owner
//! survives a snapshot; the legacy `OpenSession` of old logs still opens an unowned session
//! on the counter.

use weir_core::machine::{
    Command, Machine, Owner, Refusal, Reply, SessionId, next_session_candidate,
};

use crate::sim::Sim;

fn owner(byte: u8) -> Owner {
    Owner([byte; 32])
}

fn open_for(s: &mut Sim, owner: Option<Owner>, nonce: u64) -> SessionId {
    let command = Command::OpenSessionFor {
        ttl_ms: 10_000,
        owner,
        nonce,
    };
    match s.reply(command) {
        Reply::SessionOpened { session, .. } => session,
        other => panic!("open session: {other:?}"),
    }
}

#[test]
fn an_owned_open_takes_its_id_from_the_nonce_and_records_its_owner() {
    let mut s = Sim::new();
    let a = open_for(&mut s, Some(owner(0xa)), 0x5eed_0000_dead_beef);
    let b = open_for(&mut s, None, 0x0123_4567_89ab_cdef);
    assert_eq!(a, 0x5eed_0000_dead_beef);
    assert_eq!(b, 0x0123_4567_89ab_cdef);
    assert_eq!(s.m.session_owner(a), Some(Some(owner(0xa))));
    assert_eq!(s.m.session_owner(b), Some(None));
    // The id a counter would have given is no session.
    assert_eq!(s.m.session_owner(a + 1), None);
    assert_eq!(s.m.session_owner(1), None);
    assert_eq!(
        s.reply(Command::KeepAlive { session: a + 1 }),
        Reply::Refused(Refusal::UnknownSession { session: a + 1 })
    );
}

#[test]
fn a_nonce_that_is_zero_or_taken_steps_to_the_same_free_id_on_every_replica() {
    let mut s = Sim::new();
    let first = open_for(&mut s, Some(owner(1)), 42);
    let second = open_for(&mut s, Some(owner(2)), 42);
    let zero = open_for(&mut s, Some(owner(3)), 0);
    assert_eq!(first, 42);
    assert_eq!(second, next_session_candidate(42));
    assert_eq!(zero, next_session_candidate(0));
    assert_ne!(zero, 0);
    // The first keeps its owner; the second has its own.
    assert_eq!(s.m.session_owner(42), Some(Some(owner(1))));
    assert_eq!(s.m.session_owner(second), Some(Some(owner(2))));
    // Replaying the log gives the same ids and the same state.
    let mut replica = Machine::new();
    for (index, batch) in &s.log {
        replica.apply(*index, batch);
    }
    assert_eq!(replica.snapshot(), s.m.snapshot());
}

#[test]
fn the_legacy_open_of_old_logs_opens_an_unowned_session_on_the_counter() {
    let mut s = Sim::new();
    let [a, b] = s.open_each([10_000, 10_000]);
    assert_eq!((a, b), (1, 2));
    assert_eq!(s.m.session_owner(a), Some(None));
}

#[test]
fn a_session_keeps_its_owner_across_a_snapshot() {
    let mut s = Sim::new();
    let a = open_for(&mut s, Some(owner(7)), 1_000_003);
    let restored = Machine::restore(&s.m.snapshot()).expect("restores");
    assert_eq!(restored.session_owner(a), Some(Some(owner(7))));
    assert_eq!(restored.snapshot(), s.m.snapshot());
}
