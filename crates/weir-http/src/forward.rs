//! A forwarded request follows the leader: the rule by which this node carries its HTTP and
//! gRPC callers' requests to the leader, and gives up on one it cannot place.
//!
//! Every request that reaches this node's front doors goes to the leader through its
//! caller's internal client (`callers.rs`). When the leader it went to dies or stalls, the
//! request must not wait on it for seconds: its sender (a Python holder, Envoy) is waiting on
//! its own deadline, and a node that heartbeats and answers `/healthz` but holds requests
//! looks alive to it. So:
//!
//! 1. **Re-sent as soon as a leader is known.** A task per group follows this node's own
//!    Raft of that group ([`follow_leader`]): when the leader it knows of changes, every
//!    caller's client of that group is told at once ([`weir_client::Client::leader_moved`]). A connection to any other node
//!    is given up, and the requests waiting there are re-sent to the new leader — before
//!    the old one's socket fails (a kill), its silence is noticed (a stall: 1 s), or its
//!    commit times out (a leader cut from its peers, which never fails on its own). Every
//!    write is idempotent by its ids, and a read is re-asked, so a re-send is safe.
//! 2. **"No leader yet" after `FORWARD_RETRY_MAX`.** A caller's client retries a request
//!    for at most `FORWARD_RETRY_MAX` (2 s), not the library's 10 s, unless a redirect to
//!    a named leader is pending, which still gets its try. Past it the answer is 503
//!    `NoLeader` ("no leader known yet ... try again, or another node") or, for a write
//!    that may have been applied on some try, 503 `OutcomeUnknown`. The sender retries,
//!    here or elsewhere, and every write is idempotent.
//!
//! Why 2 s: an election on loopback ends about 0.8–1 s after a leader's death (the
//! elections' timeout is 1–2 s of silence, and the partition harness measures ~1 s), so
//! 2 s covers one election with room for a loaded machine, and answers well inside a
//! holder's 3 s TTL, whose keep-alive is sent with about 2.1 s of belief left and hedged
//! after 0.4 s by the clients (`weir-client`'s `hedge.rs`, the Python `_session.py`).
//!
//! Invariants:
//! - the follower task only redirects connections; it never answers, drops or re-sends a
//!   request itself (the client's retry does, once);
//! - a request already on a live connection to the leader is never cut short by the bound:
//!   the bound is looked at between tries.

use std::sync::Arc;

use super::callers::Callers;
use weir_server::raft::Raft;
use weir_server::server::leader::known_leader;

/// Follows this node's Raft of `group` (`None`: the default group) and tells every caller's
/// client of that group where its leader is whenever that changes (rule 1 of the module
/// doc). Ends when the node's Raft stops.
pub fn follow_leader(raft: Raft, callers: Arc<Callers>, group: Option<u64>) {
    let mut metrics = raft.metrics();
    tokio::spawn(async move {
        let mut told: Option<String> = None;
        loop {
            let leader = {
                metrics.borrow_and_update();
                known_leader(&raft).map(|(_, addr)| addr)
            };
            if let Some(addr) = leader
                && told.as_ref() != Some(&addr)
            {
                let clients = callers.clients(group);
                tracing::debug!(
                    "the leader is at {addr}: {} callers' clients follow it",
                    clients.len()
                );
                for client in clients {
                    let addr = addr.clone();
                    // One task each: a client in the middle of a connect holds its lock for
                    // up to a connect timeout, and must not hold up the others.
                    tokio::spawn(async move { client.leader_moved(&addr).await });
                }
                told = Some(addr);
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    });
}
