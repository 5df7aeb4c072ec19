//! [`Deadlines`]: the log times at which time alone changes the state, each item filed
//! under its next deadline and ordered by (deadline, item), so that an entry or a `Tick`
//! visits only what is due: `O(due · log n)`, not a walk of every session, tenant and limit.
//!
//! Three indexes of one shape ([`DeadlineIndex`]):
//! - `serve`: a rated limit whose queue head waits only for tokens, filed at the log time
//!   its bucket will hold them (`Limit::tokens_due_ms`). The entry whose clock reaches it
//!   serves the limit. A head that waits for a release is not filed: only a release (or an
//!   expiry), which serves the limit itself, can let it through.
//! - `drop`: a chunk of a keyed definition's lean keys (`machine::key_table`), filed at
//!   the earliest log time one of its keys is full again. The entry whose clock reaches it
//!   drops the keys that are full by then, which are fresh, and refiles the chunk.
//! - `prune`: a session with finished tickets, filed at the time its oldest one ages out
//!   (`Session::finished_due_ms`), and a tenant with settlement receipts, filed at the time
//!   its oldest one does (`Tenant::receipts_due_ms`). `Tick` prunes what is due.
//!
//! Session leases have their own index (`Machine::expiries`), ordered by expiry time.
//!
//! Derived state: never serialized, rebuilt from the saved state at restore
//! ([`Deadlines::of`]), and compared with that rebuild by `Machine::check`, so a place that
//! changes a deadline without refiling it is found by any test that checks the machine.
//!
//! Invariants:
//! - `by_time` and `filed` hold the same (item, deadline) pairs: each item at most once.
//! - Each item is filed exactly while the state gives it a deadline, under that deadline.

use std::collections::{BTreeMap, BTreeSet};

use super::command::{LimitId, SessionId};
use super::saved::SavedLimits;

/// Items filed under deadlines, ordered by (deadline, item).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlineIndex<K: Ord + Clone> {
    by_time: BTreeSet<(u64, K)>,
    filed: BTreeMap<K, u64>,
}

impl<K: Ord + Clone> Default for DeadlineIndex<K> {
    fn default() -> Self {
        DeadlineIndex {
            by_time: BTreeSet::new(),
            filed: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone> DeadlineIndex<K> {
    /// Files `item` under `due_ms`, or unfiles it for `None`, replacing what it had.
    pub fn set(&mut self, item: K, due_ms: Option<u64>) {
        match due_ms {
            Some(at) => {
                if let Some(old) = self.filed.insert(item.clone(), at) {
                    if old == at {
                        return;
                    }
                    self.by_time.remove(&(old, item.clone()));
                }
                self.by_time.insert((at, item));
            }
            None => {
                if let Some(old) = self.filed.remove(&item) {
                    self.by_time.remove(&(old, item));
                }
            }
        }
    }

    /// The items due at `now_ms` (deadline at or before it), earliest first. They stay
    /// filed: whoever handles one refiles it.
    pub fn due(&self, now_ms: u64) -> Vec<K> {
        self.by_time
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// The earliest deadline, if any item is filed.
    pub fn next_ms(&self) -> Option<u64> {
        self.by_time.first().map(|(at, _)| *at)
    }

    pub fn is_empty(&self) -> bool {
        self.filed.is_empty()
    }

    /// The deadline `item` is filed under.
    pub fn get(&self, item: &K) -> Option<u64> {
        self.filed.get(item).copied()
    }

    /// Checks that the two views agree.
    fn check(&self) -> Result<(), String> {
        let consistent = self.by_time.len() == self.filed.len()
            && self
                .by_time
                .iter()
                .all(|(at, k)| self.filed.get(k) == Some(at));
        if consistent {
            Ok(())
        } else {
            Err("a deadline index's two views disagree".into())
        }
    }
}

/// What `Tick` prunes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Prune {
    /// A session's finished tickets past their retention.
    Tickets(SessionId),
    /// A tenant's receipts past their retention.
    Receipts(String),
}

/// A chunk of lean keys: its definition and its bound.
pub type LeanChunk = (LimitId, Box<str>);

/// The three indexes. See the module doc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deadlines {
    pub serve: DeadlineIndex<LimitId>,
    pub drop: DeadlineIndex<LeanChunk>,
    pub prune: DeadlineIndex<Prune>,
}

impl Deadlines {
    /// The deadlines of `saved`, by a full scan of its limits, sessions and tenants.
    pub fn of(saved: &SavedLimits) -> Deadlines {
        let mut d = Deadlines::default();
        for (&id, limit) in &saved.limits {
            d.serve.set(id, limit.tokens_due_ms());
        }
        for (&def, table) in &saved.lean_keys {
            for (bound, due) in table.dues() {
                d.drop.set((def, bound.into()), due);
            }
        }
        for (&id, session) in &saved.sessions {
            d.prune.set(Prune::Tickets(id), session.finished_due_ms());
        }
        for (name, tenant) in &saved.tenants {
            d.prune
                .set(Prune::Receipts(name.clone()), tenant.receipts_due_ms());
        }
        d
    }

    /// Checks these deadlines against a full scan of `saved`.
    pub fn check(&self, saved: &SavedLimits) -> Result<(), String> {
        self.serve.check()?;
        self.prune.check()?;
        self.drop.check()?;
        let scanned = Deadlines::of(saved);
        if let Some((k, at)) = first_difference(&self.drop, &scanned.drop) {
            return Err(format!(
                "lean keys {k:?} are filed to be dropped at {at:?}, a full scan says {:?}",
                scanned.drop.get(&k)
            ));
        }
        if let Some((k, at)) = first_difference(&self.serve, &scanned.serve) {
            return Err(format!(
                "limit {k:?} is filed to be served at {at:?}, a full scan says {:?}",
                scanned.serve.get(&k)
            ));
        }
        if let Some((k, at)) = first_difference(&self.prune, &scanned.prune) {
            return Err(format!(
                "{k:?} is filed to be pruned at {at:?}, a full scan says {:?}",
                scanned.prune.get(&k)
            ));
        }
        Ok(())
    }
}

/// The first item filed differently in `kept` and `scanned`, with its deadline in `kept`.
fn first_difference<K: Ord + Clone>(
    kept: &DeadlineIndex<K>,
    scanned: &DeadlineIndex<K>,
) -> Option<(K, Option<u64>)> {
    kept.filed
        .keys()
        .chain(scanned.filed.keys())
        .find(|k| kept.get(k) != scanned.get(k))
        .map(|k| (k.clone(), kept.get(k)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refiling_moves_an_item_and_due_lists_by_deadline_then_item() {
        let mut d = DeadlineIndex::default();
        d.set(3u64, Some(50));
        d.set(1, Some(70));
        d.set(2, Some(50));
        d.set(1, Some(40));
        assert_eq!(d.due(49), vec![1]);
        assert_eq!(d.due(50), vec![1, 2, 3]);
        d.set(2, None);
        d.set(3, Some(50));
        assert_eq!(d.due(100), vec![1, 3]);
        assert_eq!(d.next_ms(), Some(40));
        d.check().unwrap();
        d.set(1, None);
        d.set(3, None);
        assert!(d.is_empty() && d.by_time.is_empty());
    }
}
