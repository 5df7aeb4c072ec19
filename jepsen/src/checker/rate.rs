//! G1 for rates: the tokens granted over any window never exceed `burst + per_second ×
//! window`, the window measured in log time.
//!
//! Judged conservatively on the harness clock: a take invoked at or after `a` and
//! acknowledged at or before `b` was granted inside a log window no longer than
//! `(b − a) × r`, where `r` is the fastest clock rate of the leaders that could have led
//! during `[a, b]` — per leadership, not per run: a leader's log clock runs at its own
//! node's rate (the clock nemesis skews it, `WEIR_TEST_CLOCK_RATE`), and a new leader
//! continues the log clock where the last one stopped, so a window's log time is at most its
//! real time at its leaders' fastest rate. Which nodes could lead: the one the status
//! monitor last saw leading before the window, and every one it saw leading within a second
//! of it (a leader is first seen up to one poll after it was elected). A leadership too
//! short for any poll to see (under ~0.4 s: a leader that grants answers status too) is the
//! caveat; at ±5% and these rates its excess is far below one token. A node's rate applies
//! from the clock fault's invoke to the next heal (which restarts it true).
//!
//! The log clock counts whole milliseconds (the proposer stamps each entry with its clock,
//! truncated to the millisecond), so two stamps taken inside `[a, b]` can be up to
//! `(b − a) + 1 ms` apart in log time: the bound allows the rate for one more millisecond
//! ([`LOG_TICK_S`]). Without it a run (seed 9217, netns) was flagged for 21 tokens of a
//! 5-burst, 20/s limit within 799.93 ms of real time, 0.0014 tokens over `5 + 20 × 0.79993`
//! and exactly what an 800 ms log window allows.

use std::collections::BTreeMap;

use super::ops::{oks, s, u};
use super::verdict::Verdict;
use crate::history::{Kind, NEMESIS, Op};

/// Per limit: rate, burst, and (invoked, acknowledged, units) of each take.
pub(crate) type Takes<'a> = BTreeMap<&'a str, (f64, u64, Vec<(u64, u64, u64)>)>;

/// Adds the acknowledged take `op` (its limit, rate, burst, invoke time and units; its
/// acknowledgement is the op's time) to `by_limit`; `Err` names a malformed op.
pub(crate) fn add_take<'a>(by_limit: &mut Takes<'a>, op: &'a Op) -> Result<(), String> {
    let (Some(limit), Some(invoke), Some(units), Some(rate), Some(burst)) = (
        s(op, "limit"),
        u(op, "invoke_ns"),
        u(op, "units"),
        op.value.get("per_second").and_then(|v| v.as_f64()),
        u(op, "burst"),
    ) else {
        return Err(format!("malformed {} op: {}", op.f, op.value));
    };
    by_limit
        .entry(limit)
        .or_insert((rate, burst, vec![]))
        .2
        .push((invoke, op.time_ns, units));
    Ok(())
}

/// How far from a window a leader sighting still counts (the monitor polls every 100 ms;
/// an election and its first sighting are well within this).
const SIGHTING_SLACK_NS: u64 = 1_000_000_000;

/// The log clock's granularity, seconds: a window of real time `w` spans at most `w` plus
/// this of log time (module doc).
const LOG_TICK_S: f64 = 0.001;

/// The nodes that could have led a window in which the monitor saw no leader, nor one before.
const EVERY_NODE: [u64; 3] = [1, 2, 3];

/// The clock rates the nemesis set, and the leaders the monitor saw.
pub(crate) struct Clocks {
    /// (from, to, rate of node 1, 2, 3), by `from`.
    spans: Vec<(u64, u64, Vec<f64>)>,
    /// (first seen, node), in time order.
    leaders: Vec<(u64, u64)>,
}

impl Clocks {
    pub(crate) fn of(ops: &[Op]) -> Clocks {
        let mut spans = vec![];
        let mut invoked = None;
        let mut open: Option<(u64, Vec<f64>)> = None;
        let mut leaders = vec![];
        for o in ops.iter().filter(|o| o.process == NEMESIS) {
            match (o.f.as_str(), o.kind) {
                ("clock", Kind::Invoke) => invoked = Some(o.time_ns),
                // Every node's rate for the whole run, from the harness's environment
                // (`WEIR_TEST_CLOCK_RATE`, which every node inherits): no heal ends it.
                ("clock", Kind::Info) if o.value["fault"] == "env-clocks" => {
                    spans.push((0, u64::MAX, node_rates(o)));
                    invoked = None;
                }
                ("clock", Kind::Info) => {
                    open = Some((invoked.take().unwrap_or(o.time_ns), node_rates(o)));
                }
                ("heal", Kind::Info) => {
                    if let Some((from, rates)) = open.take() {
                        spans.push((from, o.time_ns, rates));
                    }
                }
                ("leader", Kind::Info) => {
                    if let Some(n) = o.value["node"].as_u64() {
                        leaders.push((o.time_ns, n));
                    }
                }
                _ => {}
            }
        }
        if let Some((from, rates)) = open {
            spans.push((from, u64::MAX, rates));
        }
        leaders.sort_by_key(|(t, _)| *t);
        spans.sort_by_key(|(from, _, _)| *from);
        Clocks { spans, leaders }
    }

    /// The fastest rate of a node that could have led during `[a, b]` (1 when none was
    /// skewed): the definition [`Reach`] keeps incrementally.
    #[cfg(test)]
    fn factor(&self, a: u64, b: u64) -> f64 {
        let (lo, hi) = (
            a.saturating_sub(SIGHTING_SLACK_NS),
            b.saturating_add(SIGHTING_SLACK_NS),
        );
        let before = self
            .leaders
            .iter()
            .rev()
            .find(|(t, _)| *t < lo)
            .map(|(_, n)| *n);
        let mut nodes: Vec<u64> = self
            .leaders
            .iter()
            .filter(|(t, _)| (lo..=hi).contains(t))
            .map(|(_, n)| *n)
            .chain(before)
            .collect();
        if nodes.is_empty() {
            nodes = EVERY_NODE.to_vec();
        }
        self.spans
            .iter()
            .filter(|(from, to, _)| *from <= b && a <= *to)
            .flat_map(|(_, _, rates)| {
                nodes
                    .iter()
                    .filter_map(|n| rates.get(*n as usize - 1).copied())
            })
            .fold(1.0, f64::max)
    }
}

/// The per-node clock rates a `clock` fault's completion records (1 where one is missing).
fn node_rates(op: &Op) -> Vec<f64> {
    op.value["nodes"]
        .as_array()
        .map(|n| {
            n.iter()
                .map(|n| n["rate"].as_f64().unwrap_or(1.0))
                .collect()
        })
        .unwrap_or_default()
}

pub fn check(ops: &[Op]) -> Verdict {
    let clocks = Clocks::of(ops);
    let mut by_limit: Takes = BTreeMap::new();
    for op in oks(ops, "take") {
        if let Err(why) = add_take(&mut by_limit, op) {
            return Verdict::Unknown(why);
        }
    }
    if by_limit.is_empty() {
        return Verdict::Unknown("no rate take succeeded".into());
    }
    for (limit, (rate, burst, takes)) in by_limit {
        if let Some(why) = over_bound(limit, rate, burst, takes, &clocks) {
            return Verdict::Invalid(why);
        }
    }
    Verdict::Valid
}

/// The first window in which the `takes` (invoked, acknowledged, units) of `limit`, a
/// bucket of `rate` a second and `burst`, were granted more tokens than `burst + rate ×
/// window × r` (module doc), as the violation's text; `None` when every window fits.
///
/// Every window `[a, b]` with `a` an invoke and `b` an acknowledgement is tried: for each
/// start, one pass over the takes in acknowledgement order adds those invoked at or after
/// it, and [`Reach`] keeps `r` as `b` advances. Quadratic in one limit's takes, which its
/// own rate bounds (a 600 s run of a 20/s limit grants about 12,000).
pub(crate) fn over_bound(
    limit: &str,
    rate: f64,
    burst: u64,
    takes: Vec<(u64, u64, u64)>,
    clocks: &Clocks,
) -> Option<String> {
    scan(limit, rate, burst, takes, clocks, true)
}

/// [`over_bound`], naming the window furthest over the bound rather than the first found
/// (the same windows tried): what a violation amounts to, at its worst.
pub(crate) fn worst_over_bound(
    limit: &str,
    rate: f64,
    burst: u64,
    takes: Vec<(u64, u64, u64)>,
    clocks: &Clocks,
) -> Option<String> {
    scan(limit, rate, burst, takes, clocks, false)
}

/// The windows of [`over_bound`]: the first over the bound (`stop_at_first`), or the one furthest
/// over it.
fn scan(
    limit: &str,
    rate: f64,
    burst: u64,
    takes: Vec<(u64, u64, u64)>,
    clocks: &Clocks,
    stop_at_first: bool,
) -> Option<String> {
    let mut worst: Option<(f64, String)> = None;
    // (acknowledged, invoked, units), by acknowledgement.
    let mut by_ack: Vec<(u64, u64, u64)> = takes.iter().map(|t| (t.1, t.0, t.2)).collect();
    by_ack.sort_unstable();
    let mut starts: Vec<u64> = takes.iter().map(|t| t.0).collect();
    starts.sort_unstable();
    starts.dedup();
    for a in starts {
        // A take acknowledged before `a` was invoked before it too.
        let first = by_ack.partition_point(|t| t.0 < a);
        let mut reach = Reach::new(clocks, a);
        let mut sum = 0;
        for &(b, invoked, units) in &by_ack[first..] {
            if invoked < a {
                continue;
            }
            sum += units;
            let window_s = (b - a) as f64 / 1e9 + LOG_TICK_S;
            let bound = burst as f64 + rate * reach.factor_to(b) * window_s;
            let over = sum as f64 - bound;
            if over > 1e-9 && worst.as_ref().is_none_or(|(w, _)| over > *w) {
                let why = format!(
                    "{sum} tokens of {limit} granted within {:.3} s from {a} ns; the bound is {bound:.2}",
                    (b - a) as f64 / 1e9
                );
                if stop_at_first {
                    return Some(why);
                }
                worst = Some((over, why));
            }
        }
    }
    worst.map(|(_, why)| why)
}

/// [`Clocks::factor`] of the windows `[a, b]` of one start `a` as `b` grows: the leaders
/// sighted and the clock spans met are taken in once each, in time order, and the factor
/// is worked out again only when one of them adds a node or a span.
struct Reach<'c> {
    clocks: &'c Clocks,
    a: u64,
    /// Sightings taken in: `clocks.leaders[..seen]` (those before the window's slack were
    /// all passed at the start, the last of them kept in `nodes`).
    seen: usize,
    /// Spans taken in: `clocks.spans[..met]`.
    met: usize,
    /// The nodes that could have led, in the order first seen.
    nodes: Vec<u64>,
    /// The spans taken in that reach `a`.
    spans: Vec<usize>,
    factor: f64,
    stale: bool,
}

impl<'c> Reach<'c> {
    fn new(clocks: &'c Clocks, a: u64) -> Reach<'c> {
        let lo = a.saturating_sub(SIGHTING_SLACK_NS);
        let seen = clocks.leaders.partition_point(|(t, _)| *t < lo);
        let nodes = seen
            .checked_sub(1)
            .map(|i| clocks.leaders[i].1)
            .into_iter()
            .collect();
        Reach {
            clocks,
            a,
            seen,
            met: 0,
            nodes,
            spans: vec![],
            factor: 1.0,
            stale: true,
        }
    }

    /// The factor of `[a, b]`; `b` never smaller than at the call before.
    fn factor_to(&mut self, b: u64) -> f64 {
        let c = self.clocks;
        let hi = b.saturating_add(SIGHTING_SLACK_NS);
        while let Some(&(t, node)) = c.leaders.get(self.seen) {
            if t > hi {
                break;
            }
            if !self.nodes.contains(&node) {
                self.nodes.push(node);
                self.stale = true;
            }
            self.seen += 1;
        }
        while let Some(&(from, to, _)) = c.spans.get(self.met) {
            if from > b {
                break;
            }
            if to >= self.a {
                self.spans.push(self.met);
                self.stale = true;
            }
            self.met += 1;
        }
        if self.stale {
            let nodes = if self.nodes.is_empty() {
                &EVERY_NODE[..]
            } else {
                &self.nodes[..]
            };
            self.factor = self
                .spans
                .iter()
                .flat_map(|i| {
                    let rates = &c.spans[*i].2;
                    nodes
                        .iter()
                        .filter_map(|n| rates.get(*n as usize - 1).copied())
                })
                .fold(1.0, f64::max);
            self.stale = false;
        }
        self.factor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{fact, op};
    use crate::history::Kind;
    use serde_json::json;

    fn take(invoke_ms: u64, ok_ms: u64) -> Op {
        op(
            1,
            Kind::Ok,
            "take",
            json!({"limit": "r", "invoke_ns": invoke_ms * 1_000_000, "units": 1, "per_second": 10.0, "burst": 2}),
            ok_ms * 1_000_000,
        )
    }

    /// A take of `units` of a 5-burst, 20/s limit, invoked and acknowledged at these µs.
    fn take20(invoke_us: u64, ok_us: u64, units: u64) -> Op {
        op(
            1,
            Kind::Ok,
            "take",
            json!({"limit": "rate", "invoke_ns": invoke_us * 1_000, "units": units, "per_second": 20.0, "burst": 5}),
            ok_us * 1_000,
        )
    }

    #[test]
    fn a_window_a_log_millisecond_longer_than_real_time_is_within_the_bound() {
        // Run 9217's window: 21 tokens acknowledged 799.93 ms after the first was invoked,
        // what an 800 ms log window allows (5 + 20 x 0.8), 0.0014 over the real-time bound.
        let mut h = vec![take20(0, 1_530, 5)];
        h.extend((1..=16).map(|i| take20(i * 49_000, 799_930, 1)));
        assert_eq!(check(&h), Verdict::Valid);
        // One token more is past even the longer window.
        h.push(take20(700_000, 799_930, 1));
        let Verdict::Invalid(why) = check(&h) else {
            panic!("22 tokens within 0.8 s of a 5 + 20/s limit passed");
        };
        assert!(
            why.starts_with("22 tokens of rate granted within 0.800 s"),
            "{why}"
        );
    }

    #[test]
    fn a_burst_then_the_rate_is_valid() {
        assert_eq!(
            check(&[take(0, 1), take(0, 2), take(100, 101), take(200, 201)]),
            Verdict::Valid
        );
    }

    #[test]
    fn a_fast_leader_clock_refills_faster_in_real_time() {
        // Two at once, then one every 96 ms: 12 tokens in 961 ms is more than 2 + 10/s
        // allows (11.6), and within what a leader clock 5% fast refills (12.09).
        let mut h = vec![take(0, 1), take(0, 1)];
        h.extend((1..=10).map(|i| take(i * 96, i * 96 + 1)));
        assert!(matches!(check(&h), Verdict::Invalid(_)));
        h.push(fact("clock", json!({"nodes": [{"rate": 1.05}]}), 0));
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn a_clock_rate_from_the_environment_holds_for_the_whole_run() {
        let env = fact(
            "clock",
            json!({"fault": "env-clocks", "nodes": [{"rate": 1.08}, {"rate": 1.08}, {"rate": 1.08}]}),
            0,
        );
        let heal = fact("heal", json!({}), 1_000);
        let clocks = Clocks::of(&[env, heal]);
        assert_eq!(clocks.factor(5_000_000_000, 6_000_000_000), 1.08);
    }

    #[test]
    fn a_fast_clock_counts_only_while_its_node_leads() {
        // The same takes as above, 5% over the true-clock bound; node 2 ran 5% fast, but
        // the monitor saw node 1 leading throughout: node 2's rate does not count.
        let mut h = vec![
            op(NEMESIS, Kind::Invoke, "clock", json!({}), 0),
            fact(
                "clock",
                json!({"nodes": [{"rate": 1.0}, {"rate": 1.05}, {"rate": 1.0}]}),
                0,
            ),
            fact("leader", json!({"node": 1, "term": 4}), 0),
            take(0, 1),
            take(0, 1),
        ];
        h.extend((1..=10).map(|i| take(i * 96, i * 96 + 1)));
        assert!(matches!(check(&h), Verdict::Invalid(_)));
        // Node 2 seen leading in the window: its rate counts.
        h.push(fact("leader", json!({"node": 2, "term": 5}), 500_000_000));
        assert_eq!(check(&h), Verdict::Valid);
    }

    #[test]
    fn more_than_the_burst_at_once_is_invalid() {
        assert!(matches!(
            check(&[take(0, 1), take(0, 1), take(0, 2)]),
            Verdict::Invalid(_)
        ));
    }

    /// Every window by the definition: each start, each end, the factor worked out anew.
    fn over_bound_by_definition(
        rate: f64,
        burst: u64,
        takes: &[(u64, u64, u64)],
        clocks: &Clocks,
    ) -> bool {
        takes.iter().any(|&(a, _, _)| {
            let mut inside: Vec<(u64, u64)> = takes
                .iter()
                .filter(|t| t.0 >= a)
                .map(|t| (t.1, t.2))
                .collect();
            inside.sort_unstable();
            let mut sum = 0;
            inside.into_iter().any(|(b, units)| {
                sum += units;
                let window_s = (b - a) as f64 / 1e9 + LOG_TICK_S;
                sum as f64 > burst as f64 + rate * clocks.factor(a, b) * window_s + 1e-9
            })
        })
    }

    /// Random clock faults and leader sightings over 0..span_ms.
    fn random_clocks(rng: &mut crate::rng::Rng, span_ms: u64) -> Vec<Op> {
        let ms = 1_000_000;
        let mut h = vec![];
        for _ in 0..rng.range(0, 4) {
            let from = rng.range(0, span_ms) * ms;
            let rates: Vec<_> = (0..3)
                .map(|_| json!({"rate": 1.0 + rng.range(0, 20) as f64 / 100.0}))
                .collect();
            h.push(op(NEMESIS, Kind::Invoke, "clock", json!({}), from));
            h.push(fact("clock", json!({ "nodes": rates }), from));
            if rng.range(0, 2) == 0 {
                h.push(fact("heal", json!({}), from + rng.range(0, span_ms) * ms));
            }
        }
        for _ in 0..rng.range(0, 6) {
            let at = rng.range(0, span_ms) * ms;
            h.push(fact("leader", json!({"node": rng.range(1, 4)}), at));
        }
        h.sort_by_key(|o| o.time_ns);
        h
    }

    #[test]
    fn the_incremental_factor_is_the_factor_by_definition() {
        let mut rng = crate::rng::Rng::new(41);
        for _ in 0..300 {
            let clocks = Clocks::of(&random_clocks(&mut rng, 5_000));
            let a = rng.range(0, 5_000) * 1_000_000;
            let mut reach = Reach::new(&clocks, a);
            let mut b = a;
            for _ in 0..20 {
                b += rng.range(0, 600) * 1_000_000;
                assert_eq!(reach.factor_to(b), clocks.factor(a, b), "[{a}, {b}]");
            }
        }
    }

    #[test]
    fn every_window_is_judged_as_by_the_definition() {
        let mut rng = crate::rng::Rng::new(7);
        let (mut flagged, mut passed) = (0, 0);
        for _ in 0..400 {
            let clocks = Clocks::of(&random_clocks(&mut rng, 3_000));
            // Takes of a 5-burst 10/s bucket at about the rate, sometimes faster.
            let mut takes = vec![];
            let mut at = 0;
            let gap = rng.range(80, 240);
            for _ in 0..rng.range(1, 40) {
                at += rng.range(0, 2 * gap) * 1_000_000;
                let ack = at + rng.range(0, 50) * 1_000_000;
                takes.push((at, ack, rng.range(1, 3)));
            }
            let expected = over_bound_by_definition(10.0, 5, &takes, &clocks);
            let found = over_bound("r", 10.0, 5, takes.clone(), &clocks);
            assert_eq!(found.is_some(), expected, "{takes:?}: {found:?}");
            if expected {
                flagged += 1;
            } else {
                passed += 1;
            }
        }
        // Both answers were met often enough to mean something.
        assert!(
            flagged > 50 && passed > 50,
            "{flagged} flagged, {passed} passed"
        );
    }
}
