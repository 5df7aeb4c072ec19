//! A tenant: its namespace of limits, its run slots and ceilings, its spend per period with
//! the receipts that make settlements idempotent, and its halts.
//!
//! Run slots are a set of named runs, not a counter: a stranded slot names the run that
//! holds it (with its admitted-at time), and releasing it twice is harmless. Halts are one
//! record per (tenant, scope), so a tenant halt and an agent halt are independent.
//!
//! Receipt retention: a receipt is kept [`RECEIPT_RETENTION_MS`] of log time after its
//! settle, and at most [`TENANT_RECEIPTS_MAX`] per tenant (oldest dropped first, counted in
//! `receipts_evicted`). Expired receipts are dropped when the tenant next settles and by
//! the `Tick` that first sees them due (the machine files each tenant under its oldest
//! receipt's deadline, so a `Tick` visits only tenants with something to drop).
//!
//! Invariants:
//! - `receipt_order` lists exactly the keys of `receipts`, in settle order.
//! - Receipts settle in log-time order, so the front of `receipt_order` is the oldest and
//!   its retention is the tenant's next prune deadline ([`Tenant::receipts_due_ms`]).
//! - A period's `held_*` is the sum of what is left of the holds of the running runs that
//!   hold against it (see [`Spend`]).
//! - A ceiling of 0 admits nobody.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::command::{HaltScope, LimitId};
use super::reply::Refusal;
use crate::bounds::{RECEIPT_RETENTION_MS, TENANT_RECEIPTS_MAX};

/// A run in the running set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSlot {
    /// Leader wall clock at admission (Unix ms), for people looking for stranded slots.
    pub admitted_at_wall_ms: u64,
    /// Log time at admission.
    pub admitted_at_log_ms: u64,
    pub agent: Option<String>,
    /// The period its hold is on; `None` when it holds nothing.
    pub hold_period: Option<String>,
    /// What is left of its hold (tokens, minor units): the hold less what its settlements in
    /// `hold_period` charged. Counted in that period's `held_*` until settled or released.
    pub hold_tokens: u64,
    pub hold_minor: u64,
}

/// Spend charged to one period, and the holds standing on it.
///
/// Invariant: `held_tokens` (`held_minor`) is the sum of the remaining holds of the running
/// runs whose `hold_period` is this period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spend {
    pub tokens: u64,
    pub minor_units: u64,
    /// Standing holds of admitted runs not yet settled (G6).
    pub held_tokens: u64,
    pub held_minor: u64,
    /// What settlements charged above their run's hold, summed.
    pub overrun_tokens: u64,
    pub overrun_minor: u64,
}

impl Spend {
    /// Whether nothing is charged, held or overrun: the period can be forgotten.
    pub fn is_empty(&self) -> bool {
        *self == Spend::default()
    }
}

/// What a settlement charged, kept under its (run, epoch) key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub period: Option<String>,
    pub tokens: u64,
    pub minor_units: u64,
    pub release_slot: bool,
    pub settled_at_log_ms: u64,
}

impl Receipt {
    /// Whether `other` is the same payload (the settle time is not payload).
    pub fn same_payload(&self, other: &Receipt) -> bool {
        self.period == other.period
            && self.tokens == other.tokens
            && self.minor_units == other.minor_units
            && self.release_slot == other.release_slot
    }
}

/// One tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Limit names to ids.
    pub limits: BTreeMap<String, LimitId>,
    pub max_running: Option<u32>,
    pub budget_tokens: Option<u64>,
    pub budget_minor: Option<u64>,
    pub running: BTreeMap<String, RunSlot>,
    pub spent: BTreeMap<String, Spend>,
    pub receipts: BTreeMap<(String, u64), Receipt>,
    receipt_order: VecDeque<(String, u64)>,
    /// Receipts dropped by the count bound before their retention ran out.
    pub receipts_evicted: u64,
    pub halts: BTreeMap<HaltScope, String>,
}

impl Tenant {
    /// `Halted` when a halt of this tenant (named `name`) covers `agent`'s work (`None`: no
    /// agent), the tenant-wide halt first; the refusal names the scope and its reason.
    pub fn refuse_if_halted(&self, name: &str, agent: Option<&str>) -> Result<(), Refusal> {
        match self.halt_for(agent) {
            None => Ok(()),
            Some((scope, reason)) => Err(Refusal::Halted {
                tenant: name.to_owned(),
                scope,
                reason,
            }),
        }
    }

    /// The halt covering an agent (`None`: no agent), tenant-wide first.
    fn halt_for(&self, agent: Option<&str>) -> Option<(HaltScope, String)> {
        if let Some(reason) = self.halts.get(&HaltScope::Tenant) {
            return Some((HaltScope::Tenant, reason.clone()));
        }
        let scope = HaltScope::Agent(agent?.to_owned());
        self.halts.get(&scope).map(|reason| (scope, reason.clone()))
    }

    /// Frees `run`'s slot, if it holds one, and what is left of its hold.
    pub fn free_slot(&mut self, run: &str) {
        let Some(slot) = self.running.remove(run) else {
            return;
        };
        if let Some(period) = &slot.hold_period {
            let spend = self
                .spent
                .get_mut(period)
                .expect("a hold's period is kept while the hold stands");
            spend.held_tokens -= slot.hold_tokens;
            spend.held_minor -= slot.hold_minor;
        }
    }

    /// Keeps a new receipt and applies the retention rule.
    pub fn keep_receipt(&mut self, key: (String, u64), receipt: Receipt) {
        let now_ms = receipt.settled_at_log_ms;
        self.receipts.insert(key.clone(), receipt);
        self.receipt_order.push_back(key);
        while self.receipt_order.len() > TENANT_RECEIPTS_MAX {
            let oldest = self
                .receipt_order
                .pop_front()
                .expect("longer than the bound");
            self.receipts.remove(&oldest);
            self.receipts_evicted += 1;
        }
        self.prune_receipts(now_ms);
    }

    /// Drops receipts older than the retention window.
    pub fn prune_receipts(&mut self, now_ms: u64) {
        while let Some(oldest) = self.receipt_order.front() {
            let at = self.receipts[oldest].settled_at_log_ms;
            if now_ms.saturating_sub(at) < RECEIPT_RETENTION_MS {
                break;
            }
            let oldest = self.receipt_order.pop_front().expect("front exists");
            self.receipts.remove(&oldest);
        }
    }

    /// When the oldest receipt's retention runs out (the machine's prune deadline for this
    /// tenant), or `None` when it keeps none. Also built from a restored state before
    /// `check` has seen it, so an order naming a missing receipt answers `None` here (and
    /// `check` refuses the state) instead of panicking.
    pub fn receipts_due_ms(&self) -> Option<u64> {
        let oldest = self.receipt_order.front()?;
        Some(
            self.receipts
                .get(oldest)?
                .settled_at_log_ms
                .saturating_add(RECEIPT_RETENTION_MS),
        )
    }

    /// Moves every log time it keeps through `shift` (its adopt after a move): run
    /// admissions and receipts' settle times, which keep their order since `shift` is
    /// monotonic.
    pub fn shift_times(&mut self, shift: &dyn Fn(u64) -> u64) {
        for slot in self.running.values_mut() {
            slot.admitted_at_log_ms = shift(slot.admitted_at_log_ms);
        }
        for receipt in self.receipts.values_mut() {
            receipt.settled_at_log_ms = shift(receipt.settled_at_log_ms);
        }
    }

    /// Whether the tenant holds nothing worth keeping (it can be dropped from the state).
    pub fn is_empty(&self) -> bool {
        *self == Tenant::default()
    }

    /// Checks the invariants of the module doc.
    pub fn check(&self) -> Result<(), String> {
        let mut held: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for slot in self.running.values() {
            if let Some(p) = &slot.hold_period {
                let h = held.entry(p.as_str()).or_default();
                h.0 += slot.hold_tokens;
                h.1 += slot.hold_minor;
            }
        }
        for (period, spend) in &self.spent {
            let h = held.remove(period.as_str()).unwrap_or_default();
            if (spend.held_tokens, spend.held_minor) != h {
                return Err(format!(
                    "period {period} holds {:?} but its runs hold {h:?}",
                    (spend.held_tokens, spend.held_minor)
                ));
            }
        }
        if let Some((period, _)) = held.first_key_value() {
            return Err(format!(
                "runs hold against period {period}, which is not kept"
            ));
        }
        if self.receipt_order.len() != self.receipts.len()
            || self
                .receipt_order
                .iter()
                .any(|k| !self.receipts.contains_key(k))
        {
            return Err("receipt_order does not list the receipts".into());
        }
        Ok(())
    }
}
