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
