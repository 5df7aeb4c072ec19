//! What the reads answer about limits and tenants: [`LimitStatus`] and [`TenantStatus`], plain
//! data that queries return and the server sends on the wire. Built from the state by the
//! machine's reads (`Machine::limit_status`, `Machine::tenant_status`); nothing here
//! changes the state.

use serde::{Deserialize, Serialize};

use super::limit::{Limit, LimitSpec, MICRO};

/// What `limit show` reports.
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
        }
    }
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
