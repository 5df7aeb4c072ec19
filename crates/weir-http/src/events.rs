//! A session's events: the server-sent-event stream, and the wait of a long-polled
//! acquire.
//!
//! Both read this node's own applied log, not the leader's pushes: every node applies every
//! entry and computes the same events from it (machine module doc), so a follower serves a
//! session's events as well as the leader does, a little later (when it applies). A
//! subscriber that falls behind the broadcast misses events; the stream then sends a
//! `lagged` event (the client asks again for its tickets: an acquire is idempotent), and a
//! waiting acquire asks again itself.
//!
//! A stream is only for its session's owner (G10): before it starts, the caller's principal
//! is checked against the owner this node's machine records for the session (403
//! `Forbidden` for another principal). A session this node has not applied yet (a follower a
//! little behind the leader that opened it) is waited for, at most [`SESSION_APPEAR_WAIT`],
//! then answered 404 `UnknownSession`. The owner never changes, so one check covers the
//! whole stream. Both read the group the request speaks to (its `Weir-Group` header); a
//! session this node holds in another of its groups is answered 421 `WrongGroup` at once,
//! naming the group whose header to send. A long-polled acquire's wait needs no check of its own: its acquire went
//! through the client port, which checked the owner.
//!
//! A stream ends when a reload (SIGHUP) takes its caller's token away, as a client-port
//! connection closes then: its last event is `revoked`, naming why.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde_json::json;
use tokio::sync::broadcast::{self, error::RecvError};

use axum::http::StatusCode;

use super::context::HttpCtx;
use super::error::{ApiError, Params};
use weir_core::machine::{Applied, Event, Refusal, SessionId, TicketId};
use weir_proto::protocol::Failure;
use weir_server::session_owner::{OwnerCheck, check_owner};

/// How often an idle event stream sends a comment, so proxies and clients see it alive.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long a stream waits for this node to apply the session it names before answering
/// 404: a healthy follower applies a committed entry within a heartbeat or two (well under
/// a second); this leaves room for a loaded machine (3 s was seen to be too short on two
/// cores under a load of 24), and bounds what a stream naming a bogus id costs.
const SESSION_APPEAR_WAIT: Duration = Duration::from_secs(10);

/// How often the wait for a session to appear looks again without a broadcast to wake it.
const APPEAR_LOOK: Duration = Duration::from_millis(20);

/// Checks that the current caller may follow `session` by the shared rule
/// ([`check_owner`]), waiting for this node to apply the session if it has not yet (see the
/// module doc).
async fn check_owner_here(ctx: &HttpCtx, session: SessionId) -> Result<(), ApiError> {
    let caller = super::callers::current();
    let mut applied = ctx.state().subscribe();
    let appear = async {
        loop {
            let check = check_owner(ctx.state(), &caller.principal, session);
            if check != OwnerCheck::Unknown {
                return Ok(check);
            }
            if let Some(group) = ctx.other_group_of_session(session) {
                return Err(group);
            }
            // Woken by an applied batch that has events, or after APPEAR_LOOK at the latest:
            // the entry that opens a session raises no event, so it may broadcast nothing.
            tokio::select! {
                got = applied.recv() => match got {
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return Ok(OwnerCheck::Unknown),
                },
                () = tokio::time::sleep(APPEAR_LOOK) => {}
            }
        }
    };
    let check = match tokio::time::timeout(SESSION_APPEAR_WAIT, appear).await {
        Ok(Ok(check)) => check,
        Ok(Err(group)) => {
            let mut error = ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "WrongGroup",
                format!(
                    "session {session} is group {group}'s: send its requests with the header \
                     `Weir-Group: {group}`"
                ),
            );
            error.body.insert("session".into(), json!(session));
            error.body.insert("group".into(), json!(group));
            return Err(error);
        }
        Err(_) => OwnerCheck::Unknown,
    };
    match check {
        OwnerCheck::Allowed => Ok(()),
        OwnerCheck::Forbidden(why) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            Failure::Forbidden(why).to_string(),
        )),
        OwnerCheck::Unknown => Err(ApiError::refused(&Refusal::UnknownSession { session }, 0)),
    }
}

/// `GET /v1/sessions/{session}/events`: the session's events as server-sent events —
/// `granted`, `refused`, `halted`, `expired` (the last one; the stream then ends),
/// `lagged`, and `revoked` (the caller's token was revoked; the last one). Each `data` is
/// JSON.
pub async fn stream(
    State(ctx): State<Arc<HttpCtx>>,
    Params(session): Params<SessionId>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    // Subscribed before the check, so no event after it is missed.
    let applied = ctx.state().subscribe();
    check_owner_here(&ctx, session).await?;
    let caller = super::callers::current();
    let revoked = Box::pin(ctx.callers.tokens().revoked(caller.principal.clone()));
    let events = futures_util::stream::unfold(
        (applied, Vec::<SseEvent>::new(), false, revoked),
        move |(mut applied, mut ready, mut ended, mut revoked)| async move {
            loop {
                if let Some(e) = ready.pop() {
                    return Some((Ok(e), (applied, ready, ended, revoked)));
                }
                if ended {
                    return None;
                }
                let got = tokio::select! {
                    got = applied.recv() => got,
                    why = &mut revoked => {
                        ready.push(
                            SseEvent::default()
                                .event("revoked")
                                .data(json!({"session": session, "reason": why}).to_string()),
                        );
                        ended = true;
                        continue;
                    }
                };
                match got {
                    Ok(entry) => {
                        // Reversed, so `pop` sends them in the order they happened.
                        for event in entry.events.iter().rev() {
                            if event.session() == session {
                                ended |= matches!(event, Event::SessionExpired { .. });
                                ready.push(sse_of(event));
                            }
                        }
                    }
                    Err(RecvError::Lagged(n)) => ready.push(
                        SseEvent::default()
                            .event("lagged")
                            .data(json!({"missed_entries": n}).to_string()),
                    ),
                    Err(RecvError::Closed) => ended = true,
                }
            }
        },
    );
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(SSE_KEEP_ALIVE)))
}

/// One event as SSE: its kind as the event name, its fields as JSON data.
fn sse_of(event: &Event) -> SseEvent {
    let (name, data) = match event {
        Event::Granted {
            session,
            ticket,
            fence,
            units,
        } => (
            "granted",
            json!({"session": session, "ticket": ticket, "fence": fence, "units": units}),
        ),
        Event::Refused {
            session,
            ticket,
            refusal,
        } => (
            "refused",
            json!({"session": session, "ticket": ticket,
                   "error": weir_server::metrics::refusal_kind(refusal), "message": refusal.to_string()}),
        ),
        Event::Halted {
            session,
            ticket,
            scope,
            reason,
        } => (
            "halted",
            json!({"session": session, "ticket": ticket, "scope": scope.to_string(), "reason": reason}),
        ),
        Event::SessionExpired { session } => ("expired", json!({"session": session})),
    };
    SseEvent::default().event(name).data(data.to_string())
}

/// How a wait for one ticket ended.
pub enum Waited {
    /// An event about the ticket (a grant or a refusal), or the session's expiry.
    Event(Event),
    /// The subscription fell behind: the caller asks again.
    Lagged,
    /// Nothing within the time given.
    TimedOut,
}

/// Waits on `applied` (subscribed before the acquire was sent, so no event is missed) for
/// the grant or refusal of `ticket`, or the expiry of `session`, at most `within`.
pub async fn wait_for_ticket(
    applied: &mut broadcast::Receiver<Arc<Applied>>,
    session: SessionId,
    ticket: TicketId,
    within: Duration,
) -> Waited {
    let wait = async {
        loop {
            match applied.recv().await {
                Ok(entry) => {
                    let mine = entry.events.iter().find(|e| match e {
                        Event::Granted {
                            session: s,
                            ticket: t,
                            ..
                        }
                        | Event::Refused {
                            session: s,
                            ticket: t,
                            ..
                        } => *s == session && *t == ticket,
                        Event::SessionExpired { session: s } => *s == session,
                        Event::Halted { .. } => false,
                    });
                    if let Some(e) = mine {
                        return Waited::Event(e.clone());
                    }
                }
                Err(RecvError::Lagged(_)) => return Waited::Lagged,
                // The node is stopping: nothing more will come.
                Err(RecvError::Closed) => return Waited::TimedOut,
            }
        }
    };
    tokio::time::timeout(within, wait)
        .await
        .unwrap_or(Waited::TimedOut)
}
