//! The session-owner rule (G10), the one check every write path and the HTTP event stream
//! make: a principal acts on a session only if this node's machine records the session as
//! unowned (opened without authentication) or as the principal's own.
//!
//! The owner is replicated with the session (the edge proposes every open as
//! `OpenSessionFor`), so every node, a new leader included, answers the same once it has
//! applied the open. Before that this node does not know the session: each caller decides
//! how to wait for it (a write, through `server::edge::owned`, with a quorum round; the HTTP
//! event stream for a few seconds), then asks again.

use crate::raft::state_store::AppliedState;
use crate::security::Principal;
use weir_core::machine::SessionId;

/// What this node's applied state says of a principal acting on a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerCheck {
    /// The session is unowned or the principal's own.
    Allowed,
    /// Another principal opened it; the text says so (the refusal's reason).
    Forbidden(String),
    /// This node has not applied an open of the session (yet, or ever).
    Unknown,
}

/// Checks `principal` against the owner this node records for `session`.
pub fn check_owner(state: &AppliedState, principal: &Principal, session: SessionId) -> OwnerCheck {
    let owner = state.lock().machine.session_owner(session);
    match owner {
        None => OwnerCheck::Unknown,
        Some(owner) if principal.may_act_on(owner) => OwnerCheck::Allowed,
        Some(_) => OwnerCheck::Forbidden(format!("session {session} belongs to another principal")),
    }
}
