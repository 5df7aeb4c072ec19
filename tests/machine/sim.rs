//! A driver that feeds a machine entries the way a leader would, checking every invariant
//! after every entry; and the small language the scenarios are written in: builders for the
//! commands ([`ask`], [`limit`]), and the replies and events they expect by name.
//!
//! A scenario reads as the spec does: `s.reply(ask(a, 2, "db").units(2))` is "session `a`
//! asks ticket 2 for two units of `t/db`", and it expects `queued(0)`, [`FREED`], or
//! `granted_event(b, 1, fence, 1)`.

use weir_core::machine::{
    Acquire, AcquireParts, Applied, Batch, Command, Definition, Event, Fence, HaltScope,
    Leadership, LimitStatus, Machine, Part, Priority, Refusal, Reply, SessionId, TicketId,
};

pub struct Sim {
    pub m: Machine,
    pub index: u64,
    pub clock_ms: u64,
    pub wall_ms: u64,
    pub leadership: Leadership,
    /// Every entry applied, for replay.
    pub log: Vec<(u64, Batch)>,
    /// The invariants are checked after every entry whose index this divides (1: every
    /// entry). Long runs check every so many entries: a check walks the whole state.
    pub check_every: u64,
}

impl Sim {
    pub fn new() -> Sim {
        Sim {
            m: Machine::new(),
            index: 0,
            clock_ms: 1_000_000,
            wall_ms: 1_700_000_000_000,
            leadership: Leadership {
                term: 1,
                node: 1,
                incarnation: 0,
            },
            log: Vec::new(),
            check_every: 1,
        }
    }

    /// A sim with one limit, `t/db`, of `concurrent` units and no rate: the scenarios'
    /// usual start.
    pub fn db(concurrent: u32) -> Sim {
        let mut s = Sim::new();
        s.define("t", "db", concurrent, 0.0);
        s
    }

    /// Applies one entry of `commands` after `advance_ms` of the leader's clock.
    pub fn entry_after(&mut self, advance_ms: u64, commands: Vec<Command>) -> Applied {
        let applied = self.apply_next(advance_ms, commands);
        if self.index.is_multiple_of(self.check_every) {
            self.check();
        }
        applied
    }

    /// Applies many entries at once, checking the invariants after the last only: for bulk
    /// loads, where a check after every entry would cost the square of the state's size.
    pub fn entries(&mut self, entries: impl IntoIterator<Item = Vec<Command>>) {
        for commands in entries {
            self.apply_next(0, commands);
        }
        self.check();
    }

    /// Checks the machine's invariants; a broken one panics naming the entry.
    pub fn check(&self) {
        if let Err(e) = self.m.check() {
            panic!("invariant broken after entry {}: {e}", self.index);
        }
    }

    fn apply_next(&mut self, advance_ms: u64, commands: Vec<Command>) -> Applied {
        self.index += 1;
        self.clock_ms += advance_ms;
        self.wall_ms += advance_ms;
        let batch = Batch {
            leadership: self.leadership,
            clock_ms: self.clock_ms,
            wall_ms: self.wall_ms,
            commands,
        };
        let applied = self.m.apply(self.index, &batch);
        self.log.push((self.index, batch));
        applied
    }

    pub fn entry(&mut self, commands: Vec<Command>) -> Applied {
        self.entry_after(0, commands)
    }

    /// One command in its own entry: its reply and the events.
    pub fn one(&mut self, command: impl Into<Command>) -> (Reply, Vec<Event>) {
        let mut applied = self.entry(vec![command.into()]);
        (applied.replies.remove(0), applied.events)
    }

    pub fn reply(&mut self, command: impl Into<Command>) -> Reply {
        self.one(command).0
    }

    /// The fence of a command that must be granted at once.
    pub fn grant(&mut self, command: impl Into<Command>) -> Fence {
        fence(&self.reply(command))
    }

    /// Lets `ms` of the leader's clock pass with a tick.
    pub fn wait(&mut self, ms: u64) -> Vec<Event> {
        self.entry_after(ms, vec![Command::Tick]).events
    }

    /// Defines (tenant, name) with no burst of its own; it must be done.
    pub fn define(&mut self, tenant: &str, name: &str, concurrent: u32, per_second: f64) {
        let reply = self.reply(limit(tenant, name).concurrent(concurrent).rate(per_second));
        assert_eq!(reply, Reply::Done);
    }

    pub fn open(&mut self, ttl_ms: u64) -> SessionId {
        match self.reply(Command::OpenSession { ttl_ms }) {
            Reply::SessionOpened { session, .. } => session,
            other => panic!("open session: {other:?}"),
        }
    }

    /// Opens a session for each TTL, each in its own entry.
    pub fn open_each<const N: usize>(&mut self, ttls_ms: [u64; N]) -> [SessionId; N] {
        ttls_ms.map(|ttl_ms| self.open(ttl_ms))
    }

    /// One unit of `t/limit` for (session, ticket), waiting.
    pub fn acquire(&mut self, session: SessionId, ticket: TicketId, limit: &str) -> Reply {
        self.reply(ask(session, ticket, limit))
    }

    pub fn release(&mut self, session: SessionId, ticket: TicketId) -> (Reply, Vec<Event>) {
        self.one(Command::Release { session, ticket })
    }

    /// Removes `t/name`.
    pub fn remove(&mut self, name: &str) -> (Reply, Vec<Event>) {
        self.one(Command::RemoveLimit {
            tenant: "t".into(),
            name: name.into(),
        })
    }

    /// The status of a limit that must exist.
    pub fn status(&self, tenant: &str, name: &str) -> LimitStatus {
        self.m
            .limit_status(tenant, name)
            .unwrap_or_else(|| panic!("no limit {tenant}/{name}"))
    }
}

/// An acquire being written: by default one unit of tenant `t`'s limit, default priority,
/// no agent, waiting; with a key or more parts it is written as an `AcquireParts`.
#[derive(Clone, Debug)]
pub struct Ask(Acquire, Option<String>, Vec<Part>, bool);

/// Session `session` asks ticket `ticket` of `t/limit`.
pub fn ask(session: SessionId, ticket: TicketId, limit: &str) -> Ask {
    Ask(
        Acquire {
            session,
            ticket,
            tenant: "t".into(),
            limit: limit.into(),
            units: 1,
            priority: Priority::default(),
            agent: None,
            wait: true,
        },
        None,
        Vec::new(),
        false,
    )
}

impl Ask {
    /// The first part names key `key` of its (keyed) limit.
    pub fn key(mut self, key: &str) -> Ask {
        self.1 = Some(key.into());
        self
    }

    /// Its units are an estimate, settled later (`SettleTake`).
    pub fn estimate(mut self) -> Ask {
        self.3 = true;
        self
    }

    /// One more part: `units` of `limit`, of its key `key` if any.
    pub fn and(mut self, limit: &str, key: Option<&str>, units: u32) -> Ask {
        self.2.push(Part {
            limit: limit.into(),
            key: key.map(Into::into),
            units,
        });
        self
    }

    pub fn units(mut self, units: u32) -> Ask {
        self.0.units = units;
        self
    }

    pub fn tenant(mut self, tenant: &str) -> Ask {
        self.0.tenant = tenant.into();
        self
    }

    /// At priority `level` under fairness key `key`, weight 1.
    pub fn at(self, level: i32, key: &str) -> Ask {
        self.priority(Priority {
            level,
            fairness_key: key.into(),
            fairness_weight: 1,
        })
    }

    pub fn priority(mut self, priority: Priority) -> Ask {
        self.0.priority = priority;
        self
    }

    pub fn agent(mut self, agent: &str) -> Ask {
        self.0.agent = Some(agent.into());
        self
    }

    /// `wait = false`: answer `Busy` rather than queue.
    pub fn wait(mut self, wait: bool) -> Ask {
        self.0.wait = wait;
        self
    }
}

impl From<Ask> for Command {
    fn from(Ask(a, key, more, estimate): Ask) -> Command {
        if key.is_none() && more.is_empty() && !estimate {
            return Command::Acquire(a);
        }
        let mut parts = AcquireParts::from(&a);
        parts.parts[0].key = key;
        parts.parts.extend(more);
        parts.estimate = estimate;
        Command::AcquireParts(parts)
    }
}

/// A limit's definition being written: by default no cap, no rate, the default burst; a
/// `DefineLimit` unless it is keyed or shadow.
#[derive(Clone, Debug)]
pub struct Define(Definition);

/// Defines (tenant, name).
pub fn limit(tenant: &str, name: &str) -> Define {
    Define(Definition::from_legacy(tenant, name, 0, 0.0, None))
}

impl Define {
    pub fn concurrent(mut self, concurrent: u32) -> Define {
        self.0.concurrent = concurrent;
        self
    }

    pub fn rate(mut self, per_second: f64) -> Define {
        self.0.per_second = per_second;
        self
    }

    pub fn burst(mut self, tokens: u64) -> Define {
        self.0.burst = Some(tokens);
        self
    }

    /// Keyed, with the default `keys_max`.
    pub fn keyed(mut self) -> Define {
        self.0.keyed = true;
        self
    }

    /// Keyed, at most `n` live keys.
    pub fn keys_max(mut self, n: u32) -> Define {
        self.0.keyed = true;
        self.0.keys_max = Some(n);
        self
    }

    pub fn shadow(mut self) -> Define {
        self.0.shadow = true;
        self
    }
}

impl Define {
    /// The definition itself (for an `ApplyLimits`).
    pub fn definition(self) -> Definition {
        self.0
    }
}

impl From<Define> for Command {
    fn from(d: Define) -> Command {
        d.0.into_command()
    }
}

/// `Release` freed a held permit.
pub const FREED: Reply = Reply::Released {
    held: true,
    withdrawn: false,
};

/// `Release` withdrew a queued ticket.
pub const WITHDRAWN: Reply = Reply::Released {
    held: false,
    withdrawn: true,
};

/// `Release` of an unknown or already finished ticket.
pub const NOTHING_RELEASED: Reply = Reply::Released {
    held: false,
    withdrawn: false,
};

pub fn queued(position: u32) -> Reply {
    Reply::Queued { position }
}

pub fn refused(refusal: Refusal) -> Reply {
    Reply::Refused(refusal)
}

pub fn granted_event(session: SessionId, ticket: TicketId, fence: Fence, units: u32) -> Event {
    Event::Granted {
        session,
        ticket,
        fence,
        units,
    }
}

pub fn refused_event(session: SessionId, ticket: TicketId, refusal: Refusal) -> Event {
    Event::Refused {
        session,
        ticket,
        refusal,
    }
}

pub fn halted_event(
    session: SessionId,
    ticket: TicketId,
    scope: &HaltScope,
    reason: &str,
) -> Event {
    Event::Halted {
        session,
        ticket,
        scope: scope.clone(),
        reason: reason.into(),
    }
}

/// The refusal a halt of tenant `acme` (the tenant the halt scenarios use) in `scope` for
/// `reason` gives.
pub fn halted(scope: &HaltScope, reason: &str) -> Refusal {
    Refusal::Halted {
        tenant: "acme".into(),
        scope: scope.clone(),
        reason: reason.into(),
    }
}

/// The refusal of a request waiting on `t/name` when the limit is removed.
pub fn removed(name: &str) -> Refusal {
    Refusal::LimitRemoved {
        tenant: "t".into(),
        name: name.into(),
    }
}

/// The fence of a `Granted` reply.
pub fn fence(reply: &Reply) -> u64 {
    match reply {
        Reply::Granted { fence, .. } => *fence,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// The tickets granted by events, in order.
pub fn granted(events: &[Event]) -> Vec<(SessionId, TicketId)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Granted {
                session, ticket, ..
            } => Some((*session, *ticket)),
            _ => None,
        })
        .collect()
}
