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
    // Node 2 never stands by its own timer; node 3 may once it is behind.
    let (_dir, net, rafts) = three_nodes("stand-in").await;
    write(&rafts[&1], 1, 1).await;

    // Node 3 falls behind: node 1 and node 2 commit two entries it does not have.
    net.cut(1, 3);
    write(&rafts[&1], 1, 2).await;
    write(&rafts[&1], 1, 3).await;
    let ahead = last_log_index(&rafts[&1]);
    has_log(&rafts[&2], ahead, "node 2 has node 1's log").await;
    assert!(
        last_log_index(&rafts[&3]) < ahead,
        "node 3 is behind: {:?} against {ahead:?}",
        last_log_index(&rafts[&3])
    );

    // Node 1 stops answering anyone; node 3 may now stand.
    net.cut(1, 2);
    net.elect(3, true);
    // Node 2, whose timer never elects, stands when it refuses node 3, and wins; node 3
    // follows it and has its log.
    node_2_wins(&rafts, ahead).await;
}

/// Node 1 leads, then is cut off from everyone. openraft's timers are off on nodes 2 and 3
/// (as a timer held back by openraft's greater-log delay would be, only for good); node 2's
/// backstop is on. It stands once it has been a quiet follower for its deadline, node 3
/// grants its equal log, and it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backstop_stands_for_a_follower_whose_openraft_timer_does_not() {
    let (_dir, net, rafts) = three_nodes("backstop").await;
    write(&rafts[&1], 1, 1).await;
    let committed = last_log_index(&rafts[&1]);
    for id in [2, 3] {
        has_log(&rafts[&id], committed, "the followers have node 1's log").await;
    }

    net.cut(1, 2);
    net.cut(1, 3);
    net.backstop(2, true);
    // Node 2, with only its backstop for a timer, stands and wins; node 3 follows it.
    node_2_wins(&rafts, committed).await;
}

/// Every timer on, the backstop's included, and a live leader writing: over more than three
/// backstop deadlines (each at most 2 x 300 + 75 ms here) no follower stands, so the term
/// never moves and node 1 keeps leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_leader_is_left_alone_by_the_backstop() {
    let (_dir, net, rafts) = three_nodes("backstop-live").await;
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

/// Nodes 1 to 3 on a fresh net, node 1 leading (see [`found`]), by id, with their
/// directory under one named after `tag` (removed when the returned [`TempDir`] drops).
async fn three_nodes(tag: &str) -> (TempDir, Net, BTreeMap<NodeId, Raft>) {
    let dir = TempDir::new(tag);
    let net = Net::default();
    let rafts = found(&net, &dir.0, 3)
        .await
        .into_iter()
        .map(|(id, (raft, _))| (id, raft))
        .collect();
    (dir, net, rafts)
}

/// Waits until `raft`'s log reaches `index`.
async fn has_log(raft: &Raft, index: Option<u64>, what: &str) {
    raft.wait(Some(PATIENCE))
        .log_index_at_least(index, what)
        .await
        .unwrap();
}

/// Node 2 leads in a term after node 1's, node 3 follows it with a log past `past`, and
/// the new leader takes writes, node 3 with it; then every node shuts down.
async fn node_2_wins(rafts: &BTreeMap<NodeId, Raft>, past: Option<u64>) {
    let elected = rafts[&2]
        .wait(Some(PATIENCE))
        .metrics(|m| m.state == ServerState::Leader, "node 2 stands and wins")
        .await
        .expect("node 2 stood and won");
    assert!(
        elected.current_term > 1,
        "a new term: {}",
        elected.current_term
    );
    rafts[&3]
        .wait(Some(PATIENCE))
        .metrics(
            |m| m.current_leader == Some(2) && m.last_log_index > past,
            "node 3 follows node 2 and has its log",
        )
        .await
        .unwrap();
    write(&rafts[&2], 2, 1).await;
    shut_down(rafts).await;
}

/// Shuts every node down.
async fn shut_down(rafts: &BTreeMap<NodeId, Raft>) {
    for raft in rafts.values() {
        raft.shutdown().await.unwrap();
    }
}
