//! The hedged write, all of it: when a keep-alive or an acquire is hedged ([`hedged_write`]),
//! the one hedge connection per [`Client`] and its tries ([`Client::hedge`]), and the move to
//! the node that answers ([`Client::adopt`]).
//!
//! # The rule: the client judges answers, not liveness
//!
//! A session's keep-alive or acquire that is still unanswered after [`HEDGE_AFTER`] while
//! its session's belief deadline is near (less than [`HEDGE_WHEN_LEFT`] left) is sent again
//! to the other nodes, whether or not the connection it went to carries heartbeats; the
//! hedge follows their redirects. A node that heartbeats but does not answer is as bad as a
//! silent one: a leader cut from its peers but not from its clients still heartbeats while
//! its commits wait, and so does a node whose forwarded request waits on a dead leader. Both
//! writes are idempotent (a keep-alive by its session, an acquire by its ticket), so the two
//! copies cost nothing but a write. The node that acknowledges the hedge has just committed
//! a write: it leads, and the client moves its connection there at once (the node that did
//! not answer is suspected and the requests waiting on it retried there), so every request,
//! not only the hedged one, leaves it.
//!
//! Invariants and bounds:
//! - a hedge never starts while the deadline is far, nor before its write has waited
//!   [`HEDGE_AFTER`]: a refused connection (a kill) is retried at once by the write itself,
//!   and a commit of a few milliseconds never hedges, so neither is slowed;
//! - one hedge connection per [`Client`], shared by its sessions (single flight, under a
//!   lock held only across its connect): the sessions of one `Client` open at most one
//!   connection per try between them, not one each;
//! - the hedge never goes to the node the write is waiting on: a hedge that is redirected
//!   there waits and tries the others again;
//! - at most [`HEDGE_TRIES`] tries, each connect bounded as every connect is, and paused
//!   [`jittered`] between rounds, so hundreds of clients do not storm a node just elected.
//!
//! # The budget: the session's deadline sets the urgency
//!
//! A session with TTL `T` renews every `T/5` and believes its permits until `last
//! acknowledged send + T − margin`. With `T` = 3 s (margin 300 ms) the worst case is a fault
//! just after a keep-alive was sent and before its answer: the last acknowledged one was
//! sent 600 ms earlier, so the belief ends `2.1 s − r` after the fault, `r` being how long
//! before it that keep-alive went out (up to one commit round trip: a few ms on a quiet
//! machine, over 100 ms in a loaded debug build). A keep-alive is sent with about 2.1 s left,
//! so one unanswered is hedged [`HEDGE_AFTER`] (0.4 s) later, with about 1.7 s left. Against
//! it:
//!
//! | step | without the hedge | hedged |
//! |---|---|---|
//! | notice | a silent node: 1.0–1.1 s (`SILENCE_MAX` + its check); a node that heartbeats and holds the write: never, until its commit timeout | 0.4–0.45 s, either way |
//! | find the leader (the election runs from the fault, concurrently: 0.8–1 s) | redirects, 100 ms pauses | the same, on the hedge connection |
//! | reconnect | one connect per `Client` (loopback: ~1 ms) | one per `Client` |
//! | keep-alive round trip | one commit on the new leader | the same |
//!
//! The hedged path ends at the election's end plus one commit, about 1.3 s before the
//! belief does. The session on the cluster does not expire meanwhile: the log clock freezes
//! across the leader change (`machine` module doc), so what costs a holder its permit is
//! only its own belief deadline. Two more things would cost it, and the client avoids both:
//! keep-alives run in a loop of their own (`session.rs`), so one due while the session
//! re-asks its tickets after the reconnect (a string of writes and reads, each retried
//! through the election) does not wait for the re-ask; and after `SUSPECT_FOR` (3 s from
//! the move) a node still stopped can be connected to again, costing one welcome timeout
//! (1 s) to the requests behind that connect — the hedge does not wait on that connect. Two
//! faults in a row (a stall, then a kill of the node that took over) are two such budgets,
//! each starting from the last acknowledged keep-alive, so they cost no more than one. A TTL
//! below 3 s has less slack than this budget and may lose permits to a fault.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::boot_clock::BootInstant;
use super::client::{Client, RETRY_PAUSE, jittered, reply_of};
use super::conn::Conn;
use super::error::ClientError;
use super::session_state::SessionState;
use weir_core::machine::{Command, Reply};
use weir_proto::protocol::{Failure, Request, Response};

/// How long a keep-alive or acquire must have gone unanswered before it is hedged: far
/// below the silence detector's bound and above a loaded machine's commit, since a hedge
/// only adds a write and gives nothing up. Also how long a connection must have been silent
/// for [`Client::silence`] to call it so.
pub(super) const HEDGE_AFTER: Duration = Duration::from_millis(400);
/// A write is hedged only when less than this is left of the belief: the detector's own
/// path (silence bound, its check, and a leader discovery of about half a second) would no
/// longer leave room. With a TTL of 3 s a keep-alive is sent with about 2.1 s left, so a
/// fault just before its answer hedges after [`HEDGE_AFTER`]; with a TTL of 30 s nothing
/// hedges.
pub(super) const HEDGE_WHEN_LEFT: Duration = Duration::from_millis(1_600);
/// Most tries of one hedge (a try is a write to one node, a connect first if needed).
pub(super) const HEDGE_TRIES: u32 = 20;
/// How often an unanswered write looks whether it should be hedged.
const HEDGE_LOOK: Duration = Duration::from_millis(50);

/// One keep-alive through the current connection, hedged by the rule of the module doc.
/// Every keep-alive carries the session's acknowledged mark (`SessionState::acked_below`).
pub(super) async fn hedged_keep_alive(s: &SessionState) -> Result<Reply, ClientError> {
    let command = Command::KeepAliveAcked {
        session: s.id,
        acked_below: s.acked_below(),
    };
    hedged_write(s, command).await
}

/// `command` (a keep-alive or an acquire of session `s`: idempotent) through the current
/// connection, hedged to the other nodes once it has waited [`HEDGE_AFTER`] with the
/// deadline near (the module doc): whichever is acknowledged first answers it; the other is
/// dropped.
pub(super) async fn hedged_write(s: &SessionState, command: Command) -> Result<Reply, ClientError> {
    let primary = s.client.write(command.clone());
    tokio::pin!(primary);
    let sent = Instant::now();
    let urgent = async {
        loop {
            let left = s.deadline.borrow().remaining(BootInstant::now());
            if left < HEDGE_WHEN_LEFT && sent.elapsed() >= HEDGE_AFTER {
                return;
            }
            tokio::time::sleep(HEDGE_LOOK).await;
        }
    };
    tokio::select! {
        answer = &mut primary => return answer,
        () = urgent => {}
    }
    tracing::info!(
        "session {}: a write unanswered for {:?} near its deadline, hedged to the other nodes",
        s.id,
        sent.elapsed()
    );
    s.note_hedged();
    let hedge = async { reply_of(s.client.hedge(&Request::Write(command)).await?) };
    tokio::pin!(hedge);
    tokio::select! {
        answer = &mut primary => answer,
        answer = &mut hedge => match answer {
            Ok(reply) => Ok(reply),
            // The hedge found no leader: the primary's retries may still.
            Err(_) => primary.await,
        },
    }
}

impl Client {
    /// Sends `request` (an idempotent keep-alive or acquire) to the nodes other than the current
    /// connection's, through this client's one hedge connection, following redirects, at
    /// most [`HEDGE_TRIES`] tries. An answered write came from the leader: the client moves
    /// there ([`Client::adopt`]). See the `hedge` module doc.
    pub(super) async fn hedge(&self, request: &Request) -> Result<Response, ClientError> {
        if self.inner.servers.len() < 2 {
            return Err(ClientError::Unreachable("no other node to hedge to".into()));
        }
        let avoid = self.current_addr();
        let mut next: Option<String> = None;
        let mut last = ClientError::Unreachable("no other node answered the hedge".into());
        for attempt in 0..HEDGE_TRIES {
            let conn = {
                let mut hedge = self.inner.hedge.lock().await;
                match &*hedge {
                    Some(c) if c.is_alive() && Some(&c.addr) != avoid.as_ref() => c.clone(),
                    _ => {
                        let addr = match next.take() {
                            Some(a) => a,
                            None => self.hedge_target(attempt, avoid.as_deref()),
                        };
                        match self.open(&addr).await {
                            Ok(c) => {
                                let c = Arc::new(c);
                                *hedge = Some(c.clone());
                                c
                            }
                            Err(e) => {
                                last = e;
                                continue;
                            }
                        }
                    }
                }
            };
            match conn.call(request).await {
                Ok(Response::Failed(Failure::NotLeader { leader })) => {
                    next = leader.map(|(_, a)| a).filter(|a| Some(a) != avoid.as_ref());
                    last = ClientError::Failed(Failure::NotLeader { leader: None });
                    self.drop_hedge(&conn).await;
                    if next.is_none() {
                        tokio::time::sleep(jittered(RETRY_PAUSE)).await;
                    }
                }
                Ok(Response::Failed(f)) => {
                    last = ClientError::Failed(f);
                    self.drop_hedge(&conn).await;
                    tokio::time::sleep(jittered(RETRY_PAUSE)).await;
                }
                Ok(response) => {
                    tracing::info!("hedged write answered by {}; moving there", conn.addr);
                    self.adopt(&conn).await;
                    return Ok(response);
                }
                Err(e) => {
                    last = e;
                    self.drop_hedge(&conn).await;
                }
            }
        }
        Err(last)
    }

    /// The configured server the hedge's try `attempt` goes to: the servers in turn, the
    /// current connection's node left out (unless it is the only one).
    fn hedge_target(&self, attempt: u32, avoid: Option<&str>) -> String {
        let others: Vec<&String> = self
            .inner
            .servers
            .iter()
            .filter(|s| Some(s.as_str()) != avoid)
            .collect();
        match others.is_empty() {
            true => self.inner.servers[attempt as usize % self.inner.servers.len()].clone(),
            false => others[attempt as usize % others.len()].clone(),
        }
    }

    /// The address of the current connection, if any (`None` while a connect is in flight).
    fn current_addr(&self) -> Option<String> {
        let current = self.inner.current.try_lock().ok()?;
        current.conn.as_ref().map(|c| c.addr.clone())
    }

    /// Forgets the hedge connection `conn` if it is still the hedge's.
    async fn drop_hedge(&self, conn: &Arc<Conn>) {
        let mut hedge = self.inner.hedge.lock().await;
        if hedge.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *hedge = None;
        }
    }

    /// Makes `conn` — whose node just acknowledged a write, so it leads — the current
    /// connection: the node the hedged write still waits on, heartbeats or not, is
    /// suspected (as the silence detector would have done for a silent one), the requests
    /// waiting there are retried here, and sessions re-ask on the new connection.
    async fn adopt(&self, conn: &Arc<Conn>) {
        let mut current = self.inner.current.lock().await;
        if current.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            return;
        }
        if let Some(old) = current.conn.take() {
            current.suspect = Some((old.addr.clone(), Instant::now()));
            old.give_up();
        }
        current.conn = Some(conn.clone());
        drop(current);
        self.inner.feeds.generation.send_modify(|g| *g += 1);
    }
}
