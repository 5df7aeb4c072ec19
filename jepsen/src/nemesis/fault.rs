//! What every fault shares: the kinds ([`ALL`], and the compound ones, [`COMPOUND`]), the [`Fault`] a step injects and its
//! kind, the [`Targets`] the client faults act on, and the two ways a fault names a node
//! at the moment it fires ([`leader`], [`after`]). It imports no other file of the nemesis:
//! the schedule, the driver and every fault's file read it from below.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::workload::{ClientPause, CutClient};

/// Every kind the harness can inject, in `--nemesis all` order.
pub const ALL: [&str; 11] = [
    "partition",
    "kill",
    "pause",
    "client-pause",
    "clock",
    "membership",
    "delay",
    "client-kill",
    POWER_LOSS,
    "client-cut",
    "client-delay",
];

/// Compound kinds: two faults within one session TTL (3 s), a quorum up throughout. Each
/// is named on `--nemesis` on its own terms; none is part of `all`, so a seed's schedules
/// of the kinds above stay those it always gave. The `kept` checker judges them.
pub const COMPOUND: [&str; 3] = [
    "stall-then-kill",
    "kill-then-kill",
    "stall-entry-then-kill-leader",
];

/// Compound kinds that take two nodes down at once: five nodes only (three would lose the
/// quorum).
pub const FIVE_ONLY: [&str; 2] = ["kill-then-kill", "stall-entry-then-kill-leader"];

/// Kinds that need loopback mode's client fronts: `all` leaves them out in namespace mode.
pub const LOOPBACK_ONLY: [&str; 2] = ["client-cut", "client-delay"];

/// The power-loss kind's name: the run mounts the lost-fsync layer when it is requested.
pub const POWER_LOSS: &str = "power-loss";

/// One fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `reset`: the cut answers with resets; otherwise it is a silent black hole.
    IsolateNode {
        node: u64,
        reset: bool,
    },
    IsolateLeader {
        reset: bool,
    },
    /// `middle` keeps both links; the other two cannot reach each other.
    Bridge {
        middle: u64,
        reset: bool,
    },
    /// Three nodes: node 2 stops hearing 1, 3 stops hearing 2, 1 stops hearing 3. Five:
    /// each node and its two non-neighbours (`i`, `i ± 2`) cannot reach each other.
    Ring {
        reset: bool,
    },
    /// Five nodes: each of these cannot reach any other node (1|1|3).
    IsolateNodes {
        nodes: [u64; 2],
        reset: bool,
    },
    /// Five nodes: the leader and the node `with` places after it (cyclically) on one side,
    /// the other three on the other (3|2), or, `three_way`, split again into two and one
    /// (2|2|1).
    SplitLeader {
        with: u64,
        three_way: bool,
        reset: bool,
    },
    /// Connections from `from` to `to` are cut; the reverse direction works.
    OneWay {
        from: u64,
        to: u64,
    },
    Kill(u64),
    KillLeader,
    KillAll,
    /// Five nodes: kill -9 of two at once.
    KillTwo([u64; 2]),
    /// Five nodes: kill -9 of the leader and the node `with` places after it.
    KillLeaderAnd {
        with: u64,
    },
    PauseLeader {
        ms: u64,
    },
    PauseClient {
        ms: u64,
    },
    Delay {
        ms: u64,
        jitter_ms: u64,
    },
    Loss {
        percent: u64,
    },
    Bandwidth {
        bytes_per_s: u64,
    },
    /// Per node (1, 2, …): wall-clock skew (ms, signed) and clock rate in thousandths
    /// (1000: true).
    Clocks(Vec<(i64, u64)>),
    RemoveNode(u64),
    /// kill -9 of a client process holding a permit.
    KillClient,
    /// Power loss (kill -9, unsynced writes dropped) of one node, of the leader, of all.
    PowerLoss(u64),
    PowerLossLeader,
    PowerLossAll,
    /// Five nodes: power loss of two at once, or of the leader and the node `with` places
    /// after it.
    PowerLossTwo([u64; 2]),
    PowerLossLeaderAnd {
        with: u64,
    },
    /// The cut client cut from the leader only, both ways, silently.
    CutClientFromLeader,
    /// The cut client's replies delayed `ms`, then its requests dropped as well.
    DelayClient {
        ms: u64,
    },
    /// The leader stopped (SIGSTOP) `stall_ms`, resumed, and the leader of the moment
    /// killed -9 `then_ms` after the resume.
    StallThenKill {
        stall_ms: u64,
        then_ms: u64,
    },
    /// Five nodes: the leader killed -9; the leader of the moment `after_ms` after the next
    /// leader is first seen, killed too.
    KillThenKill {
        after_ms: u64,
    },
    /// Five nodes: the clients' entry node (node 1, first in every client's list; the first
    /// follower after it when it leads) stopped `stall_ms`, and the leader killed -9
    /// `after_ms` into the stop.
    StallEntryThenKillLeader {
        stall_ms: u64,
        after_ms: u64,
    },
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::IsolateNode { .. }
            | Fault::IsolateLeader { .. }
            | Fault::Bridge { .. }
            | Fault::Ring { .. }
            | Fault::IsolateNodes { .. }
            | Fault::SplitLeader { .. }
            | Fault::OneWay { .. } => "partition",
            Fault::Kill(_)
            | Fault::KillLeader
            | Fault::KillAll
            | Fault::KillTwo(_)
            | Fault::KillLeaderAnd { .. } => "kill",
            Fault::PauseLeader { .. } => "pause",
            Fault::PauseClient { .. } => "client-pause",
            Fault::Delay { .. } | Fault::Loss { .. } | Fault::Bandwidth { .. } => "delay",
            Fault::Clocks(_) => "clock",
            Fault::RemoveNode(_) => "membership",
            Fault::KillClient => "client-kill",
            Fault::PowerLoss(_)
            | Fault::PowerLossLeader
            | Fault::PowerLossAll
            | Fault::PowerLossTwo(_)
            | Fault::PowerLossLeaderAnd { .. } => POWER_LOSS,
            Fault::CutClientFromLeader => "client-cut",
            Fault::DelayClient { .. } => "client-delay",
            Fault::StallThenKill { .. } => COMPOUND[0],
            Fault::KillThenKill { .. } => COMPOUND[1],
            Fault::StallEntryThenKillLeader { .. } => COMPOUND[2],
        }
    }
}

/// What the nemesis acts on besides the cluster.
pub struct Targets {
    pub client_pause: Arc<ClientPause>,
    /// The client whose links the client nemeses fault.
    pub cut_client: Arc<CutClient>,
    /// The CLI holder, cut from the leader with the cut client (when it runs).
    pub cli_holder: Option<Arc<CutClient>>,
    /// Tickets queued before each fault, judged after its heal.
    pub queued: crate::workload::Queued,
}

/// The leader, for a fault that acts on it (`what` it does, for the error).
pub(super) async fn leader(cluster: &Cluster, what: &str) -> Result<u64, String> {
    match cluster.leader(Duration::from_secs(5)).await {
        Some(l) => Ok(l),
        None => Err(format!("no leader to {what}")),
    }
}

/// The node `with` places after `node`, cyclically among the cluster's.
pub(super) fn after(cluster: &Cluster, node: u64, with: u64) -> u64 {
    (node - 1 + with) % cluster.size() + 1
}
