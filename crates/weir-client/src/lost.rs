//! [`Lost`]: why a permit may no longer be believed held.
//!
//! A permit is lost by its session (deadline, expiry, close, keep-alives refused) or by a
//! halt; a permit that
//! is released is not "lost", it is gone (its guard was consumed). The reasons are values
//! for the caller to act on, never text to match.

use weir_core::machine::HaltScope;

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
    /// Another permit of the same ticket (asked again with
    /// [`AcquireOptions::ticket`](crate::AcquireOptions::ticket)) was released, consumed or
    /// dropped: the ticket is no longer held.
    Released,
    /// The deadline passed while the cluster refused this client's keep-alives (its token
    /// was revoked, say): the reason the node gave.
    Refused(String),
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Deadline => f.write_str("lease deadline passed without a keep-alive"),
            Lost::Halted { scope, reason } => write!(f, "halted ({scope}): {reason}"),
            Lost::Expired => f.write_str("session expired"),
            Lost::Closed => f.write_str("session closed"),
            Lost::Released => f.write_str("released through another permit of its ticket"),
            Lost::Refused(why) => write!(
                f,
                "lease deadline passed: the cluster refused this client's keep-alives ({why})"
            ),
        }
    }
}
