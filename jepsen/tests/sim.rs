//! The deterministic simulator end to end: seeds pass on three and five nodes, a seed
//! replays exactly (every op, every nemesis event, every node's final digest) and another
//! seed differs, and a planted bug in the simulator's own recording fails the checker that
//! exists to catch it.

use weir_jepsen::checker::Verdict;
use weir_jepsen::sim::run::{Config, Outcome, run_seed};

/// Short runs: a few faults each, so the test stays cheap on a debug build.
fn config(nodes: usize) -> Config {
    Config {
        nodes,
        workload_ms: 5_000,
        refusals_recorded_as_grants: false,
    }
}

fn verdict<'a>(outcome: &'a Outcome, checker: &str) -> &'a Verdict {
    &outcome
        .verdicts
        .iter()
        .find(|j| j.checker == checker)
        .unwrap_or_else(|| panic!("no {checker} verdict"))
        .verdict
}

fn holds(outcome: &Outcome) -> usize {
    outcome
        .trace
        .iter()
        .filter(|l| l.contains(r#""f":"hold""#))
        .count()
}

#[test]
fn seeds_pass_on_three_and_five_nodes_with_every_expected_checker_judging() {
    for (nodes, seed) in [(3, 1), (3, 2), (5, 3)] {
        let outcome = run_seed(seed, config(nodes));
        assert_eq!(
            outcome.failures(),
            Vec::<String>::new(),
            "seed {seed} on {nodes} nodes: {:?} {:?}",
            outcome.error,
            outcome.verdicts
        );
        for checker in ["P1 permits", "P2 fences", "told", "convergence"] {
            assert_eq!(verdict(&outcome, checker), &Verdict::Valid, "{checker}");
        }
        assert!(
            holds(&outcome) > 5,
            "seed {seed}: {} holds",
            holds(&outcome)
        );
        let finals = outcome.trace.iter().filter(|l| l.starts_with("final node"));
        assert_eq!(finals.count(), nodes);
    }
}

#[test]
fn a_seed_replays_exactly_and_another_seed_differs() {
    // In seeds 1 and 2 (at this workload's length) two branches of openraft's unbiased
    // `select!` are ready at once: they replay exactly only with tokio's draws seeded too
    // (`weir_server::sim::runtime`).
    for seed in [1, 2, 11] {
        let first = run_seed(seed, config(3));
        let again = run_seed(seed, config(3));
        assert!(first.trace.len() > 100, "{} trace lines", first.trace.len());
        if let Some(i) = (0..first.trace.len()).find(|i| first.trace.get(*i) != again.trace.get(*i))
        {
            panic!(
                "seed {seed} replayed differently at line {i}:\n{}\n{:?}",
                first.trace[i],
                again.trace.get(i)
            );
        }
        assert_eq!(first.trace.len(), again.trace.len());
        assert_eq!(first.sim_ns, again.sim_ns);
        if seed == 11 {
            let other = run_seed(12, config(3));
            assert_ne!(first.trace, other.trace);
        }
    }
}

#[test]
fn a_refused_acquire_recorded_as_granted_fails_the_permits_checker() {
    let mut planted = config(3);
    planted.refusals_recorded_as_grants = true;
    let outcome = run_seed(1, planted);
    assert!(
        matches!(verdict(&outcome, "P1 permits"), Verdict::Invalid(d) if d.contains("believed they held")),
        "{:?}",
        verdict(&outcome, "P1 permits")
    );
    assert!(outcome.failures().contains(&"P1 permits".to_string()));
}
