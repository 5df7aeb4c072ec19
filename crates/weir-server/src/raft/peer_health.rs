//! Which peers answer, as this node's Raft RPCs find them, told to the operator once per
//! change instead of once per failed RPC.
//!
//! openraft logs every failed replication or vote RPC at ERROR: a leader retries a down
//! follower every heartbeat, so one routine outage of a node filled its peers' logs with
//! about a hundred identical lines. Here the peer transport ([`super::network`]) reports
//! each RPC's outcome, and a peer's change of state is logged once:
//!
//! - a refused connection (nothing listens: the process is gone), or the third failure in
//!   a row of any kind (a deadline missed: the peer is stopped, cut off, or slower than a
//!   heartbeat's 100 ms deadline three times running): one WARN, "node N is unreachable:
//!   WHY", and the failures after it are counted, not logged. One or two missed deadlines
//!   on a loaded machine are not an outage and log nothing;
//! - the first answer after that WARN: one INFO, "node N answers again after D (K failed
//!   RPCs not logged)", D counted from the run's first failure. An answer after failures
//!   that logged nothing ends the run quietly.
//!
//! openraft's own lines for those failures are dropped by [`is_peer_rpc_failure`], which the
//! node's log filter asks (`weir serve`'s logging): its replication `RPCError` and its vote
//! and leadership-confirmation failures, which name a peer and carry the same error. Every
//! other openraft line (a storage error, a stopped core) is kept at its level.
//!
//! Invariants: at most one entry per peer id ever seen (a cluster's voters and learners);
//! the lock is held only to look up and change one entry, never across an await or a log
//! write.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{Level, Metadata};

use super::NodeId;

/// A change worth one log line.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// The peer stopped answering.
    Down,
    /// It answers again after `after`, with `suppressed` failed RPCs since the `Down`.
    Back { after: Duration, suppressed: u64 },
}

/// Failures in a row, of any kind, that make a peer down (the module doc).
const FAILURES_DOWN: u64 = 3;

#[derive(Default)]
struct Peer {
    /// Since when it has not answered; `None` while it answers.
    down_since: Option<Instant>,
    /// Failed RPCs in the current run.
    failures: u64,
    /// Whether this run logged its WARN.
    warned: bool,
}

/// The peers' states, shared by every RPC client of this node.
#[derive(Clone, Default)]
pub struct PeerHealth(Arc<Mutex<BTreeMap<NodeId, Peer>>>);

impl PeerHealth {
    /// Records a failed RPC to `peer` (`refused`: its connect was refused); logs the run at
    /// WARN once it makes the peer down.
    pub fn failed(&self, peer: NodeId, why: &dyn std::fmt::Display, refused: bool) {
        if self.note_failed(peer, Instant::now(), refused) == Some(Change::Down) {
            tracing::warn!("node {peer} is unreachable: {why}; retried quietly until it answers");
        }
    }

    /// Records an answer from `peer`; logs the first after failures at INFO.
    pub fn answered(&self, peer: NodeId) {
        if let Some(Change::Back { after, suppressed }) = self.note_answered(peer, Instant::now()) {
            tracing::info!(
                "node {peer} answers again after {after:.1?} ({suppressed} failed RPCs not \
                 logged)"
            );
        }
    }

    fn note_failed(&self, peer: NodeId, now: Instant, refused: bool) -> Option<Change> {
        let mut peers = crate::lock::lock(&self.0);
        let p = peers.entry(peer).or_default();
        p.down_since.get_or_insert(now);
        p.failures += 1;
        if p.warned || !(refused || p.failures >= FAILURES_DOWN) {
            return None;
        }
        p.warned = true;
        Some(Change::Down)
    }

    fn note_answered(&self, peer: NodeId, now: Instant) -> Option<Change> {
        let mut peers = crate::lock::lock(&self.0);
        let p = std::mem::take(peers.entry(peer).or_default());
        let since = p.down_since?;
        p.warned.then(|| Change::Back {
            after: now.saturating_duration_since(since),
            suppressed: p.failures - 1,
        })
    }
}

/// Whether an event is one of openraft's per-RPC failure lines that [`PeerHealth`] replaces
/// (the module doc): an ERROR of its replication with an `err` field (`RPCError`), or an
/// ERROR of its core that names a `target` peer and an `error` (a vote, or a leadership
/// confirmation, that failed or timed out).
pub fn is_peer_rpc_failure(meta: &Metadata<'_>) -> bool {
    if *meta.level() != Level::ERROR || !meta.is_event() {
        return false;
    }
    let fields = meta.fields();
    match meta.target() {
        "openraft::replication" => fields.field("err").is_some(),
        "openraft::core::raft_core" => {
            fields.field("target").is_some() && fields.field("error").is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_is_one_down_and_one_back_with_the_count() {
        let h = PeerHealth::default();
        let t0 = Instant::now();
        assert_eq!(
            h.note_answered(2, t0),
            None,
            "answering from the start: nothing"
        );
        assert_eq!(
            h.note_failed(2, t0, true),
            Some(Change::Down),
            "refused: down at once"
        );
        for i in 1..=114 {
            assert_eq!(h.note_failed(2, t0 + Duration::from_millis(i), false), None);
        }
        assert_eq!(
            h.note_answered(2, t0 + Duration::from_secs(3)),
            Some(Change::Back {
                after: Duration::from_secs(3),
                suppressed: 114
            })
        );
        assert_eq!(h.note_answered(2, t0 + Duration::from_secs(4)), None);
    }

    #[test]
    fn missed_deadlines_are_an_outage_only_three_in_a_row() {
        let h = PeerHealth::default();
        let t0 = Instant::now();
        assert_eq!(h.note_failed(3, t0, false), None);
        assert_eq!(h.note_failed(3, t0, false), None);
        assert_eq!(
            h.note_answered(3, t0),
            None,
            "two misses then an answer: quiet"
        );
        assert_eq!(h.note_failed(3, t0, false), None, "the count starts over");
        assert_eq!(h.note_failed(3, t0, false), None);
        assert_eq!(
            h.note_failed(2, t0, false),
            None,
            "each peer has its own run"
        );
        assert_eq!(h.note_failed(3, t0, false), Some(Change::Down));
        assert_eq!(
            h.note_answered(3, t0 + Duration::from_secs(1)),
            Some(Change::Back {
                after: Duration::from_secs(1),
                suppressed: 2
            })
        );
    }
}
