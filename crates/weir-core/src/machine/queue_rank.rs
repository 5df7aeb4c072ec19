//! [`Ranks`]: the keys of one wait queue in service order, kept so that a ticket's position
//! (how many keys sort before it) is cheap to answer at any queue length.
//!
//! A queue answers a position on every acquire that queues and on every retry of a queued
//! ticket; counting the keys before a key in the ordered map walks them, so building a
//! queue of `n` waiters cost `n²/2` steps (5·10⁹ at `LIMIT_WAITERS_MAX`). Here the keys are
//! kept in sorted blocks of at most [`BLOCK_KEYS_MAX`]: a position is a binary search over
//! the blocks, the lengths of the blocks before, and a binary search in one block, so it
//! costs `O(n / BLOCK_KEYS_MAX + log n)`; an insert or a removal moves at most one block's
//! keys.
//!
//! Derived state: a queue's ranks are built from its ordered map when it is decoded and
//! never serialized; [`super::queue::WaitQueue::check`] compares the two.
//!
//! Invariants:
//! - Every block is non-empty and sorted, and every key of a block sorts below every key
//!   of the next: the concatenation of the blocks is the sorted set of keys.
//! - No block holds more than [`BLOCK_KEYS_MAX`] keys, and there are at most
//!   `4 · len / BLOCK_KEYS_MAX + 1` blocks (so a position sums few lengths).

use super::queue_key::QueueKey;

/// Most keys in one block. A block that grows past it is split in halves; 512 keys of 48
/// bytes keep an insert's move within one small block while 100,000 waiters need only a
/// few hundred blocks.
const BLOCK_KEYS_MAX: usize = 512;

/// The keys of a queue in sorted blocks. See the module doc.
///
/// Equal when they hold the same keys, however blocked: a decoded queue is blocked afresh,
/// and must equal the queue that was encoded (the determinism tests compare machines).
#[derive(Clone, Debug, Default)]
pub struct Ranks {
    blocks: Vec<Vec<QueueKey>>,
    len: usize,
}

impl PartialEq for Ranks {
    fn eq(&self, other: &Ranks) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Ranks {}

impl Ranks {
    /// No keys.
    pub const EMPTY: Ranks = Ranks {
        blocks: Vec::new(),
        len: 0,
    };

    /// Ranks of keys given in ascending order (a decoded queue's map keys).
    pub fn from_sorted(keys: impl Iterator<Item = QueueKey>) -> Ranks {
        let keys: Vec<QueueKey> = keys.collect();
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "ranks are built from strictly ascending keys"
        );
        let len = keys.len();
        let blocks = keys
            .chunks(BLOCK_KEYS_MAX / 2)
            .map(<[QueueKey]>::to_vec)
            .collect();
        Ranks { blocks, len }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The block `key` belongs in: the first whose last key is not below it, else the last.
    fn block_of(&self, key: &QueueKey) -> usize {
        let i = self
            .blocks
            .partition_point(|b| b.last().expect("blocks are non-empty") < key);
        i.min(self.blocks.len().saturating_sub(1))
    }

    /// Adds `key`, which must be new.
    pub fn insert(&mut self, key: QueueKey) {
        if self.blocks.is_empty() {
            self.blocks.push(vec![key]);
            self.len = 1;
            return;
        }
        let i = self.block_of(&key);
        let block = &mut self.blocks[i];
        let at = block.partition_point(|k| k < &key);
        assert!(block.get(at) != Some(&key), "ranked keys are unique");
        block.insert(at, key);
        self.len += 1;
        if block.len() > BLOCK_KEYS_MAX {
            let upper = block.split_off(block.len() / 2);
            self.blocks.insert(i + 1, upper);
        }
    }

    /// Removes `key`; returns whether it was there.
    pub fn remove(&mut self, key: &QueueKey) -> bool {
        if self.blocks.is_empty() {
            return false;
        }
        let i = self.block_of(key);
        let block = &mut self.blocks[i];
        let Ok(at) = block.binary_search(key) else {
            return false;
        };
        block.remove(at);
        self.len -= 1;
        if block.is_empty() {
            self.blocks.remove(i);
        }
        // Removals can leave many sparse blocks; re-chunking when they pass the bound costs
        // `O(len)` once per `len / 2` removals at least, so `O(1)` amortized.
        if self.blocks.len() > self.blocks_max() {
            let keys = std::mem::take(&mut self.blocks).into_iter().flatten();
            *self = Ranks::from_sorted(keys);
        }
        true
    }

    /// Most blocks allowed for the current length (see the module doc).
    fn blocks_max(&self) -> usize {
        4 * self.len / BLOCK_KEYS_MAX + 1
    }

    /// How many keys sort before `key` (whether or not `key` itself is present).
    pub fn rank(&self, key: &QueueKey) -> usize {
        let i = self
            .blocks
            .partition_point(|b| b.last().expect("blocks are non-empty") < key);
        let before: usize = self.blocks[..i].iter().map(Vec::len).sum();
        before
            + self
                .blocks
                .get(i)
                .map_or(0, |b| b.partition_point(|k| k < key))
    }

    /// All keys in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = &QueueKey> {
        self.blocks.iter().flatten()
    }

    /// Checks the invariants of the module doc.
    pub fn check(&self) -> Result<(), String> {
        if self.blocks.iter().any(Vec::is_empty) {
            return Err("ranks keep an empty block".into());
        }
        if let Some(b) = self.blocks.iter().find(|b| b.len() > BLOCK_KEYS_MAX) {
            return Err(format!(
                "a rank block holds {} keys, above {BLOCK_KEYS_MAX}",
                b.len()
            ));
        }
        if self.blocks.len() > self.blocks_max() {
            return Err(format!(
                "{} rank blocks for {} keys",
                self.blocks.len(),
                self.len
            ));
        }
        let keys: Vec<&QueueKey> = self.iter().collect();
        if keys.len() != self.len || !keys.windows(2).all(|w| w[0] < w[1]) {
            return Err("rank blocks are not the sorted keys".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn key(n: u64) -> QueueKey {
        QueueKey::for_tests(n)
    }

    proptest! {
        /// Any sequence of inserts and removals: ranks answer what counting an ordered set
        /// answers, and the invariants hold.
        #[test]
        fn ranks_agree_with_counting_an_ordered_set(
            ops in proptest::collection::vec((any::<bool>(), 0u64..3_000), 1..4_000)
        ) {
            let mut ranks = Ranks::default();
            let mut model = BTreeSet::new();
            for (insert, n) in ops {
                let k = key(n);
                if insert && !model.contains(&k) {
                    ranks.insert(k);
                    model.insert(k);
                } else {
                    prop_assert_eq!(ranks.remove(&k), model.remove(&k));
                }
                prop_assert_eq!(ranks.rank(&k), model.range(..k).count());
                prop_assert_eq!(ranks.len(), model.len());
            }
            prop_assert!(ranks.check().is_ok(), "{:?}", ranks.check());
            prop_assert!(ranks.iter().eq(model.iter()));
            for n in (0..3_000).step_by(97) {
                prop_assert_eq!(ranks.rank(&key(n)), model.range(..key(n)).count());
            }
        }
    }

    #[test]
    fn many_removals_rechunk_instead_of_keeping_sparse_blocks() {
        let sorted: BTreeSet<QueueKey> = (0..20_000).map(key).collect();
        let mut ranks = Ranks::from_sorted(sorted.iter().copied());
        // Remove all but every 64th key in service order: blocks thin out, then re-chunk.
        let kept: Vec<QueueKey> = sorted.iter().copied().step_by(64).collect();
        for (i, k) in sorted.iter().enumerate() {
            if i % 64 != 0 {
                assert!(ranks.remove(k));
                assert!(ranks.check().is_ok(), "{:?}", ranks.check());
            }
        }
        assert_eq!(ranks.len(), kept.len());
        assert_eq!(ranks.rank(&kept[100]), 100);
        assert!(ranks.iter().eq(kept.iter()));
        let first_removed = sorted.iter().nth(1).unwrap();
        assert!(!ranks.remove(first_removed), "already removed");
    }
}
