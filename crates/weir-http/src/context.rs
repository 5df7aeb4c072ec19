//! [`HttpCtx`]: what every HTTP handler reaches — the callers (one internal client per
//! token and group, `callers.rs`) that carry requests to the leader, this node's applied
//! state of each data group (events, local figures), Raft (health, metrics), the leader
//! changes this node saw (`leaders.rs`) and the last minutes it saw of each limit
//! (`history.rs`). [`HttpCtx::write`], [`HttpCtx::read`] and the take session act for the
//! current request's caller, in its group.
//!
//! Groups: a request speaks to the group its `Weir-Group` header names, or the node's
//! default group ([`callers::GROUP_HEADER`]); [`HttpCtx::door`] is that group's state, Raft
//! and in-process writer, and every handler reads and writes through it, so a session
//! opened with the header is served, its events told and its acquires waited for in its
//! group. A request that acts for a tenant with no session of the caller's (a take,
//! Envoy's service) goes to the tenant's group by this node's placements
//! ([`HttpCtx::for_tenant`]); a tenant's and a limit's history are read in the tenant's
//! group ([`HttpCtx::tenant_history`]). The forwarder follows every group's leader for
//! that group's clients (`forward.rs`); the leader history is the default group's.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::callers::{self, Callers, TakeSession};
use super::error::ApiError;
use super::history::History;
use super::leaders::LeaderHistory;
use std::collections::BTreeMap;
use weir_client::{Client, ClientError};
use weir_core::bounds;
use weir_core::machine::{Command, Reply, SessionId, TicketId};
use weir_core::planted::Plant;
use weir_proto::protocol::{Answer, Query};

use weir_server::raft::state_store::AppliedState;
use weir_server::server::front::{DoorGroup, Doors};

/// TTL of the node's own session for takes, ms. Long, because a take holds nothing under it
/// (a rate-only grant only spends tokens) and each take renews nothing: a session that
/// expires between takes is simply opened again.
const TAKE_SESSION_TTL_MS: u64 = 60_000;

/// Takes in one take session before the next take opens another. A session keeps each
/// finished ticket for `FINISHED_TICKET_RETENTION_MS` (15 s) and refuses a new one
/// `AtCapacity` at `SESSION_FINISHED_TICKETS_MAX` (65,536): one session for every take of a
/// caller would cap the caller at 4,369 takes a second through this node. Half the bound
/// keeps a session well under it whatever the rate; the sessions left behind expire on
/// their TTL, and the machine's own bound on finished tickets counts every session's.
const TAKE_SESSION_TICKETS: u64 = (bounds::SESSION_FINISHED_TICKETS_MAX / 2) as u64;

/// The `forward-held` plant's mark of a write that followed a failed leader: no answer
/// through a live leader takes this long.
const FORWARD_HELD_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// How long the door waits, after its internal client's answer to a write that took
/// `took`, before it answers the request: nothing (an answer goes back as soon as the
/// internal client has it, however many leaders it followed). The deterministic
/// simulator's clients of the HTTP door answer their writes by this rule too.
pub fn write_answer_hold(took: std::time::Duration) -> std::time::Duration {
    // PLANTED(forward-held): a write that had to follow a failed leader is held until the
    // internal client's own request timeout before it is answered.
    if weir_core::planted::is(Plant::ForwardHeld) && took > FORWARD_HELD_AFTER {
        return weir_client::REQUEST_DEADLINE.saturating_sub(took);
    }
    std::time::Duration::ZERO
}

/// The session `ticket` is taken in: the current one if the ticket is before its end.
fn in_session(current: Option<TakeSession>, ticket: TicketId) -> Option<SessionId> {
    current.filter(|s| ticket < s.until).map(|s| s.id)
}

/// What the HTTP handlers share.
pub struct HttpCtx {
    pub id: u64,
    /// This node's client address (its own status is asked there).
    pub client_addr: String,
    /// Carry every operation to the leader over the client protocol with the request's
    /// token, following it across failovers: this node's client address first, then the
    /// other initial voters'.
    pub callers: Arc<Callers>,
    /// Every data group this node hosts: its applied state (session events, the log clock,
    /// local figures), its Raft, its in-process writer (what Envoy's service writes
    /// through while this node leads the group, without the loopback hop).
    groups: BTreeMap<u64, DoorGroup>,
    /// The group a request naming none speaks to.
    default_group: u64,
    /// The metadata group's applied state on a node of several groups: its placements.
    placements: Option<Arc<AppliedState>>,
    /// The leader changes this node saw since it started (`leaders.rs`).
    pub leaders: Arc<LeaderHistory>,
    /// The last minutes of each limit and tenant as this node saw them (`history.rs`),
    /// one per data group.
    histories: BTreeMap<u64, Arc<History>>,
}

impl HttpCtx {
    /// The front doors' context over what the node gave them, `doors`.
    pub fn new(id: u64, client_addr: String, callers: Callers, doors: &Doors) -> HttpCtx {
        let groups: BTreeMap<u64, DoorGroup> = doors
            .groups
            .iter()
            .map(|(g, door)| (u64::from(*g), door.clone()))
            .collect();
        let default_group = u64::from(doors.default_group);
        let callers = Arc::new(callers.groups(default_group, groups.keys().copied().collect()));
        let default = doors.default_door();
        for (g, door) in &groups {
            let named = (*g != default_group).then_some(*g);
            super::forward::follow_leader(door.raft.clone(), callers.clone(), named);
        }
        HttpCtx {
            id,
            client_addr,
            callers,
            leaders: LeaderHistory::follow(&default.raft),
            histories: groups
                .iter()
                .map(|(g, door)| (*g, History::follow(door.state.clone())))
                .collect(),
            groups,
            default_group,
            placements: doors.placements.clone(),
        }
    }

    /// The group the current request speaks to, as this node hosts it: the caller's (its
    /// `Weir-Group` header's, checked against the hosted groups), else the default group.
    pub fn door(&self) -> &DoorGroup {
        &self.groups[&self.group()]
    }

    /// The group the current request speaks to (its `Weir-Group`, else the default group).
    pub fn group(&self) -> u64 {
        callers::try_current()
            .map(|c| c.group())
            .filter(|g| self.groups.contains_key(g))
            .unwrap_or(self.default_group)
    }

    /// The data groups this node hosts, in order.
    pub fn groups(&self) -> Vec<u64> {
        self.groups.keys().copied().collect()
    }

    /// This node's applied state of the current request's group.
    pub fn state(&self) -> &Arc<AppliedState> {
        &self.door().state
    }

    /// Another hosted group whose applied state holds `session`, when the current
    /// request's group does not (session ids are drawn at random: two groups' sessions
    /// share one only by a 64-bit coincidence).
    pub fn other_group_of_session(&self, session: SessionId) -> Option<u64> {
        let here = self.group();
        self.groups
            .iter()
            .filter(|(g, _)| **g != here)
            .find(|(_, door)| door.state.lock().machine.session_owner(session).is_some())
            .map(|(g, _)| *g)
    }

    /// What this node saw of the current request's group's last minutes.
    pub fn history(&self) -> &Arc<History> {
        &self.histories[&self.group()]
    }

    /// What this node saw of the last minutes of the group `tenant` lives in, by its
    /// placements; of the current request's group where they name none.
    pub fn tenant_history(&self, tenant: &str) -> &Arc<History> {
        match self.placement(tenant).and_then(|g| self.histories.get(&g)) {
            Some(history) => history,
            None => self.history(),
        }
    }

    /// The caller that acts for `tenant` in a request of no session of the caller's:
    /// `caller` in the group this node's placements put `tenant` in, or `caller` itself
    /// where they name none (a node of one group; a tenant placed nowhere, or
    /// not yet as far as this node has applied: its group's answer tells it).
    pub fn for_tenant(&self, caller: Arc<callers::Caller>, tenant: &str) -> Arc<callers::Caller> {
        match self.placement(tenant) {
            Some(group) => caller.in_group(group),
            None => caller,
        }
    }

    /// The hosted group this node's placements put `tenant` in; `None` on a node of one
    /// group, or for a tenant placed nowhere as far as this node has applied.
    fn placement(&self, tenant: &str) -> Option<u64> {
        self.placed(tenant).filter(|g| self.groups.contains_key(g))
    }

    /// The data group `tenant` lives in by this node's placements: 0 on a node of one group
    /// (its one group decides every tenant); `None` for a tenant it has not seen placed.
    pub fn placed(&self, tenant: &str) -> Option<u64> {
        match &self.placements {
            None => Some(self.default_group),
            Some(placements) => placements.lock().machine.placement(tenant),
        }
    }

    /// This node's applied state of the group `tenant` lives in, by its placements; of the
    /// current request's group where they name none.
    pub fn tenant_state(&self, tenant: &str) -> &Arc<AppliedState> {
        match self.placement(tenant).and_then(|g| self.groups.get(&g)) {
            Some(door) => &door.state,
            None => self.state(),
        }
    }

    /// Whether this node leads the current request's group now, as its Raft last said.
    pub fn leads(&self) -> bool {
        self.door().raft.metrics().borrow().current_leader == Some(self.id)
    }

    /// The current request's internal client (its token, the node's CA).
    pub fn client(&self) -> Client {
        callers::current().client.clone()
    }

    /// A write through the log; a refusal is an error.
    pub async fn write(&self, command: Command) -> Result<Reply, ApiError> {
        let sent = std::time::Instant::now();
        let written = self.client().write(command).await;
        let hold = write_answer_hold(sent.elapsed());
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        match written? {
            Reply::Refused(r) => Err(ApiError::refused(&r, self.now_ms())),
            reply => Ok(reply),
        }
    }

    /// A linearizable read, answered by the leader.
    pub async fn read(&self, query: Query) -> Result<Answer, ApiError> {
        Ok(self.client().read(query).await?)
    }

    /// This node's log clock, ms (what `Busy {retry_at_ms}` is measured against).
    pub fn now_ms(&self) -> u64 {
        self.state().lock().machine.now_ms()
    }

    /// The caller's take session and a fresh ticket in it, opening a session when there is
    /// none or the current one has had its [`TAKE_SESSION_TICKETS`].
    pub async fn take_ticket(&self) -> Result<(SessionId, TicketId), ClientError> {
        let caller = callers::current();
        let mut session = caller.take_session.lock().await;
        let ticket = caller.take_ticket.fetch_add(1, Ordering::Relaxed);
        if let Some(id) = in_session(*session, ticket) {
            return Ok((id, ticket));
        }
        let id = match caller
            .client
            .write(Command::OpenSession {
                ttl_ms: TAKE_SESSION_TTL_MS,
            })
            .await?
        {
            Reply::SessionOpened { session, .. } => session,
            other => {
                return Err(ClientError::Protocol(format!(
                    "unexpected answer to an open: {other:?}"
                )));
            }
        };
        *session = Some(TakeSession {
            id,
            until: ticket.saturating_add(TAKE_SESSION_TICKETS),
        });
        Ok((id, ticket))
    }

    /// Forgets the caller's take session (it expired); the next take opens another.
    pub async fn take_session_lost(&self, lost: SessionId) {
        let caller = callers::current();
        let mut session = caller.take_session.lock().await;
        if session.is_some_and(|s| s.id == lost) {
            *session = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_session_serves_its_tickets_then_the_next_take_opens_another() {
        assert_eq!(in_session(None, 1), None);
        let s = TakeSession {
            id: 7,
            until: 1 + TAKE_SESSION_TICKETS,
        };
        assert_eq!(in_session(Some(s), 1), Some(7));
        assert_eq!(in_session(Some(s), TAKE_SESSION_TICKETS), Some(7));
        assert_eq!(in_session(Some(s), 1 + TAKE_SESSION_TICKETS), None);
        // A session is never asked for more finished tickets than it keeps.
        const { assert!(TAKE_SESSION_TICKETS < bounds::SESSION_FINISHED_TICKETS_MAX as u64) };
    }
}
