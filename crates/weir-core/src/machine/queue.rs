//! The wait queue of one limit: priority level first, weighted fairness across fairness keys
//! within a level, first come within a key.
//!
//! Fairness is start-time fair queuing with integer tags. Each (level, key) pair is a flow.
//! A ticket of weight `w` costs `COST_SCALE / w` virtual time; when it arrives it is tagged
//! `finish = max(V, last_finish_of_its_flow) + cost`, where `V` is the level's virtual time:
//! the finish tag of the ticket served last at that level. Tickets are served in order of
//! (level descending, finish ascending, arrival ascending). Because `V` only moves forward
//! and a flow's record is dropped when its last ticket leaves, a key that arrives late or
//! comes back after an absence starts at `V`: it gets its turn at once, interleaved with the
//! keys already waiting, and never a burst of catch-up service.
//!
//! Tags are fixed at arrival, so the service order of the tickets present is the key order of
//! one ordered map, and a ticket's position is the count of keys before it. That count is
//! answered by `queue_rank::Ranks` (sorted blocks of keys, derived from the map and rebuilt
//! when a queue is decoded), not by walking the map: a queue of 100,000 waiters answers each
//! position in a few hundred steps, so building it is not quadratic.
//!
//! Invariants:
//! - Every waiter's flow has a record whose `queued` counts exactly that flow's waiters.
//! - A level has a virtual-time record only while it has waiters.
//! - Service is in key order: a waiter that has no room blocks those behind it (a large
//!   request is never starved by small ones slipping past). A waiter of several parts that
//!   has room here but waits for another part is passed over ([`WaitQueue::take`] serves
//!   a waiter that is not the head).
//! - `ranks` holds exactly the keys of `order`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::command::{Priority, SessionId, TicketId};
use super::queue_key::QueueKey;
use super::queue_rank::Ranks;

/// Virtual-time cost of one ticket of weight 1. A power of two near 2^64 keeps the cost of
/// any u32 weight at least 2^32, so distinct weights order exactly; u128 tags then last for
/// 2^64 services of weight 1.
const COST_SCALE: u128 = 1 << 64;

/// A waiting ticket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    pub session: SessionId,
    pub ticket: TicketId,
    pub units: u32,
    pub agent: Option<String>,
    pub fairness_key: String,
    /// Its fairness weight as asked (at least 1), set with the key by [`WaitQueue::push`].
    /// 0 for a waiter restored from a version 5 snapshot, which did not keep it (its tag
    /// was computed from its weight all the same; only the display lacks it).
    pub weight: u32,
}

/// One (level, key) flow's bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Flow {
    last_finish: u128,
    queued: u32,
}

/// The queue. See the module doc for the order it serves.
///
/// Decoded through `SavedQueue` (the same fields but `ranks`), which rebuilds the ranks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SavedQueue")]
pub struct WaitQueue {
    order: BTreeMap<QueueKey, Waiter>,
    flows: BTreeMap<(i32, String), Flow>,
    virtual_time: BTreeMap<i32, u128>,
    next_seq: u64,
    /// The keys of `order`, for positions. Derived: never encoded, rebuilt on decode.
    #[serde(skip)]
    ranks: Ranks,
}

/// A queue as it is encoded: [`WaitQueue`]'s fields in its order, without the derived ranks.
#[derive(Deserialize)]
struct SavedQueue {
    order: BTreeMap<QueueKey, Waiter>,
    flows: BTreeMap<(i32, String), Flow>,
    virtual_time: BTreeMap<i32, u128>,
    next_seq: u64,
}

impl From<SavedQueue> for WaitQueue {
    fn from(saved: SavedQueue) -> WaitQueue {
        let ranks = Ranks::from_sorted(saved.order.keys().copied());
        WaitQueue {
            order: saved.order,
            flows: saved.flows,
            virtual_time: saved.virtual_time,
            next_seq: saved.next_seq,
            ranks,
        }
    }
}

/// A queue as snapshot version 5 encoded it: its waiters without their weights.
#[derive(Deserialize)]
pub(super) struct QueueV5 {
    order: BTreeMap<QueueKey, WaiterV5>,
    flows: BTreeMap<(i32, String), Flow>,
    virtual_time: BTreeMap<i32, u128>,
    next_seq: u64,
}

/// A waiter as snapshot version 5 encoded it.
#[derive(Deserialize)]
struct WaiterV5 {
    session: SessionId,
    ticket: TicketId,
    units: u32,
    agent: Option<String>,
    fairness_key: String,
}

impl From<QueueV5> for WaitQueue {
    /// The same queue (tags, flows and order are as they were); each waiter's weight is 0,
    /// "not kept".
    fn from(v5: QueueV5) -> WaitQueue {
        let order = v5
            .order
            .into_iter()
            .map(|(key, w)| {
                let waiter = Waiter {
                    session: w.session,
                    ticket: w.ticket,
                    units: w.units,
                    agent: w.agent,
                    fairness_key: w.fairness_key,
                    weight: 0,
                };
                (key, waiter)
            })
            .collect();
        WaitQueue::from(SavedQueue {
            order,
            flows: v5.flows,
            virtual_time: v5.virtual_time,
            next_seq: v5.next_seq,
        })
    }
}

impl WaitQueue {
    /// A queue that never held a ticket.
    pub const EMPTY: WaitQueue = WaitQueue {
        order: BTreeMap::new(),
        flows: BTreeMap::new(),
        virtual_time: BTreeMap::new(),
        next_seq: 0,
        ranks: Ranks::EMPTY,
    };

    /// Number of waiting tickets.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Queues `waiter` with `priority` (its key and weight; the waiter's own `fairness_key`
    /// is overwritten with the priority's) and returns its key.
    pub fn push(&mut self, mut waiter: Waiter, priority: &Priority) -> QueueKey {
        let level = priority.level;
        let weight = priority.fairness_weight.max(1);
        waiter.fairness_key.clone_from(&priority.fairness_key);
        waiter.weight = weight;
        let v = self.virtual_time.get(&level).copied().unwrap_or(0);
        let flow = self
            .flows
            .entry((level, priority.fairness_key.clone()))
            .or_insert(Flow {
                last_finish: v,
                queued: 0,
            });
        let finish = flow.last_finish.max(v) + COST_SCALE / weight as u128;
        flow.last_finish = finish;
        flow.queued += 1;
        self.virtual_time.entry(level).or_insert(v);
        let key = QueueKey {
            rank: (i32::MAX as i64 - level as i64) as u32,
            finish,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        let before = self.order.insert(key, waiter);
        assert!(
            before.is_none(),
            "queue keys are unique: seq {} reused",
            key.seq
        );
        self.ranks.insert(key);
        key
    }

    /// The ticket served next, without serving it.
    pub fn peek(&self) -> Option<(&QueueKey, &Waiter)> {
        self.order.first_key_value()
    }

    /// Serves the head: removes it and moves its level's virtual time to its finish tag.
    pub fn pop(&mut self) -> Option<(QueueKey, Waiter)> {
        let key = *self.order.first_key_value()?.0;
        let waiter = self.take(&key).expect("the head is queued");
        Some((key, waiter))
    }

    /// Serves the waiter under `key`, head or not (a waiter of several parts, granted where
    /// it waited behind others that wait for room: see `machine::state::permits`): removes
    /// it and moves its level's virtual time to its finish tag, as [`WaitQueue::pop`] does.
    pub fn take(&mut self, key: &QueueKey) -> Option<Waiter> {
        let waiter = self.order.remove(key)?;
        assert!(self.ranks.remove(key), "ranks hold every queued key");
        let level = key.level();
        if let Some(v) = self.virtual_time.get_mut(&level) {
            *v = (*v).max(key.finish);
        }
        self.forget(level, &waiter.fairness_key);
        Some(waiter)
    }

    /// The first waiter after `key` in service order (the head for `None`).
    pub fn next_after(&self, key: Option<&QueueKey>) -> Option<(&QueueKey, &Waiter)> {
        use std::ops::Bound::{Excluded, Unbounded};
        match key {
            None => self.order.first_key_value(),
            Some(k) => self.order.range((Excluded(*k), Unbounded)).next(),
        }
    }

    /// Withdraws the ticket queued under `key` (a release, an expiry, a refusal). Virtual
    /// time does not move: a withdrawal is not service.
    pub fn remove(&mut self, key: &QueueKey) -> Option<Waiter> {
        let waiter = self.order.remove(key)?;
        assert!(self.ranks.remove(key), "ranks hold every queued key");
        self.forget(key.level(), &waiter.fairness_key);
        Some(waiter)
    }

    /// Withdraws every waiter `pred` selects, in service order, and returns them.
    pub fn remove_where(
        &mut self,
        mut pred: impl FnMut(&Waiter) -> bool,
    ) -> Vec<(QueueKey, Waiter)> {
        let keys: Vec<QueueKey> = self
            .order
            .iter()
            .filter(|(_, w)| pred(w))
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter()
            .map(|k| {
                let w = self.remove(&k).expect("key was just listed");
                (k, w)
            })
            .collect()
    }

    /// The waiter queued under `key`, if any: a map lookup, so checking every queued ticket
    /// of a limit costs `n log n`, not `n²`.
    pub fn get(&self, key: &QueueKey) -> Option<&Waiter> {
        self.order.get(key)
    }

    /// Tickets ahead of `key` now: a rank lookup, not a walk of the keys before it.
    pub fn position(&self, key: &QueueKey) -> u32 {
        self.ranks.rank(key) as u32
    }

    /// All waiters in service order.
    pub fn iter(&self) -> impl Iterator<Item = (&QueueKey, &Waiter)> {
        self.order.iter()
    }

    /// One waiter of (level, key) left the queue: drop the flow when it was the last, and the
    /// level's virtual time when the level emptied.
    fn forget(&mut self, level: i32, fairness_key: &str) {
        let flow_key = (level, fairness_key.to_owned());
        let flow = self
            .flows
            .get_mut(&flow_key)
            .expect("a queued waiter has a flow");
        flow.queued -= 1;
        if flow.queued == 0 {
            self.flows.remove(&flow_key);
            let level_busy = self
                .flows
                .range((level, String::new())..)
                .next()
                .is_some_and(|((l, _), _)| *l == level);
            if !level_busy {
                self.virtual_time.remove(&level);
            }
        }
    }

    /// Checks the invariants of the module doc; returns the first broken one.
    pub fn check(&self) -> Result<(), String> {
        self.ranks.check()?;
        if self.ranks.len() != self.order.len() || !self.ranks.iter().eq(self.order.keys()) {
            return Err("queue ranks do not hold exactly the queued keys".into());
        }
        let mut counted: BTreeMap<(i32, &str), u32> = BTreeMap::new();
        for (k, w) in &self.order {
            *counted
                .entry((k.level(), w.fairness_key.as_str()))
                .or_default() += 1;
            if k.seq >= self.next_seq {
                return Err(format!(
                    "queue seq {} not below next {}",
                    k.seq, self.next_seq
                ));
            }
        }
        if counted.len() != self.flows.len() {
            return Err(format!(
                "{} flows recorded, {} have waiters",
                self.flows.len(),
                counted.len()
            ));
        }
        for ((level, key), flow) in &self.flows {
            if counted.get(&(*level, key.as_str())) != Some(&flow.queued) {
                return Err(format!(
                    "flow ({level}, {key:?}) counts {} waiters wrongly",
                    flow.queued
                ));
            }
            if !self.virtual_time.contains_key(level) {
                return Err(format!("level {level} has waiters but no virtual time"));
            }
        }
        // Levels with waiters, once: a lookup per level keeps the check `n log n`.
        let busy_levels: std::collections::BTreeSet<i32> =
            self.flows.keys().map(|(level, _)| *level).collect();
        if self.virtual_time.keys().any(|l| !busy_levels.contains(l)) {
            return Err("a level without waiters keeps a virtual time".into());
        }
        Ok(())
    }
}

/// A limit's queue, allocated only once a ticket has waited on it: most limits (and nearly
/// every key of a keyed limit) never queue, and an unused [`WaitQueue`] is more than a
/// hundred bytes. Reads see [`WaitQueue::EMPTY`] until then; the first write allocates.
///
/// Encoded exactly as the [`WaitQueue`] it stands for, so the snapshot bytes do not depend
/// on whether the queue was allocated; a decoded queue equal to a never-used one is not.
#[derive(Clone, Debug, Default)]
pub struct LazyQueue(Option<Box<WaitQueue>>);

static NEVER_USED: WaitQueue = WaitQueue::EMPTY;

impl std::ops::Deref for LazyQueue {
    type Target = WaitQueue;

    fn deref(&self) -> &WaitQueue {
        self.0.as_deref().unwrap_or(&NEVER_USED)
    }
}

impl std::ops::DerefMut for LazyQueue {
    fn deref_mut(&mut self) -> &mut WaitQueue {
        self.0.get_or_insert_with(Box::default)
    }
}

impl PartialEq for LazyQueue {
    fn eq(&self, other: &LazyQueue) -> bool {
        **self == **other
    }
}

impl Eq for LazyQueue {}

impl Serialize for LazyQueue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LazyQueue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<LazyQueue, D::Error> {
        Ok(WaitQueue::deserialize(deserializer)?.into())
    }
}

impl From<WaitQueue> for LazyQueue {
    /// Allocated unless equal to a never-used queue.
    fn from(queue: WaitQueue) -> LazyQueue {
        LazyQueue((queue != WaitQueue::EMPTY).then(|| Box::new(queue)))
    }
}

/// The most bytes one waiter can add to a queue's encoding: its key and waiter with the
/// largest numbers and longest names, and a flow and a level of its own. For the snapshot
/// arithmetic (`machine::totals`).
#[cfg(test)]
pub(crate) fn waiter_bytes_max() -> usize {
    use crate::bounds::NAME_BYTES_MAX;
    use crate::codec::encoded_len;
    let key = QueueKey {
        rank: u32::MAX,
        finish: u128::MAX,
        seq: u64::MAX,
    };
    let name = "n".repeat(NAME_BYTES_MAX);
    let waiter = Waiter {
        session: SessionId::MAX,
        ticket: TicketId::MAX,
        units: u32::MAX,
        agent: Some(name.clone()),
        fairness_key: name.clone(),
        weight: u32::MAX,
    };
    let flow = Flow {
        last_finish: u128::MAX,
        queued: u32::MAX,
    };
    encoded_len(&(key, waiter))
        + encoded_len(&((i32::MIN, name), flow))
        + encoded_len(&(i32::MIN, u128::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(level: i32, key: &str, weight: u32) -> Priority {
        Priority {
            level,
            fairness_key: key.into(),
            fairness_weight: weight,
        }
    }

    fn w(ticket: TicketId) -> Waiter {
        Waiter {
            session: 1,
            ticket,
            units: 1,
            agent: None,
            fairness_key: String::new(),
            weight: 0,
        }
    }

    #[test]
    fn a_lazy_queue_encodes_as_its_queue_allocated_or_not_and_keeps_a_used_empty_one() {
        use crate::codec::{decode, encode};
        let never = LazyQueue::default();
        assert!(never.0.is_none());
        assert_eq!(encode(&never), encode(&WaitQueue::default()));
        let decoded: LazyQueue = decode(&encode(&never)).unwrap();
        assert!(decoded.0.is_none(), "a never-used queue is not allocated");
        let mut used = LazyQueue::default();
        used.push(w(1), &p(0, "", 1));
        assert_eq!(encode(&used), encode(&*used));
        // Emptied, it still counts arrivals: the decoded queue keeps that, bit for bit.
        used.pop();
        let bytes = encode(&used);
        let decoded: LazyQueue = decode(&bytes).unwrap();
        assert_eq!(encode(&decoded), bytes);
        assert_eq!(decoded, used);
        assert_ne!(decoded, never);
    }

    fn drain(q: &mut WaitQueue) -> Vec<TicketId> {
        let mut out = vec![];
        while let Some((_, w)) = q.pop() {
            out.push(w.ticket);
        }
        q.check().unwrap();
        out
    }

    #[test]
    fn weights_share_service_in_proportion() {
        let mut q = WaitQueue::default();
        for t in 0..6 {
            q.push(w(100 + t), &p(0, "heavy", 2));
            q.push(w(200 + t), &p(0, "light", 1));
        }
        q.check().unwrap();
        let served = drain(&mut q);
        // Weight 2 gets two turns for every one of weight 1.
        assert_eq!(&served[..6], &[100, 200, 101, 102, 201, 103]);
    }

    #[test]
    fn a_key_returning_after_an_absence_gets_one_turn_not_a_burst() {
        let mut q = WaitQueue::default();
        for t in 0..10 {
            q.push(w(100 + t), &p(0, "steady", 1));
        }
        for _ in 0..5 {
            q.pop();
        }
        // "late" queues three tickets after "steady" had five turns.
        for t in 0..3 {
            q.push(w(200 + t), &p(0, "late", 1));
        }
        assert_eq!(drain(&mut q), vec![105, 200, 106, 201, 107, 202, 108, 109]);
    }

    #[test]
    fn withdrawal_keeps_the_bookkeeping_exact() {
        let mut q = WaitQueue::default();
        let a = q.push(w(1), &p(3, "a", 1));
        let b = q.push(w(2), &p(3, "a", 1));
        q.push(w(3), &p(-1, "b", 1));
        assert_eq!(q.position(&b), 1);
        assert_eq!(q.remove(&a).unwrap().ticket, 1);
        assert_eq!(q.position(&b), 0);
        q.check().unwrap();
        assert_eq!(q.remove_where(|w| w.ticket == 2).len(), 1);
        q.check().unwrap();
        assert_eq!(drain(&mut q), vec![3]);
        assert_eq!(
            q,
            WaitQueue {
                next_seq: 3,
                ..WaitQueue::default()
            }
        );
    }

    #[test]
    fn positions_follow_service_order_and_survive_encoding() {
        let mut q = WaitQueue::default();
        let mut keys = vec![];
        for t in 0..300 {
            let key = match t % 3 {
                0 => p(0, "a", 1),
                1 => p(0, "b", 3),
                _ => p(2, "c", 1),
            };
            keys.push(q.push(w(t), &key));
        }
        let served: Vec<QueueKey> = q.iter().map(|(k, _)| *k).collect();
        for k in &keys {
            let counted = served.iter().filter(|s| *s < k).count() as u32;
            assert_eq!(q.position(k), counted);
        }
        let bytes = crate::codec::encode(&q);
        let decoded: WaitQueue = crate::codec::decode(&bytes).unwrap();
        decoded.check().unwrap();
        assert_eq!(decoded, q, "decoding rebuilds the same ranks");
        assert_eq!(decoded.position(&keys[299]), q.position(&keys[299]));
    }
}
