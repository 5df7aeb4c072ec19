//! `weir cluster add` of a node that cannot be reached: it is tried as a learner, does not
//! catch up within the bound, is removed again, and never becomes a voter.

use std::time::Duration;

use weir_client::Client;
use weir_launcher::{LocalCluster, loopback_addr};
use weir_proto::protocol::{Failure, Request, Response};

use crate::harness::phase;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_a_node_nobody_listens_for_is_refused_and_leaves_no_member_behind() {
    let mut cluster =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-add-unreachable").unwrap();
    let configs = cluster.loopback_configs(1).unwrap();
    cluster.add_and_start(configs).unwrap();
    let leader = cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");
    let client = Client::new(cluster.servers());

    phase("add node 2 at addresses nobody listens on");
    let (peer, addr) = (loopback_addr().unwrap(), loopback_addr().unwrap());
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        client.request(Request::AddNode {
            id: 2,
            peer: peer.clone(),
            client: addr,
        }),
    )
    .await
    .expect("bounded");
    match &answer {
        Ok(Response::Failed(Failure::BadRequest(why))) => {
            assert!(why.contains("did not catch up"), "{why}");
            assert!(why.contains(&peer), "the error names the address: {why}");
        }
        other => panic!("an unreachable node was not refused: {other:?}"),
    }

    phase("the membership is node 1 alone: no voter, no learner left behind");
    let status = cluster.status(leader).await.expect("a status");
    let members: Vec<(u64, bool)> = status.members.iter().map(|m| (m.id, m.voter)).collect();
    assert_eq!(members, vec![(1, true)], "{status:?}");

    phase("the cluster still commits writes");
    let define = weir_core::machine::Command::DefineLimit {
        tenant: "t".into(),
        name: "db".into(),
        concurrent: 1,
        per_second: 0.0,
        burst: None,
    };
    assert!(matches!(
        client.request(Request::Write(define)).await,
        Ok(Response::Written { .. })
    ));
}

/// A node just removed (still running) never learns that its removal committed: its view
/// has the joint membership change in progress for good. Asked to add itself back, it must
/// send the client on to the leader, not refuse the request as "in progress".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_node_asked_to_add_itself_back_sends_the_client_to_the_leader() {
    let mut cluster =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-add-back").unwrap();
    let configs = cluster.loopback_configs(3).unwrap();
    cluster.add_and_start(configs).unwrap();
    let leader = cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");
    let removed = if leader == 3 { 2 } else { 3 };
    let everyone = Client::new(cluster.servers());

    phase("remove a follower; it keeps running");
    let answer = everyone.request(Request::RemoveNode { id: removed }).await;
    assert!(
        matches!(answer, Ok(Response::MembershipChanged)),
        "{answer:?}"
    );

    phase("ask the removed node alone to add itself back");
    let node = cluster.node(removed);
    let add = Request::AddNode {
        id: removed,
        peer: node.peer.clone(),
        client: node.client.clone(),
    };
    let only_removed = Client::new(vec![node.client.clone()]);
    let answer = tokio::time::timeout(Duration::from_secs(30), only_removed.request(add.clone()))
        .await
        .expect("bounded");
    match &answer {
        // Sent on to the leader, which added it (the client follows `NotLeader`), or told
        // where the leader is.
        Ok(Response::MembershipChanged) | Ok(Response::Failed(Failure::NotLeader { .. })) => {}
        other => panic!("the removed node did not send the client on: {other:?}"),
    }
    if !matches!(answer, Ok(Response::MembershipChanged)) {
        let again = everyone.request(add).await;
        assert!(
            matches!(again, Ok(Response::MembershipChanged)),
            "{again:?}"
        );
    }

    phase("it is a voter again");
    let status = cluster.status(leader).await.expect("a status");
    let members: Vec<(u64, bool)> = status.members.iter().map(|m| (m.id, m.voter)).collect();
    assert_eq!(members, vec![(1, true), (2, true), (3, true)], "{status:?}");
}

/// `weir cluster add` of a node of another cluster: refused naming both identities (not
/// the certificate), and the leader logs the refusal a few times, not thousands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_a_node_of_another_cluster_names_the_identities_and_logs_little() {
    let mut ours = LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-add-ours").unwrap();
    let mut theirs =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-add-theirs").unwrap();
    ours.add_and_start(ours.loopback_configs(1).unwrap())
        .unwrap();
    theirs
        .add_and_start(theirs.loopback_configs(1).unwrap())
        .unwrap();
    let leader = ours
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");
    theirs
        .leader(Duration::from_secs(30))
        .await
        .expect("their leader");
    let client = Client::new(ours.servers());

    phase("add the other cluster's node as node 2");
    let other = theirs.node(1).config.clone();
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        client.request(Request::AddNode {
            id: 2,
            peer: other.peer_addr.clone(),
            client: other.client_addr.clone(),
        }),
    )
    .await
    .expect("bounded");
    match &answer {
        Ok(Response::Failed(Failure::BadRequest(why))) => {
            assert!(
                why.contains("refused this cluster's connections")
                    && why.contains("belongs to cluster")
                    && !why.contains("certificate"),
                "{why}"
            );
        }
        other => panic!("a node of another cluster was not refused: {other:?}"),
    }
    let log = std::fs::read_to_string(&ours.node(leader).log).unwrap();
    // Its own refusal line once per 10 s; openraft's report of each failed replication,
    // which it backs off between (before, it retried at once: some 30,000 lines here).
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused this node"))
        .collect();
    let own = lines
        .iter()
        .filter(|l| l.contains("weir_server::raft::network"))
        .count();
    assert!(
        own == 1 && lines.len() < 200,
        "{own} own lines of {} refusal lines, the first: {:?}",
        lines.len(),
        &lines[..lines.len().min(3)]
    );
}
