//! `partition`: a node isolated, the leader isolated, a bridge, the majorities ring, two
//! nodes isolated, the leader split off with one other (3|2, 2|2|1), a one-way cut. Every
//! cut goes through the [`Cluster`]'s primitives, so it works in both network modes; the
//! heal (the driver's) lifts them all.

use serde_json::json;

use super::fault::{Fault, after, leader};
use crate::cluster::Cluster;

/// Cuts `node` off from every other node, both ways.
fn isolate(cluster: &Cluster, node: u64, reset: bool) -> Result<(), String> {
    for other in cluster.ids().filter(|o| *o != node) {
        cluster.cut_both(node, other, reset)?;
    }
    Ok(())
}

/// Cuts every two nodes of different groups from each other, both ways: the groups are
/// the sides of the partition.
fn split(cluster: &Cluster, groups: &[Vec<u64>], reset: bool) -> Result<(), String> {
    for (i, a) in groups.iter().enumerate() {
        for b in &groups[i + 1..] {
            for x in a {
                for y in b {
                    cluster.cut_both(*x, *y, reset)?;
                }
            }
        }
    }
    Ok(())
}

/// How a cut fault cuts, for the history.
fn how(reset: bool) -> &'static str {
    if reset { "reset" } else { "silent" }
}

/// Injects a partition fault; returns what was done (recorded in the history).
pub(super) async fn inject(
    cluster: &mut Cluster,
    fault: &Fault,
) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::IsolateNode { node, reset } => {
            isolate(cluster, node, reset)?;
            json!({"fault": "isolate", "node": node, "cut": how(reset)})
        }
        Fault::IsolateLeader { reset } => {
            let l = leader(cluster, "isolate").await?;
            isolate(cluster, l, reset)?;
            json!({"fault": "isolate-leader", "node": l, "cut": how(reset)})
        }
        Fault::Bridge { middle, reset } if cluster.size() == 5 => {
            // The middle node joins two pairs that cannot reach each other.
            let side = |a, b| vec![after(cluster, middle, a), after(cluster, middle, b)];
            let (left, right) = (side(1, 2), side(3, 4));
            split(cluster, &[left.clone(), right.clone()], reset)?;
            json!({"fault": "bridge", "middle": middle, "sides": [left, right], "cut": how(reset)})
        }
        Fault::Bridge { middle, reset } => {
            let (a, b) = match middle {
                1 => (2, 3),
                2 => (1, 3),
                _ => (1, 2),
            };
            cluster.cut_both(a, b, reset)?;
            json!({"fault": "bridge", "middle": middle, "cut": how(reset)})
        }
        Fault::Ring { reset } if cluster.size() == 5 => {
            for node in cluster.ids() {
                cluster.cut_both(node, after(cluster, node, 2), reset)?;
            }
            json!({"fault": "majorities-ring", "cut": how(reset)})
        }
        Fault::Ring { reset } => {
            for (from, to) in [(1, 2), (2, 3), (3, 1)] {
                cluster.cut(from, to, reset)?;
            }
            json!({"fault": "majorities-ring", "cut": how(reset)})
        }
        Fault::IsolateNodes { nodes, reset } => {
            for node in nodes {
                isolate(cluster, node, reset)?;
            }
            json!({"fault": "isolate-two", "nodes": nodes, "cut": how(reset)})
        }
        Fault::SplitLeader {
            with,
            three_way,
            reset,
        } => {
            let l = leader(cluster, "split off").await?;
            let minority = vec![l, after(cluster, l, with)];
            let rest: Vec<u64> = cluster.ids().filter(|n| !minority.contains(n)).collect();
            let groups = if three_way {
                vec![minority, rest[..2].to_vec(), rest[2..].to_vec()]
            } else {
                vec![minority, rest]
            };
            split(cluster, &groups, reset)?;
            json!({"fault": if three_way { "split-2-2-1" } else { "split-3-2" }, "leader": l, "groups": groups, "cut": how(reset)})
        }
        Fault::OneWay { from, to } => {
            cluster.one_way(from, to);
            json!({"fault": "one-way", "from": from, "to": to})
        }
        _ => unreachable!("not a partition fault: {fault:?}"),
    })
}
