//! Keyed limits, requests of several parts and shadow mode, one scenario per behaviour
//! (a keyed limit is a bucket or semaphore per key, alive only while it differs from a fresh
//! one; the parts of one request are granted together in one entry or not at all), in the
//! language of [`crate::sim`]. Tenant `t` throughout.

use weir_core::machine::{Command, Event, Machine, Refusal, Reply};

use crate::sim::{
    FREED, Sim, WITHDRAWN, ask, fence, granted, granted_event, limit, queued, refused,
    refused_event, removed,
};

fn invalid_containing(reply: &Reply, words: &str) {
    match reply {
        Reply::Refused(Refusal::Invalid(why)) => assert!(why.contains(words), "{why}"),
        other => panic!("expected Invalid({words:?}), got {other:?}"),
    }
}

/// A keyed token bucket `t/api`: 10 a second, a burst of 2, per key.
fn keyed_api(s: &mut Sim) {
    assert_eq!(
        s.reply(limit("t", "api").rate(10.0).burst(2).keyed()),
        Reply::Done
    );
}

#[test]
fn each_key_has_a_bucket_of_its_own() {
    let mut s = Sim::new();
    keyed_api(&mut s);
    let a = s.open(60_000);
    s.grant(ask(a, 1, "api").key("alice").units(2));
    assert_eq!(
        s.reply(ask(a, 2, "api").key("alice").wait(false)),
        refused(Refusal::Busy {
            retry_at_ms: Some(s.m.now_ms() + 100)
        })
    );
    // Bob's bucket is untouched by Alice's takes.
    s.grant(ask(a, 3, "api").key("bob").units(2));
    assert_eq!(s.m.keys("t", "api").unwrap(), vec!["alice", "bob"]);
    assert_eq!(s.m.key_status("t", "api", "alice").unwrap().tokens, 0);
    assert_eq!(s.m.key_status("t", "api", "carol").unwrap().tokens, 2);
}

#[test]
fn a_key_refilled_to_its_burst_is_dropped_and_answers_as_a_new_one() {
    let mut s = Sim::new();
    keyed_api(&mut s);
    let a = s.open(60_000);
    s.grant(ask(a, 1, "api").key("alice"));
    assert!(
        s.m.has_timed_work(),
        "the key is filed to be dropped when full"
    );
    // One token takes 100 ms: at 99 ms the key still differs from a fresh one.
    s.wait(99);
    assert_eq!(s.m.keys("t", "api").unwrap(), vec!["alice"]);
    s.wait(1);
    assert!(
        s.m.keys("t", "api").unwrap().is_empty(),
        "dropped when full"
    );
    let snapshot = s.m.snapshot();
    assert!(
        !snapshot.windows(5).any(|w| w == b"alice"),
        "the snapshot holds only live keys"
    );
    // Recreated fresh: the whole burst again.
    s.grant(ask(a, 2, "api").key("alice").units(2));
}

#[test]
fn a_keyed_semaphore_key_lives_while_a_permit_is_held_or_a_ticket_waits() {
    let mut s = Sim::new();
    s.reply(limit("t", "db").concurrent(1).keyed());
    let [a, b] = s.open_each([60_000, 60_000]);
    let f = s.grant(ask(a, 1, "db").key("eu"));
    assert_eq!(s.reply(ask(b, 1, "db").key("eu")), queued(0));
    s.grant(ask(b, 2, "db").key("us"));
    assert_eq!(s.status("t", "db").in_use, 2, "in use summed over keys");
    assert_eq!(s.status("t", "db").waiting, 1);
    assert!(s.m.validate_fence("t", "db", f));
    let (reply, events) = s.release(a, 1);
    assert_eq!(reply, FREED);
    assert_eq!(granted(&events), vec![(b, 1)]);
    s.release(b, 1);
    assert_eq!(s.m.keys("t", "db").unwrap(), vec!["us"]);
    s.release(b, 2);
    assert!(s.m.keys("t", "db").unwrap().is_empty());
}

#[test]
fn keys_max_refuses_a_new_key_at_capacity_naming_the_limit() {
    let mut s = Sim::new();
    s.reply(limit("t", "api").rate(1.0).keys_max(2));
    let a = s.open(60_000);
    s.grant(ask(a, 1, "api").key("k1"));
    s.grant(ask(a, 2, "api").key("k2"));
    assert_eq!(
        s.reply(ask(a, 3, "api").key("k3")),
        refused(Refusal::AtCapacity {
            what: "keys of limit t/api".into(),
            limit: 2
        })
    );
    // A live key is still served; a key that refilled makes room for a new one.
    assert!(matches!(
        s.reply(ask(a, 4, "api").key("k1").wait(false)),
        Reply::Refused(Refusal::Busy { .. })
    ));
    s.wait(1_000);
    s.grant(ask(a, 5, "api").key("k3"));
}

#[test]
fn a_key_on_an_unkeyed_limit_and_none_on_a_keyed_one_are_refused_charging_nothing() {
    let mut s = Sim::new();
    keyed_api(&mut s);
    s.reply(limit("t", "global").rate(10.0).burst(5));
    let a = s.open(60_000);
    let r = s.reply(ask(a, 1, "api"));
    invalid_containing(
        &r,
        "part 1: limit t/api is keyed, and the part names no key",
    );
    let r = s.reply(ask(a, 2, "global").key("x"));
    invalid_containing(&r, "limit t/global is not keyed, and the part names key x");
    let r = s.reply(ask(a, 3, "global").and("api", None, 1));
    invalid_containing(&r, "part 2: limit t/api is keyed");
    let r = s.reply(ask(a, 4, "global").and("global", None, 1));
    invalid_containing(&r, "part 2 names limit global again");
    assert_eq!(
        s.reply(ask(a, 5, "global").and("nope", None, 1)),
        refused(Refusal::UnknownLimit {
            tenant: "t".into(),
            name: "nope".into()
        })
    );
    assert_eq!(s.status("t", "global").tokens, 5, "nothing charged");
    assert!(s.m.keys("t", "api").unwrap().is_empty(), "no key created");
}

/// `t/tenant` (a rate), `t/model` (keyed rate) and `t/slots` (two at once): the three limits
/// of one decision.
fn three_limits(s: &mut Sim) {
    s.reply(limit("t", "tenant").rate(100.0).burst(10));
    s.reply(limit("t", "model").rate(1.0).burst(3).keyed());
    s.reply(limit("t", "slots").concurrent(2));
}

#[test]
fn parts_are_granted_together_under_one_fence() {
    let mut s = Sim::new();
    three_limits(&mut s);
    let a = s.open(60_000);
    let take = ask(a, 1, "tenant")
        .units(4)
        .and("model", Some("gpt"), 2)
        .and("slots", None, 1);
    let reply = s.reply(take.clone());
    assert_eq!(
        reply,
        Reply::Granted {
            fence: s.index,
            units: 4
        }
    );
    assert_eq!(s.status("t", "tenant").tokens, 6);
    assert_eq!(s.m.key_status("t", "model", "gpt").unwrap().tokens, 1);
    assert_eq!(s.status("t", "slots").in_use, 1);
    assert!(s.m.validate_fence("t", "slots", fence(&reply)));
    // Asked again: the same answer, charged once (G5).
    assert_eq!(s.reply(take), reply);
    assert_eq!(s.status("t", "tenant").tokens, 6);
    assert_eq!(s.release(a, 1).0, FREED);
    assert_eq!(s.status("t", "slots").in_use, 0);
}

#[test]
fn a_refusal_by_one_part_charges_none_of_the_others() {
    let mut s = Sim::new();
    three_limits(&mut s);
    let a = s.open(60_000);
    s.grant(ask(a, 1, "model").key("gpt").units(3));
    let reply = s.reply(
        ask(a, 2, "tenant")
            .units(4)
            .and("model", Some("gpt"), 1)
            .and("slots", None, 1)
            .wait(false),
    );
    assert_eq!(
        reply,
        refused(Refusal::Busy {
            retry_at_ms: Some(s.m.now_ms() + 1_000)
        })
    );
    assert_eq!(s.status("t", "tenant").tokens, 10);
    assert_eq!(s.status("t", "slots").in_use, 0);
    // Too many units on one part: refused naming that part's limit, nothing charged.
    assert_eq!(
        s.reply(ask(a, 3, "tenant").and("slots", None, 3)),
        refused(Refusal::TooLarge {
            tenant: "t".into(),
            name: "slots".into(),
            units: 3,
            max: 2
        })
    );
    assert_eq!(s.status("t", "tenant").tokens, 10);
}

#[test]
fn a_waiting_request_of_parts_is_granted_when_every_part_has_room() {
    let mut s = Sim::db(1);
    s.define("t", "pool", 1, 0.0);
    let [a, b, w] = s.open_each([60_000; 3]);
    s.grant(ask(a, 1, "db"));
    s.grant(ask(b, 1, "pool"));
    assert_eq!(s.reply(ask(w, 1, "db").and("pool", None, 1)), queued(0));
    // db has room now, pool not: it still waits, holding nothing.
    let (_, events) = s.release(a, 1);
    assert!(granted(&events).is_empty());
    assert_eq!(s.status("t", "db").in_use, 0);
    let (_, events) = s.release(b, 1);
    let f = s.index;
    assert_eq!(events, vec![granted_event(w, 1, f, 1)]);
    assert_eq!(s.status("t", "db").in_use, 1);
    assert_eq!(s.status("t", "pool").in_use, 1);
    assert_eq!(
        s.status("t", "db").waiting + s.status("t", "pool").waiting,
        0
    );
    // Its session's end frees both.
    s.one(Command::CloseSession { session: w });
    assert_eq!(s.status("t", "db").in_use + s.status("t", "pool").in_use, 0);
}

#[test]
fn a_waiting_request_of_parts_never_blocks_a_queue_whose_room_it_cannot_use() {
    let mut s = Sim::db(1);
    s.define("t", "pool", 1, 0.0);
    let [b, w, v] = s.open_each([60_000; 3]);
    s.grant(ask(b, 1, "pool"));
    // w waits for pool; db's room is not what it waits for, so v takes it past w.
    assert_eq!(s.reply(ask(w, 1, "db").and("pool", None, 1)), queued(0));
    s.grant(ask(v, 1, "db"));
    // Now w needs db too, and blocks it: a later single request waits behind w.
    assert_eq!(s.reply(ask(v, 2, "db")), queued(1));
    let (_, events) = s.release(b, 1);
    assert!(granted(&events).is_empty(), "db is still held by v");
    let (_, events) = s.release(v, 1);
    assert_eq!(
        granted(&events),
        vec![(w, 1)],
        "w first, then v waits for db"
    );
    assert_eq!(s.status("t", "db").waiting, 1);
}

#[test]
fn a_waiting_request_of_parts_leaves_every_queue_when_released_or_its_limit_removed() {
    let mut s = Sim::db(1);
    s.define("t", "pool", 1, 0.0);
    let [a, w] = s.open_each([60_000; 2]);
    s.grant(ask(a, 1, "db"));
    s.grant(ask(a, 2, "pool"));
    assert_eq!(s.reply(ask(w, 1, "db").and("pool", None, 1)), queued(0));
    assert_eq!(s.release(w, 1).0, WITHDRAWN);
    assert_eq!(
        s.status("t", "db").waiting + s.status("t", "pool").waiting,
        0
    );
    assert_eq!(s.reply(ask(w, 2, "db").and("pool", None, 1)), queued(0));
    let (_, events) = s.remove("pool");
    let removed = removed("pool");
    assert_eq!(events, vec![refused_event(w, 2, removed)]);
    assert_eq!(s.status("t", "db").waiting, 0, "gone from db's queue too");
}

#[test]
fn removing_a_keyed_limit_refuses_its_waiters_and_keeps_held_keys_until_released() {
    let mut s = Sim::new();
    s.reply(limit("t", "db").concurrent(1).keyed());
    let [a, b] = s.open_each([60_000; 2]);
    s.grant(ask(a, 1, "db").key("k"));
    assert_eq!(s.reply(ask(b, 1, "db").key("k")), queued(0));
    let (_, events) = s.remove("db");
    assert!(matches!(events[..], [Event::Refused { .. }]));
    assert_eq!(
        s.reply(ask(b, 2, "db").key("other")),
        refused(Refusal::UnknownLimit {
            tenant: "t".into(),
            name: "db".into()
        })
    );
    assert!(s.m.limit_status("t", "db").unwrap().removing);
    s.release(a, 1);
    assert!(
        s.m.limit_status("t", "db").is_none(),
        "gone with its last key"
    );
}

#[test]
fn whether_a_limit_is_keyed_is_fixed_at_its_definition() {
    let mut s = Sim::new();
    keyed_api(&mut s);
    let r = s.reply(limit("t", "api").rate(10.0));
    invalid_containing(&r, "limit t/api is keyed and the definition is not keyed");
    // A keyed redefinition reaches the live keys.
    let a = s.open(60_000);
    s.grant(ask(a, 1, "api").key("k"));
    s.reply(limit("t", "api").rate(10.0).burst(1).keyed());
    assert_eq!(s.m.key_status("t", "api", "k").unwrap().burst, 1);
}

#[test]
fn a_shadow_limit_never_refuses_and_counts_what_it_would_have_refused() {
    let mut s = Sim::new();
    s.reply(limit("t", "new").rate(1.0).burst(1).shadow());
    s.reply(limit("t", "old").rate(100.0).burst(100));
    let a = s.open(60_000);
    s.grant(ask(a, 1, "new"));
    s.grant(ask(a, 2, "new").wait(false));
    s.grant(ask(a, 3, "old").and("new", None, 5));
    let counted = s.m.shadow_refusals("t", "new").unwrap();
    assert_eq!((counted.busy, counted.too_large), (1, 1));
    assert_eq!(
        s.status("t", "old").tokens,
        99,
        "the enforced part is charged"
    );
    // A request refused by its enforced part counts nothing.
    s.grant(ask(a, 4, "old").units(99));
    let busy = s.reply(ask(a, 5, "old").and("new", None, 1).wait(false));
    assert!(matches!(busy, Reply::Refused(Refusal::Busy { .. })));
    assert_eq!(s.m.shadow_refusals("t", "new").unwrap().total(), 2);
    assert_eq!(s.m.tenant_shadow_refusals("t").total(), 2);
}

#[test]
fn a_snapshot_with_live_keys_and_parts_restores_bit_exact_and_replays_equal() {
    let mut s = Sim::new();
    three_limits(&mut s);
    s.reply(limit("t", "db").concurrent(1).keyed());
    let [a, b] = s.open_each([60_000; 2]);
    s.grant(ask(a, 1, "db").key("x").and("tenant", None, 1));
    s.reply(ask(b, 1, "db").key("x").and("model", Some("m"), 1));
    s.reply(ask(b, 2, "model").key("m").units(2).and("slots", None, 2));
    s.wait(333);
    let bytes = s.m.snapshot();
    let restored = Machine::restore(&bytes).expect("restores");
    assert_eq!(restored.snapshot(), bytes, "bit-exact");
    // The restored machine, fed the rest of the log, ends equal to the one that ran on.
    let mut on = s.m.clone();
    let mut from = restored;
    let later = vec![
        vec![Command::Release {
            session: a,
            ticket: 1,
        }],
        vec![Command::Tick],
    ];
    for (i, commands) in later.into_iter().enumerate() {
        let batch = weir_core::machine::Batch {
            leadership: s.leadership,
            clock_ms: s.clock_ms + 500 * (i as u64 + 1),
            wall_ms: 0,
            commands,
        };
        let index = s.index + 1 + i as u64;
        assert_eq!(on.apply(index, &batch), from.apply(index, &batch));
        from.check().unwrap();
    }
    assert_eq!(on.snapshot(), from.snapshot());
}

fn settle_take(session: u64, ticket: u64, cost: u64) -> Command {
    Command::SettleTake {
        session,
        ticket,
        cost,
    }
}

#[test]
fn a_take_settled_below_its_estimate_returns_the_difference_never_above_the_burst() {
    let mut s = Sim::new();
    s.reply(limit("t", "llm").rate(10.0).burst(1_000));
    let a = s.open(60_000);
    s.grant(ask(a, 1, "llm").units(500).estimate());
    assert_eq!(s.status("t", "llm").tokens, 500);
    assert_eq!(
        s.reply(settle_take(a, 1, 320)),
        Reply::Settled { duplicate: false }
    );
    assert_eq!(s.status("t", "llm").tokens, 680, "180 returned");
    // Settled once (G5).
    assert_eq!(
        s.reply(settle_take(a, 1, 0)),
        Reply::Settled { duplicate: true }
    );
    assert_eq!(s.status("t", "llm").tokens, 680);
    // Never above the burst: 300 more taken, 59 s of refill (590), all 300 returned.
    s.grant(ask(a, 2, "llm").units(300).estimate());
    s.wait(59_000);
    assert_eq!(
        s.reply(settle_take(a, 2, 0)),
        Reply::Settled { duplicate: false }
    );
    assert_eq!(s.status("t", "llm").tokens, 1_000);
}

#[test]
fn a_cost_above_the_estimate_is_charged_and_reported_as_an_overrun() {
    let mut s = Sim::new();
    s.reply(limit("t", "llm").rate(1.0).burst(1_000));
    s.reply(limit("t", "user").rate(1.0).burst(100).keyed());
    let a = s.open(60_000);
    s.grant(
        ask(a, 1, "llm")
            .units(50)
            .and("user", Some("u"), 50)
            .estimate(),
    );
    assert_eq!(
        s.reply(settle_take(a, 1, 80)),
        Reply::Overrun {
            tokens: 30,
            minor_units: 0
        }
    );
    assert_eq!(s.status("t", "llm").tokens, 920);
    assert_eq!(s.m.key_status("t", "user", "u").unwrap().tokens, 20);
    // The bucket floors at empty; the whole overrun is recorded.
    s.grant(ask(a, 2, "user").key("u").units(20).estimate());
    assert_eq!(
        s.reply(settle_take(a, 2, 100)),
        Reply::Overrun {
            tokens: 80,
            minor_units: 0
        }
    );
    assert_eq!(s.m.key_status("t", "user", "u").unwrap().tokens, 0);
}

#[test]
fn an_unsettled_estimate_keeps_its_key_and_stands_when_its_session_ends() {
    let mut s = Sim::new();
    s.reply(limit("t", "user").rate(10.0).burst(10).keyed());
    let a = s.open(60_000);
    s.grant(ask(a, 1, "user").key("u").units(5).estimate());
    s.wait(5_000);
    assert_eq!(
        s.m.keys("t", "user").unwrap(),
        vec!["u"],
        "full again, but an estimate may still return tokens"
    );
    s.one(Command::CloseSession { session: a });
    assert!(
        s.m.keys("t", "user").unwrap().is_empty(),
        "the estimate stands; the key is fresh and dropped"
    );
    let b = s.open(60_000);
    assert_eq!(
        s.reply(settle_take(b, 9, 1)),
        refused(Refusal::Invalid(format!(
            "ticket 9 of session {b} holds no take to settle"
        )))
    );
}

#[test]
fn live_keys_are_read_in_pages_of_at_most_the_bound_in_key_order() {
    let mut s = Sim::new();
    s.reply(limit("t", "api").rate(1.0).burst(5).keyed().keys_max(2_000));
    let a = s.open(60_000);
    for (ticket, key) in ["d", "b", "a", "c"].into_iter().enumerate() {
        s.grant(ask(a, ticket as u64 + 1, "api").key(key));
    }
    let first = s.m.keys_page("t", "api", None, 3).unwrap();
    assert_eq!(first.keys, vec!["a", "b", "c"]);
    assert_eq!(first.next.as_deref(), Some("c"));
    let last = s.m.keys_page("t", "api", first.next.as_deref(), 3).unwrap();
    assert_eq!((last.keys, last.next), (vec!["d".to_owned()], None));
    let exact = s.m.keys_page("t", "api", None, 4).unwrap();
    assert_eq!(
        (exact.keys.len(), exact.next),
        (4, None),
        "no page past the last key"
    );
    // After a key that is not live: from the next one in order.
    assert_eq!(
        s.m.keys_page("t", "api", Some("bb"), 10).unwrap().keys,
        ["c", "d"]
    );
    // However many are asked for, a page holds at most KEYS_PAGE_MAX.
    for ticket in 10..1_100u64 {
        s.grant(ask(a, ticket, "api").key(&format!("k{ticket:05}")));
    }
    let bounded = s.m.keys_page("t", "api", None, u32::MAX).unwrap();
    assert_eq!(
        bounded.keys.len(),
        weir_core::bounds::KEYS_PAGE_MAX as usize
    );
    assert!(bounded.next.is_some());
    assert!(s.m.keys_page("t", "nope", None, 3).is_none());
}

#[test]
fn a_keyed_definitions_status_counts_live_keys_shadow_refusals_and_overruns() {
    let mut s = Sim::new();
    s.reply(limit("t", "user").rate(1.0).burst(10).keyed().shadow());
    let a = s.open(60_000);
    s.grant(ask(a, 1, "user").key("u").units(10).estimate());
    s.grant(ask(a, 2, "user").key("v").units(4));
    s.grant(ask(a, 3, "user").key("v").units(7).wait(false));
    s.reply(settle_take(a, 1, 12));
    let def = s.status("t", "user");
    assert_eq!(
        (def.keys_max, def.live_keys, def.shadow),
        (Some(1_000), 2, true)
    );
    assert_eq!(def.shadow_refusals.busy, 1, "v had 6 tokens for 7");
    assert_eq!(def.overrun_tokens, 2);
    // A key that is not live answers a fresh key's state: the full bucket.
    let fresh = s.m.key_status("t", "user", "w").unwrap();
    assert_eq!((fresh.tokens, fresh.in_use, fresh.waiting), (10, 0, 0));
    assert_eq!((fresh.tenant.as_str(), fresh.name.as_str()), ("t", "user"));
    // Of a key, what is counted on the definition is the definition's.
    let u = s.m.key_status("t", "user", "u").unwrap();
    assert_eq!(
        (u.live_keys, u.overrun_tokens, u.shadow_refusals.busy),
        (2, 2, 1)
    );
    let plain = {
        s.reply(limit("t", "flat").rate(1.0).burst(1));
        s.status("t", "flat")
    };
    assert_eq!(
        (plain.keys_max, plain.live_keys, plain.shadow),
        (None, 0, false)
    );
}

#[test]
fn two_keys_of_one_keyed_limit_are_two_parts_of_one_take_each_key_once() {
    let mut s = Sim::new();
    assert_eq!(
        s.reply(limit("t", "api").rate(10.0).burst(2).keyed().keys_max(3)),
        Reply::Done
    );
    let a = s.open(60_000);
    // Alice and Bob in one entry: both charged, or neither.
    s.grant(
        ask(a, 1, "api")
            .key("alice")
            .units(2)
            .and("api", Some("bob"), 1),
    );
    assert_eq!(s.m.key_status("t", "api", "alice").unwrap().tokens, 0);
    assert_eq!(s.m.key_status("t", "api", "bob").unwrap().tokens, 1);
    assert!(matches!(
        s.reply(
            ask(a, 2, "api")
                .key("bob")
                .and("api", Some("alice"), 1)
                .wait(false)
        ),
        Reply::Refused(Refusal::Busy { .. })
    ));
    assert_eq!(
        s.m.key_status("t", "api", "bob").unwrap().tokens,
        1,
        "nothing charged"
    );
    let r = s.reply(ask(a, 3, "api").key("bob").and("api", Some("bob"), 1));
    invalid_containing(&r, "part 2 names limit api again");
    // Two new keys of one request count against keys_max together: 2 live + 2 new > 3.
    assert_eq!(
        s.reply(ask(a, 4, "api").key("carol").and("api", Some("dave"), 1)),
        refused(Refusal::AtCapacity {
            what: "keys of limit t/api".into(),
            limit: 3
        })
    );
    assert_eq!(s.m.keys("t", "api").unwrap(), vec!["alice", "bob"]);
}

// ---- Tokens returned (`ReturnTokens`) -------------------------------------------------------

fn give_back(parts: &[(&str, Option<&str>, u32)]) -> Command {
    Command::ReturnTokens {
        tenant: "t".into(),
        parts: parts
            .iter()
            .map(|&(limit, key, units)| weir_core::machine::Part {
                limit: limit.into(),
                key: key.map(Into::into),
                units,
            })
            .collect(),
    }
}

#[test]
fn returned_tokens_go_back_to_the_keys_bucket_never_above_its_burst_and_a_full_key_is_dropped() {
    let mut s = Sim::new();
    assert_eq!(
        s.reply(limit("t", "api").rate(1.0).burst(5).keyed()),
        Reply::Done
    );
    let a = s.open(600_000);
    s.grant(ask(a, 1, "api").key("alice").units(4));
    assert_eq!(s.m.key_status("t", "api", "alice").unwrap().tokens, 1);
    // Two back: 3 in the bucket, the key still lives.
    assert_eq!(
        s.reply(give_back(&[("api", Some("alice"), 2)])),
        Reply::Done
    );
    assert_eq!(s.m.key_status("t", "api", "alice").unwrap().tokens, 3);
    assert_eq!(s.m.keys("t", "api").unwrap(), ["alice"]);
    // Ten back: the bucket stops at its burst, and the full key is dropped as fresh.
    assert_eq!(
        s.reply(give_back(&[("api", Some("alice"), 10)])),
        Reply::Done
    );
    assert!(s.m.keys("t", "api").unwrap().is_empty());
    assert_eq!(s.status("t", "api").live_keys, 0);
    // A key without a state is full: a return creates none.
    assert_eq!(s.reply(give_back(&[("api", Some("bob"), 3)])), Reply::Done);
    assert!(s.m.keys("t", "api").unwrap().is_empty());
    // A fresh key takes its burst, not more: the return did not lift it.
    s.grant(ask(a, 2, "api").key("bob").units(5));
    assert_eq!(
        s.reply(ask(a, 3, "api").key("bob").wait(false)),
        refused(Refusal::Busy {
            retry_at_ms: Some(s.m.now_ms() + 1_000)
        })
    );
}

#[test]
fn a_return_lets_a_waiter_through_and_refuses_all_or_nothing() {
    let mut s = Sim::new();
    assert_eq!(
        s.reply(limit("t", "slow").rate(0.001).burst(2)),
        Reply::Done
    );
    keyed_api(&mut s);
    assert_eq!(s.reply(limit("t", "pool").concurrent(3)), Reply::Done);
    let a = s.open(600_000);
    s.grant(ask(a, 1, "slow").units(2));
    assert_eq!(s.reply(ask(a, 2, "slow")), queued(0));
    // The return serves the queue in the same entry.
    let (reply, events) = s.one(give_back(&[("slow", None, 1)]));
    assert_eq!(reply, Reply::Done);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Granted { ticket: 2, .. })),
        "{events:?}"
    );
    assert_eq!(s.status("t", "slow").tokens, 0);
    // One bad part refuses the whole return: the good part's bucket is unchanged.
    for (parts, words) in [
        (
            vec![("slow", None, 1), ("pool", None, 1)],
            "part 2: limit t/pool has no rate",
        ),
        (
            vec![("slow", None, 1), ("api", None, 1)],
            "part 2: limit t/api is keyed, and the part names no key",
        ),
        (
            vec![("slow", None, 1), ("slow", None, 1)],
            "part 2 names limit slow again",
        ),
        (vec![("slow", None, 0)], "units 0 is not in"),
    ] {
        invalid_containing(&s.reply(give_back(&parts)), words);
        assert_eq!(s.status("t", "slow").tokens, 0);
    }
    assert_eq!(
        s.reply(give_back(&[("slow", None, 1), ("gone", None, 1)])),
        refused(Refusal::UnknownLimit {
            tenant: "t".into(),
            name: "gone".into()
        })
    );
    assert_eq!(s.status("t", "slow").tokens, 0);
}

// ---- Limits of Envoy's descriptor overrides (`DefineOverride`) ------------------------------

fn define_override(requests: u32, unit_s: u64) -> Command {
    Command::DefineOverride {
        tenant: "t".into(),
        requests,
        unit_s,
    }
}

#[test]
fn an_override_limit_is_a_keyed_bucket_made_once_bounded_per_tenant_and_kept_by_a_prune() {
    let mut s = Sim::new();
    assert_eq!(s.reply(define_override(3, 3_600)), Reply::Done);
    let status = s.status("t", "envoy^3-per-3600s");
    assert_eq!(
        (status.burst, status.keyed, status.keys_max, status.shadow),
        (3, true, Some(100_000), false)
    );
    assert!((status.per_second - 3.0 / 3_600.0).abs() < 1e-12);
    // Made once: asking again leaves its keys' buckets as they are.
    let a = s.open(600_000);
    s.grant(ask(a, 1, "envoy^3-per-3600s").key("user=u").units(2));
    assert_eq!(s.reply(define_override(3, 3_600)), Reply::Done);
    assert_eq!(
        s.m.key_status("t", "envoy^3-per-3600s", "user=u")
            .unwrap()
            .tokens,
        1
    );
    // A file applied with prune leaves the gateway's override limits alone.
    let apply = Command::ApplyLimits {
        tenant: "t".into(),
        definitions: vec![
            limit("t", "envoy:user")
                .rate(1.0)
                .burst(5)
                .keyed()
                .definition(),
        ],
        prune: true,
    };
    match s.reply(apply) {
        Reply::LimitsApplied(change) => assert!(change.removed.is_empty(), "{change:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.m.key_status("t", "envoy^3-per-3600s", "user=u")
            .unwrap()
            .tokens,
        1
    );
    // At most RLS_OVERRIDES_MAX of them per tenant; one already made is still answered.
    for requests in 1..weir_core::bounds::RLS_OVERRIDES_MAX as u32 {
        assert_eq!(s.reply(define_override(requests, 60)), Reply::Done);
    }
    assert_eq!(
        s.reply(define_override(999, 60)),
        refused(Refusal::AtCapacity {
            what: "override limits of tenant t".into(),
            limit: 64
        })
    );
    assert_eq!(s.reply(define_override(3, 3_600)), Reply::Done);
    // No request, or a rate below one micro-token a second, is refused.
    invalid_containing(
        &s.reply(define_override(0, 60)),
        "override of 0 per 60 s: burst 0",
    );
    invalid_containing(
        &s.reply(define_override(1, 365 * 86_400)),
        "below one micro-token a second",
    );
}

#[test]
fn keys_with_a_bucket_alone_and_keys_with_waiters_are_read_redefined_and_dropped_alike() {
    let mut s = Sim::new();
    keyed_api(&mut s);
    let a = s.open(60_000);
    s.grant(ask(a, 1, "api").key("alice").units(2));
    s.grant(ask(a, 2, "api").key("bob").units(2));
    // Bob's next take waits: his key keeps a queue, the others only a bucket.
    assert_eq!(s.reply(ask(a, 3, "api").key("bob")), queued(0));
    s.grant(ask(a, 4, "api").key("carol"));
    // Enough keys that their table splits into several chunks, taken out of key order.
    let many: Vec<String> = (0..300u64)
        .map(|n| format!("k{:03}", (n * 7) % 300))
        .collect();
    let takes = many
        .iter()
        .enumerate()
        .map(|(i, k)| ask(a, 10 + i as u64, "api").key(k).into())
        .collect();
    for reply in s.entry(takes).replies {
        assert!(matches!(reply, Reply::Granted { .. }), "{reply:?}");
    }
    let mut all: Vec<String> = ["alice", "bob", "carol"].map(String::from).to_vec();
    all.extend((0..300).map(|n| format!("k{n:03}")));
    assert_eq!(s.m.keys("t", "api").unwrap(), all, "one list, in key order");
    let page = s.m.keys_page("t", "api", Some("bob"), 3).unwrap();
    assert_eq!(page.keys, ["carol", "k000", "k001"]);
    assert_eq!(s.m.limit_status("t", "api").unwrap().live_keys, 303);
    assert_eq!(s.m.key_status("t", "api", "alice").unwrap().tokens, 0);
    assert_eq!(s.m.key_status("t", "api", "k123").unwrap().tokens, 1);
    assert_eq!(s.m.key_status("t", "api", "bob").unwrap().waiting, 1);
    assert_eq!(
        s.m.bucket_now("t", "api", Some("carol"))
            .unwrap()
            .full_in_ms,
        100
    );
    let bytes = s.m.snapshot();
    let restored = Machine::restore(&bytes).expect("restores");
    assert_eq!(restored.snapshot(), bytes, "bit-exact");
    assert_eq!(restored.keys("t", "api").unwrap(), all);
    // A burst of 1: the keys holding a token are full, so fresh, and go at once.
    let redefined = limit("t", "api").rate(10.0).burst(1).keyed();
    assert_eq!(s.reply(redefined), Reply::Done);
    assert_eq!(s.m.keys("t", "api").unwrap(), ["alice", "bob"]);
    // 100 ms later every bucket holds its token: Bob's waiter takes his, the rest go.
    let events = s.wait(100);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(s.m.keys("t", "api").unwrap(), ["bob"]);
    s.wait(100);
    assert!(s.m.keys("t", "api").unwrap().is_empty());
    assert_eq!(s.m.limit_status("t", "api").unwrap().live_keys, 0);
}

#[test]
fn a_version_7_snapshot_of_keys_restores_and_its_keys_turn_lean_when_decided_on() {
    use weir_core::codec::{self, HEADER_BYTES};
    use weir_core::machine::SNAPSHOT_MAGIC;
    let mut s = Sim::new();
    // A semaphore that also rates: a key holding a permit is a limit of its own in every
    // version, so this state has no lean key and version 7 wrote it as today does, less
    // the (empty) maps that versions 8, 9 and 10 append.
    s.reply(limit("t", "db").concurrent(1).rate(10.0).burst(2).keyed());
    let a = s.open(60_000);
    s.grant(ask(a, 1, "db").key("eu"));
    s.grant(ask(a, 2, "db").key("us"));
    let payload = s.m.snapshot()[HEADER_BYTES..].to_vec();
    let (v7, appended) = payload.split_at(payload.len() - 3);
    assert_eq!(
        appended,
        [0, 0, 0],
        "no lean keys, no frozen tenants, no placements: three empty maps"
    );
    let restored = Machine::restore(&codec::seal_frame(SNAPSHOT_MAGIC, 7, v7)).expect("v7");
    assert_eq!(
        restored.snapshot(),
        s.m.snapshot(),
        "today's state to the byte"
    );
    s.m = restored;
    // Released, Eu's key keeps only its bucket (one token below its burst): it is lean,
    // still live, and full 100 ms later, when it goes.
    s.release(a, 1);
    assert_eq!(s.m.keys("t", "db").unwrap(), ["eu", "us"]);
    assert_eq!(s.m.key_status("t", "db", "eu").unwrap().tokens, 1);
    s.wait(100);
    assert_eq!(s.m.keys("t", "db").unwrap(), ["us"]);
}

/// A snapshot's freeze (`Machine::freeze`) shares the lean keys' chunks with the machine:
/// what the machine applies after it (takes that change, promote, demote and drop keys in
/// the shared chunks; new keys) leaves the frozen state as it was, so it encodes to the bytes
/// the machine gave at the freeze, and the machine to its own.
#[test]
fn a_frozen_state_encodes_as_the_machine_was_whatever_it_applies_after() {
    let mut s = Sim::new();
    assert_eq!(
        s.reply(
            limit("t", "api")
                .rate(10.0)
                .burst(4)
                .keyed()
                .keys_max(5_000)
        ),
        Reply::Done
    );
    let a = s.open(60_000);
    let mut ticket = 0;
    let mut take = |s: &mut Sim, key: String| {
        ticket += 1;
        s.reply(ask(a, ticket, "api").key(&key).wait(false))
    };
    for k in 0..1_000 {
        assert!(matches!(
            take(&mut s, format!("k{k:04}")),
            Reply::Granted { .. }
        ));
    }
    let at_freeze = s.m.snapshot();
    let frozen = s.m.freeze();
    // Every chunk changed: a take from every third key, new keys between the old ones, and
    // then every key refilled to its burst and dropped.
    for k in (0..1_000).step_by(3) {
        take(&mut s, format!("k{k:04}"));
    }
    for k in 0..500 {
        take(&mut s, format!("k{k:04}x"));
    }
    s.wait(200);
    let after = s.m.snapshot();
    assert_ne!(after, at_freeze, "the machine moved on");
    assert_eq!(
        frozen.encode(),
        at_freeze,
        "the frozen state is the machine's at the freeze"
    );
    drop(frozen);
    assert_eq!(s.m.snapshot(), after);
    s.m.check().expect("the machine holds its invariants");
    let restored = Machine::restore(&at_freeze).expect("the frozen bytes restore");
    assert_eq!(restored.snapshot(), at_freeze);
}
