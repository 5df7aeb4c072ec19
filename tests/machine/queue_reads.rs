//! The console's reads of one limit (`Machine::holders`, `Machine::waiters`,
//! `Machine::ticket_limit`): holders by key then fence, waiters in the order the queue
//! serves them, pages of a bounded size by offset, keyed limits key by key. Tenant `t`.

use weir_core::bounds::QUEUE_PAGE_MAX;
use weir_core::machine::{Reply, WaiterView};

use crate::sim::{Sim, ask, limit, queued};

/// (session, position, level, fairness key) of each waiter of a page.
fn order(items: &[WaiterView]) -> Vec<(u64, u32, i32, &str)> {
    items
        .iter()
        .map(|w| (w.session, w.position, w.level, w.fairness_key.as_str()))
        .collect()
}

#[test]
fn waiters_are_listed_in_the_order_the_queue_serves_them() {
    let mut s = Sim::db(1);
    let [holder, low, high, fair] = s.open_each([60_000; 4]);
    let fence = s.grant(ask(holder, 1, "db"));
    assert_eq!(s.reply(ask(low, 1, "db").at(0, "batch")), queued(0));
    assert_eq!(s.reply(ask(high, 1, "db").at(5, "ui")), queued(0));
    assert_eq!(s.reply(ask(fair, 1, "db").at(0, "other")), queued(2));

    let page = s.m.waiters("t", "db", 0, 10).unwrap();
    assert_eq!(page.total, 3);
    assert_eq!(
        order(&page.items),
        vec![
            (high, 0, 5, "ui"),
            (low, 1, 0, "batch"),
            (fair, 2, 0, "other")
        ]
    );
    let holders = s.m.holders("t", "db", 0, 10).unwrap();
    assert_eq!(holders.total, 1);
    let status = s.status("t", "db");
    assert_eq!(
        (status.keyed, status.live_keys),
        (false, 0),
        "an unkeyed limit has no keys"
    );
    let h = &holders.items[0];
    assert_eq!(
        (h.session, h.ticket, h.fence, h.units, &h.key),
        (holder, 1, fence, 1, &None)
    );
    assert!(h.lease_expires_at_ms >= 60_000, "{h:?}");

    // What the queue serves next is what the read listed first.
    let (_, events) = s.release(holder, 1);
    assert_eq!(events.first().map(|e| e.session()), Some(high));
    assert_eq!(s.m.ticket_limit(high, 1), Some(("t".into(), "db".into())));
    assert_eq!(
        s.m.ticket_limit(holder, 1),
        None,
        "a released ticket is not live"
    );
}

#[test]
fn pages_are_bounded_and_skip_by_offset() {
    let mut s = Sim::db(1);
    let [holder, a, b, c] = s.open_each([60_000; 4]);
    s.grant(ask(holder, 1, "db"));
    for w in [a, b, c] {
        assert!(matches!(s.reply(ask(w, 1, "db")), Reply::Queued { .. }));
    }
    let first = s.m.waiters("t", "db", 0, 2).unwrap();
    assert_eq!((first.items.len(), first.total), (2, 3));
    let rest = s.m.waiters("t", "db", 2, 2).unwrap();
    assert_eq!(order(&rest.items), vec![(c, 2, 0, "")]);
    assert!(s.m.waiters("t", "db", 3, 2).unwrap().items.is_empty());
    // A page size of 0 is one item; above the bound, the bound (here: all three).
    assert_eq!(s.m.waiters("t", "db", 0, 0).unwrap().items.len(), 1);
    assert_eq!(
        s.m.waiters("t", "db", 0, u32::MAX).unwrap().items.len(),
        3.min(QUEUE_PAGE_MAX as usize)
    );
    assert_eq!(s.m.waiters("t", "nope", 0, 1), None);
    assert_eq!(s.m.holders("t", "nope", 0, 1), None);
}

#[test]
fn a_keyed_limit_lists_each_live_key_in_key_order() {
    let mut s = Sim::new();
    assert_eq!(
        s.reply(limit("t", "gpu").concurrent(1).keyed()),
        Reply::Done
    );
    let [a, b, c] = s.open_each([60_000; 3]);
    let fb = s.grant(ask(a, 1, "gpu").key("bob"));
    let fa = s.grant(ask(b, 1, "gpu").key("alice"));
    assert_eq!(s.reply(ask(c, 1, "gpu").key("bob")), queued(0));

    let holders = s.m.holders("t", "gpu", 0, 10).unwrap();
    let keys: Vec<_> = holders
        .items
        .iter()
        .map(|h| (h.key.as_deref(), h.fence))
        .collect();
    assert_eq!(keys, vec![(Some("alice"), fa), (Some("bob"), fb)]);
    let waiters = s.m.waiters("t", "gpu", 0, 10).unwrap();
    assert_eq!(
        (waiters.total, waiters.items[0].key.as_deref()),
        (1, Some("bob"))
    );
    let status = s.m.limit_status("t", "gpu").unwrap();
    assert_eq!(
        (status.keyed, status.live_keys, status.shadow),
        (true, 2, false)
    );
    // A key's ticket is named by its definition, not by the key.
    assert_eq!(s.m.ticket_limit(c, 1), Some(("t".into(), "gpu".into())));
}

#[test]
fn a_page_never_holds_more_than_the_bound() {
    let mut s = Sim::db(1);
    let holder = s.open(60_000);
    s.grant(ask(holder, 1, "db"));
    let waiting = QUEUE_PAGE_MAX as usize + 10;
    for _ in 0..waiting {
        let w = s.open(60_000);
        assert!(matches!(s.reply(ask(w, 1, "db")), Reply::Queued { .. }));
    }
    let page = s.m.waiters("t", "db", 0, u32::MAX).unwrap();
    assert_eq!(
        (page.items.len(), page.total),
        (QUEUE_PAGE_MAX as usize, waiting as u64)
    );
    let last =
        s.m.waiters("t", "db", u64::from(QUEUE_PAGE_MAX), u32::MAX)
            .unwrap();
    assert_eq!(last.items.len(), 10);
    assert_eq!(last.items[0].position, QUEUE_PAGE_MAX);
}

/// A holder is answered with its grant's log time and the page with the log clock it was
/// read at, so "held for" needs no other clock; a waiter with its fairness weight.
#[test]
fn holders_answer_their_grant_time_and_waiters_their_weight() {
    let mut s = Sim::db(1);
    let [holder, heavy, light] = s.open_each([60_000; 3]);
    let granted_at_ms = s.m.now_ms();
    s.grant(ask(holder, 1, "db"));
    let heavy_ask = ask(heavy, 1, "db").priority(weir_core::machine::Priority {
        level: 0,
        fairness_key: "batch".into(),
        fairness_weight: 3,
    });
    assert_eq!(s.reply(heavy_ask), queued(0));
    assert_eq!(s.reply(ask(light, 1, "db").at(0, "ui")), queued(1));
    s.entry_after(2_500, vec![]);

    let page = s.m.holders("t", "db", 0, 10).unwrap();
    assert_eq!(page.items[0].granted_at_ms, granted_at_ms);
    assert_eq!(page.now_ms, granted_at_ms + 2_500);
    let waiters = s.m.waiters("t", "db", 0, 10).unwrap();
    let weights: Vec<_> = waiters
        .items
        .iter()
        .map(|w| (w.session, w.weight))
        .collect();
    assert_eq!(weights, vec![(heavy, 3), (light, 1)]);
    assert_eq!(waiters.now_ms, granted_at_ms + 2_500);

    // Both survive a snapshot.
    let restored = weir_core::machine::Machine::restore(&s.m.snapshot()).unwrap();
    assert_eq!(restored.holders("t", "db", 0, 10), Some(page));
    assert_eq!(restored.waiters("t", "db", 0, 10), Some(waiters));
}
