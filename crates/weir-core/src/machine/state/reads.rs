//! What queries see: a limit's status, a tenant's limits, runs, halts, spend and counts, and
//! whether a fence is still held. Reads never change the state.

use super::Machine;
use crate::bounds::{KEYS_PAGE_MAX, LIMITS_PAGE_MAX};
use crate::machine::command::{Fence, HaltScope, LimitId, Owner, SessionId, TicketId};
use crate::machine::limit::ShadowRefusals;
use crate::machine::limit::{Limit, LimitSpec, MICRO};
use crate::machine::status::{BucketNow, KeyPage, LimitStatus, LimitsPage, TenantStatus};
use crate::machine::tenant::{RunSlot, Spend, Tenant};
use std::ops::Bound;

/// Most names [`Machine::limit_as_written`] reads: a bounded walk under the apply lock.
pub const AS_WRITTEN_SCAN_MAX: usize = 10_000;

impl Machine {
    /// `read` of the tenant named, or the empty answer for a tenant the state does not know.
    fn of_tenant<T: Default>(&self, tenant: &str, read: impl FnOnce(&Tenant) -> T) -> T {
        self.saved.tenants.get(tenant).map(read).unwrap_or_default()
    }

    /// A limit's status, removed-but-held ones included. A keyed limit's counts are its
    /// live keys' summed (`max_in_use`: the most any live key held).
    pub fn limit_status(&self, tenant: &str, name: &str) -> Option<LimitStatus> {
        let id = self.limit_id(tenant, name)?;
        Some(self.status_of(id))
    }

    fn status_of(&self, id: LimitId) -> LimitStatus {
        let limit = &self.saved.limits[&id];
        let mut status = LimitStatus::of(limit);
        if limit.spec.keys_max.is_some() {
            status.live_keys = self.live_keys_of(id) as u64;
        }
        for kid in limit.keys.values() {
            let key = &self.saved.limits[kid];
            status.in_use += key.held_units;
            status.waiting += key.queue.len() as u64;
            status.max_in_use = status.max_in_use.max(key.max_held_units);
        }
        status
    }

    /// The status of key `key` of keyed limit (tenant, name): its own state, or, for a key
    /// that is not live, a fresh key's (a full bucket, an idle semaphore: what the key
    /// would answer); the definition's live keys, shadow refusals and overruns. `None` when
    /// there is no such keyed limit.
    pub fn key_status(&self, tenant: &str, name: &str, key: &str) -> Option<LimitStatus> {
        let id = self.limit_id(tenant, name)?;
        let def = &self.saved.limits[&id];
        def.spec.keys_max?;
        let mut status = LimitStatus::of(&self.key_view(id, key, self.now_ms()));
        status.tenant = tenant.to_owned();
        status.name = name.to_owned();
        status.removing = def.removing;
        // What is counted on the definition, not on its keys.
        status.live_keys = self.live_keys_of(id) as u64;
        status.shadow_refusals = def.shadow_refusals;
        status.overrun_tokens = def.overrun_tokens;
        Some(status)
    }

    /// The name of the limit of `tenant` that `written` names: itself when a limit has
    /// that name, else the one limit compiled from a ratelimit file whose name reads as
    /// `written` ([`crate::rls::path::as_written`]: `envoy:path=/beta` for
    /// `envoy:path=%2Fbeta`). Looks among the names that share `written`'s text up to its
    /// first character a name may escape, at most [`AS_WRITTEN_SCAN_MAX`] of them.
    pub fn limit_as_written(&self, tenant: &str, written: &str) -> Option<String> {
        use crate::rls::path::{PREFIX, as_written};
        if self.limit_id(tenant, written).is_some() {
            return Some(written.to_owned());
        }
        let rest = written.strip_prefix(PREFIX)?;
        let plain = PREFIX.len() + rest.find(['%', '/', '=', '~', '*']).unwrap_or(rest.len());
        let start = &written[..plain];
        let t = self.saved.tenants.get(tenant)?;
        t.limits
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
            .take_while(|(name, _)| name.starts_with(start))
            .take(AS_WRITTEN_SCAN_MAX)
            .map(|(name, _)| name)
            .find(|name| as_written(name) == written)
            .cloned()
    }

    /// Whether limit (tenant, name) exists (removed-but-held ones included).
    pub fn has_limit(&self, tenant: &str, name: &str) -> bool {
        self.limit_id(tenant, name).is_some()
    }

    /// The bucket of limit (tenant, name), or of its key `key` when keyed (a fresh key's when
    /// the key has no state), refilled to this machine's log time; `None` when there is no
    /// such limit, or `key` is given for an unkeyed one or missing for a keyed one. Reads a
    /// copy: the state is not refilled.
    pub fn bucket_now(&self, tenant: &str, name: &str, key: Option<&str>) -> Option<BucketNow> {
        let id = self.limit_id(tenant, name)?;
        let def = &self.saved.limits[&id];
        let now_ms = self.now_ms();
        let mut bucket = match (def.spec.keys_max, key) {
            (None, None) => Limit::clone(def),
            (Some(_), Some(key)) => self.key_view(id, key, now_ms),
            _ => return None,
        };
        bucket.refill(now_ms);
        let full_in_ms = if bucket.spec.rates() {
            bucket.full_at_ms().saturating_sub(now_ms)
        } else {
            0
        };
        Some(BucketNow {
            spec: LimitSpec::clone(&bucket.spec),
            tokens: bucket.tokens_micro / MICRO,
            full_in_ms,
        })
    }

    /// The live keys of keyed limit (tenant, name), in key order; `None` when there is no
    /// such keyed limit.
    pub fn keys(&self, tenant: &str, name: &str) -> Option<Vec<String>> {
        let id = self.limit_id(tenant, name)?;
        self.saved.limits[&id].spec.keys_max?;
        Some(self.live_keys_after(id, None).map(str::to_owned).collect())
    }

    /// At most `limit` (bounded by [`KEYS_PAGE_MAX`]) live keys of keyed limit (tenant,
    /// name) after `after` (from the first when `None`), in key order, with the key to ask
    /// after next when more follow. `None` when there is no such keyed limit.
    pub fn keys_page(
        &self,
        tenant: &str,
        name: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Option<KeyPage> {
        let id = self.limit_id(tenant, name)?;
        self.saved.limits[&id].spec.keys_max?;
        let mut range = self.live_keys_after(id, after);
        let keys: Vec<String> = range
            .by_ref()
            .take(limit.min(KEYS_PAGE_MAX) as usize)
            .map(str::to_owned)
            .collect();
        let next = match range.next() {
            Some(_) => keys.last().cloned(),
            None => None,
        };
        Some(KeyPage { keys, next })
    }

    /// Would-be refusals of shadow limit (tenant, name) since it was defined, by kind.
    pub fn shadow_refusals(&self, tenant: &str, name: &str) -> Option<ShadowRefusals> {
        let id = self.limit_id(tenant, name)?;
        Some(self.saved.limits[&id].shadow_refusals)
    }

    /// Would-be refusals of every shadow limit of `tenant`, by kind, summed (for metrics).
    pub fn tenant_shadow_refusals(&self, tenant: &str) -> ShadowRefusals {
        self.of_tenant(tenant, |t| {
            let mut sum = ShadowRefusals::default();
            for id in t.limits.values() {
                sum.add(self.saved.limits[id].shadow_refusals);
            }
            sum
        })
    }

    /// Every limit of a tenant, by name.
    pub fn limits(&self, tenant: &str) -> Vec<LimitStatus> {
        self.of_tenant(tenant, |t| {
            t.limits.values().map(|id| self.status_of(*id)).collect()
        })
    }

    /// One page of a tenant's limits, by name: those whose name starts with `prefix` and
    /// (when `after` is given) sorts strictly after `after`, at most `max` of them (clamped
    /// to `1..=LIMITS_PAGE_MAX`, so an answer fits a client frame). Reads only the range it
    /// answers, plus one name to tell whether another page follows: a page of a tenant with
    /// 100,000 limits costs what a page of a tenant with ten does.
    pub fn limits_page(
        &self,
        tenant: &str,
        prefix: &str,
        after: Option<&str>,
        max: u32,
    ) -> LimitsPage {
        use std::ops::Bound;
        let max = (max as usize).clamp(1, LIMITS_PAGE_MAX);
        self.of_tenant(tenant, |t| {
            let start = match after {
                Some(a) if a >= prefix => Bound::Excluded(a),
                _ => Bound::Included(prefix),
            };
            let mut names = t
                .limits
                .range::<str, _>((start, Bound::Unbounded))
                .take_while(|(name, _)| name.starts_with(prefix));
            let limits: Vec<LimitStatus> = names
                .by_ref()
                .take(max)
                .map(|(_, id)| self.status_of(*id))
                .collect();
            let more = names.next().is_some();
            let next = more
                .then(|| limits.last().map(|l| l.name.clone()))
                .flatten();
            LimitsPage { limits, next }
        })
    }

    /// Whether a permit with `fence` is held on (tenant, name) now (on any of its keys,
    /// when keyed).
    pub fn validate_fence(&self, tenant: &str, name: &str, fence: Fence) -> bool {
        self.limit_id(tenant, name).is_some_and(|id| {
            self.states_of(id)
                .iter()
                .any(|s| self.saved.limits[s].holders.contains_key(&fence))
        })
    }

    /// Spend charged to a period.
    pub fn spent(&self, tenant: &str, period: &str) -> Spend {
        self.of_tenant(tenant, |t| t.spent.get(period).copied().unwrap_or_default())
    }

    /// The running set, by run name.
    pub fn running(&self, tenant: &str) -> Vec<(String, RunSlot)> {
        self.of_tenant(tenant, |t| t.running.clone().into_iter().collect())
    }

    /// Standing halts of a tenant, tenant-wide first.
    pub fn halts(&self, tenant: &str) -> Vec<(HaltScope, String)> {
        self.of_tenant(tenant, |t| t.halts.clone().into_iter().collect())
    }

    /// A tenant's ceilings and counts.
    pub fn tenant_status(&self, tenant: &str) -> TenantStatus {
        self.of_tenant(tenant, |t| TenantStatus {
            max_running: t.max_running,
            budget_tokens: t.budget_tokens,
            budget_minor: t.budget_minor,
            running: t.running.len() as u64,
            receipts: t.receipts.len() as u64,
            receipts_evicted: t.receipts_evicted,
        })
    }

    /// The tenants the state knows, by name (for per-tenant metrics).
    pub fn tenant_names(&self) -> Vec<String> {
        self.saved.tenants.keys().cloned().collect()
    }

    /// Number of open sessions.
    /// Who opened `session`: `None` if no such session is open, `Some(None)` if it was
    /// opened without authentication. What the edge checks a session's requests against.
    pub fn session_owner(&self, session: SessionId) -> Option<Option<Owner>> {
        self.saved.sessions.get(&session).map(|s| s.owner)
    }

    /// Whether this state has applied the acquire of `ticket` in `session` (it is live or
    /// finished there): how a node that forwarded a take tells whether its own view
    /// includes it yet.
    pub fn ticket_applied(&self, session: SessionId, ticket: TicketId) -> bool {
        self.saved
            .sessions
            .get(&session)
            .is_some_and(|s| s.live.contains_key(&ticket) || s.finished.contains_key(&ticket))
    }

    pub fn session_count(&self) -> usize {
        self.saved.sessions.len()
    }
}
