//! `ApplyLimits`, one scenario per behaviour: a tenant's definitions set in one entry,
//! created, changed, left alone or pruned, all or nothing. Tenant `t` throughout.

use weir_core::machine::{Command, LimitsChange, Refusal, Reply};

use crate::sim::{Sim, granted, limit, queued, refused_event, removed};

/// `ApplyLimits` of `t` with these definitions.
fn apply(defs: Vec<crate::sim::Define>, prune: bool) -> Command {
    Command::ApplyLimits {
        tenant: "t".into(),
        definitions: defs.into_iter().map(|d| d.definition()).collect(),
        prune,
    }
}

fn change(created: &[&str], changed: &[&str], removed: &[&str], unchanged: &[&str]) -> Reply {
    let names = |l: &[&str]| l.iter().map(|n| n.to_string()).collect();
    Reply::LimitsApplied(LimitsChange {
        created: names(created),
        changed: names(changed),
        removed: names(removed),
        unchanged: names(unchanged),
    })
}

/// Three limits of `t`: `db` (3 units), `api` (10/s), `old` (1 unit).
fn three(s: &mut Sim) {
    s.define("t", "db", 3, 0.0);
    s.define("t", "api", 0, 10.0);
    s.define("t", "old", 1, 0.0);
}

#[test]
fn an_apply_creates_changes_and_leaves_alone_and_a_second_apply_changes_nothing() {
    let mut s = Sim::new();
    three(&mut s);
    let file = || {
        vec![
            limit("t", "db").concurrent(3),
            limit("t", "api").rate(20.0),
            limit("t", "new").rate(5.0).burst(5).keyed(),
        ]
    };
    assert_eq!(
        s.reply(apply(file(), false)),
        change(&["new"], &["api"], &[], &["db"])
    );
    assert_eq!(s.status("t", "api").per_second, 20.0);
    assert_eq!(s.m.keys("t", "new"), Some(vec![]), "new is keyed");
    assert_eq!(
        s.status("t", "old").concurrent,
        1,
        "without prune, old stays"
    );
    let before = s.m.limits("t");
    assert_eq!(
        s.reply(apply(file(), false)),
        change(&[], &[], &[], &["api", "db", "new"])
    );
    assert_eq!(s.m.limits("t"), before, "a second apply changed nothing");
}

#[test]
fn prune_removes_the_limits_not_named_and_refuses_their_waiters() {
    let mut s = Sim::new();
    three(&mut s);
    let [a, b] = s.open_each([10_000, 10_000]);
    assert!(matches!(s.acquire(a, 1, "old"), Reply::Granted { .. }));
    assert_eq!(s.acquire(b, 1, "old"), queued(0));
    let (reply, events) = s.one(apply(vec![limit("t", "db").concurrent(3)], true));
    assert_eq!(reply, change(&[], &[], &["api", "old"], &["db"]));
    assert_eq!(events, vec![refused_event(b, 1, removed("old"))]);
    assert!(
        s.status("t", "old").removing,
        "held until its holder releases"
    );
    assert_eq!(s.m.limit_status("t", "api"), None);
    let (_, _) = s.release(a, 1);
    assert_eq!(s.m.limit_status("t", "old"), None);
}

#[test]
fn lowering_concurrent_in_an_apply_keeps_holders_and_later_grants_wait() {
    let mut s = Sim::new();
    s.define("t", "db", 3, 0.0);
    let [a, b] = s.open_each([10_000, 10_000]);
    for ticket in 1..=3 {
        assert!(matches!(s.acquire(a, ticket, "db"), Reply::Granted { .. }));
    }
    let reply = s.reply(apply(vec![limit("t", "db").concurrent(1)], false));
    assert_eq!(reply, change(&[], &["db"], &[], &[]));
    assert_eq!(s.status("t", "db").in_use, 3, "holders keep their permits");
    assert_eq!(s.acquire(b, 1, "db"), queued(0));
    s.release(a, 1);
    let (_, events) = s.release(a, 2);
    assert!(granted(&events).is_empty(), "2 held of 1: still no room");
    let (_, events) = s.release(a, 3);
    assert_eq!(granted(&events), vec![(b, 1)]);
}

#[test]
fn an_invalid_definition_refuses_the_whole_apply_naming_it_and_changes_nothing() {
    let mut s = Sim::new();
    three(&mut s);
    let before = s.m.limits("t");
    let bad_burst = vec![
        limit("t", "db").concurrent(5),
        limit("t", "fresh").concurrent(1),
        limit("t", "zz").rate(1.0).burst(0),
    ];
    match s.reply(apply(bad_burst, true)) {
        Reply::Refused(Refusal::Invalid(why)) => {
            assert!(
                why.contains("definition zz") && why.contains("burst 0"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    let keyed_flip = vec![limit("t", "fresh").concurrent(1), limit("t", "db").keyed()];
    match s.reply(apply(keyed_flip, false)) {
        Reply::Refused(Refusal::Invalid(why)) => {
            assert!(
                why.contains("definition db") && why.contains("keyed"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    let twice = vec![limit("t", "a").concurrent(1), limit("t", "a").concurrent(2)];
    match s.reply(apply(twice, false)) {
        Reply::Refused(Refusal::Invalid(why)) => assert!(why.contains("a is given twice"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.m.limits("t"), before, "nothing changed");
}

#[test]
fn the_dry_run_answers_the_change_the_apply_then_makes_without_making_it() {
    let mut s = Sim::new();
    three(&mut s);
    let defs = vec![
        limit("t", "db").concurrent(4),
        limit("t", "n").concurrent(1),
    ];
    let plain: Vec<_> = defs.iter().cloned().map(|d| d.definition()).collect();
    let before = s.m.limits("t");
    let dry = s.m.limits_change("t", &plain, true).unwrap();
    assert_eq!(s.m.limits("t"), before, "the dry run changed nothing");
    assert_eq!(dry.removed, vec!["api".to_string(), "old".to_string()]);
    assert_eq!(s.reply(apply(defs, true)), Reply::LimitsApplied(dry));
}
