//! `leased-take`'s check of G1 in spend time: whether any window of the run spent more than
//! `burst + rate × window`.
//!
//! Two kinds of take are counted. A take decided locally (from a lease's bucket) has its
//! moment: the ms it was decided in. A take the cluster decided happened at some moment
//! between its request's send and its reply, which the bench does not see; counting it at
//! the reply would bunch takes decided over a slow reply's whole span into one ms, and
//! flag windows no one over-spent. So a window `[a, b]` (whole ms, inclusive) counts the
//! local takes in it and the cluster takes whose span lies in it (sent at or after `a`,
//! answered at or before `b`): what it surely holds. Its bound is `burst + rate × (b − a +
//! 1)` ms (a take counted in ms `t` happened in `[t, t + 1)`).
//!
//! Every window is checked, in O((ms + cluster takes) × log ms): for each end `b`, a
//! segment tree holds, at each start `a ≤ b`, what window `[a, b]` holds less its bound,
//! and the worst start is its maximum. Must never report a window over that was not:
//! every take it counts in a window was spent in it.

/// The most any window holds over its bound (at most 0 when none is over): `local[t]` the
/// takes decided locally in ms `t`, `cluster` the (sent ms, answered ms) of each take the
/// cluster decided; `rate_per_ms` and `burst` the limit's.
pub fn worst_window(local: &[u64], cluster: &[(u32, u32)], rate_per_ms: f64, burst: f64) -> f64 {
    let len = local.len();
    if len == 0 {
        return f64::NEG_INFINITY;
    }
    // Cluster takes by the ms they were answered in (clamped to the run's last ms).
    let mut answered: Vec<Vec<usize>> = vec![Vec::new(); len];
    for &(sent, at) in cluster {
        let at = (at as usize).min(len - 1);
        answered[at].push((sent as usize).min(at));
    }
    // Position a holds (what [a, b] holds) − burst − rate × (b − a + 1) once b ≥ a: start it
    // at −burst + rate × a, and take rate off every position as b moves on (`offset`).
    let mut tree = Tree::new(len, |a| -burst + rate_per_ms * a as f64);
    let mut offset = 0.0;
    let mut worst = f64::NEG_INFINITY;
    for b in 0..len {
        offset -= rate_per_ms;
        tree.add(0, b, local[b] as f64);
        for &sent in &answered[b] {
            tree.add(0, sent, 1.0);
        }
        worst = worst.max(tree.max(0, b) + offset);
    }
    worst
}

/// A segment tree over positions `0..len`: add to a range, the maximum of a range.
struct Tree {
    len: usize,
    max: Vec<f64>,
    pending: Vec<f64>,
}

impl Tree {
    fn new(len: usize, value: impl Fn(usize) -> f64) -> Tree {
        let mut tree = Tree {
            len,
            max: vec![0.0; 4 * len],
            pending: vec![0.0; 4 * len],
        };
        tree.build(1, 0, len - 1, &value);
        tree
    }

    fn build(&mut self, node: usize, lo: usize, hi: usize, value: &impl Fn(usize) -> f64) {
        if lo == hi {
            self.max[node] = value(lo);
            return;
        }
        let mid = (lo + hi) / 2;
        self.build(2 * node, lo, mid, value);
        self.build(2 * node + 1, mid + 1, hi, value);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]);
    }

    /// Adds `v` to every position in `[from, to]`.
    fn add(&mut self, from: usize, to: usize, v: f64) {
        if v != 0.0 {
            self.add_in(1, 0, self.len - 1, from, to, v);
        }
    }

    fn add_in(&mut self, node: usize, lo: usize, hi: usize, from: usize, to: usize, v: f64) {
        if to < lo || hi < from {
            return;
        }
        if from <= lo && hi <= to {
            self.max[node] += v;
            self.pending[node] += v;
            return;
        }
        let mid = (lo + hi) / 2;
        self.add_in(2 * node, lo, mid, from, to, v);
        self.add_in(2 * node + 1, mid + 1, hi, from, to, v);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]) + self.pending[node];
    }

    /// The maximum over `[from, to]`.
    fn max(&self, from: usize, to: usize) -> f64 {
        self.max_in(1, 0, self.len - 1, from, to)
    }

    fn max_in(&self, node: usize, lo: usize, hi: usize, from: usize, to: usize) -> f64 {
        if to < lo || hi < from {
            return f64::NEG_INFINITY;
        }
        if from <= lo && hi <= to {
            return self.max[node];
        }
        let mid = (lo + hi) / 2;
        let below = self.max_in(2 * node, lo, mid, from, to).max(self.max_in(
            2 * node + 1,
            mid + 1,
            hi,
            from,
            to,
        ));
        below + self.pending[node]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every window by brute force: the same rule, O(ms² × takes).
    fn brute(local: &[u64], cluster: &[(u32, u32)], rate: f64, burst: f64) -> f64 {
        let mut worst = f64::NEG_INFINITY;
        for a in 0..local.len() {
            for b in a..local.len() {
                let held = local[a..=b].iter().sum::<u64>() as f64
                    + cluster
                        .iter()
                        .filter(|&&(s, r)| {
                            s as usize >= a && (r as usize).min(local.len() - 1) <= b
                        })
                        .count() as f64;
                worst = worst.max(held - burst - rate * (b - a + 1) as f64);
            }
        }
        worst
    }

    #[test]
    fn the_tree_finds_the_worst_window_as_brute_force_does() {
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..200 {
            let len = 1 + next(40) as usize;
            let local: Vec<u64> = (0..len).map(|_| next(4)).collect();
            let cluster: Vec<(u32, u32)> = (0..next(12))
                .map(|_| {
                    let s = next(len as u64) as u32;
                    (s, s + next(6) as u32)
                })
                .collect();
            let (rate, burst) = (next(3) as f64 * 0.5, next(5) as f64);
            let (fast, slow) = (
                worst_window(&local, &cluster, rate, burst),
                brute(&local, &cluster, rate, burst),
            );
            assert!(
                (fast - slow).abs() < 1e-9,
                "{local:?} {cluster:?} {rate} {burst}"
            );
        }
    }

    #[test]
    fn a_slow_reply_is_not_counted_where_it_may_not_have_been_spent() {
        // Burst 2, half a token a ms: two local takes in ms 5, and a cluster take sent in ms
        // 0 and answered in ms 5. It may have been spent in ms 0..4: ms 5 alone holds 2 of
        // its 2.5, and [0, 5] holds 3 of 5.
        let mut local = vec![0; 10];
        local[5] = 2;
        assert_eq!(worst_window(&local, &[(0, 5)], 0.5, 2.0), -0.5);
        // Answered in the ms it was sent: surely in ms 5 with the others, half a token over.
        assert_eq!(worst_window(&local, &[(5, 5)], 0.5, 2.0), 0.5);
    }
}
