//! The hedged keep-alive, and the jitter of the client's pauses.
//!
//! A keep-alive that is still unanswered while its session's belief deadline is near *and*
//! the connection it went to has been silent for [`HEDGE_SILENCE`] is sent again to the
//! other nodes ([`Client::hedge`]), without waiting for the silence detector
//! ([`super::SILENCE_MAX`]) to give the connection up. A keep-alive is idempotent, so the
//! two copies cost nothing but a write. The node that acknowledges the hedge has just
//! committed a write: it leads, and the client moves its connection there at once
//! ([`Client::adopt`]), so every request, not only the keep-alive, leaves the silent node.
//!
//! Invariants and bounds:
//! - a hedge never starts while the connection is heard from (a busy node sends heartbeats),
//!   nor while the deadline is far: kill-failover (a refused connection, never silent) and a
//!   slow commit never hedge, so they are not slowed;
//! - one hedge connection per [`Client`], shared by its sessions (single flight, under a
//!   lock held only across its connect): the sessions of one `Client` open at most one
//!   connection per try between them, not one each;
//! - at most [`HEDGE_TRIES`] tries, each connect bounded as every connect is, and paused
//!   [`jittered`] between rounds, so hundreds of clients do not storm a node just elected.

use std::time::Duration;

/// How long the connection a keep-alive went to must have been silent before the keep-alive
/// is hedged: two heartbeat periods missed, far below the detector's bound, since a hedge
/// only adds a write and gives nothing up.
pub(super) const HEDGE_SILENCE: Duration = Duration::from_millis(400);
/// A keep-alive is hedged only when less than this is left of the belief: the detector's
/// own path (silence bound, its check, and a leader discovery of about half a second) would
/// no longer leave room. With a TTL of 3 s a keep-alive is sent with about 2.1 s left, so a
/// stop just before its answer hedges after [`HEDGE_SILENCE`]; with a TTL of 30 s nothing
/// hedges.
pub(super) const HEDGE_WHEN_LEFT: Duration = Duration::from_millis(1_600);
/// Most tries of one hedge (a try is a write to one node, a connect first if needed).
pub(super) const HEDGE_TRIES: u32 = 20;

/// `pause` scaled by a factor in [0.5, 1.5): the mean pause is unchanged (so no failover
/// waits longer on average), but clients that lost their leader at the same instant do not
/// come back in step. The spread comes from the hasher's per-process random keys and the
/// time, so it needs no random-number crate.
pub(super) fn jittered(pause: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    let unit = (h.finish() % 1_000) as f64 / 1_000.0;
    pause.mul_f64(0.5 + unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_to_one_and_a_half_of_the_pause_and_varies() {
        let pause = Duration::from_millis(100);
        let seen: Vec<Duration> = (0..200).map(|_| jittered(pause)).collect();
        assert!(
            seen.iter().all(|d| *d >= pause / 2 && *d < pause * 3 / 2),
            "{seen:?}"
        );
        let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
        assert!(
            distinct.len() > 20,
            "jitter spreads the pauses: {distinct:?}"
        );
    }
}
