//! Sessions and their leases: open, keep-alive, expire, close.
//!
//! A lease runs `ttl_ms` of log time from the entry that applied the last keep-alive (or the
//! opening). Expiry happens at the start of the first entry whose log clock reaches
//! `expires_at_ms`, earliest first; a session's end releases its permits and withdraws its
//! tickets, and ends its token leases (`token_leases`), and only then are the limits it was on
//! served, so no grant goes to a session that is already past its lease.

use std::collections::BTreeSet;

use super::Machine;
use crate::bounds::SESSIONS_MAX;
use crate::machine::command::{LimitId, Owner, SessionId, TicketId, next_session_candidate};
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::session::Session;

impl Machine {
    /// Opens a session for `owner`. Its id is `nonce` (an `OpenSessionFor`), or the
    /// counter (the legacy `OpenSession`, `nonce` = `None`), stepped past zero and every
    /// live session's id (see [`SessionId`]).
    pub(super) fn open_session(
        &mut self,
        ttl_ms: u64,
        owner: Option<Owner>,
        nonce: Option<u64>,
    ) -> Result<Reply, Refusal> {
        let open = self.saved.sessions.len() as u64;
        Refusal::room(open, SESSIONS_MAX, format_args!("open sessions"))?;
        // Counts every session ever opened; the legacy id.
        self.saved.last_session += 1;
        let mut id = nonce.unwrap_or(self.saved.last_session);
        // Ends: fewer than SESSIONS_MAX ids are live, and the step does not cycle among them.
        while id == 0 || self.saved.sessions.contains_key(&id) {
            id = next_session_candidate(id);
        }
        let session = Session::new(ttl_ms, self.now_ms(), owner);
        self.expiries.insert((session.expires_at_ms, id));
        self.saved.sessions.insert(id, session);
        Ok(Reply::SessionOpened {
            session: id,
            ttl_ms,
        })
    }

    pub(super) fn keep_alive(&mut self, id: SessionId) -> Result<Reply, Refusal> {
        let now_ms = self.now_ms();
        let session = self
            .saved
            .sessions
            .get_mut(&id)
            .ok_or(Refusal::UnknownSession { session: id })?;
        let removed = self.expiries.remove(&(session.expires_at_ms, id));
        assert!(removed, "session {id} has an expiry");
        session.expires_at_ms = now_ms.saturating_add(session.ttl_ms);
        self.expiries.insert((session.expires_at_ms, id));
        Ok(Reply::KeptAlive {
            ttl_ms: session.ttl_ms,
        })
    }

    /// A keep-alive that also raises the session's acknowledged mark to `acked_below`,
    /// forgetting its finished tickets below it (`machine::session`).
    pub(super) fn keep_alive_acked(
        &mut self,
        id: SessionId,
        acked_below: TicketId,
    ) -> Result<Reply, Refusal> {
        let reply = self.keep_alive(id)?;
        let session = self.saved.sessions.get_mut(&id).expect("kept alive");
        session.acknowledge(acked_below, &mut self.totals);
        self.refile_tickets(id);
        Ok(reply)
    }

    /// Ends every session whose lease has run out, earliest first, and only then serves the
    /// limits they were on: no grant goes to a session that is already past its lease.
    pub(super) fn expire_sessions(&mut self, now_ms: u64, events: &mut Vec<Event>) {
        let mut touched = BTreeSet::new();
        while let Some(&(at, id)) = self.expiries.first() {
            if at > now_ms {
                break;
            }
            touched.append(&mut self.drop_session(id));
            events.push(Event::SessionExpired { session: id });
        }
        // PLANTED(expiry-no-grant)
        if crate::planted::is(crate::planted::Plant::ExpiryNoGrant) {
            return;
        }
        for limit in touched {
            self.serve(limit, events);
        }
    }

    /// Closes a session: releases its permits, withdraws its tickets, then serves the limits
    /// it was on, in id order.
    pub(super) fn end_session(&mut self, id: SessionId, events: &mut Vec<Event>) {
        for limit in self.drop_session(id) {
            self.serve(limit, events);
        }
    }

    /// Removes a session with its permits and tickets; returns the limits it was on, which
    /// the caller must serve.
    fn drop_session(&mut self, id: SessionId) -> BTreeSet<LimitId> {
        let Some(session) = self.saved.sessions.remove(&id) else {
            return BTreeSet::new();
        };
        self.expiries.remove(&(session.expires_at_ms, id));
        self.deadlines
            .prune
            .set(crate::machine::deadlines::Prune::Tickets(id), None);
        session.forget_from(&mut self.totals);
        let mut touched: BTreeSet<LimitId> = session
            .live
            .values()
            .flat_map(|ticket| self.unlink(ticket))
            .collect();
        touched.append(&mut self.end_token_leases(id));
        touched
    }
}
