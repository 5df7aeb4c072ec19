//! Snapshot version 5, read and converted: [`SavedLimitsV5`] decodes the payload of a
//! version 5 snapshot and [`SavedLimitsV5::upgrade`] turns it into today's [`SavedLimits`].
//!
//! Version 6 differs from 5 in what a limit keeps of its holders and waiters, and in what
//! a session keeps: a holder keeps the log time of its grant, a waiter its fairness weight,
//! and a session its acknowledged mark (`machine::session`). A version 5 session converts
//! with the mark at 0, nothing acknowledged: its finished tickets stay until a mark passes
//! them, their log-time window runs out, or the session ends. A version 5 snapshot kept
//! neither of the others, so the conversion gives each holder the snapshot's log clock as its grant
//! time (the earliest time the state proves it was held by; "held for" then counts from
//! the upgrade) and each waiter the weight 0, which the reads answer as "not kept". Nothing
//! decided depends on either: grants never read `granted_at_ms`, and a waiter's place was
//! fixed by its weight when it was queued (its tag is in its key).
//!
//! Only the types that changed are copied here, field for field in version 5's order; the
//! rest decode as today's types, which did not change.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::clock::LogClock;
use super::command::{Fence, LimitId, SessionId, TicketId};
use super::limit::{Holder, Limit, LimitSpec, ShadowRefusals};
use super::queue::{QueueV5, WaitQueue};
use super::saved::SavedLimits;
use super::session::SessionV5;
use super::tenant::Tenant;

/// The machine's saved state as version 5 encoded it.
#[derive(Deserialize)]
pub(super) struct SavedLimitsV5 {
    clock: LogClock,
    applied: Option<u64>,
    last_fence: Fence,
    last_session: SessionId,
    last_limit: LimitId,
    sessions: BTreeMap<SessionId, SessionV5>,
    limits: BTreeMap<LimitId, LimitV5>,
    tenants: BTreeMap<String, Tenant>,
}

/// A limit as version 5 encoded it: holders without their grant times, a queue without
/// its waiters' weights.
#[derive(Deserialize)]
struct LimitV5 {
    tenant: String,
    name: String,
    spec: LimitSpec,
    holders: BTreeMap<Fence, HolderV5>,
    held_units: u64,
    max_held_units: u64,
    tokens_micro: u64,
    refill_remainder: u64,
    refilled_at_ms: u64,
    queue: QueueV5,
    removing: bool,
    of: Option<LimitId>,
    keys: BTreeMap<String, LimitId>,
    shadow_refusals: ShadowRefusals,
    estimating: BTreeMap<Fence, u32>,
    overrun_tokens: u64,
}

/// A holder as version 5 encoded it.
#[derive(Deserialize)]
struct HolderV5 {
    session: SessionId,
    ticket: TicketId,
    units: u32,
    agent: Option<String>,
}

impl SavedLimitsV5 {
    /// Today's state for this version 5 state (the module doc says what is filled in).
    pub(super) fn upgrade(self) -> SavedLimits {
        let now_ms = self.clock.now_ms();
        SavedLimits {
            clock: self.clock,
            applied: self.applied,
            last_fence: self.last_fence,
            last_session: self.last_session,
            last_limit: self.last_limit,
            sessions: (self.sessions.into_iter())
                .map(|(id, s)| (id, s.into()))
                .collect(),
            limits: (self.limits.into_iter())
                .map(|(id, l)| (id, Box::new(l.upgrade(now_ms))))
                .collect(),
            tenants: self.tenants,
            token_leases: Default::default(),
            lean_keys: Default::default(),
            frozen: Default::default(),
            placements: Default::default(),
        }
    }
}

impl LimitV5 {
    fn upgrade(self, now_ms: u64) -> Limit {
        let holders = (self.holders.into_iter())
            .map(|(fence, h)| {
                let holder = Holder {
                    session: h.session,
                    ticket: h.ticket,
                    units: h.units,
                    agent: h.agent,
                    granted_at_ms: now_ms,
                };
                (fence, holder)
            })
            .collect();
        Limit {
            tenant: self.tenant,
            name: self.name,
            spec: Arc::new(self.spec),
            holders,
            held_units: self.held_units,
            max_held_units: self.max_held_units,
            tokens_micro: self.tokens_micro,
            refill_remainder: self.refill_remainder,
            refilled_at_ms: self.refilled_at_ms,
            queue: WaitQueue::from(self.queue).into(),
            removing: self.removing,
            of: self.of,
            keys: self.keys,
            shadow_refusals: self.shadow_refusals,
            estimating: self.estimating,
            overrun_tokens: self.overrun_tokens,
            leased: Default::default(),
        }
    }
}
