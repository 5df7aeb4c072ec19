//! The simulated nemesis: carries out the schedule's faults on the world and the network,
//! and records each as the harness's nemesis does (an `invoke` of its kind, then an `info`
//! with what was done; then an `invoke` and `info` of `heal`), so the checkers that read
//! faults see them.
//!
//! Owns when faults happen and what they hit; resolves the schedule's roles (the leader,
//! the node at an index) when each fault fires.
//!
//! Invariants:
//! - At most one fault is in force; each is healed (partitions and cuts mended, drops
//!   ended, a stalled node let go, a crashed node restarted on its disk) before the next.
//! - Nothing here draws randomness: every choice is in the [`Schedule`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::client::{CLIENT_ENDPOINT_BASE, Holders};
use super::links::{Links, NodeId};
use super::schedule::{Fault, Schedule};
use super::world::World;
use crate::history::{Kind, NEMESIS, Recorder};

/// The node a fault aims at: the leader when asked for and there is one, else the member
/// at `index`.
fn target(world: &World, leader: bool, index: usize) -> NodeId {
    let members = world.members();
    let by_index = members[index % members.len()];
    if leader {
        world.leader().unwrap_or(by_index)
    } else {
        by_index
    }
}

/// Injects `fault`; returns what was done.
async fn inject(world: &World, holders: &Holders, fault: &Fault) -> Result<Value, String> {
    let members = world.members();
    match fault {
        Fault::Isolate { leader, index } => {
            let node = target(world, *leader, *index);
            let rest: BTreeSet<NodeId> = members.iter().copied().filter(|n| *n != node).collect();
            world
                .net
                .change(|l| l.partition(vec![BTreeSet::from([node]), rest]));
            Ok(json!({"isolated": node}))
        }
        Fault::Split { rotate, minority } => {
            let mut order = members.clone();
            order.rotate_left(rotate % members.len());
            let (small, large) = order.split_at(*minority);
            let groups = vec![
                small.iter().copied().collect(),
                large.iter().copied().collect::<BTreeSet<NodeId>>(),
            ];
            let shown = json!({"groups": groups});
            world.net.change(|l| l.partition(groups));
            Ok(shown)
        }
        Fault::Crash {
            leader,
            index,
            tear,
        } => {
            let node = target(world, *leader, *index);
            world.crash(node, *tear).await?;
            Ok(json!({"node": node, "torn": tear}))
        }
        Fault::Stall { leader, index } => {
            let node = target(world, *leader, *index);
            world.net.change(|l| l.stall(node));
            Ok(json!({"node": node}))
        }
        Fault::CutClient { client } => {
            let node = world.leader().unwrap_or(members[0]);
            let process = holders.pick(*client).unwrap_or(*client as u64 + 1);
            world
                .net
                .change(|l| l.set_cut(CLIENT_ENDPOINT_BASE + process, node, true));
            Ok(json!({"process": process, "node": node}))
        }
        Fault::Drops { per_mille } => {
            world.net.change(|l| l.set_drops(*per_mille));
            Ok(json!({"drops_per_mille": per_mille}))
        }
        Fault::SlowThenCut {
            client,
            late_ms,
            then_ms,
        } => {
            let late = Duration::from_millis(*late_ms);
            world
                .net
                .change(|l| l.slow_answers(Some((CLIENT_ENDPOINT_BASE, late))));
            tokio::time::sleep(Duration::from_millis(*then_ms)).await;
            // The others' answers on time again, so a grant to another client is not seen
            // late by as much as the cut client's belief was stretched. The cut client's
            // requests are lost from now on, but answers already on their way to it arrive:
            // the last keep-alive the cluster applied is the last it hears of.
            let process = holders.pick(*client).unwrap_or(*client as u64 + 1);
            world.net.change(|l| {
                l.slow_answers(None);
                for node in &members {
                    l.mute(CLIENT_ENDPOINT_BASE + process, *node);
                }
            });
            Ok(json!({"late_ms": late_ms, "then_ms": then_ms, "process": process}))
        }
    }
}

/// Ends every fault: the network whole, every node running.
pub async fn heal(world: &World) -> Result<(), String> {
    world.net.change(Links::heal);
    for node in world.members() {
        world.restart(node).await?;
    }
    Ok(())
}

/// Records the run's clocks (a `clock` fact in force for the whole run, `env-clocks`, each node's as the
/// harness's clock fault records it, `{"wall_skew_ms": w, "rate": r}`, so the log-clock
/// checker allows for the fastest rate), then runs the schedule's steps, recording each
/// fault and heal.
pub async fn run(world: Arc<World>, schedule: Schedule, history: Recorder, holders: Holders) {
    let nodes: Vec<Value> = schedule
        .node_rates
        .iter()
        .zip(&schedule.node_wall_skews_ms)
        .map(|(rate, wall)| json!({"wall_skew_ms": wall, "rate": rate}))
        .collect();
    // `env-clocks`: in force for the whole run, as the harness's environment rates are (no
    // heal ends them), which the rate checkers read as such.
    let rates = json!({"fault": "env-clocks", "nodes": nodes, "clients": schedule.client_rates});
    history.record(
        NEMESIS,
        Kind::Invoke,
        "clock",
        json!({"fault": "env-clocks"}),
    );
    history.record(NEMESIS, Kind::Info, "clock", rates);
    for step in &schedule.steps {
        tokio::time::sleep(Duration::from_millis(step.quiet_ms)).await;
        let kind = step.fault.kind();
        let fault = format!("{:?}", step.fault);
        history.record(NEMESIS, Kind::Invoke, kind, json!({"fault": fault}));
        match inject(&world, &holders, &step.fault).await {
            Ok(done) => history.record(NEMESIS, Kind::Info, kind, done),
            Err(e) => history.record(NEMESIS, Kind::Fail, kind, json!({"error": e})),
        };
        let onset = step.fault.onset_ms();
        tokio::time::sleep(Duration::from_millis(step.hold_ms.saturating_sub(onset))).await;
        history.record(NEMESIS, Kind::Invoke, "heal", json!({}));
        let healed = heal(&world).await;
        history.record(
            NEMESIS,
            Kind::Info,
            "heal",
            json!({"ok": healed.is_ok(), "error": healed.err()}),
        );
    }
}
