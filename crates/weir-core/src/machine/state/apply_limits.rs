//! `ApplyLimits`: a tenant's whole set of definitions in one entry.
//!
//! The apply is judged first, without a change ([`Machine::limits_change`], which is also
//! the dry run's answer): every definition's spec, that no existing limit changes whether it
//! is keyed, and room for the limits (and the tenant) it creates. A refusal names the
//! definition and leaves the state as it was: all or nothing. Only then is each created or
//! changed definition applied as `Define` applies it (a lowered `concurrent` keeps its
//! holders; waiters it can never serve are refused), and with `prune` each of the tenant's
//! other live limits removed as `RemoveLimit` removes it (its waiters refused "limit
//! removed"), but for the limits Envoy's descriptor overrides made (`DefineOverride`,
//! named `envoy^…`), which belong to the gateway's requests, not to a file. A definition equal to the limit's spec is left alone, so applying the same
//! file twice changes nothing the second time (not even a bucket's refill stamp).
//!
//! Invariants:
//! - The reply's four lists partition the names of the definitions and the pruned limits,
//!   each list in name order; `unchanged` and `changed` name live limits.
//! - Nothing is written unless every check passed: a refusal is returned before the first
//!   `define_limit`, and the checks it makes are exactly those `define_limit` and
//!   `add_limit` could still refuse on.

use std::collections::BTreeSet;

use super::Machine;
use crate::bounds::{LIMITS_MAX, TENANTS_MAX};
use crate::machine::command::Definition;
use crate::machine::reply::{Event, LimitsChange, Refusal, Reply};
use crate::rls::path::is_override;

impl Machine {
    /// Applies `definitions` to `tenant` (module doc): the change, or the refusal naming
    /// the definition that cannot apply, with nothing changed.
    pub(super) fn apply_limits(
        &mut self,
        tenant: &str,
        definitions: &[Definition],
        prune: bool,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let change = self.limits_change(tenant, definitions, prune)?;
        let writes: BTreeSet<&str> = change
            .created
            .iter()
            .chain(&change.changed)
            .map(String::as_str)
            .collect();
        for d in definitions
            .iter()
            .filter(|d| writes.contains(d.name.as_str()))
        {
            let done = self.define_limit(d, events);
            assert!(done.is_ok(), "checked by limits_change: {done:?}");
        }
        for name in &change.removed {
            self.remove_limit(tenant, name, events);
        }
        Ok(Reply::LimitsApplied(change))
    }

    /// What applying `definitions` (with `prune`) to `tenant` would change, or why it would
    /// be refused; changes nothing. The dry run's answer, read from the applied state.
    pub fn limits_change(
        &self,
        tenant: &str,
        definitions: &[Definition],
        prune: bool,
    ) -> Result<LimitsChange, Refusal> {
        let mut change = LimitsChange::default();
        for d in definitions {
            let name = &d.name;
            let spec = d
                .spec()
                .map_err(|why| Refusal::Invalid(format!("definition {name}: {why}")))?;
            let live = self
                .limit_id(tenant, name)
                .map(|id| &self.saved.limits[&id])
                .filter(|l| !l.removing);
            let Some(limit) = live else {
                change.created.push(name.clone());
                continue;
            };
            if limit.spec.keys_max.is_some() != spec.keys_max.is_some() {
                let was = if d.keyed { "not keyed" } else { "keyed" };
                return Err(Refusal::Invalid(format!(
                    "definition {name}: limit {tenant}/{name} is {was}, and whether a limit \
                     is keyed is fixed: remove it first"
                )));
            }
            match *limit.spec == spec {
                true => change.unchanged.push(name.clone()),
                false => change.changed.push(name.clone()),
            }
        }
        self.room_for(tenant, change.created.len())?;
        if prune {
            let named: BTreeSet<&str> = definitions.iter().map(|d| d.name.as_str()).collect();
            if let Some(t) = self.saved.tenants.get(tenant) {
                for (name, id) in &t.limits {
                    // The limits Envoy's overrides made are the gateway's, not the file's.
                    if !named.contains(name.as_str())
                        && !self.saved.limits[id].removing
                        && !is_override(name)
                    {
                        change.removed.push(name.clone());
                    }
                }
            }
        }
        change.sort();
        Ok(change)
    }

    /// The dry run of an `ApplyLimits`: its argument checks (as the edge runs them), then
    /// [`Machine::limits_change`]. Changes nothing.
    pub fn apply_dry_run(
        &self,
        tenant: &str,
        definitions: &[Definition],
        prune: bool,
    ) -> Result<LimitsChange, Refusal> {
        crate::machine::validate::check_apply(tenant, definitions)?;
        self.limits_change(tenant, definitions, prune)
    }

    /// Room for `created` more limits (a removing limit revived takes no new room, but is
    /// counted: the bound is judged conservatively), and for the tenant if it is new.
    fn room_for(&self, tenant: &str, created: usize) -> Result<(), Refusal> {
        if created == 0 {
            return Ok(());
        }
        let defined = self.definitions() + created - 1;
        Refusal::room(defined as u64, LIMITS_MAX, format_args!("limits"))?;
        let tenants = self.saved.tenants.len();
        if !self.saved.tenants.contains_key(tenant) {
            Refusal::room(tenants as u64, TENANTS_MAX, format_args!("tenants"))?;
        }
        Ok(())
    }
}
