//! Snapshot version 7, read and converted: [`SavedLimitsV7`] decodes the payload of a
//! version 7 snapshot and [`SavedLimitsV7::upgrade`] turns it into today's [`SavedLimits`].
//!
//! Version 8 appends the lean keys of each keyed definition to version 7's fields and
//! changes nothing else. Version 7 kept every live key as a limit of its own; today's
//! machine keeps such a key as it was (a key's state may be a limit of its own, as a key
//! with a holder is), so a version 7 state is today's with no lean key. Its keys become
//! lean as they are next decided on.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::clock::LogClock;
use super::command::{Fence, LimitId, SessionId};
use super::limit::Limit;
use super::saved::SavedLimits;
use super::session::Session;
use super::tenant::Tenant;
use super::token_lease::TokenLeases;

/// The machine's saved state as version 7 encoded it: today's fields up to the leases.
#[derive(Deserialize)]
pub(super) struct SavedLimitsV7 {
    clock: LogClock,
    applied: Option<u64>,
    last_fence: Fence,
    last_session: SessionId,
    last_limit: LimitId,
    sessions: BTreeMap<SessionId, Session>,
    limits: BTreeMap<LimitId, Box<Limit>>,
    tenants: BTreeMap<String, Tenant>,
    token_leases: TokenLeases,
}

impl SavedLimitsV7 {
    /// Today's state for a version 7 one: the same, with no lean key.
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
            lean_keys: Default::default(),
            frozen: Default::default(),
            placements: Default::default(),
        }
    }
}
