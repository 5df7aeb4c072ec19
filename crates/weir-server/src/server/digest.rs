//! [`DigestCache`]: the applied state's digest for `status`, kept cheap for the leader.
//!
//! The digest is a hash of the machine's encoded state (`weir status --json`: equal on replicas at the
//! same applied index), so computing it is linear in the state. Under the apply lock it only
//! freezes the state (`Machine::freeze`, as a snapshot does: a clone sharing the lean keys);
//! the encoding and the hash run on the blocking pool, so neither applies nor the node's
//! runtime wait for them (at ten million keys the encoding takes half a second). A status
//! loop, from any caller, must not slow the leader:
//!
//! - **Once per applied index.** The digest is cached with the index it is of; while nothing
//!   is applied, every status reuses it.
//! - **A bounded share of the work.** After a computation that took `t` (freeze, encoding
//!   and hash), the next may start only `LOCK_SHARE_INVERSE × t` later, so digests take at
//!   most 1/`LOCK_SHARE_INVERSE` of the time however often status is asked. A small state
//!   digests in microseconds and is re-digested at every status, as before; a large one on a
//!   busy leader is reported as of an older index.
//! - **One at a time, off the lock.** Only the freeze is under the lock; a status that finds
//!   a computation running reuses the cached digest rather than start a second.
//!
//! Status reports the digest with the index it is of (`digest_applied`); it equals `applied`
//! whenever the digest is current, which is always the case on a quiet node.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::raft::state_store::AppliedState;
use weir_core::codec::HEADER_BYTES;
use weir_core::machine::{Machine, digest_of};

/// The inverse of the share of lock time digests may take: 20, so at most 5%.
const LOCK_SHARE_INVERSE: u32 = 20;

/// The node's digest cache; one per node, shared by the status requests.
#[derive(Default)]
pub struct DigestCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The last digest and the applied index it is of.
    latest: Option<(u64, String)>,
    /// A computation is running (encoded, not yet hashed).
    computing: bool,
    /// No computation starts before this.
    next_allowed: Option<Instant>,
}

/// A digest being computed: given back (`computing` cleared) when dropped, even if the
/// hashing task fails.
struct Computing<'a>(&'a DigestCache);

impl Drop for Computing<'_> {
    fn drop(&mut self) {
        self.0.lock().computing = false;
    }
}

impl DigestCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::lock::lock(&self.inner)
    }

    /// Whether a computation for `applied` should start at `now`; if so, marks it running.
    fn begin(&self, applied: u64, now: Instant) -> bool {
        let mut inner = self.lock();
        let current = inner.latest.as_ref().is_some_and(|(i, _)| *i == applied);
        let waiting = inner.next_allowed.is_some_and(|t| now < t);
        if current || waiting || inner.computing {
            return false;
        }
        inner.computing = true;
        true
    }

    /// Notes that a computation took `took`, ending at `now`.
    fn encoded(&self, now: Instant, took: Duration) {
        self.lock().next_allowed = Some(now + took * LOCK_SHARE_INVERSE);
    }

    /// Keeps `digest` of `applied` unless a newer one is already kept.
    fn store(&self, applied: u64, digest: String) {
        let mut inner = self.lock();
        if inner.latest.as_ref().is_none_or(|(i, _)| *i <= applied) {
            inner.latest = Some((applied, digest));
        }
    }

    /// The latest digest and the index it is of; `(0, digest of the empty machine)` before
    /// the first.
    fn latest(&self) -> (u64, String) {
        self.lock()
            .latest
            .clone()
            .unwrap_or_else(|| (0, Machine::new().digest()))
    }

    /// The digest of `state` as status reports it: `(index it is of, digest)`. Refreshes the
    /// cache first when the rules above allow.
    pub async fn digest(&self, state: &Arc<AppliedState>) -> (u64, String) {
        let started = Instant::now();
        let frozen = {
            let applier = state.lock();
            let applied = applier.machine.applied_index();
            if self.begin(applied, started) {
                Some((applied, applier.machine.freeze(), Computing(self)))
            } else {
                None
            }
        };
        if let Some((applied, frozen, computing)) = frozen {
            let hashed =
                tokio::task::spawn_blocking(move || snapshot_digest(&frozen.encode())).await;
            if let Ok(digest) = hashed {
                self.store(applied, digest);
            }
            self.encoded(Instant::now(), started.elapsed());
            drop(computing);
        }
        self.latest()
    }
}

/// [`Machine::digest`] from the machine's snapshot bytes: the snapshot's payload is exactly
/// the encoding the digest hashes (a unit test holds the two equal).
fn snapshot_digest(snapshot: &[u8]) -> String {
    digest_of(&snapshot[HEADER_BYTES..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::machine::{Batch, Command, Leadership};

    #[test]
    fn the_snapshot_payload_digest_is_the_machine_digest() {
        let mut m = Machine::new();
        assert_eq!(snapshot_digest(&m.snapshot()), m.digest());
        let batch = Batch {
            leadership: Leadership::default(),
            clock_ms: 5,
            wall_ms: 5,
            commands: vec![Command::OpenSession { ttl_ms: 3_000 }],
        };
        m.apply(1, &batch);
        assert_eq!(snapshot_digest(&m.snapshot()), m.digest());
        assert_eq!(DigestCache::default().latest().1, Machine::new().digest());
    }

    #[test]
    fn digests_are_computed_once_per_index_and_within_their_share_of_the_lock() {
        let cache = DigestCache::default();
        let t0 = Instant::now();
        let cost = Duration::from_millis(10);
        // First: computed.
        assert!(cache.begin(1, t0));
        assert!(!cache.begin(2, t0), "one computation at a time");
        cache.encoded(t0, cost);
        cache.store(1, "a".into());
        cache.lock().computing = false;
        // Same index: never again.
        assert!(!cache.begin(1, t0 + Duration::from_secs(60)));
        // A new index within 20 × the cost: not yet, the old digest is reported with its index.
        assert!(!cache.begin(2, t0 + cost * 19));
        assert_eq!(cache.latest(), (1, "a".to_string()));
        // After it: computed.
        assert!(cache.begin(2, t0 + cost * 20));
        cache.store(2, "b".into());
        cache.store(1, "stale".into());
        assert_eq!(cache.latest(), (2, "b".to_string()), "never goes back");
        // A status loop: 10,000 asks over 1 s of a busy leader, 10 ms encodings.
        let cache = DigestCache::default();
        let mut computed = 0u32;
        for i in 0..10_000u32 {
            let now = t0 + Duration::from_micros(100) * i;
            if cache.begin(u64::from(i) + 1, now) {
                computed += 1;
                cache.encoded(now, cost);
                cache.lock().computing = false;
            }
        }
        assert!(
            computed <= 1 + 1_000 / 200,
            "{computed} computations in 1 s"
        );
    }
}
