//! `weir cluster add` of a node that cannot be reached: it is tried as a learner, does not
//! catch up within the bound, is removed again, and never becomes a voter.

use std::time::Duration;

use weir::launcher::{LocalCluster, loopback_addr};
use weir_client::Client;
use weir_client::protocol::{Failure, Request, Response};

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
