//! Permits: acquiring (granted at once, queued, or refused), releasing, and serving a
//! limit's queue when room appears.
//!
//! A ticket gets a permit in one of two ways, at once on its acquire or from the queue when
//! the limit is served; a request of one part goes through [`Machine::grant`], which takes
//! the fence, and one of several parts (or with an estimate) takes one fence for all its
//! parts and records them with `record_grant`. A live ticket leaves its limits in one of
//! two ways, its release or its session's end; both go through [`Machine::unlink`], and the
//! caller then serves the limits.
//!
//! Requests of several parts, keys and shadow parts are resolved and decided here (the
//! rule is the machine's module doc, "Several parts"), and so are takes with an estimate
//! and their settlement (`SettleTake`).

use std::collections::BTreeMap;

use super::Machine;
use crate::bounds::{
    FINISHED_REFUSALS_MAX, FINISHED_TICKETS_MAX, KEYS_LIVE_MAX, LIMIT_WAITERS_MAX,
    SESSION_TICKETS_MAX, TICKETS_LIVE_MAX, TICKETS_QUEUED_MAX,
};
use crate::machine::command::{Acquire, Fence, LimitId, SessionId, TicketId};
use crate::machine::command::{AcquireParts, Part};
use crate::machine::limit::{Holder, Limit, Room, ShadowKind};
use crate::machine::queue::Waiter;
use crate::machine::queue_key::QueueKey;
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::session::{Finished, Session, Ticket};

/// One part of a request, resolved against the state.
struct Resolved {
    /// The limit's definition.
    def: LimitId,
    /// The limit charged: the definition, or its key's state; `None` for a key that has
    /// no state (it is fresh), created when the request is granted or queued.
    target: Option<LimitId>,
    key: Option<String>,
    units: u32,
    /// The room for the part now.
    room: Room,
    /// Whether a waiter in the target's queue has no room: a new request waits behind it.
    blocked: bool,
    /// A part on a shadow limit that would refuse (too large, no room, no room for a new
    /// key): it passes, charges nothing, and is counted if the request is granted or queued.
    shadow_pass: Option<ShadowKind>,
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
    fn ready(&self) -> bool {
        self.room == Room::Yes && !self.blocked
    }
}

impl Machine {
    /// An acquire of one limit: an [`AcquireParts`] of one keyless part.
    pub(super) fn acquire(
        &mut self,
        a: &Acquire,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        self.acquire_parts(&AcquireParts::from(a), events)
    }

    /// An acquire or take of one or more parts: every part granted in this entry under one
    /// fence, or the request queued on every part, or refused with nothing charged.
    pub(super) fn acquire_parts(
        &mut self,
        a: &AcquireParts,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        if let Some(reply) = self.ticket_admits(a)? {
            return Ok(reply);
        }
        let decided = self.decide_new(a, events);
        if let Err(refusal) = &decided
            && a.wait
        {
            self.remember_refusal(a, refusal);
        }
        decided
    }

    /// Remembers that the new waiting request `a` was refused at once with `refusal`, as a
    /// finished ticket, so that asking again (a re-ask after a reconnect, a late duplicate)
    /// answers the same refusal instead of deciding a second time. A refusal for want of
    /// room to remember finished tickets cannot be remembered, and is not: the request was
    /// decided nothing, so asking again decides it afresh.
    fn remember_refusal(&mut self, a: &AcquireParts, refusal: &Refusal) {
        let now_ms = self.now_ms();
        let room = self.room_to_finish();
        let session = self
            .saved
            .sessions
            .get_mut(&a.session)
            .expect("checked by ticket_admits");
        if room.and(session.room_to_finish(a.session)).is_err() {
            return;
        }
        let how = Finished::refused(refusal.clone());
        session.finish(a.ticket, how, now_ms, &mut self.totals);
        self.refile_tickets(a.session);
    }

    /// A new request (its session has room for it): granted, queued, or refused.
    fn decide_new(&mut self, a: &AcquireParts, events: &mut Vec<Event>) -> Result<Reply, Refusal> {
        self.room_for_ticket()?;
        // PLANTED(halt-skipped)
        if let Some(t) = self.saved.tenants.get(&a.tenant)
            && !crate::planted::is(crate::planted::Plant::HaltSkipped)
        {
            t.refuse_if_halted(&a.tenant, a.agent.as_deref())?;
        }
        let (passed, parts): (Vec<Resolved>, Vec<Resolved>) = self
            .resolve(a)?
            .into_iter()
            .partition(|p| p.shadow_pass.is_some());
        if parts.iter().all(Resolved::ready) {
            self.count_shadow(&passed);
            return Ok(self.grant_now(a, &parts));
        }
        if !a.wait {
            // PLANTED(refused-charges-first)
            if crate::planted::is(crate::planted::Plant::RefusedChargesFirst)
                && parts.len() > 1
                && parts[0].ready()
            {
                self.charge_refused(&parts[0]);
            }
            // A retry time only when every part that lacks room waits for tokens alone.
            let waits: Option<Vec<u64>> = parts
                .iter()
                .filter(|p| !p.ready())
                .map(|p| match p.room {
                    Room::NeedsTokensAt(at) if !p.blocked => Some(at),
                    _ => None,
                })
                .collect();
            let retry_at_ms = waits.and_then(|w| w.into_iter().max());
            return Err(Refusal::Busy { retry_at_ms });
        }
        let reply = self.enqueue(a, &parts, events)?;
        self.count_shadow(&passed);
        Ok(reply)
    }

    /// Settles the take `ticket` of `session`, granted with an estimate, at `cost` tokens on
    /// every rate part; then serves those limits (returned tokens may let waiters through).
    pub(super) fn settle_take(
        &mut self,
        session: SessionId,
        ticket: TicketId,
        cost: u64,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let now_ms = self.now_ms();
        let s = self
            .saved
            .sessions
            .get(&session)
            .ok_or(Refusal::UnknownSession { session })?;
        let (fence, units, holding, estimates) = match s.live.get(&ticket) {
            Some(Ticket::HeldParts {
                fence,
                units,
                parts,
                estimates,
            }) if !estimates.is_empty() => (*fence, *units, parts.clone(), estimates.clone()),
            // Settled before (or taken without an estimate): nothing more to do (G5).
            Some(Ticket::HeldParts { .. } | Ticket::Held { .. }) => {
                return Ok(Reply::Settled { duplicate: true });
            }
            // Finished as a take, or finished and forgotten below the mark: nothing more.
            None if matches!(s.finished.get(&ticket), Some(Finished::Taken { .. }))
                || !s.remembers(ticket) =>
            {
                return Ok(Reply::Settled { duplicate: true });
            }
            Some(Ticket::Queued { .. } | Ticket::QueuedParts { .. }) => {
                return Err(Refusal::Invalid(format!(
                    "ticket {ticket} of session {session} waits: only a granted take settles"
                )));
            }
            None => {
                return Err(Refusal::Invalid(format!(
                    "ticket {ticket} of session {session} holds no take to settle"
                )));
            }
        };
        let mut overrun = 0;
        for (id, _) in &estimates {
            let limit = self
                .saved
                .limits
                .get_mut(id)
                .expect("estimates name live limits");
            limit.refill(now_ms);
            let extra = limit.settle_estimate(fence, cost);
            overrun = overrun.max(extra);
            let def = limit.of.unwrap_or(*id);
            self.saved
                .limits
                .get_mut(&def)
                .expect("keys have definitions")
                .overrun_tokens += extra;
        }
        let s = self.saved.sessions.get_mut(&session).expect("looked up");
        if holding.is_empty() {
            s.finish(
                ticket,
                Finished::Taken { fence, units },
                now_ms,
                &mut self.totals,
            );
        } else {
            let held = Ticket::HeldParts {
                fence,
                units,
                parts: holding,
                estimates: Vec::new(),
            };
            s.set_live(ticket, held, &mut self.totals);
        }
        self.refile_tickets(session);
        for (id, _) in estimates {
            self.serve(id, events);
        }
        Ok(if overrun > 0 {
            Reply::Overrun {
                tokens: overrun,
                minor_units: 0,
            }
        } else {
            Reply::Settled { duplicate: false }
        })
    }

    /// The planted bug `refused-charges-first`: takes `part`'s tokens (its room checked)
    /// although its request is refused.
    fn charge_refused(&mut self, part: &Resolved) {
        let id = self.target_of(part);
        let limit = self.saved.limits.get_mut(&id).expect("created");
        if limit.spec.rates() {
            limit.tokens_micro -= part.units as u64 * crate::machine::limit::MICRO;
        }
        self.file(id);
    }

    /// Counts the would-be refusals of shadow parts that passed a request granted or queued.
    fn count_shadow(&mut self, passed: &[Resolved]) {
        for part in passed {
            let def = self.saved.limits.get_mut(&part.def).expect("live limit");
            let kind = part.shadow_pass.expect("passed parts have a kind");
            def.shadow_refusals.count(kind);
        }
    }

    /// Resolves every part of `a` in order: the first part that names an unknown limit, a
    /// key its limit does not take, too many units, or a new key past its limit's bound,
    /// refuses the request, naming that part's limit. Changes nothing but refills.
    fn resolve(&mut self, a: &AcquireParts) -> Result<Vec<Resolved>, Refusal> {
        let now_ms = self.now_ms();
        let mut resolved = Vec::with_capacity(a.parts.len());
        for (i, part) in a.parts.iter().enumerate() {
            let n = i + 1;
            let def = self.live_limit_id(&a.tenant, &part.limit)?;
            let d = &self.saved.limits[&def];
            let target = match (d.spec.keys_max, &part.key) {
                (Some(_), None) => {
                    return Err(Refusal::Invalid(format!(
                        "part {n}: limit {}/{} is keyed, and the part names no key",
                        a.tenant, part.limit
                    )));
                }
                (None, Some(key)) => {
                    return Err(Refusal::Invalid(format!(
                        "part {n}: limit {}/{} is not keyed, and the part names key {key}",
                        a.tenant, part.limit
                    )));
                }
                (None, None) => Some(def),
                (Some(keys_max), Some(key)) => {
                    let target = d.keys.get(key).copied();
                    if target.is_none() {
                        let room =
                            self.room_for_key(&a.tenant, &part.limit, d.keys.len(), keys_max);
                        if let Err(refusal) = room {
                            if !d.spec.shadow {
                                return Err(refusal);
                            }
                            resolved.push(Resolved::passing(def, part, ShadowKind::AtCapacity));
                            continue;
                        }
                    }
                    target
                }
            };
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
    /// `keys_max` or the machine's [`KEYS_LIVE_MAX`].
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
        if self.totals.live_keys >= KEYS_LIVE_MAX as u64 {
            return Err(Refusal::AtCapacity {
                what: "live keys".into(),
                limit: KEYS_LIVE_MAX as u64,
            });
        }
        Ok(())
    }

    /// The limit a resolved part charges, creating its key's state if it has none.
    fn target_of(&mut self, part: &Resolved) -> LimitId {
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

    /// Grants `a` now: every part is ready.
    fn grant_now(&mut self, a: &AcquireParts, parts: &[Resolved]) -> Reply {
        let units = a.parts[0].units;
        if let [part] = parts
            && part.units == units
            && !a.estimate
        {
            let id = self.target_of(part);
            let fence = self.grant(id, holder_of(a, units, self.now_ms()));
            self.file(id);
            return Reply::Granted { fence, units };
        }
        let fence = self.next_fence();
        let now_ms = self.now_ms();
        let mut took = Took::default();
        let mut ids = Vec::with_capacity(parts.len());
        for part in parts {
            let id = self.target_of(part);
            let limit = self.saved.limits.get_mut(&id).expect("created");
            took.grant(
                limit,
                id,
                fence,
                holder_of(a, part.units, now_ms),
                a.estimate,
            );
            ids.push(id);
        }
        self.record_grant(a.session, a.ticket, fence, units, took);
        for id in ids {
            self.file(id);
        }
        Reply::Granted { fence, units }
    }

    /// Records in its session that a request of several parts (or taken with an estimate)
    /// was granted under `fence`: held while a part holds or an estimate is unsettled, else
    /// finished as a take.
    fn record_grant(
        &mut self,
        session: SessionId,
        ticket: TicketId,
        fence: Fence,
        units: u32,
        took: Took,
    ) {
        let now_ms = self.now_ms();
        let s = self
            .saved
            .sessions
            .get_mut(&session)
            .expect("grants go to open sessions");
        if took.holding.is_empty() && took.estimates.is_empty() {
            s.finish(
                ticket,
                Finished::Taken { fence, units },
                now_ms,
                &mut self.totals,
            );
            self.refile_tickets(session);
        } else {
            let held = Ticket::HeldParts {
                fence,
                units,
                parts: took.holding,
                estimates: took.estimates,
            };
            s.set_live(ticket, held, &mut self.totals);
        }
    }

    /// The session's side of an acquire: `Some` answer for a ticket it already knows (the
    /// same answer, no second effect: G5), else whether it has room for a new ticket. Prunes
    /// the session's finished tickets that are due first.
    fn ticket_admits(&mut self, a: &AcquireParts) -> Result<Option<Reply>, Refusal> {
        let now_ms = self.now_ms();
        let session = self
            .saved
            .sessions
            .get_mut(&a.session)
            .ok_or(Refusal::UnknownSession { session: a.session })?;
        session.prune_finished(now_ms, &mut self.totals);
        self.refile_tickets(a.session);
        let session = &self.saved.sessions[&a.session];
        if let Some(reply) = self.answer_again(a.session, a.ticket, &a.tenant, session) {
            return Ok(Some(reply));
        }
        if !session.remembers(a.ticket) {
            return Err(Refusal::Invalid(format!(
                "ticket {} of session {} is below the session's acknowledged mark {}: a new \
                 request takes a new ticket",
                a.ticket, a.session, session.acked_below
            )));
        }
        // A new ticket ends finished; there must be room to remember it (never forget one
        // a client may still retry).
        session.room_to_finish(a.session)?;
        let live = session.live.len() as u64;
        let what = format_args!("live tickets of session {}", a.session);
        Refusal::room(live, SESSION_TICKETS_MAX, what)?;
        Ok(None)
    }

    /// What an acquire naming a ticket the session already knows is answered, or `None`
    /// for a new ticket.
    fn answer_again(
        &self,
        session_id: SessionId,
        ticket: TicketId,
        tenant: &str,
        session: &Session,
    ) -> Option<Reply> {
        let position = |limit: &LimitId, key| self.saved.limits[limit].queue.position(key);
        match session.live.get(&ticket) {
            Some(Ticket::Queued { limit, key }) => Some(Reply::Queued {
                position: position(limit, key),
            }),
            Some(Ticket::QueuedParts { parts, .. }) => Some(Reply::Queued {
                position: position(&parts[0].0, &parts[0].1),
            }),
            Some(Ticket::Held { fence, units, .. } | Ticket::HeldParts { fence, units, .. }) => {
                Some(Reply::Granted {
                    fence: *fence,
                    units: *units,
                })
            }
            None => session
                .finished
                .get(&ticket)
                .map(|f| f.reply(session_id, ticket, tenant)),
        }
    }

    /// Queues `a` on every part's limit, unless a queue is full.
    fn enqueue(
        &mut self,
        a: &AcquireParts,
        parts: &[Resolved],
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        for (part, asked) in parts.iter().zip(&a.parts) {
            let waiting = part
                .target
                .map_or(0, |id| self.saved.limits[&id].queue.len());
            if waiting >= LIMIT_WAITERS_MAX {
                return Err(Refusal::QueueFull {
                    tenant: a.tenant.clone(),
                    name: asked.limit.clone(),
                });
            }
        }
        if self.totals.queued_tickets + parts.len() as u64 > TICKETS_QUEUED_MAX as u64 {
            return Err(Refusal::AtCapacity {
                what: "queued tickets of all sessions".into(),
                limit: TICKETS_QUEUED_MAX as u64,
            });
        }
        let mut queued = Vec::with_capacity(parts.len());
        for part in parts {
            let id = self.target_of(part);
            let waiter = Waiter {
                session: a.session,
                ticket: a.ticket,
                units: part.units,
                agent: a.agent.clone(),
                fairness_key: String::new(),
                weight: 0,
            };
            let limit = self.saved.limits.get_mut(&id).expect("created");
            let key = limit.queue.push(waiter, &a.priority);
            queued.push((id, key));
        }
        let (first, first_key) = queued[0];
        let position = self.saved.limits[&first].queue.position(&first_key);
        let ticket = match queued.as_slice() {
            [(limit, key)] if !a.estimate => Ticket::Queued {
                limit: *limit,
                key: *key,
            },
            _ => Ticket::QueuedParts {
                parts: queued.clone(),
                estimate: a.estimate,
            },
        };
        let session = self
            .saved
            .sessions
            .get_mut(&a.session)
            .expect("checked by acquire");
        session.set_live(a.ticket, ticket, &mut self.totals);
        // Queuing never makes room for this ticket, but it files a rated limit for serving
        // on refill (and may let a waiter behind a passed-over one through, see `serve`).
        for (id, _) in queued {
            self.serve(id, events);
        }
        Ok(Reply::Queued { position })
    }

    pub(super) fn release(
        &mut self,
        id: SessionId,
        ticket: TicketId,
        events: &mut Vec<Event>,
    ) -> Reply {
        // An unknown ticket of an open session is finished too: a late acquire of it is
        // answered `TicketReleased`, not granted. Recording it needs room (see `session`).
        let now_ms = self.now_ms();
        if let Some(session) = self.saved.sessions.get_mut(&id) {
            session.prune_finished(now_ms, &mut self.totals);
            // A ticket below the mark is not recorded, so needs no room.
            let known = session.live.contains_key(&ticket)
                || session.finished.contains_key(&ticket)
                || !session.remembers(ticket);
            let room = session.room_to_finish(id).and(self.room_to_finish());
            self.refile_tickets(id);
            if !known && let Err(refusal) = room {
                return Reply::Refused(refusal);
            }
        }
        let totals = &mut self.totals;
        let live = self.saved.sessions.get_mut(&id).and_then(|session| {
            let live = session.live.get(&ticket).cloned();
            session.finish(ticket, Finished::Released, now_ms, totals);
            live
        });
        self.refile_tickets(id);
        let Some(live) = live else {
            return Reply::Released {
                held: false,
                withdrawn: false,
            };
        };
        for limit in self.unlink(&live) {
            self.serve(limit, events);
        }
        Reply::Released {
            held: matches!(live, Ticket::Held { .. } | Ticket::HeldParts { .. }),
            withdrawn: matches!(live, Ticket::Queued { .. } | Ticket::QueuedParts { .. }),
        }
    }

    /// Grants `holder` its units on limit `id`, whose room the caller checked: takes the
    /// next fence, and records the ticket in its session as held, or as finished when the
    /// limit holds nothing (a rate take). Returns the fence.
    fn grant(&mut self, id: LimitId, holder: Holder) -> Fence {
        let last = self.saved.last_fence;
        // PLANTED(reused-fence)
        let fence = if crate::planted::is(crate::planted::Plant::ReusedFence)
            && last > 0
            && !self.saved.limits[&id].holders.contains_key(&last)
        {
            last
        } else {
            self.next_fence()
        };
        let now_ms = self.now_ms();
        let (session, ticket, units) = (holder.session, holder.ticket, holder.units);
        let session_id = session;
        let limit = self
            .saved
            .limits
            .get_mut(&id)
            .expect("granted limits exist");
        let held = limit.grant(fence, holder);
        let session = self
            .saved
            .sessions
            .get_mut(&session)
            .expect("grants go to open sessions");
        if held {
            let ticket_now = Ticket::Held {
                limit: id,
                fence,
                units,
            };
            session.set_live(ticket, ticket_now, &mut self.totals);
        } else {
            session.finish(
                ticket,
                Finished::Taken { fence, units },
                now_ms,
                &mut self.totals,
            );
            self.refile_tickets(session_id);
        }
        fence
    }

    /// Takes a live ticket out of its limits: a queued one leaves the queues, a held one
    /// frees its permits. The session's own record is the caller's. Returns the limits,
    /// which the caller must serve.
    pub(super) fn unlink(&mut self, ticket: &Ticket) -> Vec<LimitId> {
        let limits = &mut self.saved.limits;
        match ticket {
            Ticket::Queued { limit: id, key } => {
                let waiter = limit_mut(limits, id).queue.remove(key);
                waiter.expect("a queued ticket is in its queue");
                vec![*id]
            }
            Ticket::Held {
                limit: id, fence, ..
            } => {
                let holder = limit_mut(limits, id).release(*fence);
                holder.expect("a held ticket is a holder");
                vec![*id]
            }
            Ticket::QueuedParts { parts, .. } => parts
                .iter()
                .map(|(id, key)| {
                    let waiter = limit_mut(limits, id).queue.remove(key);
                    waiter.expect("a queued part is in its queue");
                    *id
                })
                .collect(),
            Ticket::HeldParts {
                fence,
                parts,
                estimates,
                ..
            } => {
                let mut ids: Vec<LimitId> = parts
                    .iter()
                    .map(|(id, _)| {
                        let holder = limit_mut(limits, id).release(*fence);
                        holder.expect("a held part is a holder");
                        *id
                    })
                    .collect();
                // An estimate left unsettled stands as taken.
                for (id, _) in estimates {
                    let estimate = limit_mut(limits, id).estimating.remove(fence);
                    estimate.expect("an unsettled estimate is recorded");
                    ids.push(*id);
                }
                ids.sort_unstable();
                ids.dedup();
                ids
            }
        }
    }

    /// `AtCapacity` when a new ticket would pass a global ticket bound: live tickets, or
    /// finished tickets (a new ticket ends finished).
    fn room_for_ticket(&self) -> Result<(), Refusal> {
        Refusal::room(
            self.totals.live_tickets,
            TICKETS_LIVE_MAX,
            format_args!("live tickets of all sessions"),
        )?;
        self.room_to_finish()
    }

    /// `AtCapacity` when the machine keeps [`FINISHED_TICKETS_MAX`] finished tickets, or
    /// [`FINISHED_REFUSALS_MAX`] refusals among them (a new ticket may end as either).
    fn room_to_finish(&self) -> Result<(), Refusal> {
        Refusal::room(
            self.totals.finished_tickets,
            FINISHED_TICKETS_MAX,
            format_args!("finished tickets of all sessions kept for retries"),
        )?;
        Refusal::room(
            self.totals.finished_refusals,
            FINISHED_REFUSALS_MAX,
            format_args!("finished refusals of all sessions kept for retries"),
        )?;
        Ok(())
    }

    /// The next fence: the entry's index when above every earlier fence, else one more.
    fn next_fence(&mut self) -> Fence {
        let last = self.saved.last_fence;
        let fence = self.applied_index().max(last + 1);
        assert!(fence > last, "fences increase: {fence} after {last}");
        self.saved.last_fence = fence;
        fence
    }

    /// Serves limit `id`'s queue in order: grants each waiter that has room here, until one
    /// has none (it blocks those behind it). A waiter of several parts that has room here is
    /// granted when every other part is ready for it too (room, and no waiter ahead of it
    /// there without room); else it is passed over, since the room here is not what it
    /// waits for. Then files the limit (see the machine's module doc, "Several parts").
    pub(super) fn serve(&mut self, id: LimitId, events: &mut Vec<Event>) {
        let now_ms = self.now_ms();
        let mut passed: Option<QueueKey> = None;
        loop {
            let limit = self.saved.limits.get_mut(&id).expect("served limits exist");
            limit.refill(now_ms);
            let Some((&key, w)) = limit.queue.next_after(passed.as_ref()) else {
                break;
            };
            if limit.room_for(w.units, now_ms) != Room::Yes {
                break;
            }
            let (session, ticket) = (w.session, w.ticket);
            let live = self.saved.sessions[&session].live.get(&ticket);
            if let Some(Ticket::QueuedParts { parts, estimate }) = live {
                let (parts, estimate) = (parts.clone(), *estimate);
                if self.parts_ready(&parts, id, now_ms) {
                    self.grant_waiting_parts(session, ticket, &parts, estimate, id, events);
                } else {
                    passed = Some(key);
                }
                continue;
            }
            let limit = self.saved.limits.get_mut(&id).expect("served limits exist");
            let w = limit.queue.take(&key).expect("listed");
            let units = w.units;
            let holder = Holder {
                session,
                ticket,
                units,
                agent: w.agent,
                granted_at_ms: now_ms,
            };
            let fence = self.grant(id, holder);
            events.push(Event::Granted {
                session,
                ticket,
                fence,
                units,
            });
        }
        self.file(id);
    }

    /// Whether every part of a waiting request but the one on limit `serving` is ready: its
    /// limit has room for it, and no waiter ahead of it there lacks room (it would block).
    fn parts_ready(
        &mut self,
        parts: &[(LimitId, QueueKey)],
        serving: LimitId,
        now_ms: u64,
    ) -> bool {
        parts
            .iter()
            .filter(|(id, _)| *id != serving)
            .all(|(id, key)| {
                let limit = limit_mut(&mut self.saved.limits, id);
                limit.refill(now_ms);
                let units = limit
                    .queue
                    .get(key)
                    .expect("a queued part is in its queue")
                    .units;
                limit.room_for(units, now_ms) == Room::Yes
                    && limit
                        .queue
                        .iter()
                        .take_while(|(k, _)| *k < key)
                        .all(|(_, v)| limit.room_for(v.units, now_ms) == Room::Yes)
            })
    }

    /// Grants a waiting request of several parts, every part ready: takes it out of every
    /// queue (as service), charges every part under one fence, and tells its session. Files
    /// every part's limit but `serving`, which its `serve` files.
    fn grant_waiting_parts(
        &mut self,
        session: SessionId,
        ticket: TicketId,
        parts: &[(LimitId, QueueKey)],
        estimate: bool,
        serving: LimitId,
        events: &mut Vec<Event>,
    ) {
        let fence = self.next_fence();
        let now_ms = self.now_ms();
        let mut took = Took::default();
        let mut first_units = None;
        for (id, key) in parts {
            let limit = limit_mut(&mut self.saved.limits, id);
            let w = limit
                .queue
                .take(key)
                .expect("a queued part is in its queue");
            let units = w.units;
            first_units.get_or_insert(units);
            let holder = Holder {
                session,
                ticket,
                units,
                agent: w.agent,
                granted_at_ms: now_ms,
            };
            took.grant(limit, *id, fence, holder, estimate);
        }
        let units = first_units.expect("a request has parts");
        self.record_grant(session, ticket, fence, units, took);
        events.push(Event::Granted {
            session,
            ticket,
            fence,
            units,
        });
        for (id, _) in parts {
            if *id != serving {
                self.file(*id);
            }
        }
    }

    /// Drops limit `id` if it is gone (removed and empty, or a key that is fresh again);
    /// otherwise files it under the time the refill alone changes it (or unfiles it: see
    /// `Limit::tokens_due_ms`).
    pub(super) fn file(&mut self, id: LimitId) {
        let limit = &self.saved.limits[&id];
        if !limit.is_gone() {
            let due = limit.tokens_due_ms();
            self.deadlines.serve.set(id, due);
            return;
        }
        let limit = self.saved.limits.remove(&id).expect("filed limits exist");
        self.deadlines.serve.set(id, None);
        if let Some(def) = limit.of {
            self.totals.live_keys -= 1;
            let d = self
                .saved
                .limits
                .get_mut(&def)
                .expect("keys have definitions");
            d.keys.remove(&limit.name);
            if d.is_gone() {
                self.file(def);
            }
            return;
        }
        let t = self
            .saved
            .tenants
            .get_mut(&limit.tenant)
            .expect("limits have tenants");
        t.limits.remove(&limit.name);
        if t.is_empty() {
            self.saved.tenants.remove(&limit.tenant);
            self.refile_receipts(&limit.tenant);
        }
    }

    /// The (tenant, name) a limit is known by: its own, or its definition's for a key.
    pub(super) fn names_of(&self, id: LimitId) -> (String, String) {
        let limit = &self.saved.limits[&id];
        let def = limit.of.map_or(limit, |d| &self.saved.limits[&d]);
        (def.tenant.clone(), def.name.clone())
    }

    /// The limits a definition stands for: its keys' states when keyed, itself otherwise.
    pub(super) fn states_of(&self, def: LimitId) -> Vec<LimitId> {
        let limit = &self.saved.limits[&def];
        if limit.spec.keys_max.is_some() {
            limit.keys.values().copied().collect()
        } else {
            vec![def]
        }
    }

    /// Tells a waiter already taken out of its queue that it is refused, and finishes its
    /// ticket so a duplicate acquire gets the same answer. A request of several parts leaves
    /// its other queues too: returns those limits, which the caller must serve (it may have
    /// blocked them) once it has refused every waiter it refuses.
    #[must_use]
    pub(super) fn refuse_waiter(
        &mut self,
        w: &Waiter,
        refusal: Refusal,
        events: &mut Vec<Event>,
    ) -> Vec<LimitId> {
        let now_ms = self.now_ms();
        let mut others = Vec::new();
        if let Some(Ticket::QueuedParts { parts, .. }) =
            self.saved.sessions[&w.session].live.get(&w.ticket)
        {
            for (id, key) in parts {
                let limit = limit_mut(&mut self.saved.limits, id);
                if limit.queue.remove(key).is_some() {
                    others.push(*id);
                }
            }
        }
        let session = self
            .saved
            .sessions
            .get_mut(&w.session)
            .expect("waiters have sessions");
        session.finish(
            w.ticket,
            Finished::refused(refusal.clone()),
            now_ms,
            &mut self.totals,
        );
        self.refile_tickets(w.session);
        events.push(Event::Refused {
            session: w.session,
            ticket: w.ticket,
            refusal,
        });
        others
    }
}

/// What a grant of several parts (or with an estimate) took: the parts that hold, and the
/// estimates recorded on the rate parts.
#[derive(Default)]
struct Took {
    holding: Vec<(LimitId, u32)>,
    estimates: Vec<(LimitId, u32)>,
}

impl Took {
    /// Grants `holder` its units on `limit` (of id `id`) under `fence`, whose room the caller
    /// checked; with `estimate`, records the units taken as an estimate to settle.
    fn grant(
        &mut self,
        limit: &mut Limit,
        id: LimitId,
        fence: Fence,
        holder: Holder,
        estimate: bool,
    ) {
        let units = holder.units;
        if limit.grant(fence, holder) {
            self.holding.push((id, units));
        }
        if estimate && limit.spec.rates() {
            limit.estimating.insert(fence, units);
            self.estimates.push((id, units));
        }
    }
}

/// The holder of `units` a request granted at once becomes.
fn holder_of(a: &AcquireParts, units: u32, now_ms: u64) -> Holder {
    Holder {
        session: a.session,
        ticket: a.ticket,
        units,
        agent: a.agent.clone(),
        granted_at_ms: now_ms,
    }
}

/// The live limit `id` of `limits`, which a ticket names.
fn limit_mut<'a>(limits: &'a mut BTreeMap<LimitId, Box<Limit>>, id: &LimitId) -> &'a mut Limit {
    limits.get_mut(id).expect("tickets name live limits")
}
