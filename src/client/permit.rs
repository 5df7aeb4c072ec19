//! [`Permit`]: a held permit, as a guard.
//!
//! It carries its fence and units, offers [`Permit::lost`] — a future that resolves when the
//! permit may no longer be held (the session's belief deadline passed, a halt covers it, the
//! session expired) — and releases on drop.

use std::sync::Arc;

use tokio::sync::watch;

use super::ClientError;
use super::session::Shared;
use crate::machine::{Command, Fence, HaltScope, TicketId};

/// Why a permit may no longer be held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// No keep-alive was acknowledged in time: past the conservative deadline, the cluster
    /// may already have expired the session.
    Deadline,
    /// A halt covers the permit. It stays held until released; the work should stop.
    Halted { scope: HaltScope, reason: String },
    /// The session expired on the cluster.
    Expired,
    /// The session was closed.
    Closed,
    /// The permit was released.
    Released,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Deadline => f.write_str("lease deadline passed without a keep-alive"),
            Lost::Halted { scope, reason } => write!(f, "halted ({scope}): {reason}"),
            Lost::Expired => f.write_str("session expired"),
            Lost::Closed => f.write_str("session closed"),
            Lost::Released => f.write_str("released"),
        }
    }
}

/// A held permit. Released on drop (in the background, when a runtime is running).
pub struct Permit {
    session: Arc<Shared>,
    tenant: String,
    limit: String,
    ticket: TicketId,
    fence: Fence,
    units: u32,
    lost: watch::Receiver<Option<Lost>>,
    released: bool,
}

impl Permit {
    pub(super) fn new(
        session: Arc<Shared>,
        tenant: String,
        limit: String,
        ticket: TicketId,
        fence: Fence,
        units: u32,
        lost: watch::Receiver<Option<Lost>>,
    ) -> Permit {
        Permit {
            session,
            tenant,
            limit,
            ticket,
            fence,
            units,
            lost,
            released: false,
        }
    }

    /// The fence: pass it to the resource this permit guards.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    pub fn units(&self) -> u32 {
        self.units
    }

    pub fn ticket(&self) -> TicketId {
        self.ticket
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    pub fn limit(&self) -> &str {
        &self.limit
    }

    /// Why the permit may no longer be held, if it may not.
    pub fn lost_reason(&self) -> Option<Lost> {
        self.lost.borrow().clone().or_else(|| {
            (*self.session.deadline.borrow() <= std::time::Instant::now()).then_some(Lost::Deadline)
        })
    }

    /// Resolves when the permit may no longer be held.
    pub async fn lost(&self) -> Lost {
        let mut lost = self.lost.clone();
        let mut deadline = self.session.deadline.subscribe();
        loop {
            if let Some(why) = lost.borrow().clone() {
                return why;
            }
            let at = *deadline.borrow();
            if at <= std::time::Instant::now() {
                return Lost::Deadline;
            }
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
        self.session.forget(self.ticket);
        self.fence
    }

    /// Releases the permit and waits for the cluster to apply it. The belief ends before the
    /// release is sent (G2).
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.released = true;
        self.session.forget(self.ticket);
        self.session
            .client
            .write(Command::Release {
                session: self.session.id,
                ticket: self.ticket,
            })
            .await
            .map(|_| ())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.session.forget(self.ticket);
        let client = self.session.client.clone();
        let command = Command::Release {
            session: self.session.id,
            ticket: self.ticket,
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = client.write(command).await;
            });
        }
    }
}
