//! A tenant's runs, budgets and halts: ceilings, run admission (reserve), settlements, and
//! halts with their effect on the tenant's limits.
//!
//! Admission checks, in order: the run already admitted (a retry answers `Admitted` and
//! takes no second slot, even after a halt: its first attempt was admitted, only its reply
//! may have been lost, and the slot it holds is its own), a halt covering the run's agent,
//! the running ceiling, then the period's budgets. This is the order `Acquire` uses too:
//! idempotency before anything that may have changed since the first attempt (G5).
//!
//! Budget holds (G6): a reserve may carry a hold, the most its run may spend in the period.
//! It is admitted only while, for each budget it holds against, settled + standing holds +
//! this hold fit the budget, so runs admitted with holds can never overspend together. The
//! hold stands in the period's `held_*` until the run's settlements in that period use it
//! up (each charge takes what it can from what is left; a charge above that is an overrun,
//! recorded and answered `Overrun`) or its slot is released, which frees what is left. A
//! hold names tokens, minor units or both; a kind it leaves out is held at 0. A reserve
//! without a hold keeps the older rule: refused once the spend has reached the budget. A budget
//! is compared with what was settled so far; settlements are idempotent per (run, epoch).

use std::collections::BTreeSet;

use super::{Machine, Reserve};
use crate::bounds::{
    HALTS_MAX, PERIODS_MAX, RECEIPTS_MAX, RUNS_MAX, TENANT_HALTS_MAX, TENANT_PERIODS_MAX,
    TENANT_RUNS_MAX, TENANTS_MAX,
};
use crate::machine::command::{Change, HaltScope, LimitId, Settle};
use crate::machine::deadlines::Prune;
use crate::machine::reply::{BudgetKind, Event, Refusal, Reply};
use crate::machine::tenant::{Receipt, RunSlot, Tenant};
use crate::machine::totals::{TenantCounts, Totals};

impl Machine {
    pub(super) fn set_tenant(
        &mut self,
        tenant: &str,
        max_running: Change<u32>,
        budget_tokens: Change<u64>,
        budget_minor: Change<u64>,
    ) -> Result<Reply, Refusal> {
        let t = self.tenant_mut(tenant)?;
        t.max_running = max_running.applied_to(t.max_running);
        t.budget_tokens = budget_tokens.applied_to(t.budget_tokens);
        t.budget_minor = budget_minor.applied_to(t.budget_minor);
        Ok(Reply::Done)
    }

    pub(super) fn reserve(&mut self, r: &Reserve<'_>, wall_ms: u64) -> Result<Reply, Refusal> {
        if r.hold.is_some() && r.period.is_none() {
            return Err(Refusal::Invalid(
                "a hold needs a period to hold against".into(),
            ));
        }
        let now_ms = self.now_ms();
        let totals = self.totals;
        let t = self.tenant_mut(r.tenant)?;
        // The same run again (a retry whose first reply was lost): the same answer (G5).
        if t.running.contains_key(r.run) {
            return Ok(Reply::Admitted);
        }
        refuse_run(t, r, &totals)?;
        let (hold_tokens, hold_minor) = r.hold.unwrap_or_default();
        let hold_period = place_hold(t, r);
        t.running.insert(
            r.run.to_owned(),
            RunSlot {
                admitted_at_wall_ms: wall_ms,
                admitted_at_log_ms: now_ms,
                agent: r.agent.map(str::to_owned),
                hold_period,
                hold_tokens,
                hold_minor,
            },
        );
        Ok(Reply::Admitted)
    }

    /// Frees a run's slot, and what is left of its hold. Idempotent.
    pub(super) fn release_run(&mut self, tenant: &str, run: &str) -> Reply {
        if let Some(t) = self.saved.tenants.get_mut(tenant) {
            t.free_slot(run);
        }
        Reply::Done
    }

    pub(super) fn settle(&mut self, s: &Settle) -> Result<Reply, Refusal> {
        let now_ms = self.now_ms();
        let totals = self.totals;
        let t = self.tenant_mut(&s.tenant)?;
        t.prune_receipts(now_ms);
        let receipt = Receipt {
            period: s.period.clone(),
            tokens: s.tokens,
            minor_units: s.minor_units,
            release_slot: s.release_slot,
            settled_at_log_ms: now_ms,
        };
        let key = (s.run.clone(), s.epoch);
        // PLANTED(settle-twice): a retry with the same payload falls through and charges again.
        if let Some(stored) = t.receipts.get(&key).filter(|stored| {
            !(crate::planted::is(crate::planted::Plant::SettleTwice)
                && stored.same_payload(&receipt))
        }) {
            return if stored.same_payload(&receipt) {
                Ok(Reply::Settled { duplicate: true })
            } else {
                Err(Refusal::Conflict {
                    tenant: s.tenant.clone(),
                    run: s.run.clone(),
                    epoch: s.epoch,
                })
            };
        }
        // Receipts pruned just now are still in `totals`: the bound is judged conservatively.
        Refusal::room(
            totals.tenants.receipts,
            RECEIPTS_MAX,
            format_args!("settlement receipts of all tenants"),
        )?;
        if let Some(period) = &s.period {
            room_for_period(&s.tenant, t, period, &totals)?;
        }
        let overrun = match &s.period {
            Some(period) => charge(t, s, period),
            None => (0, 0),
        };
        if s.release_slot {
            t.free_slot(&s.run);
        }
        t.keep_receipt(key, receipt);
        Ok(match overrun {
            (0, 0) => Reply::Settled { duplicate: false },
            (tokens, minor_units) => Reply::Overrun {
                tokens,
                minor_units,
            },
        })
    }

    /// `Tick`: drops the receipts and finished tickets past their retention, so that idle
    /// sessions and tenants do not keep the machine-wide bounds reached. It visits only the
    /// sessions and tenants filed as due in the deadline index (`machine::deadlines`):
    /// `O(due · log n)`, however many sessions and tenants there are.
    pub(super) fn prune_due(&mut self) -> Reply {
        let now_ms = self.now_ms();
        for item in self.deadlines.prune.due(now_ms) {
            match item {
                Prune::Tickets(id) => {
                    let session = self
                        .saved
                        .sessions
                        .get_mut(&id)
                        .expect("filed sessions exist");
                    session.prune_finished(now_ms, &mut self.totals);
                    self.refile_tickets(id);
                }
                Prune::Receipts(name) => {
                    let t = self
                        .saved
                        .tenants
                        .get_mut(&name)
                        .expect("filed tenants exist");
                    let before = TenantCounts::of(Some(t));
                    t.prune_receipts(now_ms);
                    self.totals
                        .tenant_changed(before, TenantCounts::of(Some(t)));
                    self.refile_receipts(&name);
                }
            }
        }
        Reply::Done
    }

    /// Sets a halt: tells the holders in its scope (they keep their permits), refuses the
    /// waiters in its scope, and serves each limit, since a withdrawn head may unblock the
    /// waiters behind it.
    pub(super) fn set_halt(
        &mut self,
        tenant: &str,
        scope: &HaltScope,
        reason: &str,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let totals = self.totals;
        let t = self.tenant_mut(tenant)?;
        if !t.halts.contains_key(scope) {
            let count = t.halts.len() as u64;
            Refusal::room(
                count,
                TENANT_HALTS_MAX,
                format_args!("halts of tenant {tenant}"),
            )?;
            Refusal::room(
                totals.tenants.halts,
                HALTS_MAX,
                format_args!("halts of all tenants"),
            )?;
        }
        t.halts.insert(scope.clone(), reason.to_owned());
        let defs: Vec<LimitId> = t.limits.values().copied().collect();
        let ids: Vec<LimitId> = defs.into_iter().flat_map(|d| self.states_of(d)).collect();
        let refusal = Refusal::Halted {
            tenant: tenant.to_owned(),
            scope: scope.clone(),
            reason: reason.to_owned(),
        };
        // Every waiter in scope leaves every queue before any limit is served, so no grant
        // reaches a request the halt covers; a holder of several parts is told once.
        let mut told = BTreeSet::new();
        let mut refused = Vec::new();
        for &id in &ids {
            let limit = self.saved.limits.get_mut(&id).expect("named limits exist");
            for (_, h) in limit.holders.iter() {
                if scope.covers(h.agent.as_deref()) && told.insert((h.session, h.ticket)) {
                    events.push(Event::Halted {
                        session: h.session,
                        ticket: h.ticket,
                        scope: scope.clone(),
                        reason: reason.to_owned(),
                    });
                }
            }
            // PLANTED(halt-keeps-queue): the waiters in scope stay queued, to be granted.
            if !crate::planted::is(crate::planted::Plant::HaltKeepsQueue) {
                refused.extend(
                    limit
                        .queue
                        .remove_where(|w| scope.covers(w.agent.as_deref())),
                );
            }
        }
        let mut touched: BTreeSet<LimitId> = ids.into_iter().collect();
        for (_, w) in refused {
            touched.extend(self.refuse_waiter(&w, refusal.clone(), events));
        }
        // Withdrawing a blocked head can let an out-of-scope waiter behind it through.
        for id in touched {
            self.serve(id, events);
        }
        Ok(Reply::Done)
    }

    /// Lifts one halt record; another scope's record stands. Idempotent.
    pub(super) fn clear_halt(&mut self, tenant: &str, scope: &HaltScope) -> Reply {
        if let Some(t) = self.saved.tenants.get_mut(tenant) {
            t.halts.remove(scope);
        }
        Reply::Done
    }
}

impl Machine {
    /// The tenant named, created if new, or `AtCapacity` when [`TENANTS_MAX`] exist.
    pub(super) fn tenant_mut(&mut self, tenant: &str) -> Result<&mut Tenant, Refusal> {
        if !self.saved.tenants.contains_key(tenant) && self.saved.tenants.len() >= TENANTS_MAX {
            return Err(Refusal::AtCapacity {
                what: "tenants".into(),
                limit: TENANTS_MAX as u64,
            });
        }
        Ok(self.saved.tenants.entry(tenant.to_owned()).or_default())
    }
}

/// `AtCapacity` when `period` is new to the tenant and it keeps [`TENANT_PERIODS_MAX`].
/// Also `AtCapacity` when the period is new and all tenants keep [`PERIODS_MAX`].
fn room_for_period(tenant: &str, t: &Tenant, period: &str, totals: &Totals) -> Result<(), Refusal> {
    if t.spent.contains_key(period) {
        return Ok(());
    }
    Refusal::room(
        t.spent.len() as u64,
        TENANT_PERIODS_MAX,
        format_args!("periods of tenant {tenant}"),
    )?;
    Refusal::room(
        totals.tenants.periods,
        PERIODS_MAX,
        format_args!("periods of all tenants"),
    )?;
    Ok(())
}

/// Charges settlement `s` to `period`: the charge uses up the run's hold on this period
/// first, and the rest is overrun, recorded in the period's spend (G6). Returns the overrun
/// (tokens, minor units).
fn charge(t: &mut Tenant, s: &Settle, period: &str) -> (u64, u64) {
    let slot = t
        .running
        .get_mut(&s.run)
        .filter(|slot| slot.hold_period.as_deref() == Some(period));
    let (from_hold, overrun) = match slot {
        Some(slot) => {
            let taken = (
                s.tokens.min(slot.hold_tokens),
                s.minor_units.min(slot.hold_minor),
            );
            slot.hold_tokens -= taken.0;
            slot.hold_minor -= taken.1;
            (taken, (s.tokens - taken.0, s.minor_units - taken.1))
        }
        None => ((0, 0), (0, 0)),
    };
    let spent = t.spent.entry(period.to_owned()).or_default();
    spent.tokens = spent.tokens.saturating_add(s.tokens);
    spent.minor_units = spent.minor_units.saturating_add(s.minor_units);
    spent.held_tokens -= from_hold.0;
    spent.held_minor -= from_hold.1;
    spent.overrun_tokens = spent.overrun_tokens.saturating_add(overrun.0);
    spent.overrun_minor = spent.overrun_minor.saturating_add(overrun.1);
    overrun
}

/// Why tenant `t` cannot admit the new run of `r`, in this order: a halt covering its agent,
/// the tenant's ceiling, the period's budget, then the bounds on runs and periods.
fn refuse_run(t: &Tenant, r: &Reserve<'_>, totals: &Totals) -> Result<(), Refusal> {
    let tenant = r.tenant;
    t.refuse_if_halted(tenant, r.agent)?;
    let running = t.running.len() as u32;
    // Compared once, outside any loop: a ceiling of 0 must refuse, not skip the check.
    if let Some(max) = t.max_running
        && running >= max
    {
        return Err(Refusal::TooManyRuns {
            tenant: tenant.to_owned(),
            running,
        });
    }
    if let Some(refusal) = r.period.and_then(|p| over_budget(tenant, t, p, r.hold)) {
        return Err(refusal);
    }
    let what = format_args!("running runs of tenant {tenant}");
    Refusal::room(t.running.len() as u64, TENANT_RUNS_MAX, what)?;
    let what = format_args!("running runs of all tenants");
    Refusal::room(totals.tenants.runs, RUNS_MAX, what)?;
    if let (Some(p), Some(_)) = (r.period, r.hold) {
        room_for_period(tenant, t, p, totals)?;
    }
    Ok(())
}

/// Adds the hold of `r`, if it carries one, to its period's standing holds; the period
/// held against, for the run's slot.
fn place_hold(t: &mut Tenant, r: &Reserve<'_>) -> Option<String> {
    let (Some(period), Some((tokens, minor))) = (r.period, r.hold) else {
        return None;
    };
    let spend = t.spent.entry(period.to_owned()).or_default();
    spend.held_tokens += tokens;
    spend.held_minor += minor;
    Some(period.to_owned())
}

/// The refusal of a reserve charged to `period` that its budgets cannot admit, tokens
/// first: with a hold of that kind, when settled + standing holds + the hold would pass the
/// budget; without one, when the spend has reached it.
fn over_budget(
    tenant: &str,
    t: &Tenant,
    period: &str,
    hold: Option<(u64, u64)>,
) -> Option<Refusal> {
    let spend = t.spent.get(period).copied().unwrap_or_default();
    let (hold_tokens, hold_minor) = hold.unwrap_or_default();
    [
        (
            BudgetKind::Tokens,
            spend.tokens,
            spend.held_tokens,
            hold_tokens,
            t.budget_tokens,
        ),
        (
            BudgetKind::MinorUnits,
            spend.minor_units,
            spend.held_minor,
            hold_minor,
            t.budget_minor,
        ),
    ]
    .into_iter()
    .find_map(|(kind, spent, held, this, budget)| {
        let budget = budget?;
        let refused = if hold.is_some() {
            // u128: three u64 sums cannot overflow the comparison.
            spent as u128 + held as u128 + this as u128 > budget as u128
        } else {
            spent >= budget
        };
        refused.then(|| Refusal::BudgetExhausted {
            tenant: tenant.to_owned(),
            period: period.to_owned(),
            kind,
            spent,
            held,
            hold: this,
            budget,
        })
    })
}
