//! Defining, redefining and removing limits.
//!
//! A redefinition keeps holders and waiters, and refuses at once the waiters the new spec
//! could never serve. A removal refuses the waiters and keeps the limit, unreachable for new
//! acquires, until its last holder releases (`serve` then drops it).

use super::Machine;
use crate::bounds::LIMITS_MAX;
use crate::machine::command::LimitId;
use crate::machine::limit::{Limit, LimitSpec};
use crate::machine::reply::{Event, Refusal, Reply};

impl Machine {
    pub(super) fn define_limit(
        &mut self,
        tenant: &str,
        name: &str,
        concurrent: u32,
        per_second: f64,
        burst: Option<u64>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let spec = LimitSpec::new(concurrent, per_second, burst).map_err(Refusal::Invalid)?;
        let id = match self.limit_id(tenant, name) {
            Some(id) => {
                self.redefine_limit(id, spec, events);
                id
            }
            None => {
                self.tenant_mut(tenant)?;
                self.add_limit(tenant, name, spec)?
            }
        };
        self.serve(id, events);
        Ok(Reply::Done)
    }

    /// Gives limit `id` a new spec, refusing the waiters it can never serve.
    fn redefine_limit(&mut self, id: LimitId, spec: LimitSpec, events: &mut Vec<Event>) {
        let now_ms = self.now_ms();
        let limit = self.saved.limits.get_mut(&id).expect("named limits exist");
        limit.redefine(spec, now_ms);
        let (tenant, name) = (limit.tenant.clone(), limit.name.clone());
        // Tickets that the new spec can never serve are refused now, not left to block the
        // queue forever.
        let Some(max) = limit.spec.max_units() else {
            return;
        };
        let too_large = limit.queue.remove_where(|w| w.units as u64 > max);
        for (_, w) in too_large {
            let refusal = Refusal::TooLarge {
                tenant: tenant.clone(),
                name: name.clone(),
                units: w.units,
                max,
            };
            self.refuse_waiter(&w, refusal, events);
        }
    }

    /// A new limit named (tenant, name), or the refusal when [`LIMITS_MAX`] are defined.
    fn add_limit(&mut self, tenant: &str, name: &str, spec: LimitSpec) -> Result<LimitId, Refusal> {
        let defined = self.saved.limits.len() as u64;
        Refusal::room(defined, LIMITS_MAX, format_args!("limits"))?;
        self.saved.last_limit += 1;
        let id = self.saved.last_limit;
        let limit = Limit::new(tenant, name, spec, self.now_ms());
        self.saved.limits.insert(id, limit);
        self.saved
            .tenants
            .entry(tenant.to_owned())
            .or_default()
            .limits
            .insert(name.to_owned(), id);
        Ok(id)
    }

    pub(super) fn remove_limit(
        &mut self,
        tenant: &str,
        name: &str,
        events: &mut Vec<Event>,
    ) -> Reply {
        let Some(id) = self.limit_id(tenant, name) else {
            return Reply::Done;
        };
        let limit = self.saved.limits.get_mut(&id).expect("named limits exist");
        limit.removing = true;
        let waiters = limit.queue.remove_where(|_| true);
        let removed = Refusal::LimitRemoved {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
        };
        for (_, w) in waiters {
            self.refuse_waiter(&w, removed.clone(), events);
        }
        self.serve(id, events);
        Reply::Done
    }

    /// The limit named (tenant, name), removed-but-held ones included.
    pub(super) fn limit_id(&self, tenant: &str, name: &str) -> Option<LimitId> {
        self.saved.tenants.get(tenant)?.limits.get(name).copied()
    }

    /// The live limit named (tenant, name), or `UnknownLimit`.
    pub(super) fn live_limit_id(&self, tenant: &str, name: &str) -> Result<LimitId, Refusal> {
        let unknown = || Refusal::UnknownLimit {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
        };
        let id = self.limit_id(tenant, name).ok_or_else(unknown)?;
        if self.saved.limits[&id].removing {
            return Err(unknown());
        }
        Ok(id)
    }
}
