//! Snapshot version 9, read and converted: [`SavedLimitsV9`] decodes the payload of a
//! version 9 snapshot and [`SavedLimitsV9::upgrade`] turns it into today's [`SavedLimits`].
//!
//! Version 10 appends the placements (the metadata group's tenant → data group) to version
//! 9's fields and changes nothing else: a version 9 state is today's with no placement.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::clock::LogClock;
use super::command::{Fence, LimitId, SessionId};
use super::frozen_tenant::FrozenTenant;
use super::key_table::KeyTable;
use super::limit::Limit;
use super::saved::SavedLimits;
use super::session::Session;
use super::tenant::Tenant;
use super::token_lease::TokenLeases;

/// The machine's saved state as version 9 encoded it: today's fields up to the frozen
/// tenants.
#[derive(Deserialize)]
pub(super) struct SavedLimitsV9 {
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
    frozen: BTreeMap<String, FrozenTenant>,
}

impl SavedLimitsV9 {
    /// Today's state for a version 9 one: the same, with no placement.
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
            frozen: self.frozen,
            placements: Default::default(),
        }
    }
}
