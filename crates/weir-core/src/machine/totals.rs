//! [`Totals`]: how many of each bounded item the whole machine keeps, so the global bounds of
//! [`crate::bounds`] (live, queued and finished tickets, receipts, runs, periods, halts,
//! live keys) are
//! judged in O(1) per command.
//!
//! Totals are derived: never serialized, computed from the saved state on restore
//! (`SavedLimits::count_totals`), kept by the machine as items come and go, and compared with
//! a fresh count by [`crate::machine::Machine::check`]. Two machines in the same state have
//! the same totals.
//!
//! Session-level counts move through [`crate::machine::session::Session`]'s methods; the
//! tenant-level ones are taken from a tenant's container sizes before and after each command
//! that touches it ([`TenantCounts`]), so no mutation site has to remember them. This file
//! knows neither sessions nor the saved state: they count themselves into it.

use super::tenant::Tenant;

/// Counts of the globally bounded items. See the module doc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Places live tickets take, held or queued, across every session: a ticket of one
    /// limit takes one, a request of several parts one per part ([`crate::machine::session::Ticket::places`]).
    pub live_tickets: u64,
    /// Of those, the queued ones: waiters in queues ([`crate::machine::session::Ticket::waiters`]).
    pub queued_tickets: u64,
    /// Finished tickets kept for retries, across every session.
    pub finished_tickets: u64,
    /// Of those, the refusals (`Finished::is_refusal`), which may be large.
    pub finished_refusals: u64,
    /// Tenant-level counts, summed over every tenant.
    pub tenants: TenantCounts,
    /// Live keys of keyed limits, across every definition: the limits whose `of` names one and
    /// the lean keys.
    pub live_keys: u64,
    /// Of those, the lean keys: kept in their definitions' key tables, not as limits.
    pub lean_keys: u64,
}

/// Sizes of one tenant's bounded containers (or their sums over tenants).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantCounts {
    pub receipts: u64,
    pub runs: u64,
    pub periods: u64,
    pub halts: u64,
}

impl TenantCounts {
    /// The counts of `t` now (zero for a tenant that does not exist).
    pub fn of(t: Option<&Tenant>) -> TenantCounts {
        t.map_or_else(TenantCounts::default, |t| TenantCounts {
            receipts: t.receipts.len() as u64,
            runs: t.running.len() as u64,
            periods: t.spent.len() as u64,
            halts: t.halts.len() as u64,
        })
    }

    fn add(&mut self, other: TenantCounts) {
        self.receipts += other.receipts;
        self.runs += other.runs;
        self.periods += other.periods;
        self.halts += other.halts;
    }

    fn sub(&mut self, other: TenantCounts) {
        self.receipts -= other.receipts;
        self.runs -= other.runs;
        self.periods -= other.periods;
        self.halts -= other.halts;
    }
}

impl Totals {
    /// A tenant's counts went from `before` to `after` (from nothing, for a count of the
    /// whole state).
    pub fn tenant_changed(&mut self, before: TenantCounts, after: TenantCounts) {
        self.tenants.sub(before);
        self.tenants.add(after);
    }
}
