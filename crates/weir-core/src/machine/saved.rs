//! [`SavedLimits`]: everything the machine keeps that a snapshot carries, field by field.
//!
//! The machine ([`crate::machine::Machine`]) is `SavedLimits` plus what it derives from it:
//! the lease-expiry index, the deadline index (`machine::deadlines`), the totals
//! of the bounded items ([`crate::machine::totals`]), each queue's ranks and each limit's
//! sums of the token leases on it. Those are
//! rebuilt when a snapshot is restored, so a snapshot cannot carry an index that disagrees
//! with the state. This file sits below the machine, the snapshot format and the derived
//! indexes: each of them reads `SavedLimits`, and it reads none of them.
//!
//! Field order is part of the snapshot format (see [`crate::machine::snapshot`]): append
//! fields, never reorder, and bump `SNAPSHOT_VERSION` with any change.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::clock::LogClock;
use super::command::{Fence, LimitId, SessionId};
use super::frozen_tenant::FrozenTenant;
use super::key_table::{KeyBucket, KeyTable};
use super::limit::{Limit, LimitSpec};
use super::session::Session;
use super::tenant::Tenant;
use super::token_lease::TokenLeases;
use super::totals::{TenantCounts, Totals};

/// The machine's saved state: what a snapshot carries, field by field in this order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedLimits {
    pub(super) clock: LogClock,
    /// Index of the last entry applied; `None` before any (Raft's first entry is index 0).
    pub(super) applied: Option<u64>,
    /// The last fence handed out (0 before any).
    pub(super) last_fence: Fence,
    /// The last session id handed out.
    pub(super) last_session: SessionId,
    /// The last limit id handed out.
    pub(super) last_limit: LimitId,
    pub(super) sessions: BTreeMap<SessionId, Session>,
    /// Boxed: a map's nodes then hold a pointer a limit, not the limit itself in every
    /// slot of every node (half of them empty). Encoded as the limit itself.
    pub(super) limits: BTreeMap<LimitId, Box<Limit>>,
    pub(super) tenants: BTreeMap<String, Tenant>,
    /// Token leases (version 7 on).
    pub(super) token_leases: TokenLeases,
    /// The lean keys of each keyed definition, by its id: keys whose state differs from a
    /// fresh one by their bucket alone (version 8 on). A definition without lean keys has
    /// no entry.
    pub(super) lean_keys: BTreeMap<LimitId, KeyTable>,
    /// The tenants frozen here by a move and not yet dropped, by name (version 9 on): each
    /// answers `Moved` until its `DropFrozen`.
    pub(super) frozen: BTreeMap<String, FrozenTenant>,
    /// The data group each placed tenant lives in, by name (version 10 on): kept by the
    /// metadata group's machine alone (`PlaceTenant`); empty in every data group's.
    pub(super) placements: BTreeMap<String, u64>,
}

impl SavedLimits {
    /// Counts every bounded item the state keeps (on restore, and by the check).
    pub fn count_totals(&self) -> Totals {
        let mut totals = Totals::default();
        for session in self.sessions.values() {
            session.count_into(&mut totals);
        }
        totals.lean_keys = self.lean_keys.values().map(|t| t.len() as u64).sum();
        totals.live_keys =
            self.limits.values().filter(|l| l.is_key()).count() as u64 + totals.lean_keys;
        for t in self.tenants.values() {
            totals.tenant_changed(TenantCounts::default(), TenantCounts::of(Some(t)));
        }
        totals
    }

    /// Sets every limit's derived lease sums from the leases (on restore).
    pub fn rebuild_leased(&mut self) {
        for limit in self.limits.values_mut() {
            limit.leased = Default::default();
        }
        for (&(_, id), lease) in &self.token_leases.leases {
            // A lease on a limit that does not exist is left for the check to refuse.
            if let Some(limit) = self.limits.get_mut(&id) {
                limit.leased.rate_micro_per_s += lease.rate_micro_per_s;
                limit.leased.cap += lease.cap;
                limit.leased.holders += 1;
            }
        }
    }

    /// Gives each key the shared spec of its definition, which a decoded state has one of
    /// per limit (a key whose spec differs keeps its own, for the check to find).
    pub fn share_specs(&mut self) {
        let keyed: BTreeMap<LimitId, Arc<LimitSpec>> = self
            .limits
            .iter()
            .filter(|(_, l)| !l.is_key() && l.spec.keys_max.is_some())
            .map(|(&id, l)| (id, Arc::clone(&l.spec)))
            .collect();
        for limit in self.limits.values_mut() {
            if let Some(spec) = limit.of.and_then(|of| keyed.get(&of))
                && *spec == limit.spec
            {
                limit.spec = Arc::clone(spec);
            }
        }
    }

    /// Sets every lean key table's due times from its definition's spec (on restore: the
    /// encoding does not carry them). A table of no keyed definition is left for the check.
    pub fn rescan_lean_keys(&mut self) {
        for (def, table) in &mut self.lean_keys {
            if let Some(d) = self.limits.get(def) {
                let spec = Arc::clone(&d.spec);
                table.rescan(&|b| lean_due_ms(&spec, b));
            }
        }
    }
}

/// The log time a lean key of a definition of spec `spec` is full again: its due time (as
/// `Limit::full_at_ms` for a key without a lease, whose cap is the burst).
pub fn lean_due_ms(spec: &LimitSpec, b: KeyBucket) -> u64 {
    super::limit::full_at_ms(
        spec.burst.saturating_mul(super::limit::MICRO),
        spec.rate_micro_per_s,
        b.tokens_micro,
        u64::from(b.refill_remainder),
        b.refilled_at_ms,
    )
}
