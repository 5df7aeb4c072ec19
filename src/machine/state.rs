//! [`Machine`]: the whole replicated state and `apply`, the one function that changes it.
//!
//! `apply` takes a log index and a [`Batch`]; it advances the log clock, expires the sessions
//! whose leases ran out, serves the rate-limited queues the refill can now serve, and then
//! executes the commands in order. Everything it decides depends on the state and the batch
//! alone: ordered maps only, integer arithmetic only, no clock, no I/O.
//!
//! Invariants (checked by [`Machine::check`], asserted where they can break):
//! - Every live ticket is in exactly one place: a `Queued` ticket is in its limit's queue
//!   under its key, a `Held` ticket is its limit's holder under its fence; and every waiter
//!   and holder of every limit is such a live ticket.
//! - `expiries` holds exactly one `(expires_at_ms, session)` per session.
//! - `rate_waiting` is exactly the set of rated limits with waiters.
//! - Fences are unique and increasing: every held fence is at most `last_fence`.
//! - A limit is reachable by name from its tenant exactly while it exists.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::clock::LogClock;
use super::command::{
    Acquire, Batch, Command, Fence, HaltScope, LimitId, SessionId, Settle, TicketId,
};
use super::limit::{Holder, Limit, LimitSpec, Room};
use super::queue::Waiter;
use super::reply::{Applied, BudgetKind, Event, Refusal, Reply};
use super::session::{Finished, Session, Ticket};
use super::tenant::{Receipt, RunSlot, Spend, Tenant};
use crate::bounds::{
    LIMIT_WAITERS_MAX, LIMITS_MAX, NAME_BYTES_MAX, REASON_BYTES_MAX, SESSION_TICKETS_MAX,
    SESSION_TTL_MS_MAX, SESSION_TTL_MS_MIN, SESSIONS_MAX, UNITS_MAX,
};

/// The replicated state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    clock: LogClock,
    /// Index of the last entry applied; `None` before any (Raft's first entry is index 0).
    applied: Option<u64>,
    /// The last fence handed out (0 before any).
    last_fence: Fence,
    /// The last session id handed out.
    last_session: SessionId,
    /// The last limit id handed out.
    last_limit: LimitId,
    sessions: BTreeMap<SessionId, Session>,
    /// Session leases by expiry time.
    expiries: BTreeSet<(u64, SessionId)>,
    limits: BTreeMap<LimitId, Limit>,
    tenants: BTreeMap<String, Tenant>,
    /// Rated limits with waiters: served on every entry, since time alone can free them.
    rate_waiting: BTreeSet<LimitId>,
}

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

/// Checks a name's length; `what` names the field in the refusal.
fn check_name(what: &str, name: &str) -> Result<(), Refusal> {
    if name.len() > NAME_BYTES_MAX {
        return Err(Refusal::Invalid(format!(
            "{what} is {} bytes, the bound is {NAME_BYTES_MAX}",
            name.len()
        )));
    }
    Ok(())
}

/// Checks a name that must also be non-empty.
fn check_key(what: &str, name: &str) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err(Refusal::Invalid(format!("{what} is empty")));
    }
    check_name(what, name)
}

fn check_scope(scope: &HaltScope) -> Result<(), Refusal> {
    match scope {
        HaltScope::Tenant => Ok(()),
        HaltScope::Agent(a) => check_key("agent", a),
    }
}

/// Whether a waiter or holder of `agent` is inside `scope`.
fn in_scope(scope: &HaltScope, agent: Option<&str>) -> bool {
    match scope {
        HaltScope::Tenant => true,
        HaltScope::Agent(a) => agent == Some(a.as_str()),
    }
}

/// Collapses a `Result<Reply, Refusal>` into the reply.
fn answer(result: Result<Reply, Refusal>) -> Reply {
    result.unwrap_or_else(Reply::Refused)
}

impl Machine {
    /// An empty machine: no entry applied yet.
    pub fn new() -> Machine {
        Machine::default()
    }

    /// Index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        self.applied.unwrap_or(0)
    }

    /// Log-clock time, ms.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Whether time alone can change the state (sessions may expire, buckets may serve
    /// waiters): the proposer ticks while this is true.
    pub fn has_timed_work(&self) -> bool {
        !self.sessions.is_empty() || !self.rate_waiting.is_empty()
    }

    /// Notes an entry that carries no batch (Raft's blank and membership entries), so that
    /// indexes stay continuous and later fences stay above it.
    pub fn skip(&mut self, index: u64) {
        assert!(
            self.applied.is_none_or(|last| index > last),
            "entry {index} applied after {:?}",
            self.applied
        );
        self.applied = Some(index);
    }

    /// Applies the entry at `index`. Indexes must increase; a repeat is a bug in the caller.
    pub fn apply(&mut self, index: u64, batch: &Batch) -> Applied {
        self.skip(index);
        let now_ms = self.clock.advance(batch);
        let mut events = Vec::new();
        self.expire_sessions(now_ms, &mut events);
        for id in self.rate_waiting.clone() {
            self.serve(id, &mut events);
        }
        let replies = batch
            .commands
            .iter()
            .map(|command| self.execute(command, batch.wall_ms, &mut events))
            .collect();
        Applied {
            log_ms: now_ms,
            replies,
            events,
        }
    }

    fn execute(&mut self, command: &Command, wall_ms: u64, events: &mut Vec<Event>) -> Reply {
        match command {
            Command::DefineLimit {
                tenant,
                name,
                concurrent,
                per_second,
                burst,
            } => answer(self.define_limit(tenant, name, *concurrent, *per_second, *burst, events)),
            Command::RemoveLimit { tenant, name } => self.remove_limit(tenant, name, events),
            Command::OpenSession { ttl_ms } => answer(self.open_session(*ttl_ms)),
            Command::KeepAlive { session } => answer(self.keep_alive(*session)),
            Command::CloseSession { session } => {
                self.end_session(*session, events);
                Reply::Done
            }
            Command::Acquire(a) => answer(self.acquire(a, events)),
            Command::Release { session, ticket } => self.release(*session, *ticket, events),
            Command::SetTenant {
                tenant,
                max_running,
                budget_tokens,
                budget_minor,
            } => answer(check_key("tenant", tenant).map(|()| {
                let t = self.tenants.entry(tenant.clone()).or_default();
                t.max_running = max_running.applied_to(t.max_running);
                t.budget_tokens = budget_tokens.applied_to(t.budget_tokens);
                t.budget_minor = budget_minor.applied_to(t.budget_minor);
                Reply::Done
            })),
            Command::Reserve {
                tenant,
                run,
                agent,
                period,
            } => answer(self.reserve(tenant, run, agent.as_deref(), period.as_deref(), wall_ms)),
            Command::ReleaseRun { tenant, run } => {
                if let Some(t) = self.tenants.get_mut(tenant) {
                    t.running.remove(run);
                }
                Reply::Done
            }
            Command::Settle(s) => answer(self.settle(s)),
            Command::SetHalt {
                tenant,
                scope,
                reason,
            } => answer(self.set_halt(tenant, scope, reason, events)),
            Command::ClearHalt { tenant, scope } => {
                if let Some(t) = self.tenants.get_mut(tenant) {
                    t.halts.remove(scope);
                }
                Reply::Done
            }
            Command::Tick => {
                let now_ms = self.now_ms();
                for t in self.tenants.values_mut() {
                    t.prune_receipts(now_ms);
                }
                Reply::Done
            }
        }
    }

    // ---- limits -------------------------------------------------------------------------

    fn define_limit(
        &mut self,
        tenant: &str,
        name: &str,
        concurrent: u32,
        per_second: f64,
        burst: Option<u64>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        check_key("tenant", tenant)?;
        check_key("limit name", name)?;
        let spec = LimitSpec::new(concurrent, per_second, burst).map_err(Refusal::Invalid)?;
        let now_ms = self.now_ms();
        let existing = self
            .tenants
            .get(tenant)
            .and_then(|t| t.limits.get(name))
            .copied();
        let id = match existing {
            Some(id) => {
                let limit = self.limits.get_mut(&id).expect("named limits exist");
                limit.redefine(spec, now_ms);
                // Tickets that the new spec can never serve are refused now, not left to
                // block the queue forever.
                if let Some(max) = limit.spec.max_units() {
                    let too_large = limit.queue.remove_where(|w| w.units as u64 > max);
                    for (_, w) in too_large {
                        self.refuse_waiter(
                            &w,
                            Refusal::TooLarge {
                                units: w.units,
                                max,
                            },
                            events,
                        );
                    }
                }
                id
            }
            None => {
                if self.limits.len() >= LIMITS_MAX {
                    return Err(Refusal::Invalid(format!(
                        "{LIMITS_MAX} limits are defined already"
                    )));
                }
                self.last_limit += 1;
                let id = self.last_limit;
                self.limits
                    .insert(id, Limit::new(tenant, name, spec, now_ms));
                self.tenants
                    .entry(tenant.to_owned())
                    .or_default()
                    .limits
                    .insert(name.to_owned(), id);
                id
            }
        };
        self.serve(id, events);
        Ok(Reply::Done)
    }

    fn remove_limit(&mut self, tenant: &str, name: &str, events: &mut Vec<Event>) -> Reply {
        let Some(id) = self
            .tenants
            .get(tenant)
            .and_then(|t| t.limits.get(name))
            .copied()
        else {
            return Reply::Done;
        };
        let limit = self.limits.get_mut(&id).expect("named limits exist");
        limit.removing = true;
        let waiters = limit.queue.remove_where(|_| true);
        for (_, w) in waiters {
            self.refuse_waiter(&w, Refusal::LimitRemoved, events);
        }
        self.serve(id, events);
        Reply::Done
    }

    /// The live limit named (tenant, name), or `UnknownLimit`.
    fn live_limit_id(&self, tenant: &str, name: &str) -> Result<LimitId, Refusal> {
        let id = self
            .tenants
            .get(tenant)
            .and_then(|t| t.limits.get(name))
            .copied()
            .ok_or(Refusal::UnknownLimit)?;
        if self.limits[&id].removing {
            return Err(Refusal::UnknownLimit);
        }
        Ok(id)
    }

    /// The next fence: the entry's index when above every earlier fence, else one more.
    fn next_fence(&mut self) -> Fence {
        let fence = self.applied_index().max(self.last_fence + 1);
        assert!(
            fence > self.last_fence,
            "fences increase: {fence} after {}",
            self.last_fence
        );
        self.last_fence = fence;
        fence
    }

    /// Grants what the head of limit `id`'s queue can take, head first, until the head must
    /// wait; then files the limit in `rate_waiting` or drops it if it was removed and is
    /// now empty.
    fn serve(&mut self, id: LimitId, events: &mut Vec<Event>) {
        let now_ms = self.now_ms();
        loop {
            let limit = self.limits.get_mut(&id).expect("served limits exist");
            limit.refill(now_ms);
            let Some((_, head)) = limit.queue.peek() else {
                break;
            };
            if limit.room_for(head.units, now_ms) != Room::Yes {
                break;
            }
            let (_, w) = limit.queue.pop().expect("peeked");
            let fence = self.next_fence();
            let limit = self.limits.get_mut(&id).expect("served limits exist");
            let units = w.units;
            let held = limit.grant(
                fence,
                Holder {
                    session: w.session,
                    ticket: w.ticket,
                    units,
                    agent: w.agent,
                },
            );
            let session = self
                .sessions
                .get_mut(&w.session)
                .expect("waiters have sessions");
            if held {
                session.live.insert(
                    w.ticket,
                    Ticket::Held {
                        limit: id,
                        fence,
                        units,
                    },
                );
            } else {
                session.finish(w.ticket, Finished::Taken { fence, units });
            }
            events.push(Event::Granted {
                session: w.session,
                ticket: w.ticket,
                fence,
                units,
            });
        }
        let limit = &self.limits[&id];
        if limit.is_gone() {
            let name = limit.name.clone();
            let tenant = limit.tenant.clone();
            self.limits.remove(&id);
            self.rate_waiting.remove(&id);
            let t = self.tenants.get_mut(&tenant).expect("limits have tenants");
            t.limits.remove(&name);
            if t.is_empty() {
                self.tenants.remove(&tenant);
            }
        } else if limit.spec.rates() && !limit.queue.is_empty() {
            self.rate_waiting.insert(id);
        } else {
            self.rate_waiting.remove(&id);
        }
    }

    /// Tells a waiter already taken out of its queue that it is refused, and finishes its
    /// ticket so a duplicate acquire gets the same answer.
    fn refuse_waiter(&mut self, w: &Waiter, refusal: Refusal, events: &mut Vec<Event>) {
        let session = self
            .sessions
            .get_mut(&w.session)
            .expect("waiters have sessions");
        session.finish(w.ticket, Finished::Refused(refusal.clone()));
        events.push(Event::Refused {
            session: w.session,
            ticket: w.ticket,
            refusal,
        });
    }

    // ---- sessions -----------------------------------------------------------------------

    fn open_session(&mut self, ttl_ms: u64) -> Result<Reply, Refusal> {
        if !(SESSION_TTL_MS_MIN..=SESSION_TTL_MS_MAX).contains(&ttl_ms) {
            return Err(Refusal::Invalid(format!(
                "ttl_ms {ttl_ms} is not in {SESSION_TTL_MS_MIN}..={SESSION_TTL_MS_MAX}"
            )));
        }
        if self.sessions.len() >= SESSIONS_MAX {
            return Err(Refusal::Invalid(format!(
                "{SESSIONS_MAX} sessions are open already"
            )));
        }
        self.last_session += 1;
        let id = self.last_session;
        let session = Session::new(ttl_ms, self.now_ms());
        self.expiries.insert((session.expires_at_ms, id));
        self.sessions.insert(id, session);
        Ok(Reply::SessionOpened {
            session: id,
            ttl_ms,
        })
    }

    fn keep_alive(&mut self, id: SessionId) -> Result<Reply, Refusal> {
        let now_ms = self.now_ms();
        let session = self.sessions.get_mut(&id).ok_or(Refusal::UnknownSession)?;
        let removed = self.expiries.remove(&(session.expires_at_ms, id));
        assert!(removed, "session {id} has an expiry");
        session.expires_at_ms = now_ms.saturating_add(session.ttl_ms);
        self.expiries.insert((session.expires_at_ms, id));
        Ok(Reply::KeptAlive {
            ttl_ms: session.ttl_ms,
        })
    }

    /// Ends every session whose lease has run out, earliest first, and only then serves the
    /// limits they were on: no grant goes to a session that is already past its lease.
    fn expire_sessions(&mut self, now_ms: u64, events: &mut Vec<Event>) {
        let mut touched = BTreeSet::new();
        while let Some(&(at, id)) = self.expiries.first() {
            if at > now_ms {
                break;
            }
            touched.append(&mut self.drop_session(id));
            events.push(Event::SessionExpired { session: id });
        }
        for limit in touched {
            self.serve(limit, events);
        }
    }

    /// Closes a session: releases its permits, withdraws its tickets, then serves the limits
    /// it was on, in id order.
    fn end_session(&mut self, id: SessionId, events: &mut Vec<Event>) {
        for limit in self.drop_session(id) {
            self.serve(limit, events);
        }
    }

    /// Removes a session with its permits and tickets; returns the limits it was on, which
    /// the caller must serve.
    fn drop_session(&mut self, id: SessionId) -> BTreeSet<LimitId> {
        let mut touched = BTreeSet::new();
        let Some(session) = self.sessions.remove(&id) else {
            return touched;
        };
        self.expiries.remove(&(session.expires_at_ms, id));
        for ticket in session.live.values() {
            match ticket {
                Ticket::Queued { limit, key } => {
                    let l = self
                        .limits
                        .get_mut(limit)
                        .expect("tickets name live limits");
                    l.queue
                        .remove(key)
                        .expect("a queued ticket is in its queue");
                    touched.insert(*limit);
                }
                Ticket::Held { limit, fence, .. } => {
                    let l = self
                        .limits
                        .get_mut(limit)
                        .expect("tickets name live limits");
                    l.release(*fence).expect("a held ticket is a holder");
                    touched.insert(*limit);
                }
            }
        }
        touched
    }

    // ---- permits ------------------------------------------------------------------------

    fn acquire(&mut self, a: &Acquire, events: &mut Vec<Event>) -> Result<Reply, Refusal> {
        check_key("tenant", &a.tenant)?;
        check_key("limit name", &a.limit)?;
        check_name("fairness key", &a.priority.fairness_key)?;
        if let Some(agent) = &a.agent {
            check_key("agent", agent)?;
        }
        if a.units == 0 || a.units > UNITS_MAX {
            return Err(Refusal::Invalid(format!(
                "units {} is not in 1..={UNITS_MAX}",
                a.units
            )));
        }
        if a.priority.fairness_weight == 0 {
            return Err(Refusal::Invalid(
                "fairness weight 0: weights are at least 1".into(),
            ));
        }
        let session = self
            .sessions
            .get(&a.session)
            .ok_or(Refusal::UnknownSession)?;
        // The same ticket again: the same answer, and no second effect (G5).
        if let Some(ticket) = session.live.get(&a.ticket) {
            return Ok(match ticket {
                Ticket::Queued { limit, key } => Reply::Queued {
                    position: self.limits[limit].queue.position(key),
                },
                Ticket::Held { fence, units, .. } => Reply::Granted {
                    fence: *fence,
                    units: *units,
                },
            });
        }
        if let Some(finished) = session.finished.get(&a.ticket) {
            return Ok(finished.reply());
        }
        if session.live.len() >= SESSION_TICKETS_MAX {
            return Err(Refusal::Invalid(format!(
                "session has {SESSION_TICKETS_MAX} live tickets already"
            )));
        }
        if let Some((scope, reason)) = self
            .tenants
            .get(&a.tenant)
            .and_then(|t| t.halt_for(a.agent.as_deref()))
        {
            return Err(Refusal::Halted { scope, reason });
        }
        let id = self.live_limit_id(&a.tenant, &a.limit)?;
        let now_ms = self.now_ms();
        let limit = self.limits.get_mut(&id).expect("live limit");
        if let Some(max) = limit.spec.max_units()
            && a.units as u64 > max
        {
            return Err(Refusal::TooLarge {
                units: a.units,
                max,
            });
        }
        limit.refill(now_ms);
        let room = limit.room_for(a.units, now_ms);
        if limit.queue.is_empty() && room == Room::Yes {
            let fence = self.next_fence();
            let limit = self.limits.get_mut(&id).expect("live limit");
            let holder = Holder {
                session: a.session,
                ticket: a.ticket,
                units: a.units,
                agent: a.agent.clone(),
            };
            let session = self.sessions.get_mut(&a.session).expect("checked above");
            if limit.grant(fence, holder) {
                session.live.insert(
                    a.ticket,
                    Ticket::Held {
                        limit: id,
                        fence,
                        units: a.units,
                    },
                );
            } else {
                session.finish(
                    a.ticket,
                    Finished::Taken {
                        fence,
                        units: a.units,
                    },
                );
            }
            return Ok(Reply::Granted {
                fence,
                units: a.units,
            });
        }
        if !a.wait {
            let retry_at_ms = match room {
                Room::NeedsTokensAt(at) if limit.queue.is_empty() => Some(at),
                _ => None,
            };
            return Err(Refusal::Busy { retry_at_ms });
        }
        if limit.queue.len() >= LIMIT_WAITERS_MAX {
            return Err(Refusal::QueueFull);
        }
        let waiter = Waiter {
            session: a.session,
            ticket: a.ticket,
            units: a.units,
            agent: a.agent.clone(),
            fairness_key: String::new(),
        };
        let key = limit.queue.push(waiter, &a.priority);
        let position = limit.queue.position(&key);
        let session = self.sessions.get_mut(&a.session).expect("checked above");
        session
            .live
            .insert(a.ticket, Ticket::Queued { limit: id, key });
        // Queuing never makes room, but it files a rated limit for serving on refill.
        self.serve(id, events);
        Ok(Reply::Queued { position })
    }

    fn release(&mut self, id: SessionId, ticket: TicketId, events: &mut Vec<Event>) -> Reply {
        let Some(session) = self.sessions.get_mut(&id) else {
            return Reply::Released {
                held: false,
                withdrawn: false,
            };
        };
        let live = session.live.get(&ticket).cloned();
        session.finish(ticket, Finished::Released);
        match live {
            Some(Ticket::Queued { limit, key }) => {
                let l = self
                    .limits
                    .get_mut(&limit)
                    .expect("tickets name live limits");
                l.queue
                    .remove(&key)
                    .expect("a queued ticket is in its queue");
                self.serve(limit, events);
                Reply::Released {
                    held: false,
                    withdrawn: true,
                }
            }
            Some(Ticket::Held { limit, fence, .. }) => {
                let l = self
                    .limits
                    .get_mut(&limit)
                    .expect("tickets name live limits");
                l.release(fence).expect("a held ticket is a holder");
                self.serve(limit, events);
                Reply::Released {
                    held: true,
                    withdrawn: false,
                }
            }
            None => Reply::Released {
                held: false,
                withdrawn: false,
            },
        }
    }

    // ---- runs, budgets, halts -----------------------------------------------------------

    fn reserve(
        &mut self,
        tenant: &str,
        run: &str,
        agent: Option<&str>,
        period: Option<&str>,
        wall_ms: u64,
    ) -> Result<Reply, Refusal> {
        check_key("tenant", tenant)?;
        check_key("run", run)?;
        if let Some(agent) = agent {
            check_key("agent", agent)?;
        }
        if let Some(period) = period {
            check_key("period", period)?;
        }
        let now_ms = self.now_ms();
        let t = self.tenants.entry(tenant.to_owned()).or_default();
        if let Some((scope, reason)) = t.halt_for(agent) {
            return Err(Refusal::Halted { scope, reason });
        }
        if t.running.contains_key(run) {
            return Ok(Reply::Admitted);
        }
        let running = t.running.len() as u32;
        // Compared once, outside any loop: a ceiling of 0 must refuse, not skip the check.
        if let Some(max) = t.max_running
            && running >= max
        {
            return Err(Refusal::TooManyRuns { running });
        }
        if let Some(period) = period {
            let spent = t.spent.get(period).copied().unwrap_or_default();
            if let Some(budget) = t.budget_tokens
                && spent.tokens >= budget
            {
                return Err(Refusal::BudgetExhausted {
                    kind: BudgetKind::Tokens,
                    spent: spent.tokens,
                    budget,
                });
            }
            if let Some(budget) = t.budget_minor
                && spent.minor_units >= budget
            {
                return Err(Refusal::BudgetExhausted {
                    kind: BudgetKind::MinorUnits,
                    spent: spent.minor_units,
                    budget,
                });
            }
        }
        t.running.insert(
            run.to_owned(),
            RunSlot {
                admitted_at_wall_ms: wall_ms,
                admitted_at_log_ms: now_ms,
                agent: agent.map(str::to_owned),
            },
        );
        Ok(Reply::Admitted)
    }

    fn settle(&mut self, s: &Settle) -> Result<Reply, Refusal> {
        check_key("tenant", &s.tenant)?;
        check_key("run", &s.run)?;
        if let Some(period) = &s.period {
            check_key("period", period)?;
        }
        let now_ms = self.now_ms();
        let t = self.tenants.entry(s.tenant.clone()).or_default();
        t.prune_receipts(now_ms);
        let receipt = Receipt {
            period: s.period.clone(),
            tokens: s.tokens,
            minor_units: s.minor_units,
            release_slot: s.release_slot,
            settled_at_log_ms: now_ms,
        };
        let key = (s.run.clone(), s.epoch);
        if let Some(stored) = t.receipts.get(&key) {
            return if stored.same_payload(&receipt) {
                Ok(Reply::Settled { duplicate: true })
            } else {
                Err(Refusal::Conflict)
            };
        }
        if let Some(period) = &s.period {
            let spent = t.spent.entry(period.clone()).or_default();
            spent.tokens = spent.tokens.saturating_add(s.tokens);
            spent.minor_units = spent.minor_units.saturating_add(s.minor_units);
        }
        if s.release_slot {
            t.running.remove(&s.run);
        }
        t.keep_receipt(key, receipt);
        Ok(Reply::Settled { duplicate: false })
    }

    fn set_halt(
        &mut self,
        tenant: &str,
        scope: &HaltScope,
        reason: &str,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        check_key("tenant", tenant)?;
        check_scope(scope)?;
        if reason.len() > REASON_BYTES_MAX {
            return Err(Refusal::Invalid(format!(
                "reason is {} bytes, the bound is {REASON_BYTES_MAX}",
                reason.len()
            )));
        }
        let t = self.tenants.entry(tenant.to_owned()).or_default();
        t.halts.insert(scope.clone(), reason.to_owned());
        let ids: Vec<LimitId> = t.limits.values().copied().collect();
        for id in ids {
            let limit = self.limits.get_mut(&id).expect("named limits exist");
            for (_, h) in limit.holders.iter() {
                if in_scope(scope, h.agent.as_deref()) {
                    events.push(Event::Halted {
                        session: h.session,
                        ticket: h.ticket,
                        scope: scope.clone(),
                        reason: reason.to_owned(),
                    });
                }
            }
            let refused = limit
                .queue
                .remove_where(|w| in_scope(scope, w.agent.as_deref()));
            let refusal = Refusal::Halted {
                scope: scope.clone(),
                reason: reason.to_owned(),
            };
            for (_, w) in refused {
                self.refuse_waiter(&w, refusal.clone(), events);
            }
            // Withdrawing a blocked head can let an out-of-scope waiter behind it through.
            self.serve(id, events);
        }
        Ok(Reply::Done)
    }

    // ---- reads --------------------------------------------------------------------------

    fn status_of(limit: &Limit) -> LimitStatus {
        LimitStatus {
            tenant: limit.tenant.clone(),
            name: limit.name.clone(),
            concurrent: limit.spec.concurrent,
            per_second: limit.spec.per_second,
            burst: limit.spec.burst,
            in_use: limit.held_units,
            waiting: limit.queue.len() as u64,
            max_in_use: limit.max_held_units,
            tokens: limit.tokens_micro / super::limit::MICRO,
            removing: limit.removing,
        }
    }

    /// A limit's status, removed-but-held ones included.
    pub fn limit_status(&self, tenant: &str, name: &str) -> Option<LimitStatus> {
        let id = self.tenants.get(tenant)?.limits.get(name)?;
        Some(Self::status_of(&self.limits[id]))
    }

    /// Every limit of a tenant, by name.
    pub fn limits(&self, tenant: &str) -> Vec<LimitStatus> {
        self.tenants
            .get(tenant)
            .map(|t| {
                t.limits
                    .values()
                    .map(|id| Self::status_of(&self.limits[id]))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether a permit with `fence` is held on (tenant, name) now.
    pub fn validate_fence(&self, tenant: &str, name: &str, fence: Fence) -> bool {
        self.tenants
            .get(tenant)
            .and_then(|t| t.limits.get(name))
            .is_some_and(|id| self.limits[id].holders.contains_key(&fence))
    }

    /// Spend charged to a period.
    pub fn spent(&self, tenant: &str, period: &str) -> Spend {
        self.tenants
            .get(tenant)
            .and_then(|t| t.spent.get(period))
            .copied()
            .unwrap_or_default()
    }

    /// The running set, by run name.
    pub fn running(&self, tenant: &str) -> Vec<(String, RunSlot)> {
        self.tenants
            .get(tenant)
            .map(|t| {
                t.running
                    .iter()
                    .map(|(r, s)| (r.clone(), s.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Standing halts of a tenant, tenant-wide first.
    pub fn halts(&self, tenant: &str) -> Vec<(HaltScope, String)> {
        self.tenants
            .get(tenant)
            .map(|t| {
                t.halts
                    .iter()
                    .map(|(s, r)| (s.clone(), r.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A tenant's ceilings and counts.
    pub fn tenant_status(&self, tenant: &str) -> TenantStatus {
        self.tenants
            .get(tenant)
            .map(|t| TenantStatus {
                max_running: t.max_running,
                budget_tokens: t.budget_tokens,
                budget_minor: t.budget_minor,
                running: t.running.len() as u64,
                receipts: t.receipts.len() as u64,
                receipts_evicted: t.receipts_evicted,
            })
            .unwrap_or_default()
    }

    /// A session's lease expiry (log ms), if it is open.
    pub fn session_expires_at_ms(&self, session: SessionId) -> Option<u64> {
        self.sessions.get(&session).map(|s| s.expires_at_ms)
    }

    /// Number of open sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    // ---- invariants ---------------------------------------------------------------------

    /// Checks every invariant of the module doc and of the parts; returns the first broken.
    /// Run on every decoded snapshot, and by tests after every entry.
    pub fn check(&self) -> Result<(), String> {
        let mut expected_waiters = 0usize;
        let mut expected_holders = 0usize;
        for (&sid, session) in &self.sessions {
            session.check().map_err(|e| format!("session {sid}: {e}"))?;
            if !self.expiries.contains(&(session.expires_at_ms, sid)) {
                return Err(format!("session {sid} has no expiry record"));
            }
            if sid > self.last_session {
                return Err(format!(
                    "session {sid} above the last id {}",
                    self.last_session
                ));
            }
            for (&tid, ticket) in &session.live {
                match ticket {
                    Ticket::Queued { limit, key } => {
                        let w = self
                            .limits
                            .get(limit)
                            .and_then(|l| l.queue.iter().find(|(k, _)| *k == key).map(|(_, w)| w));
                        if !w.is_some_and(|w| w.session == sid && w.ticket == tid) {
                            return Err(format!("queued ticket {sid}/{tid} is not in its queue"));
                        }
                        expected_waiters += 1;
                    }
                    Ticket::Held {
                        limit,
                        fence,
                        units,
                    } => {
                        let h = self.limits.get(limit).and_then(|l| l.holders.get(fence));
                        if !h.is_some_and(|h| {
                            h.session == sid && h.ticket == tid && h.units == *units
                        }) {
                            return Err(format!("held ticket {sid}/{tid} is not a holder"));
                        }
                        expected_holders += 1;
                    }
                }
            }
        }
        if self.expiries.len() != self.sessions.len() {
            return Err(format!(
                "{} expiry records for {} sessions",
                self.expiries.len(),
                self.sessions.len()
            ));
        }
        let waiters: usize = self.limits.values().map(|l| l.queue.len()).sum();
        let holders: usize = self.limits.values().map(|l| l.holders.len()).sum();
        if waiters != expected_waiters || holders != expected_holders {
            return Err(format!(
                "limits have {waiters} waiters and {holders} holders, sessions \
                 {expected_waiters} and {expected_holders}"
            ));
        }
        let mut named = 0usize;
        for (name, t) in &self.tenants {
            t.check().map_err(|e| format!("tenant {name}: {e}"))?;
            for (lname, id) in &t.limits {
                let l = self
                    .limits
                    .get(id)
                    .ok_or(format!("{name}/{lname} names no limit"))?;
                if &l.tenant != name || &l.name != lname {
                    return Err(format!("{name}/{lname} names limit {id} of another name"));
                }
                named += 1;
            }
        }
        if named != self.limits.len() {
            return Err(format!(
                "{} limits, {named} reachable by name",
                self.limits.len()
            ));
        }
        for (&id, l) in &self.limits {
            l.check()?;
            if id > self.last_limit {
                return Err(format!("limit {id} above the last id {}", self.last_limit));
            }
            if let Some((&fence, _)) = l.holders.last_key_value()
                && fence > self.last_fence
            {
                return Err(format!(
                    "fence {fence} above the last fence {}",
                    self.last_fence
                ));
            }
            if self.rate_waiting.contains(&id) != (l.spec.rates() && !l.queue.is_empty()) {
                return Err(format!("limit {id} misfiled in rate_waiting"));
            }
        }
        if self
            .rate_waiting
            .iter()
            .any(|id| !self.limits.contains_key(id))
        {
            return Err("rate_waiting names a missing limit".into());
        }
        Ok(())
    }
}
