//! G4: the same log gives byte-identical state on every machine, and a machine restored from
//! a snapshot at any index and fed the rest ends byte-equal to one that never snapshotted.

use proptest::prelude::*;
use weir_core::machine::{
    Acquire, Batch, Change, Command, HaltScope, Leadership, Machine, Priority, Settle,
};

fn name(prefix: &'static str, n: u8) -> String {
    format!("{prefix}{n}")
}

fn command() -> impl Strategy<Value = Command> {
    let tenant = (0..2u8).prop_map(|n| name("t", n));
    let limit = (0..3u8).prop_map(|n| name("l", n));
    let agent = prop::option::of((0..2u8).prop_map(|n| name("a", n)));
    let session = 1..8u64;
    prop_oneof![
        2 => (tenant.clone(), limit.clone(), 0..4u32, prop_oneof![Just(0.0), Just(2.5), Just(0.1)], prop::option::of(1..4u64))
            .prop_map(|(tenant, name, concurrent, per_second, burst)| Command::DefineLimit { tenant, name, concurrent, per_second, burst }),
        1 => (tenant.clone(), limit.clone()).prop_map(|(tenant, name)| Command::RemoveLimit { tenant, name }),
        2 => prop_oneof![Just(500u64), Just(2_000)].prop_map(|ttl_ms| Command::OpenSession { ttl_ms }),
        2 => session.clone().prop_map(|session| Command::KeepAlive { session }),
        1 => session.clone().prop_map(|session| Command::CloseSession { session }),
        8 => (session.clone(), 0..10u64, tenant.clone(), limit, 1..3u32, -1..2i32, (0..3u8).prop_map(|n| name("k", n)), 1..3u32, agent.clone(), prop::bool::weighted(0.8))
            .prop_map(|(session, ticket, tenant, limit, units, level, key, weight, agent, wait)| Command::Acquire(Acquire {
                session, ticket, tenant, limit, units,
                priority: Priority { level, fairness_key: key, fairness_weight: weight },
                agent, wait,
            })),
        5 => (session, 0..10u64).prop_map(|(session, ticket)| Command::Release { session, ticket }),
        1 => (tenant.clone(), prop_oneof![Just(Change::Keep), (0..3u32).prop_map(Change::Set), Just(Change::Clear)], prop_oneof![Just(Change::Keep), (0..50u64).prop_map(Change::Set)])
            .prop_map(|(tenant, max_running, budget_tokens)| Command::SetTenant { tenant, max_running, budget_tokens, budget_minor: Change::Keep }),
        2 => (tenant.clone(), (0..4u8).prop_map(|n| name("r", n)), agent.clone(), prop::option::of(Just("p".to_string())), prop::option::of(0..30u64), prop::option::of(0..90u64))
            .prop_map(|(tenant, run, agent, period, hold_tokens, hold_minor)| Command::Reserve { tenant, run, agent, period, hold_tokens, hold_minor }),
        1 => (tenant.clone(), (0..4u8).prop_map(|n| name("r", n))).prop_map(|(tenant, run)| Command::ReleaseRun { tenant, run }),
        2 => (tenant.clone(), (0..4u8).prop_map(|n| name("r", n)), 0..3u64, 0..20u64, any::<bool>())
            .prop_map(|(tenant, run, epoch, tokens, release_slot)| Command::Settle(Settle {
                tenant, run, epoch, period: Some("p".into()), tokens, minor_units: tokens * 3, release_slot,
            })),
        1 => (tenant.clone(), agent.clone()).prop_map(|(tenant, agent)| Command::SetHalt {
            tenant, scope: agent.map_or(HaltScope::Tenant, HaltScope::Agent), reason: "stop".into(),
        }),
        1 => (tenant, agent).prop_map(|(tenant, agent)| Command::ClearHalt {
            tenant, scope: agent.map_or(HaltScope::Tenant, HaltScope::Agent),
        }),
        1 => Just(Command::Tick),
    ]
}

/// A log: entries with time steps, occasional leader changes and skipped (blank) indexes.
fn log() -> impl Strategy<Value = Vec<(u64, Batch)>> {
    prop::collection::vec(
        (
            0..600u64,
            prop::bool::weighted(0.05),
            prop::bool::weighted(0.05),
            prop::collection::vec(command(), 0..6),
        ),
        1..80,
    )
    .prop_map(|steps| {
        let mut index = 0;
        let mut term = 1;
        let mut clock_ms = 5_000;
        let mut out = vec![];
        for (advance, new_leader, blank, commands) in steps {
            index += 1 + blank as u64;
            if new_leader {
                term += 1;
                // The new leader's clock is anywhere.
                clock_ms = clock_ms * 7 % 100_000;
            }
            clock_ms += advance;
            let leadership = Leadership {
                term,
                node: term % 3 + 1,
                incarnation: term / 2,
            };
            out.push((
                index,
                Batch {
                    leadership,
                    clock_ms,
                    wall_ms: 1_700_000_000_000 + clock_ms,
                    commands,
                },
            ));
        }
        out
    })
}

fn apply_all(m: &mut Machine, log: &[(u64, Batch)]) -> Vec<weir_core::machine::Applied> {
    log.iter()
        .map(|(index, batch)| m.apply(*index, batch))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn three_machines_fed_one_log_are_byte_identical(log in log()) {
        let mut machines = [Machine::new(), Machine::new(), Machine::new()];
        let outputs: Vec<_> = machines.iter_mut().map(|m| apply_all(m, &log)).collect();
        prop_assert_eq!(&outputs[0], &outputs[1]);
        prop_assert_eq!(&outputs[0], &outputs[2]);
        let bytes: Vec<Vec<u8>> = machines.iter().map(Machine::snapshot).collect();
        prop_assert_eq!(&bytes[0], &bytes[1]);
        prop_assert_eq!(&bytes[0], &bytes[2]);
        prop_assert_eq!(machines[0].digest(), machines[2].digest());
        machines[0].check().map_err(TestCaseError::fail)?;
    }

    #[test]
    fn a_restored_snapshot_fed_the_rest_ends_byte_equal(log in log(), cut in any::<prop::sample::Index>()) {
        let k = cut.index(log.len() + 1);
        let mut straight = Machine::new();
        let straight_out = apply_all(&mut straight, &log);
        let mut first = Machine::new();
        apply_all(&mut first, &log[..k]);
        let bytes = first.snapshot();
        let mut restored = Machine::restore(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // encode(decode(b)) == b
        prop_assert_eq!(restored.snapshot(), bytes);
        let rest_out = apply_all(&mut restored, &log[k..]);
        prop_assert_eq!(&rest_out[..], &straight_out[k..]);
        prop_assert_eq!(restored.snapshot(), straight.snapshot());
    }
}

#[test]
fn a_state_digest_changes_with_the_state() {
    let mut m = Machine::new();
    let empty = m.digest();
    let batch = Batch {
        leadership: Leadership {
            term: 1,
            node: 1,
            incarnation: 0,
        },
        clock_ms: 0,
        wall_ms: 0,
        commands: vec![Command::OpenSession { ttl_ms: 1_000 }],
    };
    m.apply(1, &batch);
    assert_ne!(m.digest(), empty);
    assert_eq!(m.digest().len(), 16);
    assert_eq!(weir_core::machine::digest_of(b""), "cbf29ce484222325");
}
