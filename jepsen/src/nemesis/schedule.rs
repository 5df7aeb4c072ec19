//! The schedule: a pure function of the cluster's size, the seed, the requested kinds and
//! the duration, drawn before the run (three nodes' faults by [`fault_of`], five nodes' by
//! [`fault_of_five`], from the same loop). It injects nothing and must never read the
//! cluster, a clock or any randomness but its seeded [`Rng`]: the same seed replays the
//! same schedule, and a seed's three-node schedule is pinned (the `pinned` tests).

use super::clock::WALL_SKEW_MS_MAX;
use super::fault::{ALL, COMPOUND, Fault, POWER_LOSS};
use crate::rng::Rng;

/// A step of the schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub quiet_ms: u64,
    pub fault: Fault,
    pub hold_ms: u64,
    /// A second fault of another kind, injected this many ms into the hold and healed with
    /// the first: composed, overlapping faults.
    pub also: Option<(u64, Fault)>,
}

/// Kinds that compose: each can overlap another without one undoing the other's injection
/// (a clock restart, a membership change or a client fault would).
const COMPOSABLE: [&str; 4] = ["partition", "kill", "pause", "delay"];

/// How long a compound kind's stall stops its node: past the harness's TTL (3 s).
const COMPOUND_STALL_MS: u64 = 5_000;

/// How long injecting `fault` itself takes, ms (a compound fault's sequence; others fire at
/// once): the schedule counts it with the step's hold.
fn injecting_ms(fault: &Fault) -> u64 {
    match *fault {
        Fault::StallThenKill { stall_ms, then_ms } => stall_ms + then_ms,
        // Before the second kill, an election: about a second and a half.
        Fault::KillThenKill { after_ms } => after_ms + 1_500,
        Fault::StallEntryThenKillLeader { stall_ms, .. } => stall_ms,
        _ => 0,
    }
}

/// One fault of `kind`; `client_ttl_ms` is the pausable client's session TTL.
fn fault_of(kind: &str, rng: &mut Rng, client_ttl_ms: u64) -> Option<Fault> {
    let node = rng.range(1, 3);
    let other = (node % 3) + 1;
    let reset = rng.range(0, 1) == 1;
    Some(match kind {
        "partition" => match rng.range(0, 4) {
            0 => Fault::IsolateNode { node, reset },
            1 => Fault::IsolateLeader { reset },
            2 => Fault::Bridge {
                middle: node,
                reset,
            },
            3 => Fault::Ring { reset },
            _ => Fault::OneWay {
                from: node,
                to: other,
            },
        },
        "kill" => match rng.range(0, 2) {
            0 => Fault::Kill(node),
            1 => Fault::KillLeader,
            _ => Fault::KillAll,
        },
        // Past the election timeout (450 ms) and the harness's session TTL (3 s).
        "pause" => Fault::PauseLeader {
            ms: rng.range(3_500, 5_000),
        },
        // Past the client's deadline (TTL less its margin) and the cluster's expiry: 1 to
        // 2.5 s past the TTL (4 to 5.5 s at the harness's 3 s).
        "client-pause" => Fault::PauseClient {
            ms: rng.range(client_ttl_ms + 1_000, client_ttl_ms + 2_500),
        },
        "delay" => match rng.range(0, 2) {
            0 => Fault::Delay {
                ms: rng.range(5, 40),
                jitter_ms: rng.range(0, 30),
            },
            1 => Fault::Loss {
                percent: rng.range(5, 30),
            },
            _ => Fault::Bandwidth {
                bytes_per_s: rng.range(32, 256) * 1_024,
            },
        },
        // Rates within ±5%: the client's margin (a tenth of the TTL) covers drift to ~11%.
        "clock" => {
            let mut one = || {
                let skew_ms = rng.range(0, 2 * WALL_SKEW_MS_MAX) as i64 - WALL_SKEW_MS_MAX as i64;
                (skew_ms, rng.range(950, 1_050))
            };
            Fault::Clocks(vec![one(), one(), one()])
        }
        "membership" => Fault::RemoveNode(node),
        "client-kill" => Fault::KillClient,
        "client-cut" => Fault::CutClientFromLeader,
        // Far past the client's margin (a tenth of its 3 s TTL). As long as the silence
        // bound at which the client leaves a connection (1 s), or longer: the front builds
        // the delay up, so the client never hears a silence that long.
        "client-delay" => Fault::DelayClient {
            ms: rng.range(1_000, 1_200),
        },
        POWER_LOSS => match rng.range(0, 2) {
            0 => Fault::PowerLoss(node),
            1 => Fault::PowerLossLeader,
            _ => Fault::PowerLossAll,
        },
        // The compound kinds are fixed sequences: their timing is the incident's own.
        "stall-then-kill" => Fault::StallThenKill {
            stall_ms: COMPOUND_STALL_MS,
            then_ms: 3_000,
        },
        "kill-then-kill" => Fault::KillThenKill { after_ms: 1_000 },
        "stall-entry-then-kill-leader" => Fault::StallEntryThenKillLeader {
            stall_ms: COMPOUND_STALL_MS,
            after_ms: 1_000,
        },
        _ => return None,
    })
}

/// One fault of `kind` on five nodes. The kinds that name nodes (partition, kill,
/// power-loss, clock, membership) draw among five and can take two at once; the others are
/// [`fault_of`]'s.
fn fault_of_five(kind: &str, rng: &mut Rng, client_ttl_ms: u64) -> Option<Fault> {
    const N: u64 = 5;
    let node = rng.range(1, N);
    // Another node than `node`, and an offset from the leader (resolved when fired).
    let second = (node - 1 + rng.range(1, N - 1)) % N + 1;
    let with = rng.range(1, N - 1);
    let reset = rng.range(0, 1) == 1;
    Some(match kind {
        "partition" => match rng.range(0, 7) {
            0 => Fault::IsolateNode { node, reset },
            1 => Fault::IsolateLeader { reset },
            2 => Fault::IsolateNodes {
                nodes: [node, second],
                reset,
            },
            3 => Fault::SplitLeader {
                with,
                three_way: false,
                reset,
            },
            4 => Fault::SplitLeader {
                with,
                three_way: true,
                reset,
            },
            5 => Fault::Bridge {
                middle: node,
                reset,
            },
            6 => Fault::Ring { reset },
            _ => Fault::OneWay {
                from: node,
                to: second,
            },
        },
        "kill" => match rng.range(0, 4) {
            0 => Fault::Kill(node),
            1 => Fault::KillLeader,
            2 => Fault::KillAll,
            3 => Fault::KillTwo([node, second]),
            _ => Fault::KillLeaderAnd { with },
        },
        POWER_LOSS => match rng.range(0, 4) {
            0 => Fault::PowerLoss(node),
            1 => Fault::PowerLossLeader,
            2 => Fault::PowerLossAll,
            3 => Fault::PowerLossTwo([node, second]),
            _ => Fault::PowerLossLeaderAnd { with },
        },
        "clock" => {
            let mut one = || {
                let skew_ms = rng.range(0, 2 * WALL_SKEW_MS_MAX) as i64 - WALL_SKEW_MS_MAX as i64;
                (skew_ms, rng.range(950, 1_050))
            };
            Fault::Clocks((0..N).map(|_| one()).collect())
        }
        "membership" => Fault::RemoveNode(node),
        other => return fault_of(other, rng, client_ttl_ms),
    })
}

/// The schedule for `kinds` over `duration_ms`, from `seed`. Kinds take turns, so every
/// requested kind fires when the run is long enough for one step each.
pub fn schedule(seed: u64, kinds: &[String], duration_ms: u64) -> Vec<Step> {
    schedule_for(
        seed,
        kinds,
        duration_ms,
        crate::workload::TTL.as_millis() as u64,
    )
}

/// [`schedule`] for a pausable client whose session TTL is `client_ttl_ms`
/// (`--fenced-ttl-ms`): its pauses last past that TTL. At the harness's TTL the two agree.
pub fn schedule_for(
    seed: u64,
    kinds: &[String],
    duration_ms: u64,
    client_ttl_ms: u64,
) -> Vec<Step> {
    schedule_on(3, seed, kinds, duration_ms, client_ttl_ms)
}

/// [`schedule_for`] on a cluster of `nodes` (3 or 5): three nodes' faults are
/// [`fault_of`]'s, five nodes' [`fault_of_five`]'s.
pub fn schedule_on(
    nodes: u64,
    seed: u64,
    kinds: &[String],
    duration_ms: u64,
    client_ttl_ms: u64,
) -> Vec<Step> {
    let fault_of = if nodes == 5 { fault_of_five } else { fault_of };
    let mut rng = Rng::new(seed);
    let implemented: Vec<&String> = kinds
        .iter()
        .filter(|k| ALL.contains(&k.as_str()) || COMPOUND.contains(&k.as_str()))
        .collect();
    let mut steps = vec![];
    let mut at = 0;
    // Leave the last seconds for the heal and the liveness probes.
    let budget = duration_ms.saturating_sub(4_000);
    let mut i = rng.range(0, 7) as usize;
    while !implemented.is_empty() {
        let quiet_ms = rng.range(1_500, 3_000);
        let hold_ms = rng.range(3_000, 6_000);
        if at + quiet_ms + hold_ms > budget {
            break;
        }
        let kind = implemented[i % implemented.len()];
        i += 1;
        let fault = fault_of(kind, &mut rng, client_ttl_ms).expect("implemented kinds have faults");
        let hold_ms = match fault {
            Fault::PauseLeader { ms } => ms,
            // The client acts when its pause ends; the heal waits for it.
            Fault::PauseClient { ms } => ms + 500,
            // Past the cut client's TTL (the cluster expires it, a waiter is granted).
            Fault::CutClientFromLeader | Fault::DelayClient { .. } => {
                crate::workload::TTL.as_millis() as u64 + 2_500
            }
            // After a compound fault's last step: past the TTL, so a permit it cost is seen
            // lost before the heal.
            Fault::StallThenKill { .. }
            | Fault::KillThenKill { .. }
            | Fault::StallEntryThenKillLeader { .. } => {
                crate::workload::TTL.as_millis() as u64 + 1_000
            }
            _ => hold_ms,
        };
        let busy_ms = injecting_ms(&fault);
        if busy_ms > 0 && at + quiet_ms + busy_ms + hold_ms > budget {
            break;
        }
        // One composable step in two gets a second fault of the next composable kind.
        let others: Vec<&&String> = implemented
            .iter()
            .filter(|k| COMPOSABLE.contains(&k.as_str()) && k.as_str() != kind.as_str())
            .collect();
        let also =
            (COMPOSABLE.contains(&kind.as_str()) && !others.is_empty() && rng.range(0, 1) == 0)
                .then(|| {
                    let other = others[i % others.len()];
                    let fault = fault_of(other, &mut rng, client_ttl_ms)
                        .expect("implemented kinds have faults");
                    (hold_ms / 2, fault)
                });
        steps.push(Step {
            quiet_ms,
            fault,
            hold_ms,
            also,
        });
        at += quiet_ms + busy_ms + hold_ms;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_replays_the_same_schedule_and_every_kind_takes_a_turn() {
        let kinds: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
        let a = schedule(7, &kinds, 120_000);
        assert_eq!(a, schedule(7, &kinds, 120_000));
        assert_ne!(a, schedule(8, &kinds, 120_000));
        for k in &kinds {
            assert!(a.iter().any(|s| s.fault.kind() == k), "{k} is scheduled");
        }
        let composed: Vec<&Step> = a.iter().filter(|s| s.also.is_some()).collect();
        assert!(!composed.is_empty(), "some faults overlap");
        for s in composed {
            let (after_ms, second) = s.also.as_ref().expect("composed");
            assert!(
                *after_ms < s.hold_ms,
                "the second fault comes inside the hold"
            );
            assert_ne!(second.kind(), s.fault.kind(), "of another kind");
            assert!(COMPOSABLE.contains(&second.kind()) && COMPOSABLE.contains(&s.fault.kind()));
        }
        let total: u64 = a.iter().map(|s| s.quiet_ms + s.hold_ms).sum();
        assert!(total <= 116_000);
    }

    #[test]
    fn client_pauses_outlast_the_pausable_clients_ttl_and_the_default_ttl_keeps_the_schedule() {
        let kinds = vec!["client-pause".to_string()];
        let pauses = |ttl_ms| -> Vec<u64> {
            schedule_for(3, &kinds, 120_000, ttl_ms)
                .iter()
                .map(|s| match s.fault {
                    Fault::PauseClient { ms } => ms,
                    ref f => panic!("a client pause, not {f:?}"),
                })
                .collect()
        };
        assert!(
            pauses(10_000)
                .iter()
                .all(|ms| (11_000..=12_500).contains(ms))
        );
        assert!(pauses(3_000).iter().all(|ms| (4_000..=5_500).contains(ms)));
        assert_eq!(
            schedule(3, &kinds, 120_000),
            schedule_for(3, &kinds, 120_000, 3_000)
        );
    }

    #[test]
    fn unknown_kinds_schedule_nothing_and_clock_rates_stay_within_the_drift_bound() {
        assert!(schedule(1, &["tsunami".to_string()], 60_000).is_empty());
        for step in schedule(5, &["clock".to_string()], 120_000) {
            let Fault::Clocks(clocks) = step.fault else {
                panic!("a clock fault")
            };
            assert!(clocks.iter().all(|(_, r)| (950..=1_050).contains(r)));
        }
    }
}

#[cfg(test)]
mod pinned {
    use super::*;

    /// FNV-1a, 64 bits: a digest that stays the same across Rust releases.
    fn fnv(text: &str) -> u64 {
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// Every schedule of seeds 0..64, for a few kind lists and durations, on `nodes`.
    fn schedules(nodes: u64) -> Vec<Vec<Step>> {
        let all: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
        let lists = [
            vec!["partition".to_string()],
            vec!["kill".to_string()],
            vec!["partition".into(), "kill".into(), "pause".into()],
            all,
        ];
        let mut out = vec![];
        for seed in 0..64 {
            for kinds in &lists {
                for duration in [30_000, 60_000, 120_000] {
                    out.push(schedule_on(nodes, seed, kinds, duration, 3_000));
                }
            }
        }
        out
    }

    /// CI's smokes and `planted.sh` name seeds: a three-node schedule must not move. The
    /// digest is of the schedules as drawn before five-node clusters existed.
    #[test]
    fn three_node_schedules_are_those_the_seeds_always_gave() {
        let text: String = schedules(3).iter().map(|s| format!("{s:?}\n")).collect();
        assert_eq!((fnv(&text), text.len()), (0x0cdf_553e_b3ce_451d, 611_599));
    }

    /// Whether `fault` takes two nodes (or a group of two) at once.
    fn takes_two(fault: &Fault) -> bool {
        matches!(
            fault,
            Fault::IsolateNodes { .. }
                | Fault::SplitLeader { .. }
                | Fault::KillTwo(_)
                | Fault::KillLeaderAnd { .. }
                | Fault::PowerLossTwo(_)
                | Fault::PowerLossLeaderAnd { .. }
        )
    }

    /// The nodes `fault` names, and the offsets from the leader it names.
    fn named(fault: &Fault) -> (Vec<u64>, Vec<u64>) {
        match fault {
            Fault::IsolateNode { node, .. }
            | Fault::Bridge { middle: node, .. }
            | Fault::Kill(node)
            | Fault::PowerLoss(node)
            | Fault::RemoveNode(node) => (vec![*node], vec![]),
            Fault::OneWay { from, to } => (vec![*from, *to], vec![]),
            Fault::IsolateNodes { nodes, .. }
            | Fault::KillTwo(nodes)
            | Fault::PowerLossTwo(nodes) => (nodes.to_vec(), vec![]),
            Fault::SplitLeader { with, .. }
            | Fault::KillLeaderAnd { with }
            | Fault::PowerLossLeaderAnd { with } => (vec![], vec![*with]),
            _ => (vec![], vec![]),
        }
    }

    #[test]
    fn five_node_schedules_replay_take_two_at_once_and_name_only_their_nodes() {
        let five = schedules(5);
        assert_eq!(
            five,
            schedules(5),
            "the same seed replays the same schedule"
        );
        assert_ne!(five, schedules(3));
        let faults: Vec<&Fault> = five
            .iter()
            .flatten()
            .flat_map(|s| std::iter::once(&s.fault).chain(s.also.iter().map(|(_, f)| f)))
            .collect();
        for f in &faults {
            let (nodes, offsets) = named(f);
            assert!(nodes.iter().all(|n| (1..=5).contains(n)), "{f:?}");
            assert!(offsets.iter().all(|o| (1..=4).contains(o)), "{f:?}");
            if let [a, b] = nodes[..] {
                assert_ne!(a, b, "two different nodes: {f:?}");
            }
            if let Fault::Clocks(clocks) = f {
                assert_eq!(clocks.len(), 5);
            }
        }
        for two in [
            |f: &Fault| matches!(f, Fault::IsolateNodes { .. }),
            |f: &Fault| {
                matches!(
                    f,
                    Fault::SplitLeader {
                        three_way: false,
                        ..
                    }
                )
            },
            |f: &Fault| {
                matches!(
                    f,
                    Fault::SplitLeader {
                        three_way: true,
                        ..
                    }
                )
            },
            |f: &Fault| matches!(f, Fault::KillTwo(_)),
            |f: &Fault| matches!(f, Fault::KillLeaderAnd { .. }),
            |f: &Fault| matches!(f, Fault::PowerLossTwo(_)),
            |f: &Fault| matches!(f, Fault::PowerLossLeaderAnd { .. }),
        ] {
            assert!(
                faults.iter().any(|f| two(f)),
                "every two-node fault is drawn"
            );
        }
        let three = schedules(3);
        assert!(
            !three.iter().flatten().any(|s| takes_two(&s.fault)),
            "three nodes never lose two"
        );
    }
}
