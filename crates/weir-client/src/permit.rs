//! [`Permit`]: a held permit, as a guard.
//!
//! It carries its fence and units, offers [`Permit::lost`] — a future that resolves when the
//! permit may no longer be held (the session's belief deadline passed, a halt covers it, the
//! session expired) — and releases on drop.
//!
//! A permit keeps its session's state (and so its keep-alives) alive while it exists, even
//! if the [`Session`](super::Session) handle is dropped first.

use std::sync::Arc;

use super::boot_clock::{BootInstant, LOOK_EVERY};
use super::client::Client;
use super::error::ClientError;
use super::lost::Lost;
use super::session_state::{Grant, SessionState, release_in_background, spawn_release};
use weir_core::machine::{Command, Fence, Reply, SessionId, TicketId};

/// A held permit. Released on drop (in the background, when a runtime is running).
pub struct Permit {
    /// The session's state, shared with the session and its other permits.
    state: Arc<SessionState>,
    tenant: String,
    limit: String,
    ticket: TicketId,
    /// Its fence, its units and where its loss is told.
    grant: Grant,
    released: bool,
}

impl Permit {
    pub(super) fn new(
        state: Arc<SessionState>,
        tenant: String,
        limit: String,
        ticket: TicketId,
        grant: Grant,
    ) -> Permit {
        Permit {
            state,
            tenant,
            limit,
            ticket,
            grant,
            released: false,
        }
    }

    /// The fence: pass it to the resource this permit guards.
    pub fn fence(&self) -> Fence {
        self.grant.fence
    }

    /// The units granted.
    pub fn units(&self) -> u32 {
        self.grant.units
    }

    /// The ticket this permit was granted for, unique within its session.
    pub fn ticket(&self) -> TicketId {
        self.ticket
    }

    /// The tenant of the limit.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The limit's name.
    pub fn limit(&self) -> &str {
        &self.limit
    }

    /// Why the permit may no longer be held, if it may not.
    pub fn lost_reason(&self) -> Option<Lost> {
        self.grant.lost.borrow().clone().or_else(|| {
            (self.state.told_at() <= BootInstant::now()).then(|| self.state.deadline_loss())
        })
    }

    /// Resolves when the permit may no longer be held.
    pub async fn lost(&self) -> Lost {
        let mut lost = self.grant.lost.clone();
        let mut deadline = self.state.deadline.subscribe();
        loop {
            if let Some(why) = lost.borrow().clone() {
                return why;
            }
            let left = self.state.told_at().remaining(BootInstant::now());
            if left.is_zero() {
                return self.state.deadline_loss();
            }
            // The deadline is on the boot clock; the timer only says when to look again.
            let at = std::time::Instant::now() + left.min(LOOK_EVERY);
            tokio::select! {
                r = lost.changed() => if r.is_err() { return Lost::Closed },
                _ = deadline.changed() => {}
                _ = tokio::time::sleep_until(at.into()) => {}
            }
        }
    }

    /// Ends the guard without releasing: for a grant of a rate-only limit (`concurrent = 0`),
    /// which took tokens and holds nothing, so there is nothing to release. Returns the fence.
    pub fn consume(mut self) -> Fence {
        self.released = true;
        self.state.forget(self.ticket);
        self.grant.fence
    }

    /// Settles a take granted with `AcquireOptions::estimate` at its actual `cost` in
    /// tokens, on every rate part: below the estimate the difference returns to the bucket,
    /// above it the difference is charged and answered `Reply::Overrun`. Idempotent: a
    /// retry answers `Settled { duplicate: true }`. The guard stays: release or consume it
    /// as before (a take that holds nothing else is finished by its settlement).
    pub async fn settle(&self, cost: u64) -> Result<Reply, ClientError> {
        let settle = Command::SettleTake {
            session: self.state.id,
            ticket: self.ticket,
            cost,
        };
        self.state.client.write(settle).await
    }

    /// Releases the permit and waits for the cluster to apply it. The belief ends before the
    /// release is sent (G2). An error says the first write was not confirmed (its outcome
    /// unknown, no leader reachable); the release is retried in the background all the same,
    /// and goes on if this future is dropped, so the permit is not left held under the live
    /// session (G9).
    ///
    /// The first write is made here, not in a task of its own: a task per release was a
    /// measurable share of a busy client's CPU. If this future is dropped before the write
    /// ends, the whole release starts again in the background.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.released = true;
        self.state.forget(self.ticket);
        let (client, session, ticket) = (self.state.client.clone(), self.state.id, self.ticket);
        let mut unfinished = ReleaseIfDropped(Some((client.clone(), session, ticket)));
        let first = client.write(Command::Release { session, ticket }).await;
        unfinished.0 = None;
        match first {
            Ok(_) => Ok(()),
            Err(e) => {
                spawn_release(client, session, ticket, 1);
                Err(e)
            }
        }
    }
}

/// Starts a release in the background when dropped armed: [`Permit::release`] dropped
/// before its first write ended.
struct ReleaseIfDropped(Option<(Client, SessionId, TicketId)>);

impl Drop for ReleaseIfDropped {
    fn drop(&mut self) {
        if let Some((client, session, ticket)) = self.0.take() {
            release_in_background(client, session, ticket);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.state.forget(self.ticket);
        release_in_background(self.state.client.clone(), self.state.id, self.ticket);
    }
}
