//! The nemesis's schedule, drawn from the seed before the run starts: which faults, when,
//! for how long, every node's and client's clock rate, and every node's wall-clock skew.
//!
//! Owns the choice of faults only; `nemesis` carries them out. Targets that depend on the
//! cluster's state (the leader) are named as roles here and resolved when the fault fires.
//!
//! Invariants:
//! - One seed gives one schedule (everything is drawn from one [`Rng`] in a fixed order;
//!   the wall-clock skews from a generator of their own, [`wall_skews`], seeded from the
//!   run's seed, so that adding them left every other draw of a seed as it was).
//! - Faults do not overlap: each is healed before the next begins, and the last heal comes
//!   before the workload stops.
//! - Clock rates stay within [`RATE_SKEW_MAX`] of 1, so any two clocks differ in rate by
//!   less than the client library's margin covers (TTL/10 covers a relative rate error up
//!   to 1/9, about 11%; two clocks 4% off either way differ by 8.4%).

use crate::rng::Rng;

/// How far a clock's rate may be from true: 4%, so two clocks skewed opposite ways stay
/// inside the margin (the module doc).
pub const RATE_SKEW_MAX: f64 = 0.04;

/// How far a node's wall clock may be off, either way, ms: an hour, as the harness's clock
/// nemesis skews its nodes. Wall time must decide nothing, so a skew far past any TTL shows
/// a decision taken on it (a wall-clock gap credited to the log clock at a leader change).
pub const WALL_SKEW_MS_MAX: u64 = 3_600_000;

/// Mixed into a run's seed to seed [`wall_skews`]'s generator.
const WALL_SKEW_STREAM: u64 = 0x5741_4c4c_534b_4557;

/// A fault, its targets named by role where they depend on the cluster's state.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Cut one node off from the rest (the leader when `leader`, else node `index` of the
    /// members).
    Isolate { leader: bool, index: usize },
    /// Split the members into a minority (the first `minority` after a rotation by
    /// `rotate`) and the majority.
    Split { rotate: usize, minority: usize },
    /// Crash a node (its disk losing unsynced writes; with `tear`, the first `tear` bytes
    /// of the oldest unsynced write survive), restarted on the same disk at the heal.
    Crash {
        leader: bool,
        index: usize,
        tear: Option<usize>,
    },
    /// Hold everything to and from a node until the heal.
    Stall { leader: bool, index: usize },
    /// Cut one client from the node that leads when the fault fires: the `client`th of those
    /// holding a permit then (the `client`th client if none does).
    CutClient { client: usize },
    /// Drop this share (per thousand) of every message.
    Drops { per_mille: u64 },
    /// The nodes' answers to every client late by `late_ms` (their requests on time) for
    /// `then_ms`, then answers on time again and one client's requests lost to every node
    /// (the answers already on their way still arrive): the `client`th of those holding a
    /// permit then (the `client`th client if none does), until the heal. A client that
    /// credits a keep-alive with its answer's arrival rather than its send believes past
    /// its lease by the lateness less its margin, which shows once the cut lets the lease
    /// lapse.
    SlowThenCut {
        client: usize,
        late_ms: u64,
        then_ms: u64,
    },
}

impl Fault {
    /// The fault's kind as the harness's nemesis names it in the history.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Isolate { .. } | Fault::Split { .. } => "partition",
            Fault::Crash { .. } => "power-loss",
            Fault::Stall { .. } => "pause",
            Fault::CutClient { .. } => "client-cut",
            Fault::Drops { .. } => "delay",
            Fault::SlowThenCut { .. } => "client-delay",
        }
    }

    /// How long carrying the fault out takes before it stands whole, ms: the slow phase
    /// before the cut; none for the others.
    pub fn onset_ms(&self) -> u64 {
        match self {
            Fault::SlowThenCut { then_ms, .. } => *then_ms,
            _ => 0,
        }
    }
}

/// One fault of the schedule: quiet, then the fault for `hold_ms`, then its heal.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub quiet_ms: u64,
    pub fault: Fault,
    pub hold_ms: u64,
}

/// A run's schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub steps: Vec<Step>,
    /// Each node's clock rate, in member order.
    pub node_rates: Vec<f64>,
    /// Each client's clock rate.
    pub client_rates: Vec<f64>,
    /// Each node's wall-clock skew, ms, in member order ([`wall_skews`]).
    pub node_wall_skews_ms: Vec<i64>,
}

/// A rate within [`RATE_SKEW_MAX`] of 1, in steps of 0.1%.
fn rate(rng: &mut Rng) -> f64 {
    let steps = (RATE_SKEW_MAX * 1_000.0) as u64;
    1.0 + (rng.range(0, 2 * steps) as f64 - steps as f64) / 1_000.0
}

/// Each of `nodes` nodes' wall-clock skew for the run of seed `seed`, ms: within
/// [`WALL_SKEW_MS_MAX`] either way, in whole seconds.
pub fn wall_skews(seed: u64, nodes: usize) -> Vec<i64> {
    let mut rng = Rng::new(seed ^ WALL_SKEW_STREAM);
    let max_s = WALL_SKEW_MS_MAX / 1_000;
    (0..nodes)
        .map(|_| (rng.range(0, 2 * max_s) as i64 - max_s as i64) * 1_000)
        .collect()
}

/// The schedule of run `seed` of `nodes` nodes and `clients` clients whose faults fit in
/// `workload_ms`, drawn from `rng` (the wall-clock skews from `seed`: [`wall_skews`]).
pub fn draw(seed: u64, rng: &mut Rng, nodes: usize, clients: usize, workload_ms: u64) -> Schedule {
    let node_rates = (0..nodes).map(|_| rate(rng)).collect();
    let client_rates = (0..clients).map(|_| rate(rng)).collect();
    let mut steps = vec![];
    let mut at_ms = 0;
    loop {
        let quiet_ms = rng.range(300, 2_000);
        let mut hold_ms = rng.range(300, 4_000);
        let leader = rng.range(0, 1) == 1;
        let index = rng.range(0, nodes as u64 - 1) as usize;
        let fault = match rng.range(0, 6) {
            0 => Fault::Isolate { leader, index },
            1 => Fault::Split {
                rotate: index,
                minority: (nodes - 1) / 2,
            },
            2 => Fault::Crash {
                leader,
                index,
                // A torn write one time in three, cut at a byte from the first few hundred.
                tear: (rng.range(0, 2) == 0).then(|| rng.range(0, 300) as usize),
            },
            3 => Fault::Stall { leader, index },
            4 => Fault::CutClient {
                client: rng.range(0, clients as u64 - 1) as usize,
            },
            5 => Fault::Drops {
                per_mille: rng.range(50, 400),
            },
            _ => {
                // The slow phase outlasts a keep-alive's wait and its late answer (0.6 s and
                // about as much), so a keep-alive is answered late before the cut; the cut
                // outlasts a TTL (3 s) and then some, so the lease lapses.
                let then_ms = rng.range(1_300, 2_000);
                hold_ms = then_ms + rng.range(3_300, 3_800);
                Fault::SlowThenCut {
                    client: rng.range(0, clients as u64 - 1) as usize,
                    late_ms: rng.range(400, 650),
                    then_ms,
                }
            }
        };
        if at_ms + quiet_ms + hold_ms > workload_ms {
            break;
        }
        at_ms += quiet_ms + hold_ms;
        steps.push(Step {
            quiet_ms,
            fault,
            hold_ms,
        });
    }
    Schedule {
        steps,
        node_rates,
        client_rates,
        node_wall_skews_ms: wall_skews(seed, nodes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_fits_its_run_keeps_rates_in_the_margin_and_replays() {
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let s = draw(seed, &mut Rng::new(seed), 5, 4, 20_000);
            assert_eq!(s, draw(seed, &mut Rng::new(seed), 5, 4, 20_000));
            let total: u64 = s.steps.iter().map(|s| s.quiet_ms + s.hold_ms).sum();
            assert!(total <= 20_000, "seed {seed}: {total} ms of faults");
            for r in s.node_rates.iter().chain(&s.client_rates) {
                assert!((r - 1.0).abs() <= RATE_SKEW_MAX + 1e-9, "rate {r}");
            }
            assert_eq!(s.node_wall_skews_ms.len(), 5);
            for w in &s.node_wall_skews_ms {
                assert!(w.unsigned_abs() <= WALL_SKEW_MS_MAX, "wall skew {w}");
            }
            kinds.extend(s.steps.iter().map(|s| s.fault.kind()));
        }
        assert_eq!(kinds.len(), 6, "every kind drawn: {kinds:?}");
        assert_ne!(
            draw(1, &mut Rng::new(1), 3, 4, 20_000),
            draw(2, &mut Rng::new(2), 3, 4, 20_000)
        );
        assert_ne!(wall_skews(1, 3), wall_skews(2, 3));
    }
}
