//! Moving a tenant between machines: the freeze in one, the adopt in another. The machine
//! the tenant moved to gives the answers the machine it left would have given (a twin of
//! it that never froze is the reference), with fences above every fence the source gave;
//! the source answers `Moved`, keeps the frozen value across a snapshot, and every replica
//! applying the same entries reaches the same state.

use crate::sim::{Sim, ask, limit, queued, refused};
use weir_core::codec::{self, HEADER_BYTES};
use weir_core::machine::{
    Change, Command, Event, FrozenTenant, LeasePart, LeaseTokens, LimitStatus, Machine, Refusal,
    Reply, SNAPSHOT_MAGIC, SessionId,
};

const MICRO: u64 = 1_000_000;

fn moved() -> Refusal {
    Refusal::Moved {
        tenant: "t".into(),
        to: 2,
    }
}

/// Sessions 1, 2 and 3 of a machine whose tenant `t` has: `db` (2 units) held by 1 and 2
/// and waited on by 3; keyed rate `api` with a lean key `alice`; keyed semaphore `conn`
/// whose key `k1` is held by 2 and waited on by 3; rate `r` leased by 1 and taken from by
/// 2; a ceiling and a running run. Session 1 also holds `u/other`.
fn source() -> (Sim, [SessionId; 3]) {
    let mut s = Sim::new();
    for d in [
        limit("t", "db").concurrent(2),
        limit("t", "api").rate(1.0).burst(5).keyed(),
        limit("t", "conn").concurrent(1).keyed(),
        limit("t", "r").rate(100.0).burst(20),
        limit("u", "other").concurrent(5),
    ] {
        assert_eq!(s.reply(d), Reply::Done);
    }
    let [s1, s2, s3] = s.open_each([30_000, 20_000, 30_000]);
    s.grant(ask(s1, 1, "db"));
    s.grant(ask(s2, 2, "db"));
    assert_eq!(s.reply(ask(s3, 3, "db")), queued(0));
    s.grant(ask(s1, 4, "api").key("alice").units(3));
    s.grant(ask(s2, 5, "conn").key("k1"));
    assert_eq!(s.reply(ask(s3, 6, "conn").key("k1")), queued(0));
    let lease = Command::LeaseTokens(LeaseTokens {
        session: s1,
        tenant: "t".into(),
        seq: 1,
        parts: vec![LeasePart {
            limit: "r".into(),
            key: None,
            rate_micro_per_s: 20 * MICRO,
            cap: 5,
            returned_micro: 0,
        }],
    });
    assert!(matches!(s.reply(lease), Reply::Leased(_)));
    s.grant(ask(s2, 7, "r").units(10));
    s.grant(ask(s1, 8, "other").tenant("u"));
    let ceiling = Command::SetTenant {
        tenant: "t".into(),
        max_running: Change::Set(2),
        budget_tokens: Change::Keep,
        budget_minor: Change::Keep,
    };
    assert_eq!(s.reply(ceiling), Reply::Done);
    let reserve = Command::Reserve {
        tenant: "t".into(),
        run: "r1".into(),
        agent: None,
        period: None,
        hold_tokens: None,
        hold_minor: None,
    };
    assert_eq!(s.reply(reserve), Reply::Admitted);
    s.wait(700);
    (s, [s1, s2, s3])
}

/// A machine of its own history (another tenant, a clock far ahead, a low fence counter)
/// that adopts `t` as `a` froze it. Returns it and the largest fence `a` ever handed out.
fn moved_to_b(a: &mut Sim) -> (Sim, u64) {
    let (reply, events) = a.one(Command::FreezeTenant {
        tenant: "t".into(),
        to: 2,
    });
    assert_eq!(reply, Reply::Done);
    // The waiters learn at once that they wait elsewhere now.
    let mut told: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Refused {
                session,
                ticket,
                refusal,
            } if *refusal == moved() => Some((*session, *ticket)),
            _ => None,
        })
        .collect();
    told.sort();
    assert_eq!(told, vec![(3, 3), (3, 6)]);
    let a_fence = a.m.contents().last_fence;
    let frozen = a.m.frozen_tenant("t").expect("frozen").clone();
    let mut b = Sim::new();
    b.define("v", "x", 1, 0.0);
    b.wait(500_000);
    assert!(b.index < a_fence, "b's own fences would be below a's");
    assert_eq!(b.reply(adopt(&frozen)), Reply::Done);
    (b, a_fence)
}

fn adopt(frozen: &FrozenTenant) -> Command {
    Command::AdoptTenant {
        tenant: frozen.name.clone(),
        frozen: frozen.encode(),
    }
}

/// What a client can see of tenant `t` in `s`: every limit's and key's status, the buckets
/// as of now, the tenant's record.
fn seen(s: &Sim) -> String {
    let mut out = String::new();
    for name in ["db", "api", "conn", "r"] {
        // A status's tokens are its bucket as of its last refill, which the freeze brings
        // to now: the buckets are compared refilled to now, below.
        let status = LimitStatus {
            tokens: 0,
            ..s.status("t", name)
        };
        out += &format!("{status:?}\n");
        out += &format!("{:?}\n", s.m.keys("t", name));
    }
    out += &format!(
        "{:?}\n",
        s.m.key_status("t", "api", "alice").map(|k| k.in_use)
    );
    out += &format!("{:?}\n", s.m.key_status("t", "conn", "k1"));
    out += &format!("{:?}\n", s.m.bucket_now("t", "r", None));
    out += &format!("{:?}\n", s.m.bucket_now("t", "api", Some("alice")));
    out += &format!("{:?}\n", s.m.tenant_status("t"));
    out
}

/// Events with their fences left out (the two machines number their entries apart).
fn shape(events: &[Event]) -> Vec<String> {
    let mut v: Vec<String> = events
        .iter()
        .map(|e| match e {
            Event::Granted {
                session,
                ticket,
                units,
                ..
            } => format!("granted {session}/{ticket} {units}"),
            other => format!("{other:?}"),
        })
        .collect();
    v.sort();
    v
}

/// Takes one token at a time of `t/r` (or a key of `t/api`) until refused: how many were
/// granted, and how long after now the refusal says to come back.
fn drain(s: &mut Sim, session: SessionId, first_ticket: u64, key: Option<&str>) -> (u64, u64) {
    for n in 0..100 {
        let a = match key {
            Some(k) => ask(session, first_ticket + n, "api").key(k),
            None => ask(session, first_ticket + n, "r"),
        };
        match s.reply(a.wait(false)) {
            Reply::Granted { .. } => {}
            Reply::Refused(Refusal::Busy {
                retry_at_ms: Some(at),
            }) => return (n, at - s.m.now_ms()),
            other => panic!("take {n}: {other:?}"),
        }
    }
    panic!("more than 100 tokens")
}

#[test]
fn the_adopting_machine_answers_as_the_source_would_have_with_fences_above_the_sources() {
    let (mut a, [s1, _, s3]) = source();
    let (mut c, _) = source();
    let (mut b, a_fence) = moved_to_b(&mut a);
    assert_eq!(
        c.m.keys("t", "api"),
        Some(vec!["alice".to_owned()]),
        "a lean key"
    );
    assert_eq!(seen(&b), seen(&c), "the same reads at once");
    // A release lets the waiter through in both, and b's first grant is fenced above a's.
    let (rb, eb) = b.release(s1, 1);
    let (rc, ec) = c.release(s1, 1);
    assert_eq!(rb, rc);
    assert_eq!(shape(&eb), shape(&ec));
    let granted: Vec<u64> = eb
        .iter()
        .filter_map(|e| match e {
            Event::Granted { session, fence, .. } if *session == s3 => Some(*fence),
            _ => None,
        })
        .collect();
    assert_eq!(granted.len(), 1, "{eb:?}");
    assert!(
        granted[0] > a_fence,
        "fence {} after the move, {a_fence} before",
        granted[0]
    );
    // Refill: the same tokens later, from the bucket with the lease and from a lean key.
    b.wait(150);
    c.wait(150);
    assert_eq!(seen(&b), seen(&c));
    assert_eq!(drain(&mut b, s1, 100, None), drain(&mut c, s1, 100, None));
    assert_eq!(
        drain(&mut b, s1, 200, Some("alice")),
        drain(&mut c, s1, 200, Some("alice"))
    );
    // Sessions keep the time they had left: they expire in the same step in both.
    for step in 0..350 {
        let eb = b.wait(100);
        let ec = c.wait(100);
        assert_eq!(shape(&eb), shape(&ec), "step {step}");
        assert_eq!(seen(&b), seen(&c), "step {step}");
    }
    assert_eq!(b.status("t", "db").in_use, 0, "every session ran out");
}

#[test]
fn the_source_answers_moved_for_the_tenant_and_keeps_its_other_tenants() {
    let (mut a, [s1, s2, s3]) = source();
    let (_b, _) = moved_to_b(&mut a);
    assert_eq!(a.reply(ask(s3, 9, "db")), refused(moved()));
    assert_eq!(a.release(s1, 1).0, refused(moved()), "a held ticket");
    assert_eq!(a.release(s3, 3).0, refused(moved()), "a waiting ticket");
    assert_eq!(
        a.reply(Command::SettleTake {
            session: s2,
            ticket: 5,
            cost: 1
        }),
        refused(moved())
    );
    assert_eq!(a.reply(limit("t", "new").concurrent(1)), refused(moved()));
    assert!(a.m.limit_status("t", "db").is_none());
    // Tenant u is untouched, and session 1 still holds it here.
    assert_eq!(a.status("u", "other").in_use, 1);
    assert!(matches!(a.release(s1, 8).0, Reply::Released { .. }));
    // Dropped, the tenant is unknown here.
    assert_eq!(
        a.reply(Command::DropFrozen { tenant: "t".into() }),
        Reply::Done
    );
    assert!(a.m.frozen_tenant("t").is_none());
    assert!(matches!(
        a.reply(ask(s3, 10, "db")),
        Reply::Refused(Refusal::UnknownLimit { .. })
    ));
}

#[test]
fn a_frozen_tenant_survives_a_snapshot_and_older_snapshots_still_load() {
    let (mut a, [_, _, s3]) = source();
    let before = a.m.snapshot();
    let (_b, _) = moved_to_b(&mut a);
    let restored = Machine::restore(&a.m.snapshot()).expect("restores");
    assert_eq!(restored.digest(), a.m.digest());
    assert_eq!(restored.frozen_tenant("t"), a.m.frozen_tenant("t"));
    let mut a2 = Sim {
        m: restored,
        ..Sim::new()
    };
    a2.index = a.index;
    assert_eq!(a2.reply(ask(s3, 9, "db")), refused(moved()));
    // A version 8 snapshot is today's without the frozen tenants and the placements (two
    // empty maps, a byte each).
    let payload = &before[HEADER_BYTES..];
    let v8 = codec::seal_frame(SNAPSHOT_MAGIC, 8, &payload[..payload.len() - 2]);
    let old = Machine::restore(&v8).expect("a version 8 snapshot loads");
    assert_eq!(old.snapshot(), before);
}

#[test]
fn replicas_applying_the_same_move_reach_the_same_state() {
    let (mut a, _) = source();
    let (mut b, _) = moved_to_b(&mut a);
    b.wait(1_000);
    let (reply, _) = b.release(1, 1);
    assert!(matches!(reply, Reply::Released { .. }));
    for (name, s) in [("source", &a), ("destination", &b)] {
        let mut replica = Machine::new();
        for (index, batch) in &s.log {
            replica.apply(*index, batch);
        }
        assert_eq!(replica.digest(), s.m.digest(), "{name}");
        assert_eq!(replica.snapshot(), s.m.snapshot(), "{name}");
    }
}

#[test]
fn an_adopt_where_the_tenant_lives_is_refused_and_changes_nothing() {
    let (mut a, _) = source();
    let frozen = {
        let (mut a2, _) = source();
        moved_to_b(&mut a2);
        a2.m.frozen_tenant("t").unwrap().clone()
    };
    let before = seen(&a);
    match a.reply(adopt(&frozen)) {
        Reply::Refused(Refusal::Invalid(why)) => {
            assert!(why.contains("tenant t has state here already"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(seen(&a), before);
    // Bytes that are no frozen tenant, or another tenant's, are refused naming why.
    let mut b = Sim::new();
    let garbage = Command::AdoptTenant {
        tenant: "t".into(),
        frozen: vec![0xff; 40],
    };
    match b.reply(garbage) {
        Reply::Refused(Refusal::Invalid(why)) => {
            assert!(why.starts_with("undecodable frozen tenant"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    let renamed = Command::AdoptTenant {
        tenant: "u".into(),
        frozen: frozen.encode(),
    };
    assert_eq!(
        b.reply(renamed),
        refused(Refusal::Invalid(
            "the frozen state is tenant t's, the adopt names u".into()
        ))
    );
    assert!(b.m.limit_status("t", "db").is_none());
}

#[test]
fn a_tenant_moved_back_merges_into_the_sessions_it_left_and_answers_there_again() {
    let (mut a, [s1, _, s3]) = source();
    let (mut b, a_fence) = moved_to_b(&mut a);
    b.wait(2_000);
    let (reply, _) = b.one(Command::FreezeTenant {
        tenant: "t".into(),
        to: 1,
    });
    assert_eq!(reply, Reply::Done);
    let back = b.m.frozen_tenant("t").expect("frozen in b").clone();
    // Its sessions still live in `a` (session 1 holds `u/other` there): the tickets of `t`
    // merge into them.
    assert_eq!(a.reply(adopt(&back)), Reply::Done);
    assert!(
        a.m.frozen_tenant("t").is_none(),
        "the old frozen record goes"
    );
    assert_eq!(a.status("t", "db").in_use, 2);
    assert_eq!(a.status("u", "other").in_use, 1);
    let (released, events) = a.release(s1, 1);
    assert!(matches!(released, Reply::Released { .. }), "{released:?}");
    let fences: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Granted { session, fence, .. } if *session == s3 => Some(*fence),
            _ => None,
        })
        .collect();
    assert_eq!(fences.len(), 1, "{events:?}");
    assert!(fences[0] > a_fence.max(b.m.contents().last_fence));
    assert!(matches!(a.release(s1, 8).0, Reply::Released { .. }));
}
