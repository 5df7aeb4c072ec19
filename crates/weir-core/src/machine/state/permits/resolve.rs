//! Resolving the parts of a request against the state: which limit (or key state) each part
//! charges, whether it has room now, and whether a waiter ahead of it blocks it.
//!
//! Resolving changes nothing but refills (and drops a key state the refill made fresh); a
//! part on a key with no state charges a state created only when the request is granted or
//! queued (`target_of`). A part on a shadow limit that would refuse passes, and is counted
//! by the caller if the request goes on.

use crate::machine::command::{AcquireParts, LimitId, Part};
use crate::machine::limit::{Limit, Room, ShadowKind};
use crate::machine::reply::Refusal;
use crate::machine::state::Machine;

/// One part of a request, resolved against the state.
pub(super) struct Resolved {
    /// The limit's definition.
    pub(super) def: LimitId,
    /// The limit charged: the definition, or its key's state; `None` for a key that has
    /// no state (it is fresh), created when the request is granted or queued.
    pub(super) target: Option<LimitId>,
    pub(super) key: Option<String>,
    pub(super) units: u32,
    /// The room for the part now.
    pub(super) room: Room,
    /// Whether a waiter in the target's queue has no room: a new request waits behind it.
    pub(super) blocked: bool,
    /// A part on a shadow limit that would refuse (too large, no room, no room for a new
    /// key): it passes, charges nothing, and is counted if the request is granted or queued.
    pub(super) shadow_pass: Option<ShadowKind>,
}

impl Resolved {
    /// A shadow part that would refuse.
    fn passing(def: LimitId, part: &Part, kind: ShadowKind) -> Resolved {
        Resolved {
            def,
            target: None,
            key: part.key.clone(),
            units: part.units,
            room: Room::NeedsRelease,
            blocked: false,
            shadow_pass: Some(kind),
        }
    }

    /// Whether the part can be granted now, ahead of nobody.
    pub(super) fn ready(&self) -> bool {
        self.room == Room::Yes && !self.blocked
    }
}

impl Machine {
    /// Resolves every part of `a` in order: the first part that names an unknown limit, a
    /// key its limit does not take, too many units, or a new key past its limit's bound,
    /// refuses the request, naming that part's limit. Changes nothing but refills.
    pub(super) fn resolve(&mut self, a: &AcquireParts) -> Result<Vec<Resolved>, Refusal> {
        let now_ms = self.now_ms();
        let mut resolved = Vec::with_capacity(a.parts.len());
        for (i, part) in a.parts.iter().enumerate() {
            let n = i + 1;
            let (def, target) = self.part_target(&a.tenant, n, &part.limit, part.key.as_ref())?;
            let d = &self.saved.limits[&def];
            if let (Some(keys_max), None) = (d.spec.keys_max, target) {
                // A new key. New keys of this definition named by earlier parts count too.
                let new_before = resolved
                    .iter()
                    .filter(|r: &&Resolved| r.def == def && r.target.is_none())
                    .count();
                let live = self.live_keys_of(def) + new_before;
                let room = self.room_for_key(&a.tenant, &part.limit, live, keys_max);
                if let Err(refusal) = room {
                    if !d.spec.shadow {
                        return Err(refusal);
                    }
                    resolved.push(Resolved::passing(def, part, ShadowKind::AtCapacity));
                    continue;
                }
            }
            if let Some(max) = d.spec.max_units()
                && part.units as u64 > max
            {
                if d.spec.shadow {
                    resolved.push(Resolved::passing(def, part, ShadowKind::TooLarge));
                    continue;
                }
                return Err(Refusal::TooLarge {
                    tenant: a.tenant.clone(),
                    name: part.limit.clone(),
                    units: part.units,
                    max,
                });
            }
            let shadow = d.spec.shadow;
            let mut target = target;
            if let Some(id) = target {
                let limit = self.saved.limits.get_mut(&id).expect("live limit");
                limit.refill(now_ms);
                if limit.is_key() && limit.is_fresh() {
                    // Refilled to its burst: a key in this state has none (`file` drops it).
                    self.file(id);
                    target = None;
                }
            }
            let (room, blocked) = match target {
                Some(id) => {
                    let limit = &self.saved.limits[&id];
                    let blocked = limit.first_blocker(now_ms).is_some();
                    (limit.room_for(part.units, now_ms), blocked)
                }
                // A fresh key: a full bucket, nothing held, and the units fit (above).
                None => (Room::Yes, false),
            };
            let ready = room == Room::Yes && !blocked;
            resolved.push(Resolved {
                def,
                target,
                key: part.key.clone(),
                units: part.units,
                room,
                blocked,
                shadow_pass: (shadow && !ready).then_some(ShadowKind::Busy),
            });
        }
        Ok(resolved)
    }

    /// `AtCapacity` when a new key of (tenant, name), which has `live` keys, would pass its
    /// `keys_max` or the machine's bound ([`crate::bounds::KEYS_LIVE_MAX`]).
    fn room_for_key(
        &self,
        tenant: &str,
        name: &str,
        live: usize,
        keys_max: u32,
    ) -> Result<(), Refusal> {
        if live >= keys_max as usize {
            return Err(Refusal::AtCapacity {
                what: format!("keys of limit {tenant}/{name}"),
                limit: keys_max as u64,
            });
        }
        let max = self.keys_live_max();
        if self.totals.live_keys >= max as u64 {
            return Err(Refusal::AtCapacity {
                what: "live keys".into(),
                limit: max as u64,
            });
        }
        Ok(())
    }

    /// The limit a resolved part charges, creating its key's state if it has none.
    pub(super) fn target_of(&mut self, part: &Resolved) -> LimitId {
        if let Some(id) = part.target {
            return id;
        }
        let key = part.key.as_deref().expect("only keys lack a state");
        let def = self.saved.limits.get_mut(&part.def).expect("live limit");
        let spec = def.spec.clone();
        self.saved.last_limit += 1;
        let id = self.saved.last_limit;
        def.keys.insert(key.to_owned(), id);
        let limit = Limit::new_key(part.def, key, spec, self.now_ms());
        self.saved.limits.insert(id, Box::new(limit));
        self.totals.live_keys += 1;
        id
    }
}
