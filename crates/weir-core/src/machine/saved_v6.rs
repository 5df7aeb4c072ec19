//! Snapshot version 6, read and converted: [`SavedLimitsV6`] decodes the payload of a
//! version 6 snapshot and [`SavedLimitsV6::upgrade`] turns it into today's [`SavedLimits`].
//!
//! Version 7 appends the token leases to version 6's fields and changes nothing else, so a
//! version 6 state is today's with no lease and no lease request.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::clock::LogClock;
use super::command::{Fence, LimitId, SessionId};
use super::limit::Limit;
use super::saved::SavedLimits;
use super::session::Session;
use super::tenant::Tenant;

/// The machine's saved state as version 6 encoded it: today's fields up to the tenants.
#[derive(Deserialize)]
pub(super) struct SavedLimitsV6 {
    clock: LogClock,
    applied: Option<u64>,
    last_fence: Fence,
    last_session: SessionId,
    last_limit: LimitId,
    sessions: BTreeMap<SessionId, Session>,
    limits: BTreeMap<LimitId, Box<Limit>>,
    tenants: BTreeMap<String, Tenant>,
}

impl SavedLimitsV6 {
    /// Today's state for a version 6 one: the same, with no token lease.
    pub(super) fn upgrade(self) -> SavedLimits {
        SavedLimits {
            clock: self.clock,
            applied: self.applied,
            last_fence: self.last_fence,
            last_session: self.last_session,
            last_limit: self.last_limit,
            sessions: self.sessions,
            limits: self.limits,
            tenants: self.tenants,
            token_leases: Default::default(),
            lean_keys: Default::default(),
            frozen: Default::default(),
            placements: Default::default(),
        }
    }
}
