//! Where each tenant lives, as the metadata group's machine records it: `PlaceTenant` and
//! the read the node routes by ([`Machine::placement`]).
//!
//! Invariants:
//! - A tenant is placed at most once and never in group 0 (the metadata group); a
//!   `PlaceTenant` naming the group it already has is answered as the first was, one naming
//!   another is refused `Placed` naming the group it has. So a node that finds a placement
//!   in its applied state, however far behind, finds the one every node finds: a route read
//!   from a stale machine is never a wrong route, only a missing one.
//! - At most [`PLACEMENTS_MAX`] tenants are placed; past it a new placement is refused
//!   `AtCapacity`, and placed tenants keep theirs.
//!
//! A data group's machine holds no placements: it decides the tenants the node routes to it.

use super::Machine;
use crate::bounds::PLACEMENTS_MAX;
use crate::machine::reply::{Refusal, Reply};

impl Machine {
    /// `PlaceTenant`: places `tenant` in data group `group` unless it is placed already.
    pub(super) fn place_tenant(&mut self, tenant: &str, group: u64) -> Result<Reply, Refusal> {
        match self.saved.placements.get(tenant) {
            Some(&placed) if placed == group => return Ok(Reply::Placed { group }),
            Some(&placed) => {
                return Err(Refusal::Placed {
                    tenant: tenant.to_owned(),
                    group: placed,
                });
            }
            None => {}
        }
        Refusal::room(
            self.saved.placements.len() as u64,
            PLACEMENTS_MAX,
            format_args!("placed tenants"),
        )?;
        self.saved.placements.insert(tenant.to_owned(), group);
        Ok(Reply::Placed { group })
    }

    /// The data group tenant `tenant` is placed in, if this machine (the metadata group's)
    /// placed it.
    pub fn placement(&self, tenant: &str) -> Option<u64> {
        self.saved.placements.get(tenant).copied()
    }

    /// Whether this machine holds any state of tenant `tenant` (a record: its limits,
    /// ceilings, runs or halts). A data group's machine that holds a tenant no placement
    /// names holds it from before placements existed.
    pub fn holds_tenant(&self, tenant: &str) -> bool {
        self.saved.tenants.contains_key(tenant)
    }

    /// How many tenants this machine has placed.
    pub fn placements(&self) -> usize {
        self.saved.placements.len()
    }
}
