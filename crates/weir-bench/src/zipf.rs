//! The key sampler of `keyed-take`: ranks `0..n` drawn Zipf-distributed with exponent `s`
//! (rank `r` with probability proportional to `1 / (r + 1)^s`), by inverse CDF over
//! weights computed once: a uniform draw in `[0, 1)` is looked up by binary search in the
//! cumulative weights. The uniform draws come from a SplitMix64 stream seeded per client,
//! so a run's key sequence is reproducible and clients do not draw in lockstep.
//!
//! Invariants: `cdf` is non-decreasing, its last entry is exactly 1.0, and every draw is a
//! rank below `n`.

use std::sync::Arc;

/// The cumulative weights of ranks `0..n`, shared by every client of a run.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Arc<Vec<f64>>,
}

impl Zipf {
    /// The distribution over `n` ranks (at least one) with exponent `s`.
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n.max(1));
        let mut sum = 0.0;
        for r in 0..n.max(1) {
            sum += 1.0 / ((r + 1) as f64).powf(s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        // Rounding may leave the last entry a hair below 1: no draw may fall past it.
        *cdf.last_mut().expect("at least one rank") = 1.0;
        Zipf { cdf: Arc::new(cdf) }
    }

    /// The rank a uniform draw `u` in `[0, 1)` stands for: the first whose cumulative
    /// weight exceeds `u`.
    pub fn rank_of(&self, u: f64) -> usize {
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }

    /// A sampler drawing from this distribution with its own stream, seeded `seed`.
    pub fn sampler(&self, seed: u64) -> Sampler {
        Sampler {
            zipf: self.clone(),
            state: seed,
        }
    }
}

/// One client's stream of ranks.
pub struct Sampler {
    zipf: Zipf,
    state: u64,
}

impl Sampler {
    /// The next SplitMix64 output.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next rank.
    pub fn next_rank(&mut self) -> usize {
        // The top 53 bits as a double in [0, 1).
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.zipf.rank_of(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_the_weights_and_stay_in_range() {
        let zipf = Zipf::new(100_000, 1.1);
        let mut sampler = zipf.sampler(7);
        let draws = 200_000;
        let mut counts = vec![0u64; 100_000];
        for _ in 0..draws {
            counts[sampler.next_rank()] += 1;
        }
        // Rank 0's share is 1 / H(100000, 1.1) = 0.1347; ranks 0 and 1 are 2^1.1 apart.
        let h: f64 = (1..=100_000).map(|r| 1.0 / (r as f64).powf(1.1)).sum();
        let share = counts[0] as f64 / draws as f64;
        assert!(
            (share - 1.0 / h).abs() < 0.005,
            "rank 0 drew {share}, expected {}",
            1.0 / h
        );
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((ratio - 2f64.powf(1.1)).abs() < 0.1, "ratio {ratio}");
        // A long tail: many distinct ranks, but far fewer than the draws.
        let distinct = counts.iter().filter(|&&c| c > 0).count();
        assert!(
            (10_000..60_000).contains(&distinct),
            "{distinct} distinct ranks"
        );
    }

    #[test]
    fn the_inverse_cdf_maps_the_ends_of_the_unit_interval_into_range() {
        let zipf = Zipf::new(3, 1.0);
        // Weights 1, 1/2, 1/3 of 11/6: cumulative 6/11, 9/11, 1.
        assert_eq!(zipf.rank_of(0.0), 0);
        assert_eq!(zipf.rank_of(6.0 / 11.0 - 1e-9), 0);
        assert_eq!(zipf.rank_of(6.0 / 11.0 + 1e-9), 1);
        assert_eq!(zipf.rank_of(0.9), 2);
        assert_eq!(zipf.rank_of(1.0 - f64::EPSILON), 2);
        assert_eq!(zipf.rank_of(1.0), 2, "clamped to the last rank");
        assert_eq!(Zipf::new(0, 1.1).rank_of(0.5), 0, "one rank at least");
    }
}
