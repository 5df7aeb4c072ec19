//! What the reads answer about limits and tenants: [`LimitStatus`] and [`TenantStatus`], plain
//! data that queries return and the server sends on the wire. Built from the state by the
//! machine's reads (`Machine::limit_status`, `Machine::tenant_status`); nothing here
//! changes the state.

use serde::{Deserialize, Serialize};

use super::limit::{Limit, LimitSpec, MICRO, ShadowRefusals};

/// What `limit show` reports. Of one key (`Machine::key_status`) the spec and counts are
/// the key's, and `keys_max`, `live_keys`, `shadow_refusals` and `overrun_tokens` its
/// definition's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitStatus {
    pub tenant: String,
    pub name: String,
    pub concurrent: u32,
    pub per_second: f64,
    pub burst: u64,
    /// Units held now.
    pub in_use: u64,
    /// Tickets queued.
    pub waiting: u64,
    /// Highest units held at once since the limit was defined.
    pub max_in_use: u64,
    /// Whole tokens in the bucket at the last refill.
    pub tokens: u64,
    /// Removed, waiting for its holders to release.
    pub removing: bool,
    /// `Some(keys_max)` on a keyed definition (its counts above are its live keys' summed).
    pub keys_max: Option<u32>,
    /// Live keys of a keyed definition: those whose state differs from a fresh one's.
    pub live_keys: u64,
    /// Shadow mode: evaluated and counted, never refuses.
    pub shadow: bool,
    /// A shadow definition's would-be refusals since it was defined, by kind.
    pub shadow_refusals: ShadowRefusals,
    /// Tokens settled above their estimates, summed since the definition was defined.
    pub overrun_tokens: u64,
    /// One bucket or semaphore per key (`keys_max` set).
    pub keyed: bool,
}

impl LimitStatus {
    pub(super) fn of(limit: &Limit) -> LimitStatus {
        LimitStatus {
            tenant: limit.tenant.clone(),
            name: limit.name.clone(),
            concurrent: limit.spec.concurrent,
            per_second: limit.spec.per_second,
            burst: limit.spec.burst,
            in_use: limit.held_units,
            waiting: limit.queue.len() as u64,
            max_in_use: limit.max_held_units,
            tokens: limit.tokens_micro / MICRO,
            removing: limit.removing,
            keys_max: limit.spec.keys_max,
            live_keys: limit.keys.len() as u64,
            shadow: limit.spec.shadow,
            shadow_refusals: limit.shadow_refusals,
            overrun_tokens: limit.overrun_tokens,
            keyed: limit.spec.keys_max.is_some(),
        }
    }
}

/// One page of a tenant's limits, in name order (`Machine::limits_page`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsPage {
    /// The page's limits, by name.
    pub limits: Vec<LimitStatus>,
    /// The name to ask `after` for the next page; `None` on the last page.
    pub next: Option<String>,
}

/// One page of a keyed definition's live keys, in key order: what `Query::Keys` answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyPage {
    pub keys: Vec<String>,
    /// The key to ask `after` for the next page; `None` when this page is the last.
    pub next: Option<String>,
}

/// A tenant's ceilings and counts, for reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStatus {
    pub max_running: Option<u32>,
    pub budget_tokens: Option<u64>,
    pub budget_minor: Option<u64>,
    pub running: u64,
    pub receipts: u64,
    pub receipts_evicted: u64,
}

/// A bucket as it stands at a log time, for answers that report what is left (Envoy's
/// `limit_remaining` and `duration_until_reset`). Built by `Machine::bucket_now`.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketNow {
    pub spec: LimitSpec,
    /// Whole tokens in the bucket, refilled to the log time asked.
    pub tokens: u64,
    /// Ms from that log time until the bucket is full again (0 when it is, or does not rate).
    pub full_in_ms: u64,
}
