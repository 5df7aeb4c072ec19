//! The metadata group's placements: a tenant placed once, for good; the same placement
//! asked again answered as the first; another refused naming the group it has; group 0
//! refused; the bound; and placements kept across a snapshot, with a version 9 snapshot
//! (no placements) still read.

use crate::sim::{Sim, refused};
use weir_core::bounds::PLACEMENTS_MAX;
use weir_core::codec::{self, HEADER_BYTES};
use weir_core::machine::{Command, Machine, Refusal, Reply, SNAPSHOT_MAGIC};

fn place(tenant: &str, group: u64) -> Command {
    Command::PlaceTenant {
        tenant: tenant.into(),
        group,
    }
}

#[test]
fn a_tenant_is_placed_once_and_keeps_its_group() {
    let mut s = Sim::new();
    assert_eq!(s.m.placement("a"), None);
    assert_eq!(s.reply(place("a", 2)), Reply::Placed { group: 2 });
    assert_eq!(s.m.placement("a"), Some(2));
    // Asked again for the same group: the same answer, nothing added.
    assert_eq!(s.reply(place("a", 2)), Reply::Placed { group: 2 });
    assert_eq!(s.m.placements(), 1);
    // Another group: refused, naming the group it has.
    assert_eq!(
        s.reply(place("a", 3)),
        refused(Refusal::Placed {
            tenant: "a".into(),
            group: 2
        })
    );
    assert_eq!(s.m.placement("a"), Some(2));
    assert_eq!(s.reply(place("b", 1)), Reply::Placed { group: 1 });
    assert_eq!(s.m.placements(), 2);
    s.check();
}

#[test]
fn group_zero_is_refused_as_the_metadata_group() {
    let mut s = Sim::new();
    let Reply::Refused(Refusal::Invalid(why)) = s.reply(place("a", 0)) else {
        panic!("group 0 must be refused as invalid");
    };
    assert!(why.contains("group 0 is the metadata group"), "{why}");
    assert_eq!(s.m.placement("a"), None);
}

#[test]
fn placements_past_the_bound_are_refused_and_the_placed_keep_theirs() {
    let mut s = Sim::new();
    // One entry of many commands keeps the test quick.
    let all: Vec<Command> = (0..PLACEMENTS_MAX)
        .map(|i| place(&format!("t{i}"), 1 + (i % 4) as u64))
        .collect();
    for chunk in all.chunks(10_000) {
        s.entry(chunk.to_vec());
    }
    assert_eq!(s.m.placements(), PLACEMENTS_MAX);
    let Reply::Refused(Refusal::AtCapacity { what, .. }) = s.reply(place("one-more", 1)) else {
        panic!("a placement past the bound must be refused");
    };
    assert!(what.contains("placed tenants"), "{what}");
    assert_eq!(s.m.placement("one-more"), None);
    // A placed tenant asked again is still answered: the bound refuses only new ones.
    assert_eq!(s.reply(place("t5", 2)), Reply::Placed { group: 2 });
}

#[test]
fn placements_survive_a_snapshot_and_a_version_9_snapshot_still_loads() {
    let mut s = Sim::new();
    let before = s.m.snapshot();
    assert_eq!(s.reply(place("a", 2)), Reply::Placed { group: 2 });
    let restored = Machine::restore(&s.m.snapshot()).expect("restores");
    assert_eq!(restored.digest(), s.m.digest());
    assert_eq!(restored.placement("a"), Some(2));
    // A version 9 snapshot is today's without the placements (an empty map, one byte).
    let payload = &before[HEADER_BYTES..];
    let v9 = codec::seal_frame(SNAPSHOT_MAGIC, 9, &payload[..payload.len() - 1]);
    let old = Machine::restore(&v9).expect("a version 9 snapshot loads");
    assert_eq!(old.snapshot(), before);
    assert_eq!(old.placements(), 0);
}
