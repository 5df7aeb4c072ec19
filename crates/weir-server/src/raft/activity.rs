//! What the cluster did, as the operator console follows it: [`Activity`], the events one
//! applied entry produced across every tenant — grants (at once or from a queue), tickets
//! queued, refusals, releases, session expiries, halts set and cleared, limits defined and
//! removed. The state-machine store derives it from each applied batch (its commands, their
//! replies and the entry's session events) and publishes it on the node's activity feed,
//! which `GET /v1/events` serves (`http/watch.rs`).
//!
//! Invariants:
//! - Derived only while someone listens: the store asks [`wanted`] first, so a node without
//!   a listener pays one atomic load per applied batch, nothing more. A node serving HTTP
//!   always has one: its console history (`weir-http`'s `history.rs`) follows the feed.
//! - Derived from this node's applied log alone, so every node computes the same activity
//!   for the same entry (as with session events); it is observation, never state: nothing
//!   reads it back into the machine.
//! - A release's limit is looked up *before* the batch applies (the ticket is gone after),
//!   a queued grant's *after* (the ticket is held then); an activity names what it could
//!   find, `null` otherwise.

use serde::Serialize;
use tokio::sync::broadcast;

use weir_core::machine::{
    Batch, Command, Effect, Event, Machine, Refusal, Reply, SessionId, TicketId,
};

/// Applied entries a console's cluster-wide event stream (`GET /v1/events`) may fall behind
/// the node's activity feed before it misses some. It is then sent `resync` (re-read the
/// state; nothing was skipped silently), as a session's stream is sent `lagged`. The feed is
/// one broadcast shared by every viewer, so this bounds the memory of all viewers together
/// at this many entries' activities; a slow viewer bounds only its own lag. 1,024 entries
/// are seconds of a busy cluster's traffic: a browser tab reading SSE keeps up unless it is
/// suspended, and then a re-read is what it needs anyway.
pub const WATCH_ENTRIES_BACKLOG: usize = 1_024;

/// One thing the cluster did. Serialized with its kind as `kind` (the SSE event name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Activity {
    /// A ticket was granted: at its acquire (`queued` false) or from a queue.
    Granted {
        tenant: Option<String>,
        limit: Option<String>,
        session: SessionId,
        ticket: TicketId,
        fence: u64,
        units: u32,
        queued: bool,
    },
    /// A ticket waits, `position` tickets ahead of it.
    Queued {
        tenant: String,
        limit: String,
        session: SessionId,
        ticket: TicketId,
        position: u32,
    },
    /// A ticket was refused (at its acquire, or withdrawn from a queue).
    Refused {
        tenant: Option<String>,
        limit: Option<String>,
        session: SessionId,
        ticket: TicketId,
        error: &'static str,
        message: String,
    },
    /// A ticket was released: `held` whether a permit was freed.
    Released {
        tenant: Option<String>,
        limit: Option<String>,
        session: SessionId,
        ticket: TicketId,
        held: bool,
    },
    /// A session's lease ran out: its permits are released, its tickets withdrawn.
    Expired {
        session: SessionId,
    },
    /// A halt was set on `scope` (`tenant` or `agent NAME`).
    HaltSet {
        tenant: String,
        scope: String,
        reason: String,
    },
    HaltCleared {
        tenant: String,
        scope: String,
    },
    /// A limit was defined or redefined.
    Defined {
        tenant: String,
        limit: String,
    },
    Removed {
        tenant: String,
        limit: String,
    },
}

/// Activities of one applied entry, in the order they happened.
pub type Activities = Vec<Activity>;

/// Whether anyone listens to `feed`: when not, nothing is derived.
pub fn wanted(feed: &broadcast::Sender<std::sync::Arc<Activities>>) -> bool {
    feed.receiver_count() > 0
}

/// Before `batch` applies: the (tenant, limit) of each command's released ticket, by
/// command index (`None` for a command that releases nothing named).
pub fn released_limits(machine: &Machine, batch: &Batch) -> Vec<Option<(String, String)>> {
    batch
        .commands
        .iter()
        .map(|c| match c.effect() {
            Effect::Releases { session, ticket } => machine.ticket_limit(session, ticket),
            _ => None,
        })
        .collect()
}

/// After `batch` applied to `machine` with `replies` and `events`: what it did.
pub fn of_entry(
    machine: &Machine,
    batch: &Batch,
    replies: &[Reply],
    events: &[Event],
    released: Vec<Option<(String, String)>>,
) -> Activities {
    let mut out = Vec::new();
    for ((command, reply), named) in batch.commands.iter().zip(replies).zip(released) {
        if let Some(a) = of_command(command, reply, named) {
            out.push(a);
        }
    }
    out.extend(events.iter().filter_map(|e| of_event(machine, e)));
    out
}

/// The activity of one command and its reply, if it did something the console shows.
fn of_command(
    command: &Command,
    reply: &Reply,
    released: Option<(String, String)>,
) -> Option<Activity> {
    let (tenant, limit, session, ticket) = match command.effect() {
        Effect::Asks {
            tenant,
            limit,
            session,
            ticket,
        } => (tenant.to_owned(), limit.to_owned(), session, ticket),
        Effect::Releases { session, ticket } => {
            let Reply::Released { held, .. } = reply else {
                return None;
            };
            let (tenant, limit) = released.unzip();
            return Some(Activity::Released {
                tenant,
                limit,
                session,
                ticket,
                held: *held,
            });
        }
        effect => return of_control(effect, reply),
    };
    match reply {
        Reply::Granted { fence, units } => Some(Activity::Granted {
            tenant: Some(tenant),
            limit: Some(limit),
            session,
            ticket,
            fence: *fence,
            units: *units,
            queued: false,
        }),
        Reply::Queued { position } => Some(Activity::Queued {
            tenant,
            limit,
            session,
            ticket,
            position: *position,
        }),
        Reply::Refused(r) => Some(refused(Some((tenant, limit)), session, ticket, r)),
        _ => None,
    }
}

/// The activity of an operator's command that succeeded, by its effect: halts and
/// definitions.
fn of_control(effect: Effect<'_>, reply: &Reply) -> Option<Activity> {
    if matches!(reply, Reply::Refused(_)) {
        return None;
    }
    Some(match effect {
        Effect::SetsHalt {
            tenant,
            scope,
            reason,
        } => Activity::HaltSet {
            tenant: tenant.to_owned(),
            scope: scope.to_string(),
            reason: reason.to_owned(),
        },
        Effect::ClearsHalt { tenant, scope } => Activity::HaltCleared {
            tenant: tenant.to_owned(),
            scope: scope.to_string(),
        },
        Effect::Defines { tenant, name } => Activity::Defined {
            tenant: tenant.to_owned(),
            limit: name.to_owned(),
        },
        Effect::Removes { tenant, name } => Activity::Removed {
            tenant: tenant.to_owned(),
            limit: name.to_owned(),
        },
        Effect::Opens { .. }
        | Effect::Closes { .. }
        | Effect::Releases { .. }
        | Effect::Asks { .. }
        | Effect::Other => return None,
    })
}

/// The activity of an event for another session; a queued grant's limit is looked up in
/// the state after the entry (the ticket is held there now). A halt covering a held permit
/// is shown by its `halt_set` already.
fn of_event(machine: &Machine, event: &Event) -> Option<Activity> {
    Some(match event {
        Event::Granted {
            session,
            ticket,
            fence,
            units,
        } => {
            let (tenant, limit) = machine.ticket_limit(*session, *ticket).unzip();
            Activity::Granted {
                tenant,
                limit,
                session: *session,
                ticket: *ticket,
                fence: *fence,
                units: *units,
                queued: true,
            }
        }
        Event::Refused {
            session,
            ticket,
            refusal,
        } => refused(None, *session, *ticket, refusal),
        Event::Halted { .. } => return None,
        Event::SessionExpired { session } => Activity::Expired { session: *session },
    })
}

fn refused(
    named: Option<(String, String)>,
    session: SessionId,
    ticket: TicketId,
    refusal: &Refusal,
) -> Activity {
    let (tenant, limit) = named.unzip();
    Activity::Refused {
        tenant,
        limit,
        session,
        ticket,
        error: crate::metrics::refusal_kind(refusal),
        message: refusal.to_string(),
    }
}
