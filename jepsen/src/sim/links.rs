//! The simulated network's state: which links are up, and each message's fate.
//!
//! Owns the faults of the network (a partition into groups, stalled nodes, dead nodes, a
//! drop rate, slow answers to the clients, a client's requests lost one way) and the draw
//! of each message's fate from the run's generator: lost, or delivered after a delay.
//! Delays are drawn per message, so two messages on one link arrive in either order
//! (reorders).
//!
//! Invariants:
//! - Every random choice comes from the one seeded [`Rng`], drawn in the order the (single
//!   threaded, deterministic) runtime asks, so a seed gives the same fates every time.
//! - A node is never both dead and stalled: killing a node ends its stall.
//! - Nothing here sleeps or looks at a clock: `net` turns fates into waits.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::rng::Rng;

/// A node's id, as the Raft layer numbers them.
pub type NodeId = u64;

/// A message's delay bounds, µs: from a fast loopback hop to a slow LAN one, wide enough
/// that messages sent 5 ms apart on one link arrive in either order.
pub const DELAY_US: (u64, u64) = (100, 8_000);

/// How long a sender waits before it learns a message was lost, µs: a refused connect is
/// fast, a silent peer is only noticed at a timeout. Never zero, so a sender that retries
/// at once on a loss still lets simulated time advance.
pub const LOST_AFTER_US: (u64, u64) = (1_000, 60_000);

/// What happens to one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It arrives after this delay (if the link is still up then).
    Deliver(Duration),
    /// It is lost; the sender learns so after this long.
    Lost(Duration),
}

/// The network's faults and its generator.
pub struct Links {
    rng: Rng,
    /// Groups that cannot reach each other; empty = no partition. An endpoint in no group
    /// (a client) is not partitioned: it reaches every group.
    groups: Vec<BTreeSet<NodeId>>,
    /// Links cut both ways (a client cut from one node).
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Links cut one way: nothing from the first to the second arrives (a client whose
    /// requests are lost while the answers already on their way still arrive).
    muted: BTreeSet<(NodeId, NodeId)>,
    stalled: BTreeSet<NodeId>,
    dead: BTreeSet<NodeId>,
    /// Messages dropped per thousand, on links that are up.
    drop_per_mille: u64,
    /// Every message to an endpoint from this id up (the clients) is this much later.
    slow_to: Option<(NodeId, Duration)>,
}

impl Links {
    /// A whole network, its fates drawn from `seed`.
    pub fn new(seed: u64) -> Links {
        Links {
            rng: Rng::new(seed),
            groups: vec![],
            cut: BTreeSet::new(),
            muted: BTreeSet::new(),
            stalled: BTreeSet::new(),
            dead: BTreeSet::new(),
            drop_per_mille: 0,
            slow_to: None,
        }
    }

    /// Splits the nodes into `groups`: a message crosses no group boundary.
    pub fn partition(&mut self, groups: Vec<BTreeSet<NodeId>>) {
        self.groups = groups;
    }

    /// Cuts the link between `a` and `b` both ways, or mends it.
    pub fn set_cut(&mut self, a: NodeId, b: NodeId, cut: bool) {
        let pair = (a.min(b), a.max(b));
        if cut {
            self.cut.insert(pair);
        } else {
            self.cut.remove(&pair);
        }
    }

    /// Loses everything from `from` to `to` until the heal; the other way is untouched.
    pub fn mute(&mut self, from: NodeId, to: NodeId) {
        self.muted.insert((from, to));
    }

    /// Drops `per_mille` of the messages on links that are up.
    pub fn set_drops(&mut self, per_mille: u64) {
        self.drop_per_mille = per_mille.min(1_000);
    }

    /// Delays every message to an endpoint numbered `from` or above by `extra` more, until
    /// the heal or `None`: the answers to the clients come late, their requests do not.
    pub fn slow_answers(&mut self, slow: Option<(NodeId, Duration)>) {
        self.slow_to = slow;
    }

    /// Holds everything to and from `node` until [`Links::unstall`].
    pub fn stall(&mut self, node: NodeId) {
        if !self.dead.contains(&node) {
            self.stalled.insert(node);
        }
    }

    pub fn unstall(&mut self, node: NodeId) {
        self.stalled.remove(&node);
    }

    /// Marks `node` dead (everything to and from it lost) or alive again.
    pub fn set_dead(&mut self, node: NodeId, dead: bool) {
        if dead {
            self.stalled.remove(&node);
            self.dead.insert(node);
        } else {
            self.dead.remove(&node);
        }
    }

    /// Ends every fault: no partition, no cut or mute, no stall, no drops, no slow answers
    /// (the dead stay dead: a restart is the world's, which marks them alive).
    pub fn heal(&mut self) {
        self.groups.clear();
        self.cut.clear();
        self.muted.clear();
        self.stalled.clear();
        self.drop_per_mille = 0;
        self.slow_to = None;
    }

    pub fn is_dead(&self, node: NodeId) -> bool {
        self.dead.contains(&node)
    }

    pub fn is_stalled(&self, node: NodeId) -> bool {
        self.stalled.contains(&node)
    }

    /// Whether a message can cross from `a` to `b` now (both alive, not cut, not muted that
    /// way, no partition between).
    pub fn up(&self, a: NodeId, b: NodeId) -> bool {
        if self.dead.contains(&a) || self.dead.contains(&b) {
            return false;
        }
        if self.cut.contains(&(a.min(b), a.max(b))) || self.muted.contains(&(a, b)) {
            return false;
        }
        let group = |n: NodeId| self.groups.iter().position(|g| g.contains(&n));
        match (group(a), group(b)) {
            (Some(ga), Some(gb)) => ga == gb,
            _ => true,
        }
    }

    /// The fate of a message sent from `from` to `to` now.
    pub fn fate(&mut self, from: NodeId, to: NodeId) -> Fate {
        let lost = !self.up(from, to) || self.rng.range(1, 1_000) <= self.drop_per_mille;
        if lost {
            let us = self.rng.range(LOST_AFTER_US.0, LOST_AFTER_US.1);
            return Fate::Lost(Duration::from_micros(us));
        }
        let extra = match self.slow_to {
            Some((from, extra)) if to >= from => extra,
            _ => Duration::ZERO,
        };
        Fate::Deliver(Duration::from_micros(self.rng.range(DELAY_US.0, DELAY_US.1)) + extra)
    }

    /// A draw from the network's generator in `lo..=hi` (for a client link's delay).
    pub fn draw(&mut self, lo: u64, hi: u64) -> u64 {
        self.rng.range(lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(nodes: &[NodeId]) -> BTreeSet<NodeId> {
        nodes.iter().copied().collect()
    }

    #[test]
    fn a_partition_loses_what_crosses_it_and_delivers_inside_a_group() {
        let mut links = Links::new(7);
        links.partition(vec![set(&[1, 2]), set(&[3])]);
        for _ in 0..100 {
            assert!(matches!(links.fate(1, 3), Fate::Lost(_)));
            assert!(matches!(links.fate(3, 2), Fate::Lost(_)));
            assert!(matches!(links.fate(1, 2), Fate::Deliver(_)));
        }
        // An endpoint in no group (a client) reaches both sides; a cut link does not.
        assert!(links.up(100, 3) && links.up(1, 100));
        links.set_cut(100, 3, true);
        assert!(!links.up(3, 100) && links.up(100, 1));
        links.heal();
        assert!(matches!(links.fate(1, 3), Fate::Deliver(_)));
        assert!(links.up(100, 3));
    }

    #[test]
    fn slow_answers_delay_only_what_goes_to_the_clients_and_a_mute_is_one_way() {
        let mut links = Links::new(5);
        let late = Duration::from_millis(500);
        links.slow_answers(Some((100, late)));
        for _ in 0..100 {
            let Fate::Deliver(to_client) = links.fate(1, 100) else {
                panic!("an answer to a client lost");
            };
            assert!(to_client >= late, "{to_client:?}");
            let Fate::Deliver(to_node) = links.fate(100, 1) else {
                panic!("a client's request lost");
            };
            assert!(
                to_node < Duration::from_micros(DELAY_US.1 + 1),
                "{to_node:?}"
            );
        }
        links.mute(100, 3);
        assert!(!links.up(100, 3) && links.up(3, 100) && links.up(100, 1));
        links.slow_answers(None);
        let Fate::Deliver(to_client) = links.fate(1, 100) else {
            panic!("an answer to a client lost");
        };
        assert!(to_client < late);
        links.slow_answers(Some((100, late)));
        links.heal();
        assert!(links.up(100, 3));
        assert!(matches!(links.fate(1, 100), Fate::Deliver(d) if d < late));
    }

    #[test]
    fn a_dead_node_loses_everything_and_is_never_stalled() {
        let mut links = Links::new(1);
        links.stall(2);
        links.set_dead(2, true);
        assert!(!links.is_stalled(2));
        links.stall(2);
        assert!(!links.is_stalled(2));
        assert!(matches!(links.fate(1, 2), Fate::Lost(_)));
        assert!(matches!(links.fate(2, 1), Fate::Lost(_)));
        links.set_dead(2, false);
        assert!(matches!(links.fate(2, 1), Fate::Deliver(_)));
    }

    #[test]
    fn drops_lose_about_their_share_and_delays_reorder() {
        let mut links = Links::new(3);
        links.set_drops(250);
        let fates: Vec<Fate> = (0..4_000).map(|_| links.fate(1, 2)).collect();
        let lost = fates.iter().filter(|f| matches!(f, Fate::Lost(_))).count();
        assert!((800..1_200).contains(&lost), "{lost} of 4000 lost at 25%");
        let delays: Vec<Duration> = fates
            .iter()
            .filter_map(|f| match f {
                Fate::Deliver(d) => Some(*d),
                Fate::Lost(_) => None,
            })
            .collect();
        // Some later message arrives before an earlier one sent 1 ms before it.
        let reordered = delays
            .windows(2)
            .any(|w| w[1] + Duration::from_millis(1) < w[0]);
        assert!(reordered);
        assert!(
            delays
                .iter()
                .all(|d| { (DELAY_US.0..=DELAY_US.1).contains(&(d.as_micros() as u64)) })
        );
    }

    #[test]
    fn one_seed_draws_the_same_fates() {
        let draw = |seed| {
            let mut links = Links::new(seed);
            links.set_drops(100);
            (0..50).map(|_| links.fate(1, 2)).collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }
}
