//! [`Machine`]: the whole replicated state and `apply`, the one function that changes it.
//!
//! `apply` takes a log index and a [`Batch`]; it advances the log clock, expires the sessions
//! whose leases ran out, serves the rate-limited queues the refill can now serve (those
//! filed in `Deadlines` at or before now, not every rated queue), and then executes the
//! commands in order. `Tick` prunes the finished tickets and receipts that are due, found
//! the same way: neither walks every session, tenant or limit. Everything it decides depends
//! on the state and the batch alone: ordered maps only, integer arithmetic only, no clock,
//! no I/O.
//!
//! This file holds the state and the dispatch; each group of commands has its own child
//! module: `limits` (define, remove), `apply_limits` (a tenant's whole set of definitions),
//! `leases` (sessions: open, keep-alive, expire, close), `permits` (acquire, release, settle,
//! and serving a queue), `token_leases` (shares of rate limits leased to holders), `runs` (tenant ceilings, run admission, settlements, halts), `moves` (a tenant's freeze, adopt
//! and drop, when it moves between groups), `placement` (the metadata group's record of
//! where each tenant lives), `reads`
//! and `queue_reads` (what queries see) and `check` (the invariants below).
//!
//! Invariants (checked by [`Machine::check`], asserted where they can break):
//! - Every live ticket is in exactly one place: a `Queued` ticket is in its limit's queue
//!   under its key, a `Held` ticket is its limit's holder under its fence; and every waiter
//!   and holder of every limit is such a live ticket.
//! - `expiries` holds exactly one `(expires_at_ms, session)` per session.
//! - `deadlines` files exactly the items the state gives a deadline, under it (checked
//!   against a full scan: see `Deadlines`).
//! - Fences are unique and increasing: every held fence is at most `last_fence`.
//! - A limit is reachable by name from its tenant exactly while it exists.

mod apply_limits;
mod check;
mod lean_keys;
mod leases;
mod limits;
mod moves;
mod permits;
mod placement;
mod queue_reads;
mod reads;
mod runs;
mod token_leases;

use std::collections::BTreeSet;

use super::command::{Batch, Command, Control, LimitId, SessionId};
use super::deadlines::{Deadlines, Prune};
use super::reply::{Applied, Event, Refusal, Reply};
use super::saved::SavedLimits;
use super::totals::{TenantCounts, Totals};

/// The replicated state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Machine {
    /// Everything a snapshot carries.
    saved: SavedLimits,
    /// Session leases by expiry time. Derived from `saved.sessions`; rebuilt on restore.
    expiries: BTreeSet<(u64, SessionId)>,
    /// What time alone changes next: rated queues to serve, finished tickets and receipts
    /// to prune, each under its deadline. Derived from `saved`; rebuilt on restore.
    deadlines: Deadlines,
    /// Counts of the globally bounded items. Derived from `saved`; rebuilt on restore.
    totals: Totals,
    /// A bound on live keys below [`crate::bounds::KEYS_LIVE_MAX`], set only by
    /// [`Machine::with_keys_live_max`]; `None` everywhere else.
    keys_live_max: Option<usize>,
    /// Lean keys promoted during the command being executed (`lean_keys`); empty between
    /// commands.
    promoted: Vec<LimitId>,
}

/// A reserve's arguments, borrowed from its command.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reserve<'a> {
    tenant: &'a str,
    run: &'a str,
    agent: Option<&'a str>,
    period: Option<&'a str>,
    /// The hold (tokens, minor units), when the reserve carries one. A hold that names
    /// one kind holds 0 of the other: the run says it will spend none of it, so any spend
    /// of that kind is an overrun.
    hold: Option<(u64, u64)>,
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

    /// A machine holding `saved`, with its derived indexes rebuilt. The caller checks it.
    pub(super) fn from_saved(mut saved: SavedLimits) -> Machine {
        saved.share_specs();
        saved.rebuild_leased();
        saved.rescan_lean_keys();
        let expiries = saved
            .sessions
            .iter()
            .map(|(&id, s)| (s.expires_at_ms, id))
            .collect();
        let deadlines = Deadlines::of(&saved);
        let totals = saved.count_totals();
        Machine {
            saved,
            expiries,
            deadlines,
            totals,
            promoted: Vec::new(),
            keys_live_max: None,
        }
    }

    /// An empty machine whose live keys are bounded at `max` instead of
    /// [`crate::bounds::KEYS_LIVE_MAX`] (at most that): for tests of the bound, which cannot
    /// take ten million keys in seconds. Every node of a cluster runs `Machine::new`.
    pub fn with_keys_live_max(max: usize) -> Machine {
        Machine {
            keys_live_max: Some(max.min(crate::bounds::KEYS_LIVE_MAX)),
            ..Machine::default()
        }
    }

    /// The bound on live keys across the machine.
    fn keys_live_max(&self) -> usize {
        self.keys_live_max.unwrap_or(crate::bounds::KEYS_LIVE_MAX)
    }

    /// What a snapshot of this machine carries.
    pub(super) fn saved(&self) -> &SavedLimits {
        &self.saved
    }

    /// Index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        self.saved.applied.unwrap_or(0)
    }

    /// Log-clock time, ms.
    pub fn now_ms(&self) -> u64 {
        self.saved.clock.now_ms()
    }

    /// Files session `id` under its oldest finished ticket's retention deadline (or unfiles
    /// it): called wherever its finished tickets may have changed.
    fn refile_tickets(&mut self, id: SessionId) {
        let due = self
            .saved
            .sessions
            .get(&id)
            .and_then(|s| s.finished_due_ms());
        self.deadlines.prune.set(Prune::Tickets(id), due);
    }

    /// Files `tenant` under its oldest receipt's retention deadline (or unfiles it).
    fn refile_receipts(&mut self, tenant: &str) {
        let due = self
            .saved
            .tenants
            .get(tenant)
            .and_then(|t| t.receipts_due_ms());
        self.deadlines
            .prune
            .set(Prune::Receipts(tenant.to_owned()), due);
    }

    /// The earliest log time at which a `Tick` would prune something, if any: what the
    /// deadline index holds first.
    pub fn next_prune_ms(&self) -> Option<u64> {
        self.deadlines.prune.next_ms()
    }

    /// Whether time alone can change the state (sessions may expire, buckets may serve
    /// waiters): the proposer ticks while this is true.
    pub fn has_timed_work(&self) -> bool {
        !self.saved.sessions.is_empty()
            || !self.deadlines.serve.is_empty()
            || !self.deadlines.drop.is_empty()
    }

    /// Notes an entry that carries no batch (Raft's blank and membership entries), so that
    /// indexes stay continuous and later fences stay above it.
    pub fn skip(&mut self, index: u64) {
        assert!(
            self.saved.applied.is_none_or(|last| index > last),
            "entry {index} applied after {:?}",
            self.saved.applied
        );
        self.saved.applied = Some(index);
    }

    /// Applies the entry at `index`. Indexes must increase; a repeat is a bug in the caller.
    pub fn apply(&mut self, index: u64, batch: &Batch) -> Applied {
        self.skip(index);
        let now_ms = self.saved.clock.advance(batch);
        let mut events = Vec::new();
        self.expire_sessions(now_ms, &mut events);
        // In id order, as when every rated queue was served on every entry: serving one
        // limit moves another's deadline only later (a grant of several parts charges the
        // others' buckets), so the grants (and their fences) are the same.
        let mut due = self.deadlines.serve.due(now_ms);
        due.sort_unstable();
        for id in due {
            self.serve(id, &mut events);
        }
        self.drop_full_keys(now_ms);
        let wall_ms = planted_wall_ms(batch.wall_ms);
        let replies = batch
            .commands
            .iter()
            .map(|command| self.execute(command, wall_ms, &mut events))
            .collect();
        Applied {
            log_ms: now_ms,
            replies,
            events,
        }
    }

    fn execute(&mut self, command: &Command, wall_ms: u64, events: &mut Vec<Event>) -> Reply {
        // The edge refused these before proposing; a command here that breaks one came from
        // elsewhere (another build's log) and is refused the same way.
        if let Err(refusal) = command.validate() {
            return Reply::Refused(refusal);
        }
        // A tenant frozen here by a move answers everything of its own `Moved`: a command
        // naming it, or the release or settlement of a ticket it took with it.
        if let Some(moved) = self.moved(command) {
            return Reply::Refused(moved);
        }
        // Tenant-level totals move by the named tenant's container sizes (see `totals`).
        let tenant = command.tenant_counted();
        let before = tenant.map(|t| TenantCounts::of(self.saved.tenants.get(t)));
        let reply = self.dispatch(command, wall_ms, events);
        self.demote_promoted();
        if let (Some(t), Some(before)) = (tenant, before) {
            let after = TenantCounts::of(self.saved.tenants.get(t));
            self.totals.tenant_changed(before, after);
            self.refile_receipts(t);
        }
        reply
    }

    /// `Moved` when `command` belongs to a tenant frozen here (a move's own commands never
    /// do).
    fn moved(&self, command: &Command) -> Option<Refusal> {
        if self.saved.frozen.is_empty() || command.control() == Some(Control::Placement) {
            return None;
        }
        if let Some(tenant) = command.tenant() {
            return self.moved_tenant(tenant);
        }
        match command {
            Command::Release { session, ticket }
            | Command::SettleTake {
                session, ticket, ..
            } => self.moved_ticket(*session, *ticket),
            _ => None,
        }
    }

    fn dispatch(&mut self, command: &Command, wall_ms: u64, events: &mut Vec<Event>) -> Reply {
        match command {
            Command::DefineLimit { .. } | Command::Define(_) => {
                let d = command.definition().expect("a definition command");
                answer(self.define_limit(&d, events))
            }
            Command::AcquireParts(a) => answer(self.acquire_parts(a, events)),
            Command::SettleTake {
                session,
                ticket,
                cost,
            } => answer(self.settle_take(*session, *ticket, *cost, events)),
            Command::RemoveLimit { tenant, name } => self.remove_limit(tenant, name, events),
            Command::ApplyLimits {
                tenant,
                definitions,
                prune,
            } => answer(self.apply_limits(tenant, definitions, *prune, events)),
            Command::OpenSession { ttl_ms } => answer(self.open_session(*ttl_ms, None, None)),
            Command::OpenSessionFor {
                ttl_ms,
                owner,
                nonce,
            } => answer(self.open_session(*ttl_ms, *owner, Some(*nonce))),
            Command::KeepAlive { session } => answer(self.keep_alive(*session)),
            Command::KeepAliveAcked {
                session,
                acked_below,
            } => answer(self.keep_alive_acked(*session, *acked_below)),
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
            } => answer(self.set_tenant(tenant, *max_running, *budget_tokens, *budget_minor)),
            Command::Reserve {
                tenant,
                run,
                agent,
                period,
                hold_tokens,
                hold_minor,
            } => {
                let hold = (hold_tokens.is_some() || hold_minor.is_some())
                    .then(|| (hold_tokens.unwrap_or(0), hold_minor.unwrap_or(0)));
                let reserve = Reserve {
                    tenant,
                    run,
                    agent: agent.as_deref(),
                    period: period.as_deref(),
                    hold,
                };
                answer(self.reserve(&reserve, wall_ms))
            }
            Command::ReleaseRun { tenant, run } => self.release_run(tenant, run),
            Command::Settle(s) => answer(self.settle(s)),
            Command::SetHalt {
                tenant,
                scope,
                reason,
            } => answer(self.set_halt(tenant, scope, reason, events)),
            Command::ClearHalt { tenant, scope } => self.clear_halt(tenant, scope),
            Command::Tick => self.prune_due(),
            Command::ReturnTokens { tenant, parts } => {
                answer(self.return_tokens(tenant, parts, events))
            }
            Command::DefineOverride {
                tenant,
                requests,
                unit_s,
            } => answer(self.define_override(tenant, *requests, *unit_s, events)),
            Command::LeaseTokens(l) => answer(self.lease_tokens(l, events)),
            Command::FreezeTenant { tenant, to } => answer(self.freeze_tenant(tenant, *to, events)),
            Command::AdoptTenant { tenant, frozen } => answer(self.adopt_tenant(tenant, frozen)),
            Command::DropFrozen { tenant } => self.drop_frozen(tenant),
            Command::PlaceTenant { tenant, group } => answer(self.place_tenant(tenant, *group)),
        }
    }
}

/// The wall stamp an apply uses: the entry's own.
fn planted_wall_ms(stamped: u64) -> u64 {
    // PLANTED(local-wall): the apply reads this node's wall clock, not the entry's stamp.
    if crate::planted::is(crate::planted::Plant::LocalWall) {
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
    }
    stamped
}
