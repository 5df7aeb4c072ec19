//! Lean keys: a key whose state differs from a fresh one by its bucket alone is kept in its
//! definition's [`KeyTable`], not as a limit of its own (the machine's essay, "Keyed
//! limits").
//!
//! The rest of the machine decides on limits by id, so a lean key is *promoted* (made a
//! limit of its own again, under a new id) when a command names it, and *demoted* back when
//! a command leaves it with nothing but a bucket below its burst (`file`). A key promoted by
//! a command that then leaves it untouched (a request refused by another part) is demoted
//! at the command's end.
//!
//! Invariants:
//! - A key is in at most one of its definition's tables: `keys` (promoted) or the lean
//!   table; `totals.live_keys` counts both, `totals.lean_keys` the lean ones.
//! - A lean key's bucket is below its definition's burst, and the definition is a live
//!   keyed limit that rates; the table has an entry in `lean_keys` only while it holds keys.
//! - Each chunk of a table is filed in `deadlines.drop` under the earliest time one of its
//!   keys is full again; the entry whose clock reaches it drops those keys (they are fresh).
//!
//! Never: a lean key's bucket changes while it is lean (only a promoted key is decided on),
//! so its due time is fixed from the moment it is demoted.

use std::ops::Bound;
use std::sync::Arc;

use super::Machine;
use crate::machine::command::LimitId;
use crate::machine::key_table::{KeyBucket, KeyTable, Refile};
use crate::machine::limit::{Limit, LimitSpec};
use crate::machine::saved::lean_due_ms;

impl Machine {
    /// The live keys of definition `def`: its promoted keys and its lean ones.
    pub(super) fn live_keys_of(&self, def: LimitId) -> usize {
        self.saved.limits[&def].keys.len() + self.saved.lean_keys.get(&def).map_or(0, KeyTable::len)
    }

    /// The spec of definition `def`, shared.
    fn spec_of(&self, def: LimitId) -> Arc<LimitSpec> {
        Arc::clone(&self.saved.limits[&def].spec)
    }

    fn refile_chunks(&mut self, def: LimitId, refiles: Vec<Refile>) {
        for (bound, due) in refiles {
            let chunk = (def, bound);
            // Most changes leave a chunk's due time as it was: no refile, no copy.
            if self.deadlines.drop.get(&chunk) != due {
                self.deadlines.drop.set(chunk, due);
            }
        }
        if self
            .saved
            .lean_keys
            .get(&def)
            .is_some_and(KeyTable::is_empty)
        {
            self.saved.lean_keys.remove(&def);
        }
    }

    /// The state of key `key` of definition `def` as a limit: its id when it has one,
    /// promoting a lean key to one; `None` for a key with no state (it is fresh).
    pub(super) fn key_state(&mut self, def: LimitId, key: &str) -> Option<LimitId> {
        if let Some(&id) = self.saved.limits[&def].keys.get(key) {
            return Some(id);
        }
        let spec = self.spec_of(def);
        let table = self.saved.lean_keys.get_mut(&def)?;
        let (b, refiles) = table.remove(key, &|b| lean_due_ms(&spec, b))?;
        self.refile_chunks(def, refiles);
        self.totals.lean_keys -= 1;
        self.saved.last_limit += 1;
        let id = self.saved.last_limit;
        let mut limit = Limit::new_key(def, key, spec, b.refilled_at_ms);
        limit.tokens_micro = b.tokens_micro;
        limit.refill_remainder = b.refill_remainder as u64;
        let due = limit.tokens_due_ms();
        self.saved.limits.insert(id, Box::new(limit));
        self.saved
            .limits
            .get_mut(&def)
            .expect("live definition")
            .keys
            .insert(key.to_owned(), id);
        self.deadlines.serve.set(id, due);
        self.promoted.push(id);
        id.into()
    }

    /// Promotes every lean key of `def` (a redefinition or a removal reaches every key).
    pub(super) fn promote_all(&mut self, def: LimitId) {
        let keys: Vec<String> = match self.saved.lean_keys.get(&def) {
            Some(t) => t.iter().map(|(k, _)| k.to_owned()).collect(),
            None => return,
        };
        for key in keys {
            self.key_state(def, &key);
        }
    }

    /// Demotes each key promoted during the command that is still a limit with nothing
    /// but its bucket (`file` demotes it or leaves it).
    pub(super) fn demote_promoted(&mut self) {
        for id in std::mem::take(&mut self.promoted) {
            if self.saved.limits.contains_key(&id) {
                self.file(id);
            }
        }
    }

    /// Whether limit `id` is a key to keep lean: nothing held, waiting, estimated or
    /// leased, not removing, and a bucket below its burst (a full one is fresh).
    pub(super) fn is_lean(&self, id: LimitId) -> bool {
        let l = &self.saved.limits[&id];
        l.is_key()
            && !l.removing
            && l.holders.is_empty()
            && l.queue.is_empty()
            && l.estimating.is_empty()
            && l.leased.holders == 0
            && l.spec.rates()
            && l.tokens_micro < l.spec.burst.saturating_mul(crate::machine::limit::MICRO)
    }

    /// Makes key `id` (see [`Machine::is_lean`]) a lean key of its definition.
    pub(super) fn demote(&mut self, id: LimitId) {
        let limit = self.saved.limits.remove(&id).expect("a demoted key exists");
        self.deadlines.serve.set(id, None);
        let def = limit.of.expect("a demoted limit is a key");
        let d = self
            .saved
            .limits
            .get_mut(&def)
            .expect("keys have definitions");
        d.keys.remove(&limit.name);
        let spec = Arc::clone(&d.spec);
        let b = KeyBucket {
            tokens_micro: limit.tokens_micro,
            refill_remainder: u16::try_from(limit.refill_remainder).expect("remainder < 1000"),
            refilled_at_ms: limit.refilled_at_ms,
        };
        let refiles = self
            .saved
            .lean_keys
            .entry(def)
            .or_default()
            .insert(&limit.name, b, &|b| lean_due_ms(&spec, b));
        self.refile_chunks(def, refiles);
        self.totals.lean_keys += 1;
    }

    /// Drops the lean keys full by `now_ms` (fresh, so they have no state), chunk by chunk
    /// as the deadline index files them.
    pub(super) fn drop_full_keys(&mut self, now_ms: u64) {
        for (def, bound) in self.deadlines.drop.due(now_ms) {
            let spec = self.spec_of(def);
            // A chunk emptied or merged away earlier in this walk was unfiled with it.
            let Some(table) = self.saved.lean_keys.get_mut(&def) else {
                continue;
            };
            let (dropped, refiles) = table.drop_due(&bound, now_ms, &|b| lean_due_ms(&spec, b));
            self.refile_chunks(def, refiles);
            self.totals.lean_keys -= dropped as u64;
            self.totals.live_keys -= dropped as u64;
            if self.saved.limits[&def].removing && self.live_keys_of(def) == 0 {
                self.file(def);
            }
        }
    }

    /// Key `key` of definition `def` as a limit, for reading: its state, a lean key's bucket
    /// under its definition's spec, or a fresh key's at log time `now_ms`.
    pub(super) fn key_view(&self, def: LimitId, key: &str, now_ms: u64) -> Limit {
        let d = &self.saved.limits[&def];
        if let Some(id) = d.keys.get(key) {
            return Limit::clone(&self.saved.limits[id]);
        }
        let lean = self.saved.lean_keys.get(&def).and_then(|t| t.get(key));
        let Some(b) = lean else {
            return Limit::new_key(def, key, d.spec.clone(), now_ms);
        };
        let mut limit = Limit::new_key(def, key, d.spec.clone(), b.refilled_at_ms);
        limit.tokens_micro = b.tokens_micro;
        limit.refill_remainder = b.refill_remainder as u64;
        limit
    }

    /// The live keys of definition `def` after `after` (from the first for `None`), in key
    /// order: its promoted keys and its lean ones, merged.
    pub(super) fn live_keys_after<'a>(
        &'a self,
        def: LimitId,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = &'a str> + 'a {
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut promoted = self.saved.limits[&def]
            .keys
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(k, _)| k.as_str())
            .peekable();
        let mut lean = self
            .saved
            .lean_keys
            .get(&def)
            .into_iter()
            .flat_map(move |t| t.keys_after(after))
            .peekable();
        std::iter::from_fn(move || match (promoted.peek(), lean.peek()) {
            (Some(p), Some(l)) if p < l => promoted.next(),
            (Some(_), Some(_)) | (None, _) => lean.next(),
            (Some(_), None) => promoted.next(),
        })
    }

    /// Every lean key table belongs to a live keyed definition that rates, holds keys
    /// below its burst that it has no promoted state for, and is well formed.
    pub(super) fn check_lean_keys(&self) -> Result<(), String> {
        for (&def, table) in &self.saved.lean_keys {
            let d = self
                .saved
                .limits
                .get(&def)
                .ok_or(format!("lean keys of limit {def}, which does not exist"))?;
            if d.is_key() || d.spec.keys_max.is_none() || !d.spec.rates() {
                return Err(format!("lean keys of limit {def}, not a keyed rate limit"));
            }
            if table.is_empty() {
                return Err(format!("an empty table of lean keys for limit {def}"));
            }
            let spec = Arc::clone(&d.spec);
            table
                .check(&|b| lean_due_ms(&spec, b))
                .map_err(|e| format!("limit {}/{}: {e}", d.tenant, d.name))?;
            for (key, b) in table.iter() {
                if d.keys.contains_key(key) {
                    return Err(format!("key {key} of {} is lean and promoted", d.name));
                }
                if b.tokens_micro >= d.spec.burst.saturating_mul(crate::machine::limit::MICRO)
                    || b.refill_remainder >= 1000
                {
                    return Err(format!("lean key {key} of {}: bucket out of range", d.name));
                }
            }
        }
        Ok(())
    }
}
