//! A tenant's runs, budgets and halts: ceilings, run admission (reserve), settlements, and
//! halts with their effect on the tenant's limits.
//!
//! Admission checks, in order: the run already admitted (a retry answers `Admitted` and
//! takes no second slot, even after a halt: its first attempt was admitted, only its reply
//! may have been lost, and the slot it holds is its own), a halt covering the run's agent,
//! the running ceiling, then the period's budgets. This is the order `Acquire` uses too:
//! idempotency before anything that may have changed since the first attempt (G5). A budget
//! is compared with what was settled so far; settlements are idempotent per (run, epoch).

use super::Machine;
use crate::bounds::REASON_BYTES_MAX;
use crate::machine::command::{Change, HaltScope, LimitId, Settle, check_key};
use crate::machine::reply::{BudgetKind, Event, Refusal, Reply};
use crate::machine::tenant::{Receipt, RunSlot, Tenant};

impl Machine {
    pub(super) fn set_tenant(
        &mut self,
        tenant: &str,
        max_running: Change<u32>,
        budget_tokens: Change<u64>,
        budget_minor: Change<u64>,
    ) -> Result<Reply, Refusal> {
        check_key("tenant", tenant)?;
        let t = self.saved.tenants.entry(tenant.to_owned()).or_default();
        t.max_running = max_running.applied_to(t.max_running);
        t.budget_tokens = budget_tokens.applied_to(t.budget_tokens);
        t.budget_minor = budget_minor.applied_to(t.budget_minor);
        Ok(Reply::Done)
    }

    pub(super) fn reserve(
        &mut self,
        tenant: &str,
        run: &str,
        agent: Option<&str>,
        period: Option<&str>,
        wall_ms: u64,
    ) -> Result<Reply, Refusal> {
        check_key("tenant", tenant)?;
        check_key("run", run)?;
        if let Some(agent) = agent {
            check_key("agent", agent)?;
        }
        if let Some(period) = period {
            check_key("period", period)?;
        }
        let now_ms = self.now_ms();
        let t = self.saved.tenants.entry(tenant.to_owned()).or_default();
        // The same run again (a retry whose first reply was lost): the same answer (G5).
        if t.running.contains_key(run) {
            return Ok(Reply::Admitted);
        }
        if let Some((scope, reason)) = t.halt_for(agent) {
            return Err(Refusal::Halted { scope, reason });
        }
        let running = t.running.len() as u32;
        // Compared once, outside any loop: a ceiling of 0 must refuse, not skip the check.
        if let Some(max) = t.max_running
            && running >= max
        {
            return Err(Refusal::TooManyRuns { running });
        }
        if let Some(refusal) = period.and_then(|p| over_budget(t, p)) {
            return Err(refusal);
        }
        t.running.insert(
            run.to_owned(),
            RunSlot {
                admitted_at_wall_ms: wall_ms,
                admitted_at_log_ms: now_ms,
                agent: agent.map(str::to_owned),
            },
        );
        Ok(Reply::Admitted)
    }

    /// Frees a run's slot. Idempotent.
    pub(super) fn release_run(&mut self, tenant: &str, run: &str) -> Reply {
        if let Some(t) = self.saved.tenants.get_mut(tenant) {
            t.running.remove(run);
        }
        Reply::Done
    }

    pub(super) fn settle(&mut self, s: &Settle) -> Result<Reply, Refusal> {
        s.validate()?;
        let now_ms = self.now_ms();
        let t = self.saved.tenants.entry(s.tenant.clone()).or_default();
        t.prune_receipts(now_ms);
        let receipt = Receipt {
            period: s.period.clone(),
            tokens: s.tokens,
            minor_units: s.minor_units,
            release_slot: s.release_slot,
            settled_at_log_ms: now_ms,
        };
        let key = (s.run.clone(), s.epoch);
        if let Some(stored) = t.receipts.get(&key) {
            return if stored.same_payload(&receipt) {
                Ok(Reply::Settled { duplicate: true })
            } else {
                Err(Refusal::Conflict)
            };
        }
        if let Some(period) = &s.period {
            let spent = t.spent.entry(period.clone()).or_default();
            spent.tokens = spent.tokens.saturating_add(s.tokens);
            spent.minor_units = spent.minor_units.saturating_add(s.minor_units);
        }
        if s.release_slot {
            t.running.remove(&s.run);
        }
        t.keep_receipt(key, receipt);
        Ok(Reply::Settled { duplicate: false })
    }

    /// `Tick`: drops every tenant's receipts past their retention.
    pub(super) fn prune_receipts(&mut self) -> Reply {
        let now_ms = self.now_ms();
        for t in self.saved.tenants.values_mut() {
            t.prune_receipts(now_ms);
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
        check_key("tenant", tenant)?;
        scope.validate()?;
        if reason.len() > REASON_BYTES_MAX {
            return Err(Refusal::Invalid(format!(
                "reason is {} bytes, the bound is {REASON_BYTES_MAX}",
                reason.len()
            )));
        }
        let t = self.saved.tenants.entry(tenant.to_owned()).or_default();
        t.halts.insert(scope.clone(), reason.to_owned());
        let ids: Vec<LimitId> = t.limits.values().copied().collect();
        let refusal = Refusal::Halted {
            scope: scope.clone(),
            reason: reason.to_owned(),
        };
        for id in ids {
            let limit = self.saved.limits.get_mut(&id).expect("named limits exist");
            for (_, h) in limit.holders.iter() {
                if scope.covers(h.agent.as_deref()) {
                    events.push(Event::Halted {
                        session: h.session,
                        ticket: h.ticket,
                        scope: scope.clone(),
                        reason: reason.to_owned(),
                    });
                }
            }
            let refused = limit
                .queue
                .remove_where(|w| scope.covers(w.agent.as_deref()));
            for (_, w) in refused {
                self.refuse_waiter(&w, refusal.clone(), events);
            }
            // Withdrawing a blocked head can let an out-of-scope waiter behind it through.
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

/// The refusal of a reserve charged to `period` when its spend has reached a budget,
/// tokens first.
fn over_budget(t: &Tenant, period: &str) -> Option<Refusal> {
    let spent = t.spent.get(period).copied().unwrap_or_default();
    [
        (BudgetKind::Tokens, spent.tokens, t.budget_tokens),
        (BudgetKind::MinorUnits, spent.minor_units, t.budget_minor),
    ]
    .into_iter()
    .find_map(|(kind, spent, budget)| {
        let budget = budget.filter(|&budget| spent >= budget)?;
        Some(Refusal::BudgetExhausted {
            kind,
            spent,
            budget,
        })
    })
}
