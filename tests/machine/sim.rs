//! A driver that feeds a machine entries the way a leader would, checking every invariant
//! after every entry.

use weir::machine::{
    Acquire, Applied, Batch, Command, Event, Leadership, Machine, Priority, Reply, SessionId,
    TicketId,
};

pub struct Sim {
    pub m: Machine,
    pub index: u64,
    pub clock_ms: u64,
    pub wall_ms: u64,
    pub leadership: Leadership,
    /// Every entry applied, for replay.
    pub log: Vec<(u64, Batch)>,
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
        }
    }

    /// Applies one entry of `commands` after `advance_ms` of the leader's clock.
    pub fn entry_after(&mut self, advance_ms: u64, commands: Vec<Command>) -> Applied {
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
        if let Err(e) = self.m.check() {
            panic!("invariant broken after entry {}: {e}", self.index);
        }
        applied
    }

    pub fn entry(&mut self, commands: Vec<Command>) -> Applied {
        self.entry_after(0, commands)
    }

    /// One command in its own entry: its reply and the events.
    pub fn one(&mut self, command: Command) -> (Reply, Vec<Event>) {
        let mut applied = self.entry(vec![command]);
        (applied.replies.remove(0), applied.events)
    }

    pub fn reply(&mut self, command: Command) -> Reply {
        self.one(command).0
    }

    /// Lets `ms` of the leader's clock pass with a tick.
    pub fn wait(&mut self, ms: u64) -> Vec<Event> {
        self.entry_after(ms, vec![Command::Tick]).events
    }

    pub fn define(&mut self, tenant: &str, name: &str, concurrent: u32, per_second: f64) {
        let reply = self.reply(Command::DefineLimit {
            tenant: tenant.into(),
            name: name.into(),
            concurrent,
            per_second,
            burst: None,
        });
        assert_eq!(reply, Reply::Done);
    }

    pub fn open(&mut self, ttl_ms: u64) -> SessionId {
        match self.reply(Command::OpenSession { ttl_ms }) {
            Reply::SessionOpened { session, .. } => session,
            other => panic!("open session: {other:?}"),
        }
    }

    pub fn acquire(&mut self, session: SessionId, ticket: TicketId, limit: &str) -> Reply {
        self.reply(acquire(session, ticket, "t", limit, 1, Priority::default()))
    }

    pub fn release(&mut self, session: SessionId, ticket: TicketId) -> (Reply, Vec<Event>) {
        self.one(Command::Release { session, ticket })
    }
}

pub fn acquire(
    session: SessionId,
    ticket: TicketId,
    tenant: &str,
    limit: &str,
    units: u32,
    priority: Priority,
) -> Command {
    Command::Acquire(Acquire {
        session,
        ticket,
        tenant: tenant.into(),
        limit: limit.into(),
        units,
        priority,
        agent: None,
        wait: true,
    })
}

pub fn level(level: i32, key: &str) -> Priority {
    Priority {
        level,
        fairness_key: key.into(),
        fairness_weight: 1,
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
