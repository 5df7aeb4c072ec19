//! Heartbeats on a client connection: a small `ServerFrame::Heartbeat` every
//! [`HEARTBEAT_PERIOD`], carrying the node's Raft term and the leader it knows of.
//!
//! They exist for the client's failure detector (`client` module doc): a node that is alive
//! sends them even while every request it serves is slow (an election, a full log), and a
//! stopped or frozen one sends nothing at all, so silence — not a slow answer — is what the
//! client takes as a dead node. The leader they name lets a client on a deposed leader move
//! to the new one without waiting for a request to fail.
//!
//! A heartbeat is put in the outbox with `try_send`: when the outbox is full the connection
//! is sending frames anyway (the client hears from the node), and a heartbeat must never
//! wait behind them or hold the connection's writer.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::ctx::Ctx;
use super::leader::known_leader;
use weir_proto::protocol::{HEARTBEAT_PERIOD, ServerFrame};

/// Sends a heartbeat on `out` every [`HEARTBEAT_PERIOD`] until the connection's outbox closes.
pub async fn send_heartbeats(ctx: Arc<Ctx>, out: mpsc::Sender<ServerFrame>) {
    let mut every = tokio::time::interval(HEARTBEAT_PERIOD);
    // A late tick (a busy node) sends one heartbeat, not a burst of them.
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let term = ctx.raft.metrics().borrow().current_term;
        let beat = ServerFrame::Heartbeat {
            term,
            leader: known_leader(&ctx.raft),
        };
        match out.try_send(beat) {
            Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
}
