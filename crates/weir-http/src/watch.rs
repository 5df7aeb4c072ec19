//! `GET /v1/events`: the cluster's event stream the operator console follows, as
//! server-sent events. It serves this node's activity feed (`raft/activity.rs`: grants,
//! queued tickets, refusals, releases, expiries, halts set and cleared, limits defined and
//! removed, each named by its kind) and this node's view of the leader (`leader`, sent
//! when the leader or the term this node knows changes). The first event is `hello`,
//! with the node's id, the group and the leader and term it knows. On a node of several
//! Raft groups the stream is one group's: the one its request's `Weir-Group` names, else
//! the default group.
//!
//! Who may follow: `admin` and `read` tokens (and anyone where no tokens are configured, as
//! for the rest of `/v1`). A `tenant:NAME` token is answered 403 `Forbidden`: the feed
//! names every tenant's sessions and limits, and filtering it per tenant would make this
//! node an authorizer of its own beside the client port's. A tenant's operator follows its
//! limits by reading them.
//!
//! Bounds and the resync rule (the client protocol's `Resync`, a session stream's `lagged`):
//! - A stream that falls more than `WATCH_ENTRIES_BACKLOG` (the activity feed's, in
//!   `weir_server::raft::activity`) applied entries behind the feed misses some; it is then sent `resync` (with how many entries it missed) and goes on.
//! - A stream sends at most `WATCH_EVENTS_PER_SECOND_MAX` activities a second; beyond that
//!   it drops the rest of that second and sends `resync` once when the second ends.
//!
//! Either way the viewer re-reads the state it shows: nothing is lost silently. A stream
//! ends with `revoked` when a reload takes its caller's token away, and with the node.
//! The feed is derived while anything listens: a stream, and the node's own history of the
//! last minutes (`history.rs`), which always does.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use futures_util::future::BoxFuture;
use serde_json::json;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::watch;
use tokio::time::Instant;

use super::bounds::WATCH_EVENTS_PER_SECOND_MAX;
use super::context::HttpCtx;
use super::error::ApiError;
use weir_server::raft::NodeAddr;
use weir_server::raft::activity::{Activities, Activity};
use weir_server::security::Role;

/// How often an idle stream sends a comment, so proxies and browsers see it alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The length of the window `WATCH_EVENTS_PER_SECOND_MAX` counts over.
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// The node's activity feed, as one viewer reads it.
type Feed = broadcast::Receiver<Arc<Activities>>;

/// The node's Raft metrics (its leader and term), as one viewer watches them.
type Metrics = watch::Receiver<openraft::RaftMetrics<u64, NodeAddr>>;

/// One viewer's stream: where it reads, what it has to send, what it last told.
struct Viewer {
    node: u64,
    feed: Feed,
    metrics: Metrics,
    revoked: BoxFuture<'static, String>,
    /// Events ready to send, oldest last (sent with `pop`).
    ready: Vec<SseEvent>,
    /// (leader, term) as last sent.
    leader: (Option<u64>, u64),
    /// Activities sent in the current window, and when it started.
    sent_in_window: u32,
    window_start: Instant,
    /// Activities were dropped in this window or entries missed: `resync` is owed.
    resync_owed: bool,
    ended: bool,
}

/// `GET /v1/events`: the stream of the module doc; 403 for a `tenant:NAME` token.
pub async fn stream(
    State(ctx): State<Arc<HttpCtx>>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let caller = super::callers::current();
    if let Role::Tenant(t) = &caller.principal.role {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "the cluster event stream needs the admin or read role, not tenant:{t} \
                 (it names every tenant's sessions)"
            ),
        ));
    }
    let viewer = Viewer::new(
        ctx.id,
        ctx.group(),
        ctx.state().watch(),
        ctx.door().raft.metrics(),
        Box::pin(ctx.callers.tokens().revoked(caller.principal.clone())),
    );
    let events = futures_util::stream::unfold(viewer, |mut v| async move {
        let e = v.next().await?;
        Some((Ok(e), v))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

fn leader_of(metrics: &Metrics) -> (Option<u64>, u64) {
    let m = metrics.borrow();
    (m.current_leader, m.current_term)
}

impl Viewer {
    /// A viewer of `feed` (of `group`) whose first event is `hello` with the leader
    /// `metrics` know.
    fn new(
        node: u64,
        group: u64,
        feed: Feed,
        metrics: Metrics,
        revoked: BoxFuture<'static, String>,
    ) -> Viewer {
        let leader = leader_of(&metrics);
        let hello = named(
            "hello",
            &json!({"node": node, "group": group, "leader": leader.0, "term": leader.1}),
        );
        Viewer {
            node,
            feed,
            metrics,
            revoked,
            ready: vec![hello],
            leader,
            sent_in_window: 0,
            window_start: Instant::now(),
            resync_owed: false,
            ended: false,
        }
    }

    /// The next event to send, waiting for one; `None` once the stream ended.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.ready.pop() {
                return Some(e);
            }
            if self.ended {
                return None;
            }
            let window_end = self.window_start + RATE_WINDOW;
            tokio::select! {
                got = self.feed.recv() => self.take(got),
                changed = self.metrics.changed() => match changed {
                    Ok(()) => self.leader_changed(),
                    Err(_) => self.ended = true,
                },
                why = &mut self.revoked => {
                    self.ready.push(named("revoked", &json!({"reason": why})));
                    self.ended = true;
                }
                () = tokio::time::sleep_until(window_end), if self.resync_owed => {
                    self.new_window();
                }
            }
        }
    }

    /// One receive from the feed: its activities within the rate bound, or a lag.
    fn take(&mut self, got: Result<Arc<Activities>, RecvError>) {
        match got {
            Ok(did) => {
                if self.window_start.elapsed() >= RATE_WINDOW {
                    self.new_window();
                }
                // Reversed, so `pop` sends them in the order they happened.
                let room = WATCH_EVENTS_PER_SECOND_MAX.saturating_sub(self.sent_in_window);
                let fit = did.len().min(room as usize);
                if fit < did.len() {
                    self.resync_owed = true;
                }
                self.sent_in_window += fit as u32;
                let mut batch: Vec<SseEvent> = did[..fit].iter().map(sse_of).collect();
                batch.reverse();
                batch.append(&mut self.ready);
                self.ready = batch;
            }
            Err(RecvError::Lagged(missed)) => {
                self.ready.insert(
                    0,
                    resync(&format!("this stream fell {missed} entries behind")),
                );
                self.resync_owed = false;
            }
            Err(RecvError::Closed) => self.ended = true,
        }
    }

    /// Starts a new rate window, first sending the `resync` the last one owes.
    fn new_window(&mut self) {
        if self.resync_owed {
            self.ready.insert(
                0,
                resync(&format!(
                    "more than {WATCH_EVENTS_PER_SECOND_MAX} events in a second"
                )),
            );
            self.resync_owed = false;
        }
        self.sent_in_window = 0;
        self.window_start = Instant::now();
    }

    /// The node's metrics changed: a `leader` event if the leader or term did.
    fn leader_changed(&mut self) {
        let now = leader_of(&self.metrics);
        if now != self.leader {
            self.leader = now;
            let data = json!({"node": self.node, "leader": now.0, "term": now.1});
            self.ready.insert(0, named("leader", &data));
        }
    }
}

fn named(name: &str, data: &serde_json::Value) -> SseEvent {
    SseEvent::default().event(name).data(data.to_string())
}

fn resync(why: &str) -> SseEvent {
    named("resync", &json!({"reason": why}))
}

/// An activity as SSE: its kind as the event name, the whole of it as JSON data.
fn sse_of(a: &Activity) -> SseEvent {
    let data = serde_json::to_value(a).expect("plain data");
    let kind = data["kind"].as_str().unwrap_or("activity").to_owned();
    named(&kind, &data)
}

#[cfg(test)]
mod tests {
    //! The stream's bounds and its resync rule, on a feed of this test's own.

    use super::*;

    /// A viewer of a feed of `capacity` entries, the feed's sender, and the metrics' sender
    /// (kept: a closed metrics channel ends the stream).
    fn viewer(
        capacity: usize,
    ) -> (
        Viewer,
        broadcast::Sender<Arc<Activities>>,
        watch::Sender<openraft::RaftMetrics<u64, NodeAddr>>,
    ) {
        let (feed, rx) = broadcast::channel(capacity);
        let (metrics_tx, metrics) = watch::channel(openraft::RaftMetrics::new_initial(1));
        let v = Viewer::new(1, 0, rx, metrics, Box::pin(std::future::pending()));
        (v, feed, metrics_tx)
    }

    fn expired(n: u64) -> Activity {
        Activity::Expired { session: n }
    }

    /// The next event as its SSE text, within a bound far above the rate window.
    async fn next(v: &mut Viewer) -> String {
        let e = tokio::time::timeout(Duration::from_secs(5), v.next())
            .await
            .expect("an event within 5 s")
            .expect("the stream goes on");
        format!("{e:?}")
    }

    #[tokio::test]
    async fn past_the_rate_bound_the_rest_of_the_second_is_dropped_and_resync_sent() {
        let (mut v, feed, _metrics) = viewer(16);
        assert!(next(&mut v).await.contains("hello"));
        let flood: Activities = (0..u64::from(WATCH_EVENTS_PER_SECOND_MAX) + 50)
            .map(expired)
            .collect();
        feed.send(Arc::new(flood)).unwrap();
        for i in 0..WATCH_EVENTS_PER_SECOND_MAX {
            let e = next(&mut v).await;
            assert!(e.contains(&format!("session\\\":{i}}}")), "{i}: {e}");
        }
        let e = next(&mut v).await;
        assert!(e.contains("resync") && e.contains("in a second"), "{e}");
        feed.send(Arc::new(vec![expired(7)])).unwrap();
        let e = next(&mut v).await;
        assert!(
            e.contains("session\\\":7}"),
            "the next second sends again: {e}"
        );
    }

    #[tokio::test]
    async fn a_viewer_behind_the_feed_is_sent_resync_then_goes_on() {
        let (mut v, feed, _metrics) = viewer(2);
        assert!(next(&mut v).await.contains("hello"));
        for n in 0..5 {
            feed.send(Arc::new(vec![expired(n)])).unwrap();
        }
        let e = next(&mut v).await;
        assert!(
            e.contains("resync") && e.contains("fell 3 entries behind"),
            "{e}"
        );
        assert!(next(&mut v).await.contains("session\\\":3}"));
        assert!(next(&mut v).await.contains("session\\\":4}"));
    }
}
