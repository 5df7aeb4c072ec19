//! The machine-wide bounds of `weir_core::bounds` (every container of the state is bounded):
//! each refuses `AtCapacity` at its bound, naming it, while the per-session and per-tenant
//! bounds are still far away.

use weir_core::bounds::{
    FINISHED_REFUSALS_MAX, FINISHED_TICKETS_MAX, HALTS_MAX, KEYS_LIVE_MAX, PERIODS_MAX,
    RECEIPTS_MAX, RUNS_MAX, SESSION_FINISHED_TICKETS_MAX,
};
use weir_core::machine::{Command, HaltScope, Machine, Refusal, Reply, Settle};

use crate::sim::{Sim, ask, limit, refused};

fn full(what: &str, limit: usize) -> Reply {
    refused(Refusal::AtCapacity {
        what: what.into(),
        limit: limit as u64,
    })
}

/// `n` split into shares of at most `most`, in order: one per session, each under a
/// per-session bound.
fn shares(n: usize, most: usize) -> Vec<u64> {
    (0..n.div_ceil(most))
        .map(|i| most.min(n - i * most) as u64)
        .collect()
}

fn applied_in_entries(s: &mut Sim, commands: Vec<Command>) {
    s.entries(commands.chunks(4_096).map(<[Command]>::to_vec));
}

#[test]
fn finished_tickets_of_all_sessions_are_bounded() {
    let mut s = Sim::new();
    s.reply(
        limit("t", "api")
            .rate(1_000.0)
            .burst(2 * FINISHED_TICKETS_MAX as u64),
    );
    // Sessions of finished rate takes, each below the session bound, together reach the
    // machine's.
    let counts = shares(FINISHED_TICKETS_MAX, SESSION_FINISHED_TICKETS_MAX - 1);
    let sessions: Vec<_> = counts.iter().map(|_| s.open(600_000)).collect();
    let takes = sessions
        .iter()
        .zip(counts)
        .flat_map(|(&a, count)| (0..count).map(move |t| ask(a, t, "api").into()))
        .collect();
    applied_in_entries(&mut s, takes);
    let b = s.open(600_000);
    let at_bound = full(
        "finished tickets of all sessions kept for retries",
        FINISHED_TICKETS_MAX,
    );
    assert_eq!(s.reply(ask(b, 0, "api")), at_bound);
    assert_eq!(
        s.release(b, 1).0,
        at_bound,
        "a release of an unknown ticket too"
    );
    // A retry of a kept ticket is still answered, and after the window there is room.
    assert!(matches!(
        s.reply(ask(sessions[0], 0, "api")),
        Reply::Granted { .. }
    ));
    s.wait(weir_core::bounds::FINISHED_TICKET_RETENTION_MS);
    for &a in &sessions {
        s.reply(Command::KeepAlive { session: a });
    }
    let b = s.open(600_000);
    assert!(matches!(s.reply(ask(b, 0, "api")), Reply::Granted { .. }));
}

/// Queues `n` waiters on `t/db` (already held full), from fresh sessions of at most
/// `SESSION_TICKETS_MAX` live tickets each, then halts `t`: every waiter is refused and kept
/// as a finished refusal. Lifts the halt after.
fn halted_waiters(s: &mut Sim, n: usize) {
    let counts = shares(n, weir_core::bounds::SESSION_TICKETS_MAX);
    let sessions: Vec<_> = counts.iter().map(|_| s.open(600_000)).collect();
    let asks = sessions
        .into_iter()
        .zip(counts)
        .flat_map(|(a, count)| (0..count).map(move |t| ask(a, t, "db").into()))
        .collect();
    applied_in_entries(s, asks);
    let halt = |reason: &str| Command::SetHalt {
        tenant: "t".into(),
        scope: HaltScope::Tenant,
        reason: reason.into(),
    };
    assert_eq!(s.reply(halt("stop")), Reply::Done);
    assert_eq!(
        s.reply(Command::ClearHalt {
            tenant: "t".into(),
            scope: HaltScope::Tenant,
        }),
        Reply::Done
    );
}

#[test]
fn finished_refusals_are_bounded_apart_from_small_finished_tickets() {
    let mut s = Sim::db(1);
    let holder = s.open(600_000);
    assert!(matches!(
        s.reply(ask(holder, 0, "db")),
        Reply::Granted { .. }
    ));
    // Rounds of halted waiters (a round is bounded by the limit's queue) make the machine
    // keep FINISHED_REFUSALS_MAX refusals, far below FINISHED_TICKETS_MAX.
    let round = weir_core::bounds::LIMIT_WAITERS_MAX;
    for start in (0..FINISHED_REFUSALS_MAX).step_by(round) {
        halted_waiters(&mut s, round.min(FINISHED_REFUSALS_MAX - start));
    }
    const _: () = assert!(FINISHED_REFUSALS_MAX < FINISHED_TICKETS_MAX);
    let b = s.open(600_000);
    assert_eq!(
        s.reply(ask(b, 0, "db")),
        full(
            "finished refusals of all sessions kept for retries",
            FINISHED_REFUSALS_MAX
        )
    );
    // A retry of a refused waiter still gets its refusal.
    let Reply::Refused(Refusal::Halted { reason, .. }) = s.reply(ask(holder + 1, 0, "db")) else {
        panic!("a kept refusal is answered again");
    };
    assert_eq!(reason, "stop");
    // Once they age out there is room again.
    s.wait(weir_core::bounds::FINISHED_TICKET_RETENTION_MS);
    s.reply(Command::KeepAlive { session: holder });
    let b = s.open(600_000);
    assert_eq!(s.reply(ask(b, 0, "db")), crate::sim::queued(0));
}

fn tenant(i: usize) -> String {
    format!("t{i}")
}

fn reserve(tenant: String, run: String, period: Option<String>, hold: bool) -> Command {
    Command::Reserve {
        tenant,
        run,
        agent: None,
        period,
        hold_tokens: hold.then_some(1),
        hold_minor: None,
    }
}

/// A machine with `each` items in each of `tenants` tenants, item `i` of tenant `t` made by
/// the commands `item(tenant(t), i)`.
fn filled_across_tenants<I: IntoIterator<Item = Command>>(
    tenants: usize,
    each: usize,
    item: impl Fn(String, usize) -> I,
) -> Sim {
    let mut s = Sim::new();
    let commands = (0..tenants)
        .flat_map(|t| {
            (0..each)
                .flat_map(|i| item(tenant(t), i))
                .collect::<Vec<_>>()
        })
        .collect();
    applied_in_entries(&mut s, commands);
    s
}

#[test]
fn runs_of_all_tenants_are_bounded() {
    // 10,000 in each of ten tenants.
    let mut s = filled_across_tenants(10, RUNS_MAX / 10, |t, r| {
        [reserve(t, format!("r{r}"), None, false)]
    });
    assert_eq!(
        s.reply(reserve(tenant(10), "r".into(), None, false)),
        full("running runs of all tenants", RUNS_MAX)
    );
}

#[test]
fn receipts_of_all_tenants_are_bounded() {
    // Settles with new keys, across two tenants (each below its own eviction).
    let settle = |t: String, epoch: usize| {
        Command::Settle(Settle {
            tenant: t,
            run: "s".into(),
            epoch: epoch as u64,
            period: None,
            tokens: 1,
            minor_units: 0,
            release_slot: false,
        })
    };
    let mut s = filled_across_tenants(2, RECEIPTS_MAX / 2, |t, e| [settle(t, e)]);
    assert_eq!(
        s.reply(settle(tenant(2), 0)),
        full("settlement receipts of all tenants", RECEIPTS_MAX)
    );
}

#[test]
fn periods_of_all_tenants_are_bounded() {
    // A thousand in each of a hundred tenants, each named by a held reserve whose run is
    // released at once (the period stays: spend is never pruned).
    let mut s = filled_across_tenants(100, PERIODS_MAX / 100, |t, p| {
        [
            reserve(t.clone(), format!("h{p}"), Some(format!("p{p}")), true),
            Command::ReleaseRun {
                tenant: t,
                run: format!("h{p}"),
            },
        ]
    });
    assert_eq!(
        s.reply(reserve(tenant(300), "h".into(), Some("p".into()), true)),
        full("periods of all tenants", PERIODS_MAX)
    );
}

#[test]
fn halts_of_all_tenants_are_bounded() {
    // A hundred agents in each of a hundred tenants.
    let mut s = filled_across_tenants(100, HALTS_MAX / 100, |t, a| {
        [Command::SetHalt {
            tenant: t,
            scope: HaltScope::Agent(format!("a{a}")),
            reason: "stop".into(),
        }]
    });
    assert_eq!(
        s.reply(Command::SetHalt {
            tenant: tenant(0),
            scope: HaltScope::Tenant,
            reason: "stop".into(),
        }),
        full("halts of all tenants", HALTS_MAX)
    );
    assert_eq!(
        s.reply(Command::SetHalt {
            tenant: tenant(0),
            scope: HaltScope::Agent("a0".into()),
            reason: "still".into(),
        }),
        Reply::Done,
        "a halt already kept may be set again"
    );
}

#[test]
fn live_keys_of_all_keyed_limits_are_bounded_apart_from_definitions() {
    // The machine's bound lowered to what a test takes in seconds; the rule is the same.
    let live_max = 50_000;
    assert!(live_max < KEYS_LIVE_MAX);
    let mut s = Sim::new();
    s.m = Machine::with_keys_live_max(live_max);
    // Two keyed buckets whose own bounds together pass the machine's: keys taken from
    // stay live (one token in 1,000 s).
    let each = (live_max / 2 + 1) as u32;
    for name in ["a", "b"] {
        let def = limit("t", name).rate(0.001).burst(1).keyed().keys_max(each);
        assert_eq!(s.reply(def), Reply::Done);
    }
    let key = |limit: &'static str, session: u64, k: u64| {
        ask(session, k, limit).key(&format!("{limit}-{k}")).into()
    };
    let a_keys = each as usize;
    let b_keys = live_max - a_keys;
    let mut takes: Vec<Command> = Vec::new();
    for (limit, n) in [("a", a_keys), ("b", b_keys)] {
        let mut first = 0;
        for count in shares(n, SESSION_FINISHED_TICKETS_MAX - 1) {
            let session = s.open(600_000);
            takes.extend((first..first + count).map(|k| key(limit, session, k)));
            first += count;
        }
    }
    applied_in_entries(&mut s, takes);
    assert_eq!(s.m.limit_status("t", "b").unwrap().live_keys, b_keys as u64);
    let c = s.open(600_000);
    assert_eq!(
        s.reply(ask(c, 1, "b").key("one-more")),
        full("live keys", live_max),
        "b is below its own keys_max, the machine is at its bound"
    );
    // A key that lives takes no new room; definitions are counted apart.
    assert!(matches!(
        s.reply(ask(c, 2, "b").key("b-0").wait(false)),
        Reply::Refused(Refusal::Busy { .. })
    ));
    assert_eq!(s.reply(limit("t", "c").rate(1.0)), Reply::Done);
}
