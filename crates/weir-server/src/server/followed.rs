//! [`Followed`]: the sessions one client connection follows for pushes, bounded by
//! [`FOLLOWED_SESSIONS_MAX`].
//!
//! A connection follows a session from the write that names it (`KeepAlive`, `CloseSession`,
//! `Release`, `Acquire`) or the `OpenSession` reply that created it, and stops when it sees
//! the session end: the reply to its `CloseSession`, or the session's `SessionExpired` event.
//!
//! Invariants:
//! - `sessions.len() + opening <= FOLLOWED_SESSIONS_MAX`: an `OpenSession` reserves its place
//!   before it is proposed (its id is known only once applied), so concurrent opens cannot
//!   together pass the bound.
//! - A write naming a session the connection does not follow, at the bound, is refused before
//!   it is proposed, with an error naming the bound.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use weir_core::bounds::FOLLOWED_SESSIONS_MAX;
use weir_core::machine::SessionId;
use weir_proto::protocol::Failure;

/// The followed set, shared by a connection's request tasks (which add and remove) and its
/// forwarder (which reads it per applied entry). A std mutex: held only to look up or change
/// the set, never across an await.
#[derive(Clone, Default)]
pub struct Followed(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    sessions: BTreeSet<SessionId>,
    /// `OpenSession`s in flight on this connection, each holding a place.
    opening: usize,
}

/// A place held for a session being opened; given back when dropped unless [`Followed::opened`]
/// turned it into the session.
pub struct Opening(Followed);

impl Drop for Opening {
    fn drop(&mut self) {
        self.0.inner().opening -= 1;
    }
}

fn full() -> Failure {
    Failure::BadRequest(format!(
        "this connection follows {FOLLOWED_SESSIONS_MAX} sessions already (the bound): \
         close one, or use another connection"
    ))
}

impl Followed {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::lock::lock(&self.0)
    }

    /// Follows `session`, or refuses at the bound.
    pub fn follow(&self, session: SessionId) -> Result<(), Failure> {
        let mut inner = self.inner();
        if inner.sessions.contains(&session) {
            return Ok(());
        }
        if inner.sessions.len() + inner.opening >= FOLLOWED_SESSIONS_MAX {
            return Err(full());
        }
        inner.sessions.insert(session);
        Ok(())
    }

    /// Holds a place for a session about to be opened, or refuses at the bound.
    pub fn begin_open(&self) -> Result<Opening, Failure> {
        let mut inner = self.inner();
        if inner.sessions.len() + inner.opening >= FOLLOWED_SESSIONS_MAX {
            return Err(full());
        }
        inner.opening += 1;
        Ok(Opening(self.clone()))
    }

    /// Follows the session `opening` was held for.
    pub fn opened(&self, opening: Opening, session: SessionId) {
        let mut inner = self.inner();
        inner.sessions.insert(session);
        drop(inner);
        // Gives the place back: the session now holds one of its own.
        drop(opening);
    }

    /// Stops following `session` (it closed or expired).
    pub fn unfollow(&self, session: SessionId) {
        self.inner().sessions.remove(&session);
    }

    /// Whether `session` is followed.
    pub fn contains(&self, session: SessionId) -> bool {
        self.inner().sessions.contains(&session)
    }

    /// Runs `f` with the set locked once (the forwarder filters a whole entry's events).
    pub fn with<T>(&self, f: impl FnOnce(&BTreeSet<SessionId>) -> T) -> T {
        f(&self.inner().sessions)
    }

    /// How many sessions are followed.
    pub fn len(&self) -> usize {
        self.inner().sessions.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_is_bounded_and_shrinks_when_sessions_end() {
        let f = Followed::default();
        for s in 1..=FOLLOWED_SESSIONS_MAX as u64 {
            f.follow(s).unwrap();
        }
        f.follow(1).unwrap();
        let err = f.follow(0).unwrap_err();
        assert!(err.to_string().contains("follows 16384 sessions"), "{err}");
        assert!(f.begin_open().is_err());
        f.unfollow(7);
        assert!(!f.contains(7));
        let open = f.begin_open().unwrap();
        assert!(f.follow(7).is_err(), "the open holds the freed place");
        f.opened(open, 1 << 40);
        assert!(f.contains(1 << 40));
        assert_eq!(f.len(), FOLLOWED_SESSIONS_MAX);
        f.unfollow(1 << 40);
        drop(f.begin_open().unwrap());
        f.follow(7).unwrap();
    }
}
