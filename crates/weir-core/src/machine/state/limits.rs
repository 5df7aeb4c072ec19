//! Defining, redefining and removing limits.
//!
//! A redefinition keeps holders and waiters, and refuses at once the waiters the new spec
//! could never serve. A removal refuses the waiters and keeps the limit, unreachable for new
//! acquires, until its last holder releases (`serve` then drops it).
//!
//! A keyed limit's keys carry its spec: a redefinition or a removal reaches every live key
//! (a keyed definition itself holds nothing). Whether a limit is keyed is fixed when it is
//! first defined: a redefinition that changes it is refused, since the keys' states and
//! the tickets on them could not carry over.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Machine;
use crate::bounds::{LIMITS_MAX, RLS_OVERRIDES_MAX};
use crate::machine::command::Definition;
use crate::machine::command::LimitId;
use crate::machine::limit::{Limit, LimitSpec};
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::validate::override_definition;
use crate::rls::path::{OVERRIDE_PREFIX, is_override};

impl Machine {
    pub(super) fn define_limit(
        &mut self,
        d: &Definition,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let spec = d.spec().map_err(Refusal::Invalid)?;
        let (tenant, name) = (d.tenant.as_str(), d.name.as_str());
        let id = match self.limit_id(tenant, name) {
            Some(id) => {
                let keyed = self.saved.limits[&id].spec.keys_max.is_some();
                if keyed != spec.keys_max.is_some() {
                    let (was, asked) = if keyed {
                        ("keyed", "not keyed")
                    } else {
                        ("not keyed", "keyed")
                    };
                    return Err(Refusal::Invalid(format!(
                        "limit {tenant}/{name} is {was} and the definition is {asked}: \
                         remove it first"
                    )));
                }
                self.promote_all(id);
                self.redefine_limit(id, spec);
                id
            }
            None => {
                self.tenant_mut(tenant)?;
                self.add_limit(tenant, name, spec)?
            }
        };
        let mut touched = self.redefined_waiters(id, events);
        touched.extend(self.states_of(id));
        for state in touched {
            self.serve(state, events);
        }
        Ok(Reply::Done)
    }

    /// Makes sure `tenant` has the limit deciding Envoy overrides of `requests` per
    /// `unit_s` seconds; one of that name is left as it is. A new one is refused past
    /// [`RLS_OVERRIDES_MAX`] such limits in the tenant.
    pub(super) fn define_override(
        &mut self,
        tenant: &str,
        requests: u32,
        unit_s: u64,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let d = override_definition(tenant, requests, unit_s);
        if self.live_limit_id(tenant, &d.name).is_ok() {
            return Ok(Reply::Done);
        }
        let made = self.saved.tenants.get(tenant).map_or(0, |t| {
            t.limits
                .range(OVERRIDE_PREFIX.to_owned()..)
                .take_while(|(name, _)| is_override(name))
                .filter(|(_, id)| !self.saved.limits[*id].removing)
                .count()
        });
        if made >= RLS_OVERRIDES_MAX {
            return Err(Refusal::AtCapacity {
                what: format!("override limits of tenant {tenant}"),
                limit: RLS_OVERRIDES_MAX as u64,
            });
        }
        self.define_limit(&d, events)
    }

    /// Gives limit `id` (and its keys) a new spec.
    fn redefine_limit(&mut self, id: LimitId, spec: LimitSpec) {
        let now_ms = self.now_ms();
        let spec = Arc::new(spec);
        let mut states = self.states_of(id);
        states.push(id);
        states.dedup();
        for state in states {
            let limit = self
                .saved
                .limits
                .get_mut(&state)
                .expect("named limits exist");
            limit.redefine(spec.clone(), now_ms);
        }
    }

    /// Refuses the waiters of limit `id` (or its keys) that its spec can never serve, now
    /// rather than left to block a queue forever; returns the other limits that requests
    /// of several parts among them left, to be served.
    fn redefined_waiters(&mut self, id: LimitId, events: &mut Vec<Event>) -> BTreeSet<LimitId> {
        let (tenant, name) = self.names_of(id);
        let Some(max) = self.saved.limits[&id].spec.max_units() else {
            return BTreeSet::new();
        };
        let mut too_large = Vec::new();
        for state in self.states_of(id) {
            let limit = self
                .saved
                .limits
                .get_mut(&state)
                .expect("named limits exist");
            too_large.extend(limit.queue.remove_where(|w| w.units as u64 > max));
        }
        let mut touched = BTreeSet::new();
        for (_, w) in too_large {
            let refusal = Refusal::TooLarge {
                tenant: tenant.clone(),
                name: name.clone(),
                units: w.units,
                max,
            };
            touched.extend(self.refuse_waiter(&w, refusal, events));
        }
        touched
    }

    /// Limits kept that are not keys' states: definitions, removing ones included.
    pub(super) fn definitions(&self) -> usize {
        self.saved.limits.len() - (self.totals.live_keys - self.totals.lean_keys) as usize
    }

    /// A new limit named (tenant, name), or the refusal when [`LIMITS_MAX`] are defined.
    fn add_limit(&mut self, tenant: &str, name: &str, spec: LimitSpec) -> Result<LimitId, Refusal> {
        Refusal::room(
            self.definitions() as u64,
            LIMITS_MAX,
            format_args!("limits"),
        )?;
        self.saved.last_limit += 1;
        let id = self.saved.last_limit;
        let limit = Limit::new(tenant, name, Arc::new(spec), self.now_ms());
        self.saved.limits.insert(id, Box::new(limit));
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
        let removed = Refusal::LimitRemoved {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
        };
        self.promote_all(id);
        self.saved.limits.get_mut(&id).expect("named").removing = true;
        let states = self.states_of(id);
        let mut waiters = Vec::new();
        for &state in &states {
            let limit = self
                .saved
                .limits
                .get_mut(&state)
                .expect("named limits exist");
            limit.removing = true;
            waiters.extend(limit.queue.remove_where(|_| true));
        }
        let mut touched: BTreeSet<LimitId> = states.into_iter().collect();
        for (_, w) in waiters {
            touched.extend(self.refuse_waiter(&w, removed.clone(), events));
        }
        for state in touched {
            self.serve(state, events);
        }
        // A keyed definition goes with its last key (`file`), or now when it has none.
        if self
            .saved
            .limits
            .get(&id)
            .is_some_and(|l| l.keys.is_empty())
        {
            self.file(id);
        }
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

    /// Part `n` of a request, naming `limit` of `tenant` and perhaps a key: its live
    /// definition, and the state the part is decided on (the definition itself, a key's
    /// state, or `None` for a key with no state yet). A key on a limit that is not keyed, or
    /// none on one that is, is refused naming the part.
    pub(super) fn part_target(
        &mut self,
        tenant: &str,
        n: usize,
        limit: &str,
        key: Option<&String>,
    ) -> Result<(LimitId, Option<LimitId>), Refusal> {
        let def = self.live_limit_id(tenant, limit)?;
        let d = &self.saved.limits[&def];
        match (d.spec.keys_max, key) {
            (Some(_), None) => Err(Refusal::Invalid(format!(
                "part {n}: limit {tenant}/{limit} is keyed, and the part names no key"
            ))),
            (None, Some(key)) => Err(Refusal::Invalid(format!(
                "part {n}: limit {tenant}/{limit} is not keyed, and the part names key {key}"
            ))),
            (None, None) => Ok((def, Some(def))),
            (Some(_), Some(key)) => Ok((def, self.key_state(def, key))),
        }
    }

    /// The (tenant, name) a limit is known by: its own, or its definition's for a key.
    fn names_of(&self, id: LimitId) -> (String, String) {
        let limit = &self.saved.limits[&id];
        let def = limit.of.map_or(limit, |d| &self.saved.limits[&d]);
        (def.tenant.clone(), def.name.clone())
    }

    /// The limits a definition stands for: its keys' states when keyed, itself otherwise.
    pub(super) fn states_of(&self, def: LimitId) -> Vec<LimitId> {
        let limit = &self.saved.limits[&def];
        if limit.spec.keys_max.is_some() {
            limit.keys.values().copied().collect()
        } else {
            vec![def]
        }
    }
}
