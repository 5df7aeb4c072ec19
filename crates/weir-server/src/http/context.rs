//! [`HttpCtx`]: what every HTTP handler reaches — the callers (one internal client per
//! token, `callers.rs`) that carry requests to the leader, this node's applied state
//! (events, local figures), Raft (health, metrics) and the leader changes this node saw
//! (`leaders.rs`). [`HttpCtx::write`], [`HttpCtx::read`] and the take session act for the
//! current request's caller.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::callers::{self, Callers};
use super::error::ApiError;
use super::leaders::LeaderHistory;
use crate::raft::Raft;
use crate::raft::state_store::AppliedState;
use weir_client::protocol::{Answer, Query};
use weir_client::{Client, ClientError};
use weir_core::machine::{Command, Reply, SessionId, TicketId};

/// TTL of the node's own session for takes, ms. Long, because a take holds nothing under it
/// (a rate-only grant only spends tokens) and each take renews nothing: a session that
/// expires between takes is simply opened again.
const TAKE_SESSION_TTL_MS: u64 = 60_000;

/// What the HTTP handlers share.
pub struct HttpCtx {
    pub id: u64,
    /// This node's client address (its own status is asked there).
    pub client_addr: String,
    /// Carry every operation to the leader over the client protocol with the request's
    /// token, following it across failovers: this node's client address first, then the
    /// other initial voters'.
    pub callers: Arc<Callers>,
    /// This node's applied state: session events, the log clock, local figures.
    pub state: Arc<AppliedState>,
    pub raft: Raft,
    /// The leader changes this node saw since it started (`leaders.rs`).
    pub leaders: Arc<LeaderHistory>,
}

impl HttpCtx {
    pub fn new(
        id: u64,
        client_addr: String,
        callers: Callers,
        state: Arc<AppliedState>,
        raft: Raft,
    ) -> HttpCtx {
        HttpCtx {
            id,
            client_addr,
            callers: Arc::new(callers),
            state,
            leaders: LeaderHistory::follow(&raft),
            raft,
        }
    }

    /// The current request's internal client (its token, the node's CA).
    pub fn client(&self) -> Client {
        callers::current().client.clone()
    }

    /// A write through the log; a refusal is an error.
    pub async fn write(&self, command: Command) -> Result<Reply, ApiError> {
        match self.client().write(command).await? {
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
        self.state.lock().machine.now_ms()
    }

    /// The caller's take session and a fresh ticket in it, opening the session if needed.
    pub async fn take_ticket(&self) -> Result<(SessionId, TicketId), ClientError> {
        let caller = callers::current();
        let mut session = caller.take_session.lock().await;
        let id = match *session {
            Some(id) => id,
            None => {
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
                *session = Some(id);
                id
            }
        };
        Ok((id, caller.take_ticket.fetch_add(1, Ordering::Relaxed)))
    }

    /// Forgets the caller's take session (it expired); the next take opens another.
    pub async fn take_session_lost(&self, lost: SessionId) {
        let caller = callers::current();
        let mut session = caller.take_session.lock().await;
        if *session == Some(lost) {
            *session = None;
        }
    }
}
