//! The deadline index (`machine::deadlines`): after any sequence of operations
//! the index the machine keeps agrees with a full scan of its state (`Machine::check`
//! compares them after every entry here), a `Tick` leaves nothing due behind it, and a
//! machine restored from a snapshot (index rebuilt) is equal to the one that kept it.

use proptest::prelude::*;
use weir_core::bounds::{FINISHED_TICKET_RETENTION_MS, RECEIPT_RETENTION_MS};
use weir_core::machine::{Change, Command, HaltScope, Machine, Reply, Settle};

use crate::sim::{Sim, ask, limit};

/// One step of the random walk.
#[derive(Clone, Debug)]
enum Op {
    Open {
        ttl_ms: u64,
    },
    KeepAlive {
        s: u64,
    },
    Close {
        s: u64,
    },
    Acquire {
        s: u64,
        ticket: u64,
        limit: usize,
        units: u32,
        wait: bool,
    },
    Release {
        s: u64,
        ticket: u64,
    },
    Settle {
        tenant: usize,
        run: u64,
        epoch: u64,
        tokens: u64,
    },
    Reserve {
        tenant: usize,
        run: u64,
    },
    ReleaseRun {
        tenant: usize,
        run: u64,
    },
    Halt {
        agent: bool,
    },
    ClearHalt {
        agent: bool,
    },
    Redefine {
        limit: usize,
        per_second: u32,
    },
    Tick,
}

/// Limits of tenant `t`: concurrency only, rate only, both. The rated ones refill slowly so
/// that queues wait on tokens for many entries.
const LIMITS: [&str; 3] = ["db", "api", "both"];
const TENANTS: [&str; 2] = ["acme", "zeta"];

fn op() -> impl Strategy<Value = Op> {
    let s = 1..8u64;
    prop_oneof![
        2 => (500..20_000u64).prop_map(|ttl_ms| Op::Open { ttl_ms }),
        2 => s.clone().prop_map(|s| Op::KeepAlive { s }),
        1 => s.clone().prop_map(|s| Op::Close { s }),
        8 => (s.clone(), 0..12u64, 0..3usize, 1..3u32, any::<bool>()).prop_map(
            |(s, ticket, limit, units, wait)| Op::Acquire { s, ticket, limit, units, wait }
        ),
        4 => (s.clone(), 0..12u64).prop_map(|(s, ticket)| Op::Release { s, ticket }),
        3 => (0..2usize, 0..4u64, 0..3u64, 0..50u64).prop_map(|(tenant, run, epoch, tokens)| {
            Op::Settle { tenant, run, epoch, tokens }
        }),
        1 => (0..2usize, 0..4u64).prop_map(|(tenant, run)| Op::Reserve { tenant, run }),
        1 => (0..2usize, 0..4u64).prop_map(|(tenant, run)| Op::ReleaseRun { tenant, run }),
        1 => any::<bool>().prop_map(|agent| Op::Halt { agent }),
        1 => any::<bool>().prop_map(|agent| Op::ClearHalt { agent }),
        1 => (1..3usize, 1..4u32).prop_map(|(limit, per_second)| Op::Redefine { limit, per_second }),
        2 => Just(Op::Tick),
    ]
}

/// How far the leader's clock moves before an entry: mostly a little, sometimes past a
/// finished ticket's retention, rarely past a receipt's (which also expires every session).
fn advance_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        10 => 0..1_500u64,
        2 => FINISHED_TICKET_RETENTION_MS - 1_000..FINISHED_TICKET_RETENTION_MS + 1_000,
        1 => RECEIPT_RETENTION_MS - 1..RECEIPT_RETENTION_MS + 2,
    ]
}

fn scope(agent: bool) -> HaltScope {
    if agent {
        HaltScope::Agent("bot".into())
    } else {
        HaltScope::Tenant
    }
}

fn command(op: &Op) -> Command {
    match *op {
        Op::Open { ttl_ms } => Command::OpenSession { ttl_ms },
        Op::KeepAlive { s } => Command::KeepAlive { session: s },
        Op::Close { s } => Command::CloseSession { session: s },
        Op::Acquire {
            s,
            ticket,
            limit,
            units,
            wait,
        } => {
            let a = ask(s, ticket, LIMITS[limit]).units(units).wait(wait);
            let a = if ticket % 2 == 0 { a.agent("bot") } else { a };
            a.into()
        }
        Op::Release { s, ticket } => Command::Release { session: s, ticket },
        Op::Settle {
            tenant,
            run,
            epoch,
            tokens,
        } => Command::Settle(Settle {
            tenant: TENANTS[tenant].into(),
            run: format!("r{run}"),
            epoch,
            period: Some("p".into()),
            tokens,
            minor_units: 0,
            release_slot: epoch == 2,
        }),
        Op::Reserve { tenant, run } => Command::Reserve {
            tenant: TENANTS[tenant].into(),
            run: format!("r{run}"),
            agent: None,
            period: Some("p".into()),
            hold_tokens: Some(10),
            hold_minor: None,
        },
        Op::ReleaseRun { tenant, run } => Command::ReleaseRun {
            tenant: TENANTS[tenant].into(),
            run: format!("r{run}"),
        },
        Op::Halt { agent } => Command::SetHalt {
            tenant: "t".into(),
            scope: scope(agent),
            reason: "drill".into(),
        },
        Op::ClearHalt { agent } => Command::ClearHalt {
            tenant: "t".into(),
            scope: scope(agent),
        },
        Op::Redefine { limit, per_second } => {
            let concurrent = if limit == 2 { 2 } else { 0 };
            let d = crate::sim::limit("t", LIMITS[limit])
                .concurrent(concurrent)
                .rate(per_second as f64 / 4.0)
                .burst(2);
            d.into()
        }
        Op::Tick => Command::Tick,
    }
}

fn start() -> Sim {
    let mut s = Sim::new();
    assert_eq!(s.reply(limit("t", "db").concurrent(2)), Reply::Done);
    assert_eq!(s.reply(limit("t", "api").rate(0.5).burst(2)), Reply::Done);
    assert_eq!(
        s.reply(limit("t", "both").concurrent(2).rate(0.25).burst(2)),
        Reply::Done
    );
    for name in TENANTS {
        let set = Command::SetTenant {
            tenant: name.into(),
            max_running: Change::Set(3),
            budget_tokens: Change::Set(1_000),
            budget_minor: Change::Keep,
        };
        assert_eq!(s.reply(set), Reply::Done);
    }
    s
}

proptest! {
    // 512 cases: at 96 a dropped refile (planted in `refuse_waiter`) went unseen; at 512 it
    // is found, in about 14 s of a debug build.
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random operations, in entries of a few commands after random clock steps: after
    /// every entry the kept index equals a full scan (the Sim checks the machine), an entry
    /// with a `Tick` leaves nothing due to prune, and a restored machine equals the live one.
    #[test]
    fn the_deadline_index_agrees_with_a_full_scan(
        entries in proptest::collection::vec(
            (advance_ms(), proptest::collection::vec(op(), 1..6)),
            1..60,
        )
    ) {
        let mut s = start();
        for (advance_ms, ops) in &entries {
            let commands: Vec<Command> = ops.iter().map(command).collect();
            let ticked = commands.contains(&Command::Tick);
            let applied = s.entry_after(*advance_ms, commands);
            if ticked {
                prop_assert!(
                    s.m.next_prune_ms().is_none_or(|at| at > applied.log_ms),
                    "a Tick at {} left {:?} due", applied.log_ms, s.m.next_prune_ms()
                );
            }
        }
        let restored = Machine::restore(&s.m.snapshot()).expect("valid snapshot");
        prop_assert!(restored == s.m, "a restored machine rebuilds the same indexes");
    }
}

#[test]
fn a_tick_prunes_what_is_due_and_nothing_before_it() {
    let mut s = start();
    let a = s.open(600_000);
    let settle = Command::Settle(Settle {
        tenant: "acme".into(),
        run: "r1".into(),
        epoch: 1,
        period: Some("p".into()),
        tokens: 5,
        minor_units: 0,
        release_slot: false,
    });
    // Log time, not the leader's stamps: the log clock counts only their differences.
    let settled_at = s
        .entry(vec![settle.clone(), ask(a, 1, "api").into()])
        .log_ms;
    // The rate take finished ticket 1 now; its retention is the first deadline.
    assert_eq!(
        s.m.next_prune_ms(),
        Some(settled_at + FINISHED_TICKET_RETENTION_MS)
    );
    s.wait(FINISHED_TICKET_RETENTION_MS - 1);
    s.reply(Command::KeepAlive { session: a });
    assert_eq!(
        s.m.next_prune_ms(),
        Some(settled_at + FINISHED_TICKET_RETENTION_MS),
        "one ms early: nothing pruned"
    );
    s.wait(1);
    assert_eq!(
        s.m.next_prune_ms(),
        Some(settled_at + RECEIPT_RETENTION_MS),
        "the ticket is pruned; the receipt is next"
    );
    // The ticket is forgotten (a retry is a new ticket); the receipt still answers.
    assert_eq!(s.reply(settle.clone()), Reply::Settled { duplicate: true });
}
