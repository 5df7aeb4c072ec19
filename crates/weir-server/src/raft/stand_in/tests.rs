//! The stand-in against three in-process nodes ([`crate::raft::test_cluster`]).
//!
//! In the first test node 2 never stands for election by a timer (openraft's `elect(false)`,
//! which `Trigger::elect` ignores, and its backstop off): whatever leader it becomes, its
//! stand-in made it so. Node 3 is left behind and stands first; its log can never win. In
//! the second, the backstop is the only timer left in the cluster; in the third, every
//! timer runs beside a live leader.

use std::collections::BTreeMap;

use super::*;
use crate::raft::test_cluster::{Net, PATIENCE, TempDir, found, last_log_index, write};

/// Node 1 leads; node 3 is cut off from it and falls behind; then node 1 is cut off from
/// everyone (a stopped leader). Node 3 times out and stands, node 2 refuses it by log, and
/// node 2, whose own timer never elects, stands at once and wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_ahead_of_a_refused_candidate_stands_at_once_and_wins() {
    let dir = TempDir::new("stand-in");
    let net = Net::default();
    // Node 2 never stands by its own timer; node 3 may once it is behind.
    let rafts = three_nodes(&net, &dir).await;
    write(&rafts[&1], 1, 1).await;

    // Node 3 falls behind: node 1 and node 2 commit two entries it does not have.
    net.cut(1, 3);
    write(&rafts[&1], 1, 2).await;
    write(&rafts[&1], 1, 3).await;
    let ahead = last_log_index(&rafts[&1]);
    rafts[&2]
        .wait(Some(PATIENCE))
        .log_index_at_least(ahead, "node 2 has node 1's log")
        .await
        .unwrap();
    assert!(
        last_log_index(&rafts[&3]) < ahead,
        "node 3 is behind: {:?} against {ahead:?}",
        last_log_index(&rafts[&3])
    );

    // Node 1 stops answering anyone; node 3 may now stand.
    net.cut(1, 2);
    net.elect(3, true);
    let elected = rafts[&2]
        .wait(Some(PATIENCE))
        .metrics(
            |m| m.state == ServerState::Leader,
            "node 2 stands for itself and wins",
        )
        .await
        .expect("node 2, whose timer never elects, stood when it refused node 3 and won");
    assert!(
        elected.current_term > 1,
        "a new term: {}",
        elected.current_term
    );
    rafts[&3]
        .wait(Some(PATIENCE))
        .metrics(
            |m| m.current_leader == Some(2) && m.last_log_index > ahead,
            "node 3 follows node 2 and has its log",
        )
        .await
        .unwrap();
    // The new leader takes writes, node 3 with it.
    write(&rafts[&2], 2, 1).await;
    shut_down(&rafts).await;
}

/// Node 1 leads, then is cut off from everyone. openraft's timers are off on nodes 2 and 3
/// (as a timer held back by openraft's greater-log delay would be, only for good); node 2's
/// backstop is on. It stands once it has been a quiet follower for its deadline, node 3
/// grants its equal log, and it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backstop_stands_for_a_follower_whose_openraft_timer_does_not() {
    let dir = TempDir::new("backstop");
    let net = Net::default();
    let rafts = three_nodes(&net, &dir).await;
    write(&rafts[&1], 1, 1).await;
    let committed = last_log_index(&rafts[&1]);
    for id in [2, 3] {
        rafts[&id]
            .wait(Some(PATIENCE))
            .log_index_at_least(committed, "the followers have node 1's log")
            .await
            .unwrap();
    }

    net.cut(1, 2);
    net.cut(1, 3);
    net.backstop(2, true);
    let elected = rafts[&2]
        .wait(Some(PATIENCE))
        .metrics(
            |m| m.state == ServerState::Leader,
            "node 2's backstop stands for it and it wins",
        )
        .await
        .expect("node 2, with only its backstop for a timer, stood and won");
    assert!(
        elected.current_term > 1,
        "a new term: {}",
        elected.current_term
    );
    rafts[&3]
        .wait(Some(PATIENCE))
        .metrics(|m| m.current_leader == Some(2), "node 3 follows node 2")
        .await
        .unwrap();
    write(&rafts[&2], 2, 1).await;
    shut_down(&rafts).await;
}

/// Every timer on, the backstop's included, and a live leader writing: over more than three
/// backstop deadlines (each at most 2 x 300 + 75 ms here) no follower stands, so the term
/// never moves and node 1 keeps leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_leader_is_left_alone_by_the_backstop() {
    let dir = TempDir::new("backstop-live");
    let net = Net::default();
    let rafts = three_nodes(&net, &dir).await;
    net.elect(2, true);
    net.elect(3, true);
    let term = rafts[&1].metrics().borrow().current_term;
    for clock_ms in 1..=25 {
        write(&rafts[&1], 1, clock_ms).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (id, raft) in &rafts {
        let m = raft.metrics().borrow().clone();
        assert_eq!(
            (m.current_term, m.current_leader),
            (term, Some(1)),
            "node {id}: the term stays and node 1 leads"
        );
    }
    shut_down(&rafts).await;
}

fn vote_request(term: u64, last_index: u64) -> VoteRequest<NodeId> {
    VoteRequest::new(
        openraft::Vote::new(term, 3),
        Some(openraft::LogId::new(
            openraft::CommittedLeaderId::new(1, 1),
            last_index,
        )),
    )
}

fn refusal(last_index: u64) -> VoteResponse<NodeId> {
    VoteResponse::new(
        openraft::Vote::new_committed(1, 1),
        Some(openraft::LogId::new(
            openraft::CommittedLeaderId::new(1, 1),
            last_index,
        )),
        false,
    )
}

#[test]
fn only_a_refusal_by_log_with_no_leader_for_a_lease_calls_for_a_stand_in() {
    let lease = Duration::from_millis(450);
    let long_ago = Some(Duration::from_secs(1));
    let request = vote_request(2, 5);
    assert!(calls_for_stand_in(
        &request,
        &refusal(6),
        long_ago,
        lease,
        true
    ));
    assert!(
        calls_for_stand_in(&request, &refusal(6), None, lease, true),
        "never heard a leader"
    );
    assert!(
        !calls_for_stand_in(
            &request,
            &refusal(6),
            Some(Duration::from_millis(100)),
            lease,
            true
        ),
        "a leader heard within the lease is alive for this node"
    );
    assert!(
        !calls_for_stand_in(&request, &refusal(5), long_ago, lease, true),
        "refused with the same log: by vote, not by log"
    );
    assert!(
        !calls_for_stand_in(&request, &refusal(4), long_ago, lease, true),
        "the candidate's log is longer"
    );
    // Node 1's request of the election it has since won, read late from a socket.
    let delayed = VoteRequest::new(openraft::Vote::new(1, 1), request.last_log_id);
    assert!(
        !calls_for_stand_in(&delayed, &refusal(6), long_ago, lease, true),
        "a request of an election this node has seen decided: not above its vote"
    );
    let mut granted = refusal(6);
    granted.vote_granted = true;
    assert!(
        !calls_for_stand_in(&request, &granted, long_ago, lease, true),
        "granted"
    );
    assert!(
        !calls_for_stand_in(&request, &refusal(6), long_ago, lease, false),
        "a leader or a candidate does not stand in"
    );
}

/// Nodes 1 to 3 on `net`, node 1 leading (see [`found`]), by id.
async fn three_nodes(net: &Net, dir: &TempDir) -> BTreeMap<NodeId, Raft> {
    found(net, &dir.0, 3)
        .await
        .into_iter()
        .map(|(id, (raft, _))| (id, raft))
        .collect()
}

/// Shuts every node down.
async fn shut_down(rafts: &BTreeMap<NodeId, Raft>) {
    for raft in rafts.values() {
        raft.shutdown().await.unwrap();
    }
}
