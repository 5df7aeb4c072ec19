//! Linearizability of each capped limit as one fenced semaphore, checked with the
//! Wing–Gong algorithm (J. M. Wing and C. Gong, "Testing and verifying concurrent objects",
//! JPDC 17, 1993) in the form of G. Lowe, "Testing for linearizability" (CCPE 29, 2017):
//! just-in-time linearization over a doubly linked list of call and return events, with a
//! cache of (linearized set, model state) configurations already explored, and
//! P-compositionality (Herlihy and Wing: a history is linearizable iff each object's
//! sub-history is) so each limit is searched alone.
//!
//! The model, per limit of capacity `c`: `held`, the set of fences held, and `max`, the
//! largest fence granted so far.
//! - `acquire → fence f`: allowed when `f > max` (fences grow in log order) and
//!   `|held| < c`; then `f` is held and `max = f`;
//! - `end f`: the permit's lease ended (its release was applied, or its session expired):
//!   `f` is no longer held. Its call is the moment the holder's belief ended (the release was
//!   sent, or its conservative deadline passed: before then neither can apply, G2) and its
//!   return the release's acknowledgement — never, when the release's outcome is unknown;
//! - `validate f → held?`: the answer must be whether `f` is held.
//!
//! Acquires whose outcome is unknown are left out (a grant nobody saw can only make the
//! others' answers harder to explain, never easier, so leaving it out cannot produce a false
//! alarm); an op that never returned may be linearized anywhere after its call or not at
//! all. The search is bounded by [`MAX_STEPS`] per limit: past it the verdict is unknown,
//! never a pass.

use std::collections::{BTreeMap, HashSet};

use super::ops::{hold_end, oks, s, u};
use super::verdict::Verdict;
use crate::history::Op;
use crate::rng::Rng;

/// Search steps per limit before giving up with "unknown". Each step tries one op; a
/// history of tens of thousands of ops with a few concurrent ones takes a small multiple of
/// its length.
pub const MAX_STEPS: u64 = 5_000_000;

/// A never-returning op's return time.
const NEVER: u64 = u64::MAX;

/// One operation of the fenced-semaphore model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Acquire { fence: u64 },
    End { fence: u64 },
    Validate { fence: u64, held: bool },
}

/// One op of a limit's sub-history: what, and its real-time interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub call: Call,
    pub invoke_ns: u64,
    /// `u64::MAX` when it never returned.
    pub return_ns: u64,
}

/// The model's state. `held` is sorted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct State {
    held: Vec<u64>,
    max: u64,
}

impl State {
    fn step(&self, call: Call, cap: usize) -> Option<State> {
        match call {
            Call::Acquire { fence } => {
                if fence <= self.max || self.held.len() >= cap {
                    return None;
                }
                let mut next = self.clone();
                next.held.push(fence);
                next.held.sort_unstable();
                next.max = fence;
                Some(next)
            }
            Call::End { fence } => {
                // A lease ends only after its grant.
                if fence > self.max {
                    return None;
                }
                let mut next = self.clone();
                next.held.retain(|f| *f != fence);
                Some(next)
            }
            Call::Validate { fence, held } => {
                (self.held.binary_search(&fence).is_ok() == held).then(|| self.clone())
            }
        }
    }
}

/// How the search ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Linearizable,
    /// Not linearizable; the op at which the last search path failed.
    Not(Entry),
    /// The step bound was reached.
    GaveUp,
}

/// A node of the event list: an op's call or return.
#[derive(Clone, Copy)]
struct Event {
    op: usize,
    call: bool,
    prev: usize,
    next: usize,
    /// For a call: its return's node.
    partner: usize,
}

const HEAD: usize = 0;
const NIL: usize = usize::MAX;

/// Wing–Gong–Lowe search of one object's history under capacity `cap`.
pub fn search(entries: &[Entry], cap: usize, max_steps: u64) -> Outcome {
    // Events in time order; at equal times calls first (the ops then overlap, which
    // allows more orders, never fewer).
    let mut order: Vec<(u64, bool, usize)> = vec![];
    for (i, e) in entries.iter().enumerate() {
        order.push((e.invoke_ns, false, i));
        order.push((e.return_ns, true, i));
    }
    order.sort_unstable();
    let mut events = vec![Event {
        op: NIL,
        call: false,
        prev: NIL,
        next: NIL,
        partner: NIL,
    }];
    let mut call_node = vec![NIL; entries.len()];
    for (n, (_, is_return, op)) in order.iter().enumerate() {
        let node = n + 1;
        events.push(Event {
            op: *op,
            call: !is_return,
            prev: node - 1,
            next: if n + 1 < order.len() { node + 1 } else { NIL },
            partner: NIL,
        });
        if *is_return {
            events[call_node[*op]].partner = node;
        } else {
            call_node[*op] = node;
        }
    }
    events[HEAD].next = if order.is_empty() { NIL } else { 1 };
    // Zobrist keys: the linearized set's hash is the xor of its ops' keys.
    let mut rng = Rng::new(0x5eed_1993);
    let keys: Vec<u128> = (0..entries.len())
        .map(|_| (rng.next_u64() as u128) << 64 | rng.next_u64() as u128)
        .collect();
    let lift = |events: &mut Vec<Event>, node: usize| {
        for n in [node, events[node].partner] {
            let (p, x) = (events[n].prev, events[n].next);
            events[p].next = x;
            if x != NIL {
                events[x].prev = p;
            }
        }
    };
    let unlift = |events: &mut Vec<Event>, node: usize| {
        for n in [events[node].partner, node] {
            let (p, x) = (events[n].prev, events[n].next);
            events[p].next = n;
            if x != NIL {
                events[x].prev = n;
            }
        }
    };
    let mut state = State::default();
    let mut linearized: u128 = 0;
    let mut cache: HashSet<(u128, State)> = HashSet::new();
    let mut stack: Vec<(usize, State)> = vec![];
    let mut entry = events[HEAD].next;
    let mut steps = 0;
    let mut deepest = None;
    while entry != NIL {
        steps += 1;
        if steps > max_steps {
            return Outcome::GaveUp;
        }
        let e = events[entry];
        if e.call {
            if let Some(next) = state.step(entries[e.op].call, cap) {
                let lin = linearized ^ keys[e.op];
                if cache.insert((lin, next.clone())) {
                    stack.push((entry, std::mem::replace(&mut state, next)));
                    linearized = lin;
                    lift(&mut events, entry);
                    entry = events[HEAD].next;
                    continue;
                }
            }
            entry = e.next;
        } else {
            // Every op still listed that returns never can be left out: done.
            if entries[e.op].return_ns == NEVER {
                return Outcome::Linearizable;
            }
            // An op returned before it could be linearized: undo the last choice.
            if stack.len() >= deepest.map_or(0, |(d, _)| d) {
                deepest = Some((stack.len(), entries[e.op]));
            }
            let Some((node, previous)) = stack.pop() else {
                return Outcome::Not(deepest.map_or(entries[e.op], |(_, op)| op));
            };
            state = previous;
            linearized ^= keys[events[node].op];
            unlift(&mut events, node);
            entry = events[node].next;
        }
    }
    Outcome::Linearizable
}

/// The per-limit sub-histories: (capacity, entries).
pub fn sub_histories(ops: &[Op]) -> BTreeMap<String, (usize, Vec<Entry>)> {
    let mut caps: BTreeMap<&str, usize> = BTreeMap::new();
    // Belief ends by (limit, fence).
    let mut ends: BTreeMap<(&str, u64), u64> = BTreeMap::new();
    for h in oks(ops, "hold") {
        if let (Some(limit), Some(cap), Some(fence), Some(to)) =
            (s(h, "limit"), u(h, "cap"), u(h, "fence"), hold_end(h))
        {
            caps.insert(limit, cap as usize);
            ends.insert((limit, fence), to);
        }
    }
    // Acknowledged releases by (limit, fence).
    let mut released: BTreeMap<(&str, u64), u64> = BTreeMap::new();
    for r in oks(ops, "release") {
        if let (Some(limit), Some(fence)) = (s(r, "limit"), u(r, "fence")) {
            released.entry((limit, fence)).or_insert(r.time_ns);
        }
    }
    let mut out: BTreeMap<String, (usize, Vec<Entry>)> = BTreeMap::new();
    let mut seen: HashSet<(&str, u64)> = HashSet::new();
    for a in oks(ops, "acquire") {
        let (Some(limit), Some(fence), Some(invoke)) =
            (s(a, "limit"), u(a, "fence"), u(a, "invoke_ns"))
        else {
            continue;
        };
        let Some(cap) = caps.get(limit) else { continue };
        // A ticket asked again answers the same fence: one grant.
        if !seen.insert((limit, fence)) {
            continue;
        }
        let list = &mut out.entry(limit.to_string()).or_insert((*cap, vec![])).1;
        list.push(Entry {
            call: Call::Acquire { fence },
            invoke_ns: invoke,
            return_ns: a.time_ns,
        });
        // Without a recorded belief end, the lease may have ended any time after the grant.
        let end_from = ends.get(&(limit, fence)).copied().unwrap_or(a.time_ns);
        list.push(Entry {
            call: Call::End { fence },
            invoke_ns: end_from,
            return_ns: released
                .get(&(limit, fence))
                .copied()
                .unwrap_or(NEVER)
                .max(end_from),
        });
    }
    for v in oks(ops, "validate") {
        let (Some(fence), Some(invoke), Some(held)) = (
            u(v, "fence"),
            u(v, "invoke_ns"),
            v.value.get("held").and_then(|h| h.as_bool()),
        ) else {
            continue;
        };
        let limit = s(v, "limit").unwrap_or(crate::workload::FENCED);
        if let Some((_, list)) = out.get_mut(limit) {
            list.push(Entry {
                call: Call::Validate { fence, held },
                invoke_ns: invoke,
                return_ns: v.time_ns,
            });
        }
    }
    out
}

pub fn check(ops: &[Op]) -> Verdict {
    let subs = sub_histories(ops);
    if subs.is_empty() {
        return Verdict::Unknown("no permit on a capped limit to judge".into());
    }
    let mut gave_up = vec![];
    for (limit, (cap, entries)) in &subs {
        match search(entries, *cap, MAX_STEPS) {
            Outcome::Linearizable => {}
            Outcome::Not(at) => {
                return Verdict::Invalid(format!(
                    "{limit:?} (concurrent {cap}) is not linearizable as a fenced semaphore: the deepest search path could not place {:?} ({}..{} ns) before it returned",
                    at.call, at.invoke_ns, at.return_ns
                ));
            }
            Outcome::GaveUp => gave_up.push(limit.clone()),
        }
    }
    if !gave_up.is_empty() {
        return Verdict::Unknown(format!(
            "search bound ({MAX_STEPS} steps) reached on {gave_up:?}"
        ));
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acq(fence: u64, from: u64, to: u64) -> Entry {
        Entry {
            call: Call::Acquire { fence },
            invoke_ns: from,
            return_ns: to,
        }
    }
    fn end(fence: u64, from: u64, to: u64) -> Entry {
        Entry {
            call: Call::End { fence },
            invoke_ns: from,
            return_ns: to,
        }
    }
    fn val(fence: u64, held: bool, from: u64, to: u64) -> Entry {
        Entry {
            call: Call::Validate { fence, held },
            invoke_ns: from,
            return_ns: to,
        }
    }

    #[test]
    fn sequential_holders_and_overlapping_ops_linearize_in_some_order() {
        let linearizable = [
            // Sequential holders, each validated.
            vec![
                acq(5, 0, 10),
                val(5, true, 11, 12),
                end(5, 13, 15),
                acq(9, 16, 20),
                val(5, false, 21, 22),
                val(9, true, 21, 23),
                end(9, 30, NEVER),
            ],
            // The second acquire overlaps the first's end: ordered after it.
            vec![
                acq(5, 0, 10),
                end(5, 12, 30),
                acq(9, 14, 25),
                val(9, true, 26, 28),
            ],
            // A validation overlapping the end may see either state.
            vec![
                acq(5, 0, 10),
                end(5, 12, 30),
                val(5, true, 20, 40),
                val(5, false, 20, 40),
            ],
        ];
        for h in linearizable {
            assert_eq!(search(&h, 1, 1_000), Outcome::Linearizable, "{h:?}");
        }
    }

    #[test]
    fn two_holders_a_stale_or_lost_validation_and_fences_out_of_order_are_not_linearizable() {
        let not_linearizable = [
            // 9 granted (returned at 20) while 5's lease could not have ended (its end's call
            // is at 25).
            vec![
                acq(5, 0, 10),
                acq(9, 11, 20),
                end(5, 25, 30),
                end(9, 40, 50),
            ],
            // A stale fence validated as held.
            vec![
                acq(5, 0, 10),
                end(5, 11, 12),
                acq(9, 13, 20),
                val(5, true, 21, 22),
            ],
            // A held fence validated as lost.
            vec![acq(5, 0, 10), val(5, false, 11, 12), end(5, 13, 14)],
            // Fence 9 acknowledged before fence 5 was asked for: 5 cannot follow 9.
            vec![acq(9, 0, 10), end(9, 11, 12), acq(5, 13, 20)],
        ];
        for h in &not_linearizable {
            assert!(matches!(search(h, 1, 1_000), Outcome::Not(_)), "{h:?}");
        }
        // Under capacity 2 the two holders are fine.
        assert_eq!(
            search(&not_linearizable[0], 2, 1_000),
            Outcome::Linearizable
        );
    }

    #[test]
    fn the_step_bound_gives_up_rather_than_running_on() {
        // Many concurrent acquires of a large semaphore: many orders to try.
        let h: Vec<Entry> = (1..=40).map(|f| acq(f, 0, 100)).collect();
        let mut h2 = h.clone();
        h2.push(val(999, true, 200, 300));
        assert_eq!(search(&h2, 64, 50), Outcome::GaveUp);
        assert_eq!(search(&h, 64, 1_000_000), Outcome::Linearizable);
    }
}
