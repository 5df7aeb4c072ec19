//! Snapshot version 8, read and converted: [`SavedLimitsV8`] decodes the payload of a
//! version 8 snapshot and [`SavedLimitsV8::upgrade`] turns it into today's [`SavedLimits`].
//!
//! Version 9 appends the frozen tenants (tenants moved to another group and not yet
//! dropped) to version 8's fields and changes nothing else: a version 8 state is today's
//! with no frozen tenant.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::clock::LogClock;
use super::command::{Fence, LimitId, SessionId};
use super::key_table::KeyTable;
use super::limit::Limit;
use super::saved::SavedLimits;
use super::session::Session;
use super::tenant::Tenant;
use super::token_lease::TokenLeases;

/// The machine's saved state as version 8 encoded it: today's fields up to the lean keys.
#[derive(Deserialize)]
pub(super) struct SavedLimitsV8 {
    clock: LogClock,
    applied: Option<u64>,
    last_fence: Fence,
    last_session: SessionId,
    last_limit: LimitId,
    sessions: BTreeMap<SessionId, Session>,
    limits: BTreeMap<LimitId, Box<Limit>>,
    tenants: BTreeMap<String, Tenant>,
    token_leases: TokenLeases,
    lean_keys: BTreeMap<LimitId, KeyTable>,
}

impl SavedLimitsV8 {
    /// Today's state for a version 8 one: the same, with no frozen tenant.
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
            token_leases: self.token_leases,
            lean_keys: self.lean_keys,
            frozen: Default::default(),
            placements: Default::default(),
        }
    }
}
