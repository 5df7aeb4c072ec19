//! The nemesis: a seeded schedule of faults, and their injection.
//!
//! The schedule is a pure function of the cluster's size, the seed, the requested kinds and
//! the duration: the same seed replays the same schedule. Three- and five-node schedules
//! are drawn by separate functions from the same loop (`schedule.rs`), so
//! a seed's three-node schedule does not change with what five nodes can do. Each step waits a quiet gap, injects one fault,
//! holds it, and heals everything. When two or more composable kinds (partition, kill,
//! pause, delay) are requested, one such step in two also injects a fault of another of
//! them halfway through its hold — composed, overlapping faults, healed together. Targets named at run time (the leader) are resolved when
//! the fault fires, and the history records which node that was. Faults go through the
//! [`Cluster`]'s primitives, so each kind works in both network modes.
//!
//! Kinds:
//! - `partition`: isolate a node, isolate the leader (with three nodes, the majority /
//!   minority halves are these), a bridge, the majorities ring (each node cut from one
//!   neighbour, `1 ↛ 2 ↛ 3 ↛ 1`), silent (black hole) or answered by resets; and a one-way
//!   cut of the connections one node opens to another. On five nodes also: two nodes
//!   isolated at once (1|1|3), the leader and one other node cut from the rest (3|2, the
//!   leader in the minority) or from two groups (2|2|1: no majority anywhere); the bridge
//!   is one node joining two pairs, the ring each node cut from its two non-neighbours (each
//!   still sees a majority, no two the same);
//! - `kill`: kill -9 one node, the leader, or all of them, then restart; on five nodes also
//!   two at once: two named nodes, or the leader and one other;
//! - `pause`: SIGSTOP the leader past the election timeout and the session TTL, then SIGCONT;
//! - `client-pause`: stop a holder of the `fenced` limit between checking its permit and
//!   acting on it, past its lease deadline, then let it act with its fence;
//! - `delay`: every peer link delayed with jitter (the proxy), or packets lost, or bandwidth
//!   limited;
//! - `clock`: a rolling restart giving each node a proposer clock rate skewed within the
//!   documented drift bound, ±5% (its leaderships' log clock really runs that fast or slow:
//!   the status monitor measures it), and a wall clock off by up to ±1 hour (its WALL stamps
//!   only: wall time must decide nothing, so every checker must stay valid); healed by a
//!   rolling restart on true clocks;
//! - `membership`: remove a node from the cluster, add it back at the heal;
//! - `client-kill`: a client as a process of its own (`weir acquire crash --hold`, the CLI)
//!   holds the one unit of `crash`; a waiter queues behind it; the client is killed -9. Its
//!   lease must lapse (its session TTL, the CLI's default) and the permit move on to the
//!   waiter — judged by the liveness checker;
//! - `power-loss`: kill -9 one node, the leader, or all of them (on five, also two: two
//!   named nodes, or the leader and one other), and drop every write its data
//!   directory had not fsynced (the lost-fsync layer, [`crate::lazyfs`], mounted on every
//!   data directory when this kind is requested); the heal restarts it on what it had made
//!   durable. Acknowledged writes must survive (G3): the settlement checker reads every
//!   acknowledged settlement back, the permit checkers see a lost grant given twice;
//! - `client-cut` (loopback mode): the cut client ([`crate::workload::CutClient`]), pinned
//!   to a permit of `cut` with waiters behind it, is cut from the leader only: the leader's
//!   client front holds its bytes both ways, silently, while the followers stay reachable
//!   (and redirect it to the leader). Its session may expire; its belief must end before
//!   anyone else is granted its permit;
//! - `client-delay` (loopback mode): the pinned cut client's replies (node → client, on
//!   every node's front) are delayed by about a second, built up over two; then, while the
//!   delayed replies still arrive, its requests are dropped. The last keep-alive the
//!   cluster received is acknowledged a second late, so a client that counted its deadline
//!   from the reply's arrival (`keepalive-arrival`) believes that long past the expiry,
//!   while the cluster grants a waiter.
//!
//! Compound kinds, two faults within one session TTL with a quorum up throughout, named on
//! `--nemesis` on their own (never part of `all`), judged by the `kept` checker:
//! - `stall-then-kill`: the leader stopped 5 s and resumed, then the leader of the moment
//!   killed -9 3 s later;
//! - `kill-then-kill` (five nodes): the leader killed, then the next leader 1 s after it is
//!   first seen (within one TTL of the first kill);
//! - `stall-entry-then-kill-leader` (five nodes): the clients' entry node (node 1, or the
//!   first follower after it) stopped 5 s, the leader killed 1 s into the stop.
//!
//! Files: `fault.rs` holds what every fault shares (the kinds, [`Fault`], [`Targets`], the
//! leader and the node after it, named when a fault fires); `schedule.rs` draws the
//! schedule; one file per kind injects its faults (`partition.rs`, `kill.rs`, `pause.rs`,
//! `delay.rs`, `clock.rs`, `membership.rs`, `power_loss.rs`, `client_pause.rs`,
//! `client_kill.rs`, `client_link.rs` for `client-cut` and `client-delay`, and `compound.rs`
//! for the compound kinds); this file
//! is the driver: it dispatches each fault to its kind's file, records it, and heals. No
//! fault's file imports another's, nor this one.

use std::time::Duration;

use serde_json::json;

use crate::cluster::Cluster;
use crate::history::{Kind, NEMESIS, Recorder};

mod client_kill;
mod client_link;
mod client_pause;
mod clock;
mod compound;
mod delay;
mod fault;
mod kill;
mod membership;
mod partition;
mod pause;
mod power_loss;
mod schedule;

pub use clock::WALL_SKEW_MS_MAX;
pub use fault::{ALL, COMPOUND, FIVE_ONLY, Fault, LOOPBACK_ONLY, POWER_LOSS, Targets};
pub use schedule::{Step, schedule, schedule_for, schedule_on};

/// Injects `fault` through the file of its kind ([`Fault::kind`], the one place that groups
/// the variants); returns what was done (recorded in the history).
pub async fn inject(
    cluster: &mut Cluster,
    targets: &Targets,
    fault: &Fault,
    history: &Recorder,
) -> Result<serde_json::Value, String> {
    match fault.kind() {
        "partition" => partition::inject(cluster, fault).await,
        "delay" => delay::inject(cluster, fault).await,
        "kill" => kill::inject(cluster, fault).await,
        "pause" => pause::inject(cluster, fault).await,
        "clock" => clock::inject(cluster, fault).await,
        "membership" => membership::inject(cluster, fault).await,
        POWER_LOSS => power_loss::inject(cluster, fault).await,
        "client-pause" => client_pause::inject(targets, fault).await,
        "client-kill" => client_kill::kill_client(cluster, history).await,
        "client-cut" | "client-delay" => client_link::inject(cluster, targets, fault).await,
        kind if COMPOUND.contains(&kind) => compound::inject(cluster, fault).await,
        other => Err(format!("no injector for faults of kind {other}")),
    }
}

/// Injects one fault, recording its invoke and how it ended; a fired fault's kind is added
/// to `fired`.
async fn fire(
    cluster: &mut Cluster,
    targets: &Targets,
    fault: &Fault,
    history: &Recorder,
    fired: &mut Vec<&'static str>,
) {
    history.record(
        NEMESIS,
        Kind::Invoke,
        fault.kind(),
        json!({"fault": format!("{fault:?}")}),
    );
    let injected = match inject(cluster, targets, fault, history).await {
        // A partition counts as fired only once the connect probe saw it take effect.
        Ok(mut done) if fault.kind() == "partition" => match cluster.verify_links().await {
            Ok(probed) => {
                done["probed"] = probed.unwrap_or_else(|| "not probed".into());
                Ok(done)
            }
            Err(e) => Err(e),
        },
        other => other,
    };
    match injected {
        Ok(done) => {
            history.record(NEMESIS, Kind::Info, fault.kind(), done);
            fired.push(fault.kind());
        }
        Err(e) => {
            history.record(NEMESIS, Kind::Fail, fault.kind(), json!({"error": e}));
        }
    }
}

/// Runs `steps`, recording each fault and heal. Returns the kinds that fired.
pub async fn run(
    cluster: &mut Cluster,
    targets: &Targets,
    steps: &[Step],
    history: &Recorder,
) -> Vec<&'static str> {
    let mut fired = vec![];
    for step in steps {
        tokio::time::sleep(Duration::from_millis(step.quiet_ms)).await;
        targets.queued.arm().await;
        fire(cluster, targets, &step.fault, history, &mut fired).await;
        match &step.also {
            Some((after_ms, second)) => {
                tokio::time::sleep(Duration::from_millis(*after_ms)).await;
                fire(cluster, targets, second, history, &mut fired).await;
                tokio::time::sleep(Duration::from_millis(step.hold_ms - after_ms)).await;
            }
            None => tokio::time::sleep(Duration::from_millis(step.hold_ms)).await,
        }
        history.record(NEMESIS, Kind::Invoke, "heal", json!({}));
        let healed = cluster.heal().await;
        // The pinned holds (if any) end with the fault.
        client_link::let_go(targets);
        let healed_ns = history.record(
            NEMESIS,
            Kind::Info,
            "heal",
            json!({"ok": healed.is_ok(), "error": healed.err()}),
        );
        targets.queued.after_heal(healed_ns).await;
        crate::converge::probe(cluster, history, false).await;
    }
    fired
}
