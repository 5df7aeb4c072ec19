//! This node's own record of the leader changes it saw, for the console's cluster view
//! (`GET /v1/status`, `leader_history`).
//!
//! A task follows the node's Raft metrics from the node's start; each time the pair
//! (leader, term) they report differs from the last one recorded, it appends a
//! [`LeaderChange`]: the term, the leader (`None` while none is known, as in an election),
//! and when, wall-clock ms since the Unix epoch (the console compares it with its own clock
//! to count the last hour). The first entry is what the node knew when it started.
//!
//! Invariants:
//! - at most [`LEADER_HISTORY_MAX`] entries, the newest; older ones are dropped;
//! - entries are in the order this node saw them, and no two neighbours have the same
//!   (leader, term);
//! - kept in memory only: a restarted node's record begins at its restart (the metrics of a
//!   killed node are gone with it, and the record says what this process saw).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::bounds::LEADER_HISTORY_MAX;
use weir_server::raft::Raft;

/// One change of the leader or term this node saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaderChange {
    pub term: u64,
    pub leader: Option<u64>,
    /// Wall clock when this node saw it, ms since the Unix epoch.
    pub at_ms: u64,
}

/// The record of the module doc.
#[derive(Default)]
pub struct LeaderHistory {
    changes: Mutex<VecDeque<LeaderChange>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl LeaderHistory {
    /// A record of `raft`'s leader changes, followed by a task that ends with the node's
    /// Raft (when its metrics channel closes).
    pub fn follow(raft: &Raft) -> Arc<LeaderHistory> {
        let history = Arc::new(LeaderHistory::default());
        let mut metrics = raft.metrics();
        let record = history.clone();
        tokio::spawn(async move {
            loop {
                let (leader, term) = {
                    let m = metrics.borrow_and_update();
                    (m.current_leader, m.current_term)
                };
                record.saw(leader, term, now_ms());
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        });
        history
    }

    /// Records (leader, term) seen at `at_ms` if it differs from the last entry.
    pub fn saw(&self, leader: Option<u64>, term: u64, at_ms: u64) {
        let mut changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        if changes
            .back()
            .is_some_and(|c| c.leader == leader && c.term == term)
        {
            return;
        }
        if changes.len() == LEADER_HISTORY_MAX {
            changes.pop_front();
        }
        changes.push_back(LeaderChange {
            term,
            leader,
            at_ms,
        });
    }

    /// Every kept change, newest first.
    pub fn newest_first(&self) -> Vec<LeaderChange> {
        let changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        changes.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_kept_once_newest_first_and_the_oldest_go_beyond_the_bound() {
        let h = LeaderHistory::default();
        h.saw(None, 1, 10);
        h.saw(None, 1, 11);
        h.saw(Some(2), 1, 12);
        h.saw(Some(2), 1, 13);
        h.saw(None, 2, 14);
        h.saw(Some(3), 2, 15);
        let seen: Vec<(Option<u64>, u64, u64)> = h
            .newest_first()
            .iter()
            .map(|c| (c.leader, c.term, c.at_ms))
            .collect();
        assert_eq!(
            seen,
            vec![
                (Some(3), 2, 15),
                (None, 2, 14),
                (Some(2), 1, 12),
                (None, 1, 10)
            ]
        );
        for term in 3..3 + LEADER_HISTORY_MAX as u64 {
            h.saw(Some(1), term, term);
        }
        let kept = h.newest_first();
        assert_eq!(kept.len(), LEADER_HISTORY_MAX);
        assert_eq!(kept[0].term, 2 + LEADER_HISTORY_MAX as u64);
        assert_eq!(
            kept.last().map(|c| c.term),
            Some(3),
            "the oldest four are gone"
        );
    }
}
