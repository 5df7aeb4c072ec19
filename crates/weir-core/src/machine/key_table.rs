//! [`KeyTable`]: the lean keys of one keyed definition, a compact ordered map from a key's
//! name to its [`KeyBucket`].
//!
//! A lean key is a key whose state differs from a fresh one by its bucket alone (the
//! machine's essay, "Keyed limits"): no permit held, no waiter, no unsettled estimate, no
//! token lease. Its state is three numbers and its name, kept once. Keys live in chunks
//! of at most [`CHUNK_KEYS_MAX`] keys, each holding its names' bytes back to back in one
//! buffer and its buckets in columns, so a key costs its name's bytes and 22 bytes, not an
//! allocation of its own. A chunk is known by its *bound*: no key in it sorts below its
//! bound, and every key in the chunks before it sorts below it. The first chunk's bound is
//! the empty name.
//!
//! Each chunk keeps the earliest log time any of its keys is full again (`due_ms`): the
//! machine files the chunk, not each key, under it (`machine::deadlines`), so a key's place
//! in the deadline index costs a share of one entry per chunk.
//!
//! Invariants (checked by [`KeyTable::check`]):
//! - Names are strictly increasing across the table; each chunk's names are at or above its
//!   bound and below the next chunk's bound.
//! - Only the first chunk may be empty, and only when others follow.
//! - `len` is the number of keys; each chunk's columns have one entry a key.
//! - Each chunk's `due_ms` is the least due time of its keys (`u64::MAX` when empty).
//!
//! Chunks are shared, copy-on-write, at two levels: the map of chunks is a persistent B+ tree
//! ([`imbl::OrdMap`]: nodes of up to 64 entries behind reference counts), and each chunk sits
//! behind an [`Arc`] of its own. A clone of the table shares the whole tree, in constant
//! time; a change afterwards copies the few tree nodes on the path to its chunk and the chunk
//! itself, never the rest. So cloning a table costs nothing a key or a chunk: what the
//! machine's snapshot takes under the state lock ([`crate::machine::Frozen`]) before it
//! encodes the clone outside it, however many keys there are.
//!
//! Never: iteration order, the encoding or equality depend on how keys fall into chunks
//! (a restored table is chunked afresh); a name is never stored twice; a change to one
//! table is seen by a clone of it.

use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;
use serde::de::Error as _;
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most keys of one chunk. A change to a chunk moves at most this many names and numbers
/// and rescans at most this many due times; its fixed cost (a map entry, five buffers, its
/// deadline entry: some 250 bytes) is shared by its keys. A chunk fills whole when keys
/// come in increasing order and half when they come in any other; one left with few keys
/// merges into the one before it when they fit. (Caveat: removals in an adversarial order
/// can leave neighbouring chunks of a few keys each, up to the fixed cost a key, still
/// below what a key kept as a limit costs.)
pub const CHUNK_KEYS_MAX: usize = 64;

/// Keys a chunk is filled with when a table is built from a sorted list (on restore):
/// three quarters, room to grow before the first split.
const CHUNK_KEYS_LOADED: usize = CHUNK_KEYS_MAX * 3 / 4;

/// A chunk left with fewer keys than this merges into the one before it when they fit.
const CHUNK_KEYS_MIN: usize = CHUNK_KEYS_MAX / 4;

/// A key's bucket: what differs from a fresh key (whose bucket is full). Its spec is its
/// definition's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyBucket {
    /// Tokens, micro-tokens: below the definition's burst.
    pub tokens_micro: u64,
    /// Refill remainder, below 1000 (see `Limit::refill`).
    pub refill_remainder: u16,
    /// Log time of the last refill, ms.
    pub refilled_at_ms: u64,
}

/// A run of keys, in name order, in columns. See the module doc.
#[derive(Clone, Debug, Default)]
struct Chunk {
    /// The names' bytes, back to back.
    names: Vec<u8>,
    /// Where each name ends in `names`.
    ends: Vec<u32>,
    tokens_micro: Vec<u64>,
    refill_remainder: Vec<u16>,
    refilled_at_ms: Vec<u64>,
    /// The least due time of the keys; `u64::MAX` when empty.
    due_ms: u64,
}

impl Chunk {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn name(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.names[start..self.ends[i] as usize]
    }

    fn name_str(&self, i: usize) -> &str {
        std::str::from_utf8(self.name(i)).expect("names are stored from strings")
    }

    fn bucket(&self, i: usize) -> KeyBucket {
        KeyBucket {
            tokens_micro: self.tokens_micro[i],
            refill_remainder: self.refill_remainder[i],
            refilled_at_ms: self.refilled_at_ms[i],
        }
    }

    /// The index of `key`, or where it would go.
    fn find(&self, key: &[u8]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.name(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Room for one more entry in every column, grown by an eighth (not doubled): the
    /// columns are most of a lean key's memory.
    fn reserve(&mut self, name_bytes: usize) {
        fn grow<T>(v: &mut Vec<T>, n: usize) {
            if v.capacity() < v.len() + n {
                v.reserve_exact(n.max(v.len() / 8).max(4));
            }
        }
        grow(&mut self.names, name_bytes);
        grow(&mut self.ends, 1);
        grow(&mut self.tokens_micro, 1);
        grow(&mut self.refill_remainder, 1);
        grow(&mut self.refilled_at_ms, 1);
    }

    fn insert_at(&mut self, i: usize, key: &[u8], b: KeyBucket) {
        self.reserve(key.len());
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.names.splice(start..start, key.iter().copied());
        let n = key.len() as u32;
        self.ends.insert(i, start as u32 + n);
        for end in &mut self.ends[i + 1..] {
            *end += n;
        }
        self.tokens_micro.insert(i, b.tokens_micro);
        self.refill_remainder.insert(i, b.refill_remainder);
        self.refilled_at_ms.insert(i, b.refilled_at_ms);
    }

    fn push(&mut self, key: &[u8], b: KeyBucket) {
        let i = self.len();
        self.insert_at(i, key, b);
    }

    fn remove_at(&mut self, i: usize) -> KeyBucket {
        let b = self.bucket(i);
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        let end = self.ends[i] as usize;
        self.names.drain(start..end);
        let n = (end - start) as u32;
        self.ends.remove(i);
        for e in &mut self.ends[i..] {
            *e -= n;
        }
        self.tokens_micro.remove(i);
        self.refill_remainder.remove(i);
        self.refilled_at_ms.remove(i);
        b
    }

    /// The entries from `at` on, moved into a new chunk.
    fn split_off(&mut self, at: usize) -> Chunk {
        let mut right = Chunk {
            due_ms: u64::MAX,
            ..Chunk::default()
        };
        for i in at..self.len() {
            right.push(self.name(i), self.bucket(i));
        }
        let start = self.ends[at - 1] as usize;
        self.names.truncate(start);
        self.ends.truncate(at);
        self.tokens_micro.truncate(at);
        self.refill_remainder.truncate(at);
        self.refilled_at_ms.truncate(at);
        self.shrink();
        right
    }

    fn shrink(&mut self) {
        self.names.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.tokens_micro.shrink_to_fit();
        self.refill_remainder.shrink_to_fit();
        self.refilled_at_ms.shrink_to_fit();
    }

    fn rescan(&mut self, due: &dyn Fn(KeyBucket) -> u64) {
        self.due_ms = (0..self.len())
            .map(|i| due(self.bucket(i)))
            .min()
            .unwrap_or(u64::MAX);
    }
}

/// A chunk whose due time changed: its bound, and its due time now (`None`: no longer
/// filed, for a chunk emptied or merged away).
pub type Refile = (Box<str>, Option<u64>);

/// The lean keys of one definition. See the module doc.
#[derive(Clone, Debug, Default)]
pub struct KeyTable {
    /// Each chunk by its bound; the tree and the chunks shared with the table's clones
    /// (module doc).
    chunks: OrdMap<Arc<str>, Arc<Chunk>>,
    len: usize,
}

impl PartialEq for KeyTable {
    fn eq(&self, other: &KeyTable) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl KeyTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bound of the chunk `key` belongs in, if any chunk exists.
    fn chunk_of(&self, key: &str) -> Option<&str> {
        self.chunks.get_prev(key).map(|(bound, _)| &**bound)
    }

    /// The bucket of `key`, if it is a lean key.
    pub fn get(&self, key: &str) -> Option<KeyBucket> {
        let chunk = &self.chunks[self.chunk_of(key)?];
        chunk.find(key.as_bytes()).ok().map(|i| chunk.bucket(i))
    }

    pub fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Adds `key`, which is not in the table, with bucket `b`; `due` gives a bucket's due
    /// time. Returns the chunks to refile.
    pub fn insert(
        &mut self,
        key: &str,
        b: KeyBucket,
        due: &dyn Fn(KeyBucket) -> u64,
    ) -> Vec<Refile> {
        let bound: Box<str> = self.chunk_of(key).unwrap_or("").into();
        let chunk = self.chunks.entry(Arc::from(&*bound)).or_insert_with(|| {
            Arc::new(Chunk {
                due_ms: u64::MAX,
                ..Chunk::default()
            })
        });
        let chunk = Arc::make_mut(chunk);
        let i = chunk
            .find(key.as_bytes())
            .expect_err("an inserted key is new");
        chunk.insert_at(i, key.as_bytes(), b);
        chunk.due_ms = chunk.due_ms.min(due(b));
        self.len += 1;
        if chunk.len() <= CHUNK_KEYS_MAX {
            return vec![(bound, Some(chunk.due_ms))];
        }
        // A key added at the end (keys made in increasing order, a common way to name them)
        // leaves the chunk full and starts the next one; elsewhere the chunk halves.
        let at = if i == chunk.len() - 1 {
            CHUNK_KEYS_MAX
        } else {
            chunk.len() / 2
        };
        let mut right = chunk.split_off(at);
        chunk.rescan(due);
        right.rescan(due);
        let left_due = chunk.due_ms;
        let right_bound: Box<str> = right.name_str(0).into();
        let right_due = right.due_ms;
        self.chunks
            .insert(Arc::from(&*right_bound), Arc::new(right));
        vec![(bound, Some(left_due)), (right_bound, Some(right_due))]
    }

    /// Takes `key` out; returns its bucket and the chunks to refile.
    pub fn remove(
        &mut self,
        key: &str,
        due: &dyn Fn(KeyBucket) -> u64,
    ) -> Option<(KeyBucket, Vec<Refile>)> {
        let bound: Box<str> = self.chunk_of(key)?.into();
        let shared = self.chunks.get_mut(&*bound).expect("found above");
        let i = shared.find(key.as_bytes()).ok()?;
        let chunk = Arc::make_mut(shared);
        let b = chunk.remove_at(i);
        self.len -= 1;
        if due(b) == chunk.due_ms {
            chunk.rescan(due);
        }
        let refiles = self.tidy(bound);
        Some((b, refiles))
    }

    /// Removes every key whose due time is at or before `now_ms` from the chunk of bound
    /// `bound`; returns how many, and the chunks to refile.
    pub fn drop_due(
        &mut self,
        bound: &str,
        now_ms: u64,
        due: &dyn Fn(KeyBucket) -> u64,
    ) -> (usize, Vec<Refile>) {
        let Some(chunk) = self.chunks.get_mut(bound) else {
            return (0, Vec::new());
        };
        let chunk = Arc::make_mut(chunk);
        let mut dropped = 0;
        let mut i = 0;
        while i < chunk.len() {
            if due(chunk.bucket(i)) <= now_ms {
                chunk.remove_at(i);
                dropped += 1;
            } else {
                i += 1;
            }
        }
        chunk.rescan(due);
        self.len -= dropped;
        (dropped, self.tidy(bound.into()))
    }

    /// After a removal from the chunk of `bound`: removes it when empty (unless it is the
    /// first and others follow), merges it into the one before when both fit in one.
    fn tidy(&mut self, bound: Box<str>) -> Vec<Refile> {
        let chunk = &self.chunks[&*bound];
        let first = self.chunks.get_min().map(|(b, _)| &**b) == Some(&*bound);
        if chunk.len() == 0 && (!first || self.chunks.len() == 1) {
            self.chunks.remove(&*bound);
            return vec![(bound, None)];
        }
        if first || chunk.len() >= CHUNK_KEYS_MIN {
            let due = chunk.due_ms;
            return vec![(bound, (due != u64::MAX).then_some(due))];
        }
        let (before, prev) = self
            .chunks
            .range::<_, str>((Bound::Unbounded, Bound::Excluded(&*bound)))
            .next_back()
            .expect("a chunk that is not first has one before it");
        let before: Box<str> = Box::from(&**before);
        if prev.len() + self.chunks[&*bound].len() > CHUNK_KEYS_MAX {
            let due = self.chunks[&*bound].due_ms;
            return vec![(bound, (due != u64::MAX).then_some(due))];
        }
        let gone = self.chunks.remove(&*bound).expect("present");
        let prev = Arc::make_mut(self.chunks.get_mut(&*before).expect("present"));
        for i in 0..gone.len() {
            prev.push(gone.name(i), gone.bucket(i));
        }
        prev.due_ms = prev.due_ms.min(gone.due_ms);
        let due = prev.due_ms;
        vec![(bound, None), (before, (due != u64::MAX).then_some(due))]
    }

    /// Every key and bucket, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, KeyBucket)> {
        self.chunks
            .values()
            .flat_map(|c| (0..c.len()).map(move |i| (c.name_str(i), c.bucket(i))))
    }

    /// The keys after `after` (from the first for `None`), in name order.
    pub fn keys_after<'a>(&'a self, after: Option<&'a str>) -> impl Iterator<Item = &'a str> {
        let start = after.and_then(|a| self.chunk_of(a)).unwrap_or("");
        self.chunks
            .range::<_, str>((Bound::Included(start), Bound::Unbounded))
            .flat_map(|(_, c)| (0..c.len()).map(move |i| c.name_str(i)))
            .filter(move |k| after.is_none_or(|a| *k > a))
    }

    /// Each chunk's bound and due time (`None` when empty).
    pub fn dues(&self) -> impl Iterator<Item = (&str, Option<u64>)> {
        self.chunks
            .iter()
            .map(|(b, c)| (&**b, (c.due_ms != u64::MAX).then_some(c.due_ms)))
    }

    /// Recomputes every chunk's due time (on restore, when the definition's spec is known).
    pub fn rescan(&mut self, due: &dyn Fn(KeyBucket) -> u64) {
        let bounds: Vec<Arc<str>> = self.chunks.keys().cloned().collect();
        for bound in bounds {
            let chunk = self.chunks.get_mut(&*bound).expect("a bound of the table");
            Arc::make_mut(chunk).rescan(due);
        }
    }

    /// A table of `keys`, which must be in strictly increasing name order.
    pub fn from_sorted(keys: Vec<(String, KeyBucket)>) -> Result<KeyTable, String> {
        if let Some(w) = keys.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(format!(
                "lean keys out of order: {:?} then {:?}",
                w[0].0, w[1].0
            ));
        }
        let mut t = KeyTable::default();
        for (n, group) in keys.chunks(CHUNK_KEYS_LOADED).enumerate() {
            let mut chunk = Chunk {
                due_ms: u64::MAX,
                ..Chunk::default()
            };
            for (k, b) in group {
                chunk.push(k.as_bytes(), *b);
            }
            chunk.shrink();
            let bound: Arc<str> = if n == 0 {
                "".into()
            } else {
                group[0].0.as_str().into()
            };
            t.chunks.insert(bound, Arc::new(chunk));
        }
        t.len = keys.len();
        Ok(t)
    }

    /// Checks the invariants of the module doc, with `due` giving a bucket's due time.
    pub fn check(&self, due: &dyn Fn(KeyBucket) -> u64) -> Result<(), String> {
        let mut count = 0;
        let mut last: Option<&str> = None;
        for (n, (bound, c)) in self.chunks.iter().enumerate() {
            // The keys before this chunk sort below its bound, or a lookup would miss them.
            if last.is_some_and(|l| l >= &**bound) {
                return Err(format!(
                    "lean key {last:?} at or above the next bound {bound:?}"
                ));
            }
            if n == 0 && !bound.is_empty() {
                return Err(format!("the first chunk of lean keys has bound {bound:?}"));
            }
            if c.len() == 0 && (n > 0 || self.chunks.len() == 1) {
                return Err(format!("an empty chunk of lean keys at {bound:?}"));
            }
            let columns = [
                c.tokens_micro.len(),
                c.refill_remainder.len(),
                c.refilled_at_ms.len(),
            ];
            if columns.iter().any(|&l| l != c.len())
                || c.ends.last().map_or(0, |&e| e as usize) != c.names.len()
                || c.ends.windows(2).any(|w| w[0] > w[1])
            {
                return Err(format!("a chunk of lean keys at {bound:?} is malformed"));
            }
            for i in 0..c.len() {
                let name = std::str::from_utf8(c.name(i)).map_err(|_| "a lean key is not UTF-8")?;
                if name < &**bound || last.is_some_and(|l| l >= name) {
                    return Err(format!("lean key {name:?} out of order"));
                }
                last = Some(name);
            }
            let least = (0..c.len()).map(|i| due(c.bucket(i))).min();
            if least.unwrap_or(u64::MAX) != c.due_ms {
                return Err(format!(
                    "a chunk of lean keys at {bound:?} is due at {}, its keys say {least:?}",
                    c.due_ms
                ));
            }
            count += c.len();
        }
        if count != self.len {
            return Err(format!("{} lean keys counted, {count} kept", self.len));
        }
        Ok(())
    }
}

/// A lean key as the snapshot encodes it.
#[derive(Serialize, Deserialize)]
struct SavedKey<N> {
    name: N,
    tokens_micro: u64,
    refill_remainder: u16,
    refilled_at_ms: u64,
}

/// Encoded as the list of keys in name order, whatever the chunks.
impl Serialize for KeyTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len))?;
        for (name, b) in self.iter() {
            seq.serialize_element(&SavedKey {
                name,
                tokens_micro: b.tokens_micro,
                refill_remainder: b.refill_remainder,
                refilled_at_ms: b.refilled_at_ms,
            })?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for KeyTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyTable, D::Error> {
        let keys: Vec<SavedKey<String>> = Vec::deserialize(d)?;
        let keys = keys
            .into_iter()
            .map(|k| {
                let b = KeyBucket {
                    tokens_micro: k.tokens_micro,
                    refill_remainder: k.refill_remainder,
                    refilled_at_ms: k.refilled_at_ms,
                };
                (k.name, b)
            })
            .collect();
        // Due times are left unknown here: the machine rescans with the spec on restore.
        KeyTable::from_sorted(keys).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(t: u64) -> KeyBucket {
        KeyBucket {
            tokens_micro: t,
            refill_remainder: 0,
            refilled_at_ms: 0,
        }
    }

    fn due(b: KeyBucket) -> u64 {
        1000 - b.tokens_micro
    }

    #[test]
    fn a_table_keeps_order_through_splits_merges_and_drops() {
        let mut t = KeyTable::default();
        let mut model = std::collections::BTreeMap::new();
        // A fixed scramble of 500 keys: inserted out of order, so chunks split mid-way; then
        // 200 more in increasing order, each at the end.
        for n in 0..700u64 {
            let k = if n < 500 {
                format!("k{:04}", (n * 7919) % 500)
            } else {
                format!("k{n:04}")
            };
            t.insert(&k, b(n % 900), &due);
            model.insert(k, b(n % 900));
            t.check(&due).unwrap();
        }
        assert_eq!(t.len(), 700);
        assert!(t.iter().map(|(k, b)| (k.to_owned(), b)).eq(model.clone()));
        for n in (0..700u64).step_by(3) {
            let k = format!("k{n:04}");
            let (got, _) = t.remove(&k, &due).unwrap();
            assert_eq!(Some(got), model.remove(&k));
            t.check(&due).unwrap();
        }
        assert!(t.iter().map(|(k, b)| (k.to_owned(), b)).eq(model.clone()));
        assert_eq!(t.get("k0001"), model.get("k0001").copied());
        assert_eq!(t.get("k0000"), None);
        let bounds: Vec<Box<str>> = t.dues().map(|(b, _)| b.into()).collect();
        for bound in bounds {
            t.drop_due(&bound, 500, &due);
            t.check(&due).unwrap();
        }
        model.retain(|_, b| due(*b) > 500);
        assert!(t.iter().map(|(k, b)| (k.to_owned(), b)).eq(model.clone()));
        let after: Vec<&str> = t.keys_after(Some("k0250")).take(2).collect();
        let want: Vec<&str> = model
            .range::<str, _>((Bound::Excluded("k0250"), Bound::Unbounded))
            .take(2)
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(after, want);
        let bytes = crate::codec::encode(&t);
        let mut back: KeyTable = crate::codec::decode(&bytes).unwrap();
        back.rescan(&due);
        back.check(&due).unwrap();
        assert_eq!(back, t);
        assert_eq!(crate::codec::encode(&back), bytes);
    }

    #[test]
    fn a_key_at_or_above_the_next_chunks_bound_is_found_by_the_check() {
        let keys = (0..96).map(|n| (format!("k{n:04}"), b(1))).collect();
        let mut t = KeyTable::from_sorted(keys).unwrap();
        t.rescan(&due);
        t.check(&due).unwrap();
        // The second chunk's bound moved below the first chunk's last key.
        let (bound, chunk) = t.chunks.get_max().cloned().unwrap();
        t.chunks.remove(&bound);
        assert_eq!(&*bound, "k0048");
        t.chunks.insert("k0047".into(), chunk);
        assert!(t.check(&due).unwrap_err().contains("next bound"));
        assert_eq!(
            t.get("k0047"),
            None,
            "what the check guards: a lookup misses it"
        );
    }

    #[test]
    fn a_clone_keeps_its_keys_while_the_table_changes() {
        let keys = (0..300).map(|n| (format!("k{n:04}"), b(n % 900))).collect();
        let mut t = KeyTable::from_sorted(keys).unwrap();
        t.rescan(&due);
        let before: Vec<(String, KeyBucket)> = t.iter().map(|(k, b)| (k.into(), b)).collect();
        let bytes = crate::codec::encode(&t);
        let clone = t.clone();
        assert!(
            t.chunks.ptr_eq(&clone.chunks),
            "a clone shares the map of chunks itself, not a copy of its entries"
        );
        assert!(
            t.chunks
                .values()
                .zip(clone.chunks.values())
                .all(|(a, b)| Arc::ptr_eq(a, b)),
            "a clone shares every chunk"
        );
        // Changes to every chunk: removals, inserts (splits), drops, a rescan.
        for n in (0..300u64).step_by(2) {
            t.remove(&format!("k{n:04}"), &due).unwrap();
        }
        for n in 0..200u64 {
            t.insert(&format!("k{n:04}z"), b(n), &due);
        }
        let bounds: Vec<Box<str>> = t.dues().map(|(b, _)| b.into()).collect();
        for bound in bounds {
            t.drop_due(&bound, 800, &due);
        }
        t.rescan(&|b| due(b) + 1);
        t.check(&|b| due(b) + 1).unwrap();
        assert_ne!(crate::codec::encode(&t), bytes);
        clone.check(&due).unwrap();
        assert!(clone.iter().map(|(k, b)| (k.to_owned(), b)).eq(before));
        assert_eq!(crate::codec::encode(&clone), bytes);
    }

    #[test]
    fn keys_out_of_order_are_refused() {
        let err = KeyTable::from_sorted(vec![("b".into(), b(1)), ("a".into(), b(1))]);
        assert!(err.unwrap_err().contains("out of order"));
    }
}
