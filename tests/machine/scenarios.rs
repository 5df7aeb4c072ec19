//! One scenario per behaviour of the operations, named for it, written in the language of
//! [`crate::sim`]: limits `t/db` (concurrency) and `t/api` (rate) unless a scenario says
//! otherwise, and tenant `acme` for runs, budgets and halts.

use weir_core::machine::{
    BudgetKind, Change, Command, Event, HaltScope, Leadership, Machine, Priority, Refusal, Reply,
    Settle,
};

use crate::sim::{
    FREED, NOTHING_RELEASED, Sim, WITHDRAWN, ask, fence, granted, granted_event, halted,
    halted_event, limit, queued, refused, refused_event, removed,
};

// ---- tenant `acme`: runs, budgets, halts ---------------------------------------------------

fn settle(run: &str, epoch: u64, period: &str, tokens: u64, minor: u64, release: bool) -> Command {
    Command::Settle(Settle {
        tenant: "acme".into(),
        run: run.into(),
        epoch,
        period: Some(period.into()),
        tokens,
        minor_units: minor,
        release_slot: release,
    })
}

fn reserve(run: &str, agent: Option<&str>, period: Option<&str>) -> Command {
    Command::Reserve {
        tenant: "acme".into(),
        run: run.into(),
        agent: agent.map(Into::into),
        period: period.map(Into::into),
        hold_tokens: None,
        hold_minor: None,
    }
}

/// A reserve of `run` in `period` holding (tokens, minor units) of its budget.
fn reserve_holding(run: &str, period: &str, tokens: Option<u64>, minor: Option<u64>) -> Command {
    Command::Reserve {
        tenant: "acme".into(),
        run: run.into(),
        agent: None,
        period: Some(period.into()),
        hold_tokens: tokens,
        hold_minor: minor,
    }
}

fn unknown(tenant: &str, name: &str) -> Refusal {
    Refusal::UnknownLimit {
        tenant: tenant.into(),
        name: name.into(),
    }
}

fn release_run(run: &str) -> Command {
    Command::ReleaseRun {
        tenant: "acme".into(),
        run: run.into(),
    }
}

fn set_tenant(max_running: Change<u32>, tokens: Change<u64>, minor: Change<u64>) -> Command {
    Command::SetTenant {
        tenant: "acme".into(),
        max_running,
        budget_tokens: tokens,
        budget_minor: minor,
    }
}

fn set_halt(scope: &HaltScope, reason: &str) -> Command {
    Command::SetHalt {
        tenant: "acme".into(),
        scope: scope.clone(),
        reason: reason.into(),
    }
}

fn clear_halt(scope: &HaltScope) -> Command {
    Command::ClearHalt {
        tenant: "acme".into(),
        scope: scope.clone(),
    }
}

// ---- limits and permits --------------------------------------------------------------------

#[test]
fn concurrency_is_counted_in_units_and_full_limits_queue() {
    let mut s = Sim::db(3);
    let a = s.open(3_000);
    assert!(matches!(
        s.reply(ask(a, 1, "db").units(2)),
        Reply::Granted { units: 2, .. }
    ));
    // One unit is left: a two-unit ticket waits, a one-unit ticket behind it waits too
    // (the head blocks), and nothing exceeds the cap.
    assert_eq!(s.reply(ask(a, 2, "db").units(2)), queued(0));
    assert_eq!(s.reply(ask(a, 3, "db")), queued(1));
    let st = s.status("t", "db");
    assert_eq!((st.in_use, st.waiting, st.max_in_use), (2, 2, 2));
    let (_, events) = s.release(a, 1);
    assert_eq!(granted(&events), vec![(a, 2), (a, 3)]);
    assert_eq!(s.status("t", "db").in_use, 3);
}

#[test]
fn token_bucket_grants_its_burst_then_refills_on_the_log_clock() {
    let mut s = Sim::new();
    s.reply(limit("t", "api").rate(10.0).burst(5));
    let a = s.open(3_000);
    for t in 1..=5 {
        assert!(matches!(s.acquire(a, t, "api"), Reply::Granted { .. }));
    }
    // Empty bucket: one token comes 100 ms of log time later.
    let now = s.m.now_ms();
    let busy = refused(Refusal::Busy {
        retry_at_ms: Some(now + 100),
    });
    assert_eq!(s.reply(ask(a, 6, "api").wait(false)), busy);
    s.wait(99);
    assert!(matches!(
        s.reply(ask(a, 7, "api").wait(false)),
        Reply::Refused(Refusal::Busy { .. })
    ));
    s.wait(1);
    // The refused tickets answer their refusal again; a new one is granted the token.
    assert_eq!(s.reply(ask(a, 6, "api").wait(false)), busy);
    assert!(matches!(
        s.reply(ask(a, 8, "api").wait(false)),
        Reply::Granted { .. }
    ));
}

#[test]
fn rate_only_limit_takes_tokens_holds_nothing_and_serves_waiters_on_refill() {
    let mut s = Sim::new();
    s.define("t", "api", 0, 2.0);
    let a = s.open(3_000);
    let first = s.acquire(a, 1, "api");
    let second = s.acquire(a, 2, "api");
    assert!(matches!(first, Reply::Granted { .. }));
    assert!(matches!(second, Reply::Granted { .. }));
    assert_eq!(s.status("t", "api").in_use, 0);
    assert_eq!(s.acquire(a, 3, "api"), queued(0));
    // No client asks again: the refill alone grants the waiter, in a tick's entry.
    assert!(granted(&s.wait(400)).is_empty());
    assert_eq!(granted(&s.wait(100)), vec![(a, 3)]);
    // A lost push loses nothing: asking again answers the same grant.
    let again = s.acquire(a, 3, "api");
    assert_eq!(again, s.acquire(a, 3, "api"));
    assert!(matches!(again, Reply::Granted { units: 1, .. }));
    assert_eq!(s.acquire(a, 1, "api"), first);
}

#[test]
fn lowering_concurrent_keeps_holders_and_delays_new_grants() {
    let mut s = Sim::db(3);
    let a = s.open(3_000);
    for t in 1..=3 {
        s.acquire(a, t, "db");
    }
    s.define("t", "db", 1, 0.0);
    let st = s.status("t", "db");
    assert_eq!((st.concurrent, st.in_use), (1, 3));
    assert_eq!(s.acquire(a, 4, "db"), queued(0));
    assert!(granted(&s.release(a, 1).1).is_empty());
    assert!(granted(&s.release(a, 2).1).is_empty());
    assert_eq!(s.status("t", "db").in_use, 1);
    assert_eq!(granted(&s.release(a, 3).1), vec![(a, 4)]);
    assert_eq!(s.status("t", "db").in_use, 1);
}

#[test]
fn uncapping_a_limit_keeps_its_holders_and_its_snapshot_restores() {
    let mut s = Sim::db(1);
    let a = s.open(3_000);
    let f = s.grant(ask(a, 1, "db"));
    s.define("t", "db", 0, 0.0);
    assert!(
        s.m.validate_fence("t", "db", f),
        "the holder keeps its permit"
    );
    assert!(
        matches!(s.acquire(a, 2, "db"), Reply::Granted { .. }),
        "no cap now"
    );
    assert_eq!(s.status("t", "db").in_use, 1, "the new grant holds nothing");
    let restored = Machine::restore(&s.m.snapshot()).unwrap();
    assert_eq!(restored.snapshot(), s.m.snapshot());
    assert_eq!(s.release(a, 1).0, FREED);
    assert_eq!(s.status("t", "db").in_use, 0);
}

#[test]
fn lowering_concurrent_refuses_waiters_that_can_never_fit() {
    let mut s = Sim::db(4);
    let a = s.open(3_000);
    s.reply(ask(a, 1, "db").units(4));
    s.reply(ask(a, 2, "db").units(3));
    let (_, events) = s.one(limit("t", "db").concurrent(2));
    let too_large = Refusal::TooLarge {
        tenant: "t".into(),
        name: "db".into(),
        units: 3,
        max: 2,
    };
    assert_eq!(events, vec![refused_event(a, 2, too_large)]);
}

#[test]
fn removing_a_limit_refuses_waiters_and_waits_for_holders() {
    let mut s = Sim::db(1);
    let a = s.open(3_000);
    s.acquire(a, 1, "db");
    s.acquire(a, 2, "db");
    let (_, events) = s.remove("db");
    let removed = removed("db");
    assert_eq!(events, vec![refused_event(a, 2, removed.clone())]);
    assert_eq!(s.acquire(a, 3, "db"), refused(unknown("t", "db")));
    // The holder keeps its permit; the limit is gone once it releases.
    assert!(s.status("t", "db").removing);
    s.release(a, 1);
    assert_eq!(s.m.limit_status("t", "db"), None);
    // A duplicate of the refused ticket's acquire hears the same refusal.
    assert_eq!(s.acquire(a, 2, "db"), refused(removed));
}

#[test]
fn an_unknown_limit_or_session_is_refused_never_granted() {
    let mut s = Sim::new();
    let a = s.open(3_000);
    assert_eq!(s.acquire(a, 1, "nothing"), refused(unknown("t", "nothing")));
    assert_eq!(
        s.acquire(99, 1, "nothing"),
        refused(Refusal::UnknownSession { session: 99 })
    );
}

#[test]
fn too_large_is_refused_against_concurrent_and_burst() {
    let mut s = Sim::db(2);
    s.define("t", "api", 0, 3.0);
    let a = s.open(3_000);
    for (ticket, name, units, max) in [(1, "db", 3, 2), (2, "api", 4, 3)] {
        assert_eq!(
            s.reply(ask(a, ticket, name).units(units)),
            refused(Refusal::TooLarge {
                tenant: "t".into(),
                name: name.into(),
                units,
                max
            }),
            "{units} units of {name}"
        );
    }
}

#[test]
fn wait_false_answers_busy_when_only_a_release_can_make_room() {
    let mut s = Sim::db(1);
    let a = s.open(3_000);
    s.acquire(a, 1, "db");
    assert_eq!(
        s.reply(ask(a, 2, "db").wait(false)),
        refused(Refusal::Busy { retry_at_ms: None })
    );
    assert_eq!(s.status("t", "db").waiting, 0);
}

// ---- sessions and leases -------------------------------------------------------------------

#[test]
fn session_expires_at_a_deterministic_log_time_releasing_permits_and_withdrawing_tickets() {
    let mut s = Sim::db(1);
    let [a, b] = s.open_each([1_000, 10_000]);
    s.acquire(a, 1, "db");
    s.acquire(a, 2, "db");
    s.acquire(b, 1, "db");
    assert!(s.wait(999).is_empty());
    let events = s.wait(1);
    assert_eq!(
        events,
        vec![
            Event::SessionExpired { session: a },
            granted_event(b, 1, s.index, 1),
        ]
    );
    assert_eq!(s.status("t", "db").waiting, 0);
    assert_eq!(
        s.reply(Command::KeepAlive { session: a }),
        refused(Refusal::UnknownSession { session: a })
    );
}

#[test]
fn keep_alive_extends_the_lease_from_its_own_entry() {
    let mut s = Sim::new();
    let a = s.open(1_000);
    s.wait(900);
    assert_eq!(
        s.reply(Command::KeepAlive { session: a }),
        Reply::KeptAlive { ttl_ms: 1_000 }
    );
    assert!(s.wait(999).is_empty());
    assert_eq!(s.wait(1), vec![Event::SessionExpired { session: a }]);
}

#[test]
fn a_new_leaders_fast_clock_does_not_expire_leases_early() {
    let mut s = Sim::db(1);
    let a = s.open(1_000);
    s.acquire(a, 1, "db");
    s.wait(500);
    // Node 2 takes over with a clock an hour ahead, after an outage of 800 ms.
    s.leadership = Leadership {
        term: 2,
        node: 2,
        incarnation: 0,
    };
    s.clock_ms += 3_600_000;
    assert!(
        s.wait(800).is_empty(),
        "the change of leader adds no log time"
    );
    assert!(s.wait(499).is_empty());
    assert_eq!(s.wait(1), vec![Event::SessionExpired { session: a }]);
}

#[test]
fn closing_a_session_releases_everything_and_grants_the_next_waiter() {
    let mut s = Sim::db(1);
    s.define("t", "cache", 1, 0.0);
    let [a, b] = s.open_each([3_000, 3_000]);
    s.acquire(a, 1, "db");
    s.acquire(a, 2, "cache");
    s.acquire(b, 1, "db");
    s.acquire(b, 2, "cache");
    let (reply, events) = s.one(Command::CloseSession { session: a });
    assert_eq!(reply, Reply::Done);
    assert_eq!(granted(&events), vec![(b, 1), (b, 2)]);
    assert_eq!(s.m.session_count(), 1);
}

// ---- tickets, grants and fences ------------------------------------------------------------

#[test]
fn acquire_is_idempotent_per_session_and_ticket() {
    let mut s = Sim::db(1);
    let [a, b] = s.open_each([3_000, 3_000]);
    let first = s.acquire(a, 7, "db");
    for _ in 0..3 {
        assert_eq!(s.acquire(a, 7, "db"), first);
    }
    assert_eq!(s.acquire(b, 7, "db"), queued(0));
    assert_eq!(s.acquire(b, 7, "db"), queued(0));
    assert_eq!(s.status("t", "db").waiting, 1);
    let (r1, _) = s.release(a, 7);
    let (r2, e2) = s.release(a, 7);
    assert_eq!(r1, FREED);
    assert_eq!(r2, NOTHING_RELEASED);
    assert!(e2.is_empty());
    // A late duplicate of the released ticket's acquire does not grant it again.
    assert_eq!(
        s.acquire(a, 7, "db"),
        refused(Refusal::TicketReleased {
            session: a,
            ticket: 7
        })
    );
}

#[test]
fn a_rate_take_retried_after_thousands_of_others_is_answered_not_granted_twice() {
    let mut s = Sim::new();
    s.reply(limit("t", "api").rate(1_000.0).burst(1_000_000));
    let a = s.open(600_000);
    let first = s.grant(ask(a, 0, "api"));
    // 5,000 other takes finish on the same session before the retry arrives.
    let others: Vec<Command> = (1..=5_000).map(|t| ask(a, t, "api").into()).collect();
    s.entries(others.chunks(1_000).map(<[Command]>::to_vec));
    let tokens = s.status("t", "api").tokens;
    let first_answer = Reply::Granted {
        fence: first,
        units: 1,
    };
    let retry = s.reply(ask(a, 0, "api"));
    assert_eq!(retry, first_answer, "the retry gets its first answer");
    assert_eq!(s.status("t", "api").tokens, tokens, "and takes no token");
    // After the retention window, in log time, the ticket is forgotten.
    s.wait(weir_core::bounds::FINISHED_TICKET_RETENTION_MS);
    assert_ne!(s.reply(ask(a, 0, "api")), first_answer);
}

fn acked(session: u64, acked_below: u64) -> Command {
    Command::KeepAliveAcked {
        session,
        acked_below,
    }
}

/// The acknowledged mark: finished tickets below it are forgotten, and asking about one is
/// refused without effect; live tickets below it stay live; tickets at or above it keep
/// their answers; the mark never moves down.
#[test]
fn finished_tickets_below_the_acknowledged_mark_are_forgotten_and_never_granted_again() {
    let mut s = Sim::db(2);
    s.reply(limit("t", "api").rate(1_000.0).burst(1_000_000));
    let a = s.open(600_000);
    let taken = s.grant(ask(a, 1, "api"));
    let held = s.grant(ask(a, 2, "db"));
    let later = s.grant(ask(a, 4, "api"));
    assert_eq!(s.reply(acked(a, 4)), Reply::KeptAlive { ttl_ms: 600_000 });

    let below = |ticket| {
        refused(Refusal::Invalid(format!(
            "ticket {ticket} of session {a} is below the session's acknowledged mark 4: a new \
             request takes a new ticket"
        )))
    };
    // Ticket 1 finished below the mark: forgotten, and its retry takes no second token.
    let tokens = s.status("t", "api").tokens;
    assert_eq!(s.reply(ask(a, 1, "api")), below(1));
    assert_eq!(
        s.reply(ask(a, 3, "db")),
        below(3),
        "never asked: refused too"
    );
    assert_eq!(s.status("t", "api").tokens, tokens);
    // Ticket 2 is live below the mark: answered as held, released, and then not recorded.
    assert_eq!(
        s.reply(ask(a, 2, "db")),
        Reply::Granted {
            fence: held,
            units: 1
        }
    );
    assert_eq!(s.release(a, 2).0, FREED);
    assert_eq!(s.release(a, 2).0, NOTHING_RELEASED);
    assert_eq!(s.reply(ask(a, 2, "db")), below(2));
    assert_eq!(s.status("t", "db").in_use, 0);
    // Ticket 4, at the mark, keeps its answer; a lower mark changes nothing.
    assert_eq!(s.reply(acked(a, 1)), Reply::KeptAlive { ttl_ms: 600_000 });
    assert_eq!(
        s.reply(ask(a, 4, "api")),
        Reply::Granted {
            fence: later,
            units: 1
        }
    );
    assert_ne!(taken, later);
    assert_eq!(s.reply(acked(a, 5)), Reply::KeptAlive { ttl_ms: 600_000 });
    assert_eq!(
        s.reply(ask(a, 4, "api")),
        refused(Refusal::Invalid(format!(
            "ticket 4 of session {a} is below the session's acknowledged mark 5: a new \
             request takes a new ticket"
        )))
    );
    // The mark is state: a restored machine refuses the same.
    let restored = Machine::restore(&s.m.snapshot()).unwrap();
    assert_eq!(restored.digest(), s.m.digest());
    assert_eq!(
        s.reply(acked(a + 1, 9)),
        refused(Refusal::UnknownSession { session: a + 1 })
    );
}

#[test]
fn a_session_at_its_finished_ticket_bound_is_refused_not_made_to_forget() {
    let mut s = Sim::new();
    s.reply(limit("t", "api").rate(1_000.0).burst(1_000_000));
    let a = s.open(600_000);
    let max = weir_core::bounds::SESSION_FINISHED_TICKETS_MAX as u64;
    let takes: Vec<Command> = (0..max).map(|t| ask(a, t, "api").into()).collect();
    s.entries(takes.chunks(4_096).map(<[Command]>::to_vec));
    let full = Refusal::AtCapacity {
        what: format!("finished tickets of session {a} kept for retries"),
        limit: max,
    };
    assert_eq!(s.reply(ask(a, max, "api")), refused(full.clone()));
    assert_eq!(
        s.release(a, max + 1).0,
        refused(full),
        "recording a release of an unknown ticket needs room too"
    );
    // Every one of them is still answered as before.
    assert!(matches!(s.reply(ask(a, 0, "api")), Reply::Granted { .. }));
    s.wait(weir_core::bounds::FINISHED_TICKET_RETENTION_MS);
    assert!(matches!(s.reply(ask(a, max, "api")), Reply::Granted { .. }));
}

#[test]
fn queued_ticket_is_granted_by_the_machine_on_release() {
    let mut s = Sim::db(1);
    let [a, b] = s.open_each([3_000, 3_000]);
    s.acquire(a, 1, "db");
    assert_eq!(s.acquire(b, 1, "db"), queued(0));
    let (_, events) = s.release(a, 1);
    let index = s.index;
    assert_eq!(events, vec![granted_event(b, 1, index, 1)]);
    assert!(s.m.validate_fence("t", "db", index));
    assert_eq!(
        s.acquire(b, 1, "db"),
        Reply::Granted {
            fence: index,
            units: 1
        }
    );
}

#[test]
fn withdrawing_a_queued_ticket_serves_the_one_behind_it() {
    let mut s = Sim::db(2);
    let a = s.open(3_000);
    s.reply(ask(a, 1, "db"));
    s.reply(ask(a, 2, "db").units(2));
    s.reply(ask(a, 3, "db"));
    let (reply, events) = s.release(a, 2);
    assert_eq!(reply, WITHDRAWN);
    assert_eq!(granted(&events), vec![(a, 3)]);
}

#[test]
fn fences_increase_strictly_even_within_one_entry() {
    let mut s = Sim::db(10);
    let a = s.open(3_000);
    let lone = s.grant(ask(a, 1, "db"));
    assert_eq!(lone, s.index, "a lone grant's fence is its entry's index");
    let applied = s.entry((2..=6).map(|t| ask(a, t, "db").into()).collect());
    let fences: Vec<u64> = applied.replies.iter().map(fence).collect();
    assert_eq!(fences, (s.index..s.index + 5).collect::<Vec<_>>());
    let next = s.grant(ask(a, 7, "db"));
    assert!(next > fences[4]);
}

#[test]
fn validate_fence_answers_whether_the_permit_is_still_held() {
    let mut s = Sim::db(1);
    let a = s.open(3_000);
    let f = s.grant(ask(a, 1, "db"));
    assert!(s.m.validate_fence("t", "db", f));
    assert!(!s.m.validate_fence("t", "db", f + 1));
    assert!(!s.m.validate_fence("t", "other", f));
    s.release(a, 1);
    assert!(!s.m.validate_fence("t", "db", f));
}

// ---- the wait queue ------------------------------------------------------------------------

#[test]
fn grant_on_release_serves_priority_then_fairness_across_sessions() {
    // The seed's order test: a deep backlog of "big" does not hold "a" and "b" back, and
    // the urgent ticket that came last goes first.
    let mut s = Sim::db(1);
    let [one, two] = s.open_each([3_000, 3_000]);
    assert!(matches!(s.acquire(one, 100, "db"), Reply::Granted { .. }));
    let backlog = (101..121).map(|t| (one, t, "big"));
    for (session, t, key) in backlog.chain([(two, 201, "a"), (two, 202, "b"), (two, 203, "a")]) {
        assert!(matches!(
            s.reply(ask(session, t, "db").at(0, key)),
            Reply::Queued { .. }
        ));
    }
    assert_eq!(s.reply(ask(two, 299, "db").at(5, "")), queued(0));
    assert_eq!(s.status("t", "db").waiting, 24);
    let mut held = (one, 100);
    let mut served = Vec::new();
    for _ in 0..6 {
        let (_, events) = s.release(held.0, held.1);
        let g = granted(&events);
        assert_eq!(g.len(), 1, "one permit frees one grant");
        held = g[0];
        served.push(held.1);
    }
    assert_eq!(served, vec![299, 101, 201, 202, 102, 203]);
    assert_eq!(s.status("t", "db").max_in_use, 1);
}

#[test]
fn a_fairness_key_arriving_late_gets_its_turn_not_a_catch_up_burst() {
    let mut s = Sim::db(1);
    let a = s.open(3_000);
    s.acquire(a, 1, "db");
    for t in 10..20 {
        s.reply(ask(a, t, "db").at(0, "old"));
    }
    let mut served = vec![];
    let mut held = 1;
    for _ in 0..4 {
        held = granted(&s.release(a, held).1)[0].1;
        served.push(held);
    }
    for t in 30..33 {
        s.reply(ask(a, t, "db").at(0, "new"));
    }
    for _ in 0..6 {
        held = granted(&s.release(a, held).1)[0].1;
        served.push(held);
    }
    assert_eq!(served, vec![10, 11, 12, 13, 14, 30, 15, 31, 16, 32]);
}

// ---- runs, budgets, settlements ------------------------------------------------------------

#[test]
fn run_slots_are_bounded_idempotent_and_released_once() {
    let mut s = Sim::new();
    s.reply(set_tenant(Change::Set(2), Change::Keep, Change::Keep));
    assert_eq!(s.reply(reserve("r1", None, None)), Reply::Admitted);
    assert_eq!(
        s.reply(reserve("r1", None, None)),
        Reply::Admitted,
        "a retry takes no slot"
    );
    assert_eq!(s.reply(reserve("r2", None, None)), Reply::Admitted);
    assert_eq!(
        s.reply(reserve("r3", None, None)),
        refused(Refusal::TooManyRuns {
            tenant: "acme".into(),
            running: 2
        })
    );
    let running = s.m.running("acme");
    assert_eq!(
        running.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(),
        vec!["r1", "r2"]
    );
    assert_eq!(running[0].1.admitted_at_wall_ms, 1_700_000_000_000);
    for _ in 0..2 {
        assert_eq!(s.reply(release_run("r1")), Reply::Done);
    }
    assert_eq!(s.reply(reserve("r3", None, None)), Reply::Admitted);
}

#[test]
fn a_ceiling_of_zero_admits_nobody() {
    let mut s = Sim::new();
    s.reply(set_tenant(Change::Set(0), Change::Keep, Change::Keep));
    assert_eq!(
        s.reply(reserve("r1", None, None)),
        refused(Refusal::TooManyRuns {
            tenant: "acme".into(),
            running: 0
        })
    );
    s.reply(set_tenant(Change::Clear, Change::Set(0), Change::Keep));
    assert_eq!(
        s.reply(reserve("r1", None, Some("2026-12"))),
        refused(Refusal::BudgetExhausted {
            tenant: "acme".into(),
            period: "2026-12".into(),
            kind: BudgetKind::Tokens,
            spent: 0,
            held: 0,
            hold: 0,
            budget: 0
        })
    );
}

#[test]
fn budgets_refuse_reserves_once_the_period_is_spent() {
    let mut s = Sim::new();
    s.reply(set_tenant(
        Change::Keep,
        Change::Set(100),
        Change::Set(5_000),
    ));
    for (run, tokens) in [("r1", 60), ("r2", 40)] {
        assert_eq!(s.reply(reserve(run, None, Some("p1"))), Reply::Admitted);
        assert_eq!(
            s.reply(settle(run, 1, "p1", tokens, 1_000, true)),
            Reply::Settled { duplicate: false }
        );
    }
    assert_eq!(
        s.reply(reserve("r3", None, Some("p1"))),
        refused(Refusal::BudgetExhausted {
            tenant: "acme".into(),
            period: "p1".into(),
            kind: BudgetKind::Tokens,
            spent: 100,
            held: 0,
            hold: 0,
            budget: 100
        })
    );
    // Another period has its own budget.
    assert_eq!(s.reply(reserve("r3", None, Some("p2"))), Reply::Admitted);
    let spent = s.m.spent("acme", "p1");
    assert_eq!((spent.tokens, spent.minor_units), (100, 2_000));
}

#[test]
fn holds_admit_only_what_fits_and_settlements_replace_them_with_the_charge() {
    let mut s = Sim::new();
    s.reply(set_tenant(Change::Keep, Change::Set(100), Change::Keep));
    assert_eq!(
        s.reply(reserve_holding("r1", "p", Some(60), None)),
        Reply::Admitted
    );
    assert_eq!(
        s.reply(reserve_holding("r2", "p", Some(50), None)),
        refused(Refusal::BudgetExhausted {
            tenant: "acme".into(),
            period: "p".into(),
            kind: BudgetKind::Tokens,
            spent: 0,
            held: 60,
            hold: 50,
            budget: 100
        }),
        "60 held + 50 would pass 100"
    );
    assert_eq!(
        s.reply(reserve_holding("r2", "p", Some(40), None)),
        Reply::Admitted
    );
    // Without a hold, the older rule: admitted while the spend has not reached the budget.
    assert_eq!(s.reply(reserve("r3", None, Some("p"))), Reply::Admitted);
    assert_eq!(s.m.spent("acme", "p").held_tokens, 100);
    // r1 settles within its hold, then past it: the charge replaces the hold, and the
    // excess is recorded and reported.
    assert_eq!(
        s.reply(settle("r1", 1, "p", 30, 0, false)),
        Reply::Settled { duplicate: false }
    );
    assert_eq!(
        s.reply(settle("r1", 2, "p", 40, 0, true)),
        Reply::Overrun {
            tokens: 10,
            minor_units: 0
        }
    );
    let spend = s.m.spent("acme", "p");
    assert_eq!(
        (spend.tokens, spend.held_tokens, spend.overrun_tokens),
        (70, 40, 10)
    );
    // Releasing r2 unsettled frees its hold.
    s.reply(release_run("r2"));
    assert_eq!(s.m.spent("acme", "p").held_tokens, 0);
    assert_eq!(
        s.reply(reserve_holding("r4", "p", Some(30), None)),
        Reply::Admitted,
        "70 spent + 30 fits 100"
    );
    assert!(matches!(
        s.reply(reserve_holding("r5", "p", Some(1), None)),
        Reply::Refused(Refusal::BudgetExhausted { .. })
    ));
    // A snapshot keeps the holds.
    let restored = Machine::restore(&s.m.snapshot()).unwrap();
    assert_eq!(restored.spent("acme", "p").held_tokens, 30);
}

#[test]
fn a_settlement_charges_once_and_a_conflicting_one_changes_nothing() {
    let mut s = Sim::new();
    s.reply(reserve("r1", None, Some("p")));
    assert_eq!(
        s.reply(settle("r1", 1, "p", 10, 20, false)),
        Reply::Settled { duplicate: false }
    );
    assert_eq!(
        s.reply(settle("r1", 1, "p", 10, 20, false)),
        Reply::Settled { duplicate: true }
    );
    let before = s.m.snapshot();
    assert_eq!(
        s.reply(settle("r1", 1, "p", 11, 20, true)),
        refused(Refusal::Conflict {
            tenant: "acme".into(),
            run: "r1".into(),
            epoch: 1
        })
    );
    let mut after = s.m.clone();
    // Only the applied index moved: state is otherwise unchanged (slot still held).
    assert_eq!(s.m.running("acme").len(), 1);
    assert_eq!(s.m.spent("acme", "p").tokens, 10);
    assert_ne!(before, after.snapshot());
    after = Machine::restore(&before).unwrap();
    assert_eq!(after.spent("acme", "p").tokens, 10);
    assert_eq!(
        s.reply(settle("r1", 2, "p", 5, 0, true)),
        Reply::Settled { duplicate: false }
    );
    assert_eq!(s.m.spent("acme", "p").tokens, 15);
    assert!(
        s.m.running("acme").is_empty(),
        "release_slot freed the slot"
    );
}

#[test]
fn receipts_are_kept_for_the_retention_window_then_dropped() {
    let mut s = Sim::new();
    s.reply(settle("r1", 1, "p", 10, 0, false));
    s.wait(weir_core::bounds::RECEIPT_RETENTION_MS - 1);
    assert_eq!(s.m.tenant_status("acme").receipts, 1);
    assert_eq!(
        s.reply(settle("r1", 1, "p", 10, 0, false)),
        Reply::Settled { duplicate: true }
    );
    s.wait(1);
    assert_eq!(s.m.tenant_status("acme").receipts, 0);
    assert_eq!(s.m.tenant_status("acme").receipts_evicted, 0);
}

#[test]
fn receipts_beyond_the_count_bound_are_evicted_oldest_first_and_counted() {
    let mut s = Sim::new();
    let max = weir_core::bounds::TENANT_RECEIPTS_MAX as u64;
    let commands: Vec<Command> = (0..max + 3)
        .map(|e| settle("r", e, "p", 1, 0, false))
        .collect();
    s.entries(commands.chunks(4_096).map(<[Command]>::to_vec));
    let st = s.m.tenant_status("acme");
    assert_eq!((st.receipts, st.receipts_evicted), (max, 3));
    // The evicted receipt's retry is no longer recognized: it is charged again. That is
    // the documented cost of the bound, and it is counted above.
    assert_eq!(
        s.reply(settle("r", 0, "p", 1, 0, false)),
        Reply::Settled { duplicate: false }
    );
    assert_eq!(
        s.reply(settle("r", max + 2, "p", 1, 0, false)),
        Reply::Settled { duplicate: true }
    );
}

// ---- halts ---------------------------------------------------------------------------------

#[test]
fn a_halt_refuses_its_scope_refuses_its_queue_and_tells_its_holders() {
    let mut s = Sim::new();
    s.define("acme", "db", 1, 0.0);
    let [a, b] = s.open_each([3_000, 3_000]);
    let as_agent =
        |session, ticket, agent: &str| ask(session, ticket, "db").tenant("acme").agent(agent);
    let f = s.grant(as_agent(a, 1, "bot"));
    s.reply(as_agent(b, 1, "bot"));
    s.reply(as_agent(b, 2, "human"));
    let bot = HaltScope::Agent("bot".into());
    let (reply, events) = s.one(set_halt(&bot, "runaway loop"));
    assert_eq!(reply, Reply::Done);
    let runaway = halted(&bot, "runaway loop");
    assert_eq!(
        events,
        vec![
            halted_event(a, 1, &bot, "runaway loop"),
            refused_event(b, 1, runaway.clone()),
        ]
    );
    // The holder keeps its permit; the other agent still waits; new bot work is refused.
    assert!(s.m.validate_fence("acme", "db", f));
    assert_eq!(s.status("acme", "db").waiting, 1);
    assert_eq!(s.reply(as_agent(a, 3, "bot")), refused(runaway.clone()));
    assert_eq!(s.reply(reserve("r1", Some("bot"), None)), refused(runaway));
    assert_eq!(s.reply(reserve("r2", Some("human"), None)), Reply::Admitted);
    // A tenant halt is a separate record: clearing the agent halt leaves it standing.
    let tenant = HaltScope::Tenant;
    let (_, events) = s.one(set_halt(&tenant, "incident"));
    assert_eq!(
        events,
        vec![
            halted_event(a, 1, &tenant, "incident"),
            refused_event(b, 2, halted(&tenant, "incident")),
        ]
    );
    s.reply(clear_halt(&bot));
    assert_eq!(
        s.m.halts("acme"),
        vec![(HaltScope::Tenant, "incident".to_string())]
    );
    assert!(matches!(
        s.reply(reserve("r3", Some("bot"), None)),
        Reply::Refused(Refusal::Halted { .. })
    ));
    s.reply(clear_halt(&tenant));
    assert_eq!(s.reply(reserve("r3", Some("bot"), None)), Reply::Admitted);
    assert_eq!(s.reply(as_agent(a, 4, "bot")), queued(0));
}

/// A request refused at once, waiting or not, is remembered: asked again (a re-ask after a
/// reconnect, a retry, a late duplicate) it answers the same refusal, though what refused it
/// has gone, and is never granted after its refusal was answered.
#[test]
fn a_request_refused_at_once_answers_the_same_refusal_when_asked_again() {
    let mut s = Sim::new();
    s.define("acme", "db", 1, 0.0);
    let a = s.open(60_000);
    let bot = HaltScope::Agent("bot".into());
    let as_bot = |ticket| ask(a, ticket, "db").tenant("acme").agent("bot");
    assert_eq!(s.reply(set_halt(&bot, "runaway loop")), Reply::Done);
    let runaway = refused(halted(&bot, "runaway loop"));
    assert_eq!(s.reply(as_bot(1)), runaway);
    assert_eq!(s.reply(as_bot(2).wait(false)), runaway);
    // The halt is cleared and the limit has room: both tickets answer their refusal again,
    // and nothing is held.
    assert_eq!(s.reply(clear_halt(&bot)), Reply::Done);
    assert_eq!(s.reply(as_bot(1)), runaway);
    assert_eq!(s.reply(as_bot(2).wait(false)), runaway);
    assert_eq!(s.status("acme", "db").in_use, 0);

    // Busy (the request that does not wait finds no room): its copy decided after the holder
    // released is refused again, not granted a permit its caller was told it did not get.
    let holder = s.open(60_000);
    assert!(matches!(
        s.reply(ask(holder, 1, "db").tenant("acme")),
        Reply::Granted { .. }
    ));
    let busy = s.reply(ask(a, 4, "db").tenant("acme").wait(false));
    assert!(
        matches!(busy, Reply::Refused(Refusal::Busy { .. })),
        "{busy:?}"
    );
    s.release(holder, 1);
    assert_eq!(s.reply(ask(a, 4, "db").tenant("acme").wait(false)), busy);
    assert_eq!(s.status("acme", "db").in_use, 0);
    assert!(matches!(
        s.reply(ask(a, 5, "db").tenant("acme").wait(false)),
        Reply::Granted { .. }
    ));

    // A limit that did not exist yet: defined since, the first answer still stands.
    let unknown = refused(Refusal::UnknownLimit {
        tenant: "acme".into(),
        name: "gpu".into(),
    });
    let gpu = ask(a, 3, "gpu").tenant("acme");
    assert_eq!(s.reply(gpu.clone()), unknown);
    s.define("acme", "gpu", 1, 0.0);
    assert_eq!(s.reply(gpu), unknown);
    assert_eq!(s.status("acme", "gpu").in_use, 0);
}

#[test]
fn a_retried_reserve_after_a_halt_answers_admitted_for_the_run_already_admitted() {
    let mut s = Sim::new();
    s.reply(set_tenant(Change::Set(1), Change::Keep, Change::Keep));
    // Admitted; its reply is lost; a halt lands; the client retries.
    assert_eq!(s.reply(reserve("r1", Some("bot"), None)), Reply::Admitted);
    s.reply(set_halt(&HaltScope::Tenant, "incident"));
    assert_eq!(
        s.reply(reserve("r1", Some("bot"), None)),
        Reply::Admitted,
        "the retry is told what its first attempt did"
    );
    assert_eq!(s.m.running("acme").len(), 1, "and takes no second slot");
    // A new run is still refused by the halt.
    assert_eq!(
        s.reply(reserve("r2", Some("bot"), None)),
        refused(halted(&HaltScope::Tenant, "incident"))
    );
}

#[test]
fn tenants_periods_halts_and_runs_are_bounded_with_a_refusal_at_the_bound() {
    use weir_core::bounds::{TENANT_HALTS_MAX, TENANT_PERIODS_MAX, TENANT_RUNS_MAX, TENANTS_MAX};
    let full = |what: String, limit: usize| {
        refused(Refusal::AtCapacity {
            what,
            limit: limit as u64,
        })
    };
    let mut s = Sim::new();
    let runs: Vec<Command> = (0..TENANT_RUNS_MAX)
        .map(|r| reserve(&format!("r{r}"), None, None))
        .collect();
    s.entries(runs.chunks(4_096).map(<[Command]>::to_vec));
    assert_eq!(
        s.reply(reserve("one-more", None, None)),
        full("running runs of tenant acme".into(), TENANT_RUNS_MAX),
        "a tenant without a ceiling is bounded all the same"
    );
    let periods: Vec<Command> = (0..TENANT_PERIODS_MAX as u64)
        .map(|p| settle("r", p, &format!("p{p}"), 1, 0, false))
        .collect();
    s.entries(periods.chunks(4_096).map(<[Command]>::to_vec));
    assert_eq!(
        s.reply(settle("r", 1 << 40, "one-more", 1, 0, false)),
        full("periods of tenant acme".into(), TENANT_PERIODS_MAX)
    );
    assert_eq!(
        s.reply(settle("r", 1 << 41, "p0", 1, 0, false)),
        Reply::Settled { duplicate: false },
        "a period already kept is charged as before"
    );
    let halts: Vec<Command> = (0..TENANT_HALTS_MAX)
        .map(|a| set_halt(&HaltScope::Agent(format!("a{a}")), "stop"))
        .collect();
    s.entries(halts.chunks(4_096).map(<[Command]>::to_vec));
    assert_eq!(
        s.reply(set_halt(&HaltScope::Tenant, "stop")),
        full("halts of tenant acme".into(), TENANT_HALTS_MAX)
    );
    let tenants: Vec<Command> = (1..TENANTS_MAX)
        .map(|t| Command::SetTenant {
            tenant: format!("t{t}"),
            max_running: Change::Set(1),
            budget_tokens: Change::Keep,
            budget_minor: Change::Keep,
        })
        .collect();
    s.entries(tenants.chunks(4_096).map(<[Command]>::to_vec));
    assert_eq!(
        s.reply(limit("new", "db").concurrent(1)),
        full("tenants".into(), TENANTS_MAX)
    );
    assert_eq!(
        s.reply(reserve("r-again", None, None)),
        full("running runs of tenant acme".into(), TENANT_RUNS_MAX)
    );
}

// ---- argument rules ------------------------------------------------------------------------

#[test]
fn bad_arguments_are_refused_with_the_rule_they_break() {
    let mut s = Sim::new();
    let long = "x".repeat(weir_core::bounds::NAME_BYTES_MAX + 1);
    let a = s.open(3_000);
    let weightless = Priority {
        level: 0,
        fairness_key: String::new(),
        fairness_weight: 0,
    };
    let cases: Vec<(Command, &str)> = vec![
        (
            Command::OpenSession { ttl_ms: 10 },
            "ttl_ms 10 is not in 500..=600000",
        ),
        (
            limit(&long, "n").concurrent(1).into(),
            "tenant is 129 bytes, the bound is 128",
        ),
        (
            limit("t", "n").concurrent(1).rate(f64::INFINITY).into(),
            "per_second inf is not a rate in 0..=1000000000",
        ),
        (
            ask(a, 1, "n").units(0).into(),
            "units 0 is not in 1..=1073741824",
        ),
        (
            ask(a, 1, "n").priority(weightless).into(),
            "fairness weight 0: weights are at least 1",
        ),
        (
            Command::Reserve {
                tenant: "t".into(),
                run: String::new(),
                agent: None,
                period: None,
                hold_tokens: None,
                hold_minor: None,
            },
            "run is empty",
        ),
        (
            Command::Reserve {
                tenant: "t".into(),
                run: "r".into(),
                agent: None,
                period: None,
                hold_tokens: Some(1),
                hold_minor: None,
            },
            "a hold needs a period to hold against",
        ),
        (
            Command::SetHalt {
                tenant: "t".into(),
                scope: HaltScope::Tenant,
                reason: "r".repeat(1025),
            },
            "reason is 1025 bytes, the bound is 1024",
        ),
    ];
    for (command, why) in cases {
        assert_eq!(s.reply(command), refused(Refusal::Invalid(why.into())));
    }
}

// ---- reads: a tenant's limits, page by page -------------------------------------------------

#[test]
fn a_tenant_of_many_limits_reads_page_by_page_each_once_in_name_order() {
    let mut s = Sim::new();
    let names: Vec<String> = (0..2_500).map(|i| format!("l{i:05}")).collect();
    let defines: Vec<Command> = names
        .iter()
        .map(|n| limit("big", n).concurrent(1).into())
        .collect();
    s.entry(defines);
    s.define("other", "l00000", 1, 0.0);
    let mut read = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = s.m.limits_page("big", "", after.as_deref(), 1_000);
        pages += 1;
        assert!(page.limits.len() <= 1_000);
        read.extend(page.limits.into_iter().map(|l| l.name));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
        assert!(pages < 10, "paging ends");
    }
    assert_eq!((pages, &read), (3, &names));
    // A page size above the bound is clamped to it; zero is one.
    assert_eq!(
        s.m.limits_page("big", "", None, u32::MAX).limits.len(),
        1_000
    );
    let one = s.m.limits_page("big", "", None, 0);
    assert_eq!((one.limits.len(), one.next.as_deref()), (1, Some("l00000")));
    // A prefix bounds the range; `after` past it, or before it, still answers inside it.
    let p = s.m.limits_page("big", "l0001", None, 1_000);
    assert_eq!(p.limits.len(), 10);
    assert_eq!(p.next, None);
    let p = s.m.limits_page("big", "l0001", Some("l00015"), 3);
    let got: Vec<_> = p.limits.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        (got, p.next.as_deref()),
        (vec!["l00016", "l00017", "l00018"], Some("l00018"))
    );
    let p = s.m.limits_page("big", "l0001", Some("a"), 2);
    assert_eq!(p.limits[0].name, "l00010");
    assert!(
        s.m.limits_page("big", "l0001", Some("l2"), 2)
            .limits
            .is_empty()
    );
    assert!(s.m.limits_page("nobody", "", None, 10).limits.is_empty());
}
