//! What applying an entry produces: one [`Reply`] per command for the client that sent it,
//! and [`Event`]s for other sessions (grants of queued tickets, refusals of queued tickets,
//! halts, expiries), which the server pushes.
//!
//! Replies and events are not part of the state: they are recomputed identically on every
//! node that applies the entry, and only the leader's are sent. Refusals are typed values;
//! nothing here is prose a caller must match on. A refusal names the object it is about (the
//! limit, the tenant and period, the bound), so its text tells a person what to look at.
//! Invalid input (`Invalid`) and a full cluster (`AtCapacity`) are different refusals: the
//! first is the caller's mistake, the second a bound the state reached.

use serde::{Deserialize, Serialize};

use super::command::{Fence, HaltScope, SessionId, TicketId};

/// Which budget a refusal is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BudgetKind {
    Tokens,
    MinorUnits,
}

/// Why a command was not done. A refusal changes nothing in the state, except where a
/// variant says so (a queued ticket refused by a halt is withdrawn).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// No limit by that (tenant, name), or it is being removed.
    UnknownLimit { tenant: String, name: String },
    /// Session `session` does not exist (never opened, closed, or expired).
    UnknownSession { session: SessionId },
    /// A halt of `tenant` covers the request.
    Halted {
        tenant: String,
        scope: HaltScope,
        reason: String,
    },
    /// More units than limit (tenant, name) could ever grant at once: above `concurrent`, or
    /// above `burst` on a rated limit.
    TooLarge {
        tenant: String,
        name: String,
        units: u32,
        max: u64,
    },
    /// `wait = false` and no room now. `retry_at_ms` is the log-clock time at which the rate
    /// bucket will have the tokens, or `None` when only a release can make room.
    Busy { retry_at_ms: Option<u64> },
    /// The limit was removed while the ticket waited.
    LimitRemoved { tenant: String, name: String },
    /// The limit's wait queue is full (see `bounds::LIMIT_WAITERS_MAX`).
    QueueFull { tenant: String, name: String },
    /// Ticket `ticket` was already released in session `session`: a late duplicate of its
    /// acquire.
    TicketReleased {
        session: SessionId,
        ticket: TicketId,
    },
    /// The tenant's running set is at its ceiling.
    TooManyRuns { tenant: String, running: u32 },
    /// The period's budget cannot admit the reserve: without a hold, `spent` has reached
    /// `budget`; with one, `spent + held + hold` would pass it (`held`: the standing holds of
    /// runs admitted before, `hold`: this reserve's).
    BudgetExhausted {
        tenant: String,
        period: String,
        kind: BudgetKind,
        spent: u64,
        held: u64,
        hold: u64,
        budget: u64,
    },
    /// The settlement key (`tenant`, `run`, `epoch`) was used before with another payload.
    Conflict {
        tenant: String,
        run: String,
        epoch: u64,
    },
    /// An argument rule was broken (a name too long, units out of range); the text names it.
    /// The request is wrong and will never be admitted as it is.
    Invalid(String),
    /// A count bound of the state is reached (see [`crate::bounds`]): `what` names the
    /// container, `limit` is the bound. The request was fine; the cluster is full, and may
    /// admit it once something is released, closed or expires.
    AtCapacity { what: String, limit: u64 },
    /// Tenant `tenant` moved to group `to` (`Command::FreezeTenant`): the request was not
    /// decided here; asked again there, it is decided as it would have been here.
    Moved { tenant: String, to: u64 },
    /// `PlaceTenant`: tenant `tenant` already lives in data group `group`, another than the
    /// one asked; a placed tenant changes group only by a move.
    Placed { tenant: String, group: u64 },
}

impl Refusal {
    /// `Ok` while `count` is below `bound` (there is room for one more), else `AtCapacity`
    /// naming `what` and the bound: how every count bound of the state refuses (see
    /// [`crate::bounds`]). `what` is formatted only for a refusal.
    pub fn room(count: u64, bound: usize, what: std::fmt::Arguments<'_>) -> Result<(), Refusal> {
        if count < bound as u64 {
            return Ok(());
        }
        Err(Refusal::AtCapacity {
            what: what.to_string(),
            limit: bound as u64,
        })
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::UnknownLimit { tenant, name } => write!(f, "unknown limit {tenant}/{name}"),
            Refusal::UnknownSession { session } => {
                write!(f, "unknown session {session} (closed or expired)")
            }
            Refusal::Halted {
                tenant,
                scope,
                reason,
            } => write!(f, "halted {tenant} ({scope}): {reason}"),
            Refusal::TooLarge {
                tenant,
                name,
                units,
                max,
            } => {
                write!(
                    f,
                    "too large for {tenant}/{name}: {units} units, the limit grants at most {max}"
                )
            }
            Refusal::Busy {
                retry_at_ms: Some(at),
            } => write!(f, "busy: retry at {at} ms"),
            Refusal::Busy { retry_at_ms: None } => f.write_str("busy: no room until a release"),
            Refusal::LimitRemoved { tenant, name } => write!(f, "limit {tenant}/{name} removed"),
            Refusal::QueueFull { tenant, name } => write!(f, "wait queue of {tenant}/{name} full"),
            Refusal::TicketReleased { session, ticket } => {
                write!(f, "ticket {ticket} of session {session} already released")
            }
            Refusal::TooManyRuns { tenant, running } => {
                write!(f, "too many runs in {tenant}: {running} running")
            }
            Refusal::BudgetExhausted {
                tenant,
                period,
                kind,
                spent,
                held,
                hold,
                budget,
            } => {
                let unit = match kind {
                    BudgetKind::Tokens => "tokens",
                    BudgetKind::MinorUnits => "minor units",
                };
                write!(
                    f,
                    "budget exhausted for {tenant} period {period}: spent {spent}"
                )?;
                if *held > 0 || *hold > 0 {
                    write!(f, " + {held} held + {hold} asked")?;
                }
                write!(f, " of {budget} {unit}")
            }
            Refusal::Conflict { tenant, run, epoch } => write!(
                f,
                "conflict: {tenant} run {run} epoch {epoch} was settled before with another payload"
            ),
            Refusal::Invalid(why) => write!(f, "invalid: {why}"),
            Refusal::AtCapacity { what, limit } => {
                write!(f, "at capacity: {what} (the bound is {limit})")
            }
            Refusal::Moved { tenant, to } => write!(f, "tenant {tenant} moved to group {to}"),
            Refusal::Placed { tenant, group } => write!(
                f,
                "tenant {tenant} is already placed in group {group}; a placed tenant changes \
                 group only by a move"
            ),
        }
    }
}

/// What an `ApplyLimits` changed (or, in a dry run, would change): names of the tenant's
/// limits, each list in name order, no name in two lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsChange {
    /// Defined anew (or revived while removed but still held).
    pub created: Vec<String>,
    /// Given a new spec.
    pub changed: Vec<String>,
    /// Removed by `prune`: live limits the definitions did not name.
    pub removed: Vec<String>,
    /// Named with the spec they already had.
    pub unchanged: Vec<String>,
}

impl LimitsChange {
    /// Puts each list in name order.
    pub fn sort(&mut self) {
        for list in [
            &mut self.created,
            &mut self.changed,
            &mut self.removed,
            &mut self.unchanged,
        ] {
            list.sort();
        }
    }

    /// Whether applying changes nothing.
    pub fn is_empty(&self) -> bool {
        self.created.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

/// The answer to one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// `DefineLimit`, `RemoveLimit`, `SetTenant`, `ReleaseRun`, `ClearHalt`, `SetHalt`,
    /// `CloseSession`, `Tick`: done.
    Done,
    SessionOpened {
        session: SessionId,
        ttl_ms: u64,
    },
    /// The session's lease now runs `ttl_ms` from this entry.
    KeptAlive {
        ttl_ms: u64,
    },
    /// The ticket holds `units` under `fence` (or, on a limit without `concurrent`, took
    /// them as tokens).
    Granted {
        fence: Fence,
        units: u32,
    },
    /// The ticket waits; `position` tickets are ahead of it now.
    Queued {
        position: u32,
    },
    /// `Release`: `held` says whether a permit was freed, `withdrawn` whether a queued
    /// ticket left the queue; both false for an unknown or already finished ticket.
    Released {
        held: bool,
        withdrawn: bool,
    },
    Admitted,
    /// `Settle`: charged now, or `duplicate` of a receipt already applied.
    Settled {
        duplicate: bool,
    },
    /// `Settle`: charged now, and the charge passed what was left of the run's hold by this
    /// much (G6: an overrun is recorded in the period's spend and reported, never hidden).
    Overrun {
        tokens: u64,
        minor_units: u64,
    },
    Refused(Refusal),
    /// `ApplyLimits`: what it changed.
    LimitsApplied(LimitsChange),
    /// `LeaseTokens`: each part's lease as it now stands, in the request's order.
    Leased(Vec<LeaseShare>),
    /// `PlaceTenant`: the tenant lives in data group `group` (placed now, or before in the
    /// same group).
    Placed {
        group: u64,
    },
}

/// One part's token lease after a [`crate::machine::command::LeaseTokens`]: what the holder
/// may spend from now on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseShare {
    /// The refill share granted, micro-tokens a second (at most what was asked).
    pub rate_micro_per_s: u64,
    /// The local bucket's size granted, tokens (at most what was asked).
    pub cap: u64,
    /// Micro-tokens moved from the cluster's bucket to the holder's by this request.
    pub tokens_micro: u64,
    /// A fair share of the limit's leasable rate among its holders now: a holder above it
    /// should ask for less in its next request, so newcomers get room.
    pub fair_rate_micro_per_s: u64,
    /// A fair share of the limit's leasable bucket among its holders now, tokens.
    pub fair_cap: u64,
    /// The request was a retry (its `seq` not above the lease's): nothing changed.
    pub duplicate: bool,
}

/// Something another session must be told, produced by an entry it did not send.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A queued ticket was granted.
    Granted {
        session: SessionId,
        ticket: TicketId,
        fence: Fence,
        units: u32,
    },
    /// A queued ticket was refused and withdrawn (halt, removal, lowered cap).
    Refused {
        session: SessionId,
        ticket: TicketId,
        refusal: Refusal,
    },
    /// A halt now covers a permit the session holds. It keeps the permit until it releases.
    Halted {
        session: SessionId,
        ticket: TicketId,
        scope: HaltScope,
        reason: String,
    },
    /// The session expired: its permits are released and its tickets withdrawn.
    SessionExpired { session: SessionId },
}

impl Event {
    /// The session this event is addressed to.
    pub fn session(&self) -> SessionId {
        match self {
            Event::Granted { session, .. }
            | Event::Refused { session, .. }
            | Event::Halted { session, .. }
            | Event::SessionExpired { session } => *session,
        }
    }
}

/// The outcome of applying one entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The log clock after the entry, in ms.
    pub log_ms: u64,
    /// One reply per command, in order.
    pub replies: Vec<Reply>,
    /// Events for other sessions, in the order they happened.
    pub events: Vec<Event>,
}
