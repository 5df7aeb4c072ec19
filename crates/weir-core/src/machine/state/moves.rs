//! Moving a tenant between machines: the freeze that takes its state out as one
//! [`FrozenTenant`], the adopt that installs it, and the drop of a frozen tenant (the
//! value's invariants are in `machine::frozen_tenant`).
//!
//! - `FreezeTenant` refills the tenant's buckets and lean keys to now, takes out its record,
//!   limits, keys, token leases and its sessions' live tickets of it, keeps the value among
//!   the frozen tenants, and refuses each of its waiters `Moved` by event (the waiter asks
//!   again in the destination, where it waits in the same place). From then on every
//!   command naming the tenant, and a release or settlement of a ticket it carried, is
//!   answered `Moved` naming the destination (`Machine::moved`).
//! - `AdoptTenant` renumbers its limits from the destination's counter (in the source's id
//!   order, so every replica picks the same ids), moves its log times by the value's
//!   [`crate::machine::frozen_tenant::Shift`], installs its sessions (merged into a live
//!   session of the same id and owner), raises the fence counter to the value's, and drops
//!   a frozen record of the same tenant (a tenant moving back).
//! - `DropFrozen` forgets a frozen tenant: its requests are then those of an unknown tenant.
//!
//! Freeze and adopt rebuild the derived indexes from the saved state and check every
//! invariant of the result before it replaces the machine's state: a value that would break
//! one is refused naming it, changing nothing. Both cost a pass over the whole state, which
//! a move, rare and operator-driven, affords.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::Machine;
use crate::bounds::{FROZEN_TENANTS_MAX, MOVE_BYTES_MAX};
use crate::machine::command::{LimitId, SessionId, TicketId};
use crate::machine::frozen_tenant::{FrozenTenant, GroupId, LeanKey};
use crate::machine::key_table::{KeyBucket, KeyTable};
use crate::machine::limit::Limit;
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::saved::SavedLimits;
use crate::machine::session::Ticket;

/// The limit ids a ticket takes a place in.
fn ticket_limits(ticket: &Ticket) -> Vec<LimitId> {
    match ticket {
        Ticket::Queued { limit, .. } | Ticket::Held { limit, .. } => vec![*limit],
        Ticket::QueuedParts { parts, .. } => parts.iter().map(|(l, _)| *l).collect(),
        Ticket::HeldParts {
            parts, estimates, ..
        } => parts.iter().chain(estimates).map(|(l, _)| *l).collect(),
    }
}

/// `ticket` with its limit ids renumbered by `ids`.
fn renumbered(ticket: &Ticket, ids: &BTreeMap<LimitId, LimitId>) -> Result<Ticket, String> {
    let id = |l: &LimitId| {
        ids.get(l)
            .copied()
            .ok_or_else(|| format!("a ticket names limit {l}, which the tenant does not carry"))
    };
    Ok(match ticket {
        Ticket::Queued { limit, key } => Ticket::Queued {
            limit: id(limit)?,
            key: *key,
        },
        Ticket::Held {
            limit,
            fence,
            units,
        } => Ticket::Held {
            limit: id(limit)?,
            fence: *fence,
            units: *units,
        },
        Ticket::QueuedParts { parts, estimate } => Ticket::QueuedParts {
            parts: parts
                .iter()
                .map(|(l, k)| Ok((id(l)?, *k)))
                .collect::<Result<_, String>>()?,
            estimate: *estimate,
        },
        Ticket::HeldParts {
            fence,
            units,
            parts,
            estimates,
        } => Ticket::HeldParts {
            fence: *fence,
            units: *units,
            parts: parts
                .iter()
                .map(|(l, u)| Ok((id(l)?, *u)))
                .collect::<Result<_, String>>()?,
            estimates: estimates
                .iter()
                .map(|(l, u)| Ok((id(l)?, *u)))
                .collect::<Result<_, String>>()?,
        },
    })
}

/// A lean key's bucket brought up to `now_ms` under its definition's spec, or `None` when
/// that fills it (a full lean key is fresh, and a fresh key is not kept).
fn refilled_lean(def: &Limit, name: &str, b: KeyBucket, now_ms: u64) -> Option<LeanKey> {
    let mut key = Limit::new_key(0, name, Arc::clone(&def.spec), b.refilled_at_ms);
    key.tokens_micro = b.tokens_micro;
    key.refill_remainder = u64::from(b.refill_remainder);
    key.refill(now_ms);
    if key.tokens_micro >= key.own_cap_micro() {
        return None;
    }
    Some(LeanKey {
        name: name.to_owned(),
        tokens_micro: key.tokens_micro,
        refill_remainder: u16::try_from(key.refill_remainder).expect("a remainder is below 1000"),
        refilled_at_ms: key.refilled_at_ms,
    })
}

impl Machine {
    /// `Moved` when `tenant` is frozen here: where it went.
    pub(super) fn moved_tenant(&self, tenant: &str) -> Option<Refusal> {
        self.saved.frozen.get(tenant).map(|f| Refusal::Moved {
            tenant: tenant.to_owned(),
            to: f.to,
        })
    }

    /// `Moved` when `ticket` of `session` belongs to a tenant frozen here.
    pub(super) fn moved_ticket(&self, session: SessionId, ticket: TicketId) -> Option<Refusal> {
        self.saved
            .frozen
            .values()
            .find(|f| f.has_ticket(session, ticket))
            .map(|f| Refusal::Moved {
                tenant: f.name.clone(),
                to: f.to,
            })
    }

    /// The frozen value of `tenant`, while it is frozen here: what the destination adopts.
    pub fn frozen_tenant(&self, tenant: &str) -> Option<&FrozenTenant> {
        self.saved.frozen.get(tenant)
    }

    /// The tenants frozen here, in name order.
    pub fn frozen_tenants(&self) -> impl Iterator<Item = &str> {
        self.saved.frozen.keys().map(String::as_str)
    }

    /// Replaces the state with `saved`, its indexes rebuilt, when it keeps every invariant.
    fn install(&mut self, saved: SavedLimits, what: &str) -> Result<(), Refusal> {
        let mut next = Machine::from_saved(saved);
        next.keys_live_max = self.keys_live_max;
        next.check()
            .map_err(|e| Refusal::Invalid(format!("{what} would break the state: {e}")))?;
        *self = next;
        Ok(())
    }

    /// `FreezeTenant`: see the module doc.
    pub(super) fn freeze_tenant(
        &mut self,
        name: &str,
        to: GroupId,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        Refusal::room(
            self.saved.frozen.len() as u64,
            FROZEN_TENANTS_MAX,
            format_args!("frozen tenants"),
        )?;
        let now_ms = self.now_ms();
        let mut saved = self.saved.clone();
        let tenant = saved.tenants.remove(name).unwrap_or_default();
        // The definitions and their whole keys.
        let mut ids = BTreeSet::new();
        for id in tenant.limits.values() {
            ids.insert(*id);
            if let Some(def) = saved.limits.get(id) {
                ids.extend(def.keys.values().copied());
            }
        }
        let mut limits = Vec::with_capacity(ids.len());
        let mut lean_keys = Vec::new();
        for id in &ids {
            let mut limit = *saved.limits.remove(id).ok_or_else(|| {
                Refusal::Invalid(format!("{name} names limit {id}, which is gone"))
            })?;
            limit.refill(now_ms);
            // Derived from the leases, and rebuilt from them by the adopt.
            limit.leased = Default::default();
            if let Some(table) = saved.lean_keys.remove(id) {
                let keys: Vec<LeanKey> = table
                    .iter()
                    .filter_map(|(k, b)| refilled_lean(&limit, k, b, now_ms))
                    .collect();
                if !keys.is_empty() {
                    lean_keys.push((*id, keys));
                }
            }
            limits.push((*id, limit));
        }
        let token_leases: Vec<_> = saved
            .token_leases
            .leases
            .iter()
            .filter(|((_, l), _)| ids.contains(l))
            .map(|(&k, &v)| (k, v))
            .collect();
        for (k, _) in &token_leases {
            saved.token_leases.leases.remove(k);
        }
        let leasing: BTreeSet<SessionId> = token_leases.iter().map(|((s, _), _)| *s).collect();
        let mut sessions = Vec::new();
        let mut lease_seqs = Vec::new();
        let mut refused = Vec::new();
        for (&id, session) in &mut saved.sessions {
            let (moving, staying): (BTreeMap<_, _>, BTreeMap<_, _>) =
                std::mem::take(&mut session.live)
                    .into_iter()
                    .partition(|(_, t)| ticket_limits(t).iter().any(|l| ids.contains(l)));
            session.live = staying;
            if moving.is_empty() && !leasing.contains(&id) {
                continue;
            }
            for (&ticket, t) in &moving {
                if matches!(t, Ticket::Queued { .. } | Ticket::QueuedParts { .. }) {
                    refused.push(Event::Refused {
                        session: id,
                        ticket,
                        refusal: Refusal::Moved {
                            tenant: name.to_owned(),
                            to,
                        },
                    });
                }
            }
            if let Some(&seq) = saved.token_leases.seqs.get(&id) {
                lease_seqs.push((id, seq));
            }
            sessions.push((id, session.moved_copy(moving)));
        }
        let frozen = FrozenTenant {
            name: name.to_owned(),
            to,
            frozen_at_ms: now_ms,
            last_fence: saved.last_fence,
            tenant,
            limits,
            lean_keys,
            sessions,
            token_leases,
            lease_seqs,
        };
        let bytes = frozen.encode().len();
        if bytes > MOVE_BYTES_MAX {
            return Err(Refusal::AtCapacity {
                what: format!("the frozen state of tenant {name} ({bytes} bytes)"),
                limit: MOVE_BYTES_MAX as u64,
            });
        }
        saved.frozen.insert(name.to_owned(), frozen);
        self.install(saved, &format!("freezing {name}"))?;
        events.extend(refused);
        Ok(Reply::Done)
    }

    /// `AdoptTenant`: see the module doc.
    pub(super) fn adopt_tenant(&mut self, tenant: &str, bytes: &[u8]) -> Result<Reply, Refusal> {
        let frozen = FrozenTenant::decode(bytes).map_err(Refusal::Invalid)?;
        let name = frozen.name.as_str();
        if name != tenant {
            return Err(Refusal::Invalid(format!(
                "the frozen state is tenant {name}'s, the adopt names {tenant}"
            )));
        }
        if self.saved.tenants.contains_key(name) {
            return Err(Refusal::Invalid(format!(
                "tenant {name} has state here already: a move adopts it only where it has none"
            )));
        }
        let shift = frozen.shift(self.now_ms());
        let at = |t| shift.at(t);
        let mut saved = self.saved.clone();
        saved.frozen.remove(name);
        let mut ids = BTreeMap::new();
        for (old, _) in &frozen.limits {
            saved.last_limit += 1;
            ids.insert(*old, saved.last_limit);
        }
        let id = |l: &LimitId| {
            ids.get(l).copied().ok_or_else(|| {
                Refusal::Invalid(format!(
                    "the frozen state of {name} names limit {l}, which it does not carry"
                ))
            })
        };
        for (old, limit) in &frozen.limits {
            let mut limit = limit.clone();
            limit.of = limit.of.as_ref().map(id).transpose()?;
            for key in limit.keys.values_mut() {
                *key = id(key)?;
            }
            limit.refilled_at_ms = at(limit.refilled_at_ms);
            for holder in limit.holders.values_mut() {
                holder.granted_at_ms = at(holder.granted_at_ms);
            }
            saved.limits.insert(ids[old], Box::new(limit));
        }
        for (def, keys) in &frozen.lean_keys {
            let keys = keys
                .iter()
                .map(|k| {
                    let b = KeyBucket {
                        tokens_micro: k.tokens_micro,
                        refill_remainder: k.refill_remainder,
                        refilled_at_ms: at(k.refilled_at_ms),
                    };
                    (k.name.clone(), b)
                })
                .collect();
            let table = KeyTable::from_sorted(keys).map_err(Refusal::Invalid)?;
            saved.lean_keys.insert(id(def)?, table);
        }
        let mut tenant = frozen.tenant.clone();
        for l in tenant.limits.values_mut() {
            *l = id(l)?;
        }
        tenant.shift_times(&at);
        if !tenant.is_empty() {
            saved.tenants.insert(name.to_owned(), tenant);
        }
        for (sid, session) in &frozen.sessions {
            let mut session = session.clone();
            session.live = session
                .live
                .iter()
                .map(|(&t, ticket)| Ok((t, renumbered(ticket, &ids)?)))
                .collect::<Result<_, String>>()
                .map_err(Refusal::Invalid)?;
            session.shift_times(&at);
            match saved.sessions.get_mut(sid) {
                Some(here) => here
                    .merge(session)
                    .map_err(|e| Refusal::Invalid(format!("session {sid} of {name}: {e}")))?,
                None => {
                    saved.sessions.insert(*sid, session);
                }
            }
        }
        for &((sid, l), lease) in &frozen.token_leases {
            let mut lease = lease;
            lease.since_ms = at(lease.since_ms);
            saved.token_leases.leases.insert((sid, id(&l)?), lease);
        }
        for &(sid, seq) in &frozen.lease_seqs {
            let here = saved.token_leases.seqs.entry(sid).or_default();
            *here = (*here).max(seq);
        }
        saved.last_fence = saved.last_fence.max(frozen.last_fence);
        self.install(saved, &format!("adopting {name}"))?;
        Ok(Reply::Done)
    }

    /// `DropFrozen`: forgets a frozen tenant; `Done` whether it was frozen here or not.
    pub(super) fn drop_frozen(&mut self, name: &str) -> Reply {
        self.saved.frozen.remove(name);
        Reply::Done
    }
}
