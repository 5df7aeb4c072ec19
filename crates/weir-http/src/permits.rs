//! Permits and tokens: `POST /v1/tenants/{tenant}/limits/{name}/acquire` (a session's
//! ticket, long-polled while it waits) and `.../take` (a one-shot rate take, no session).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::bounds::WAIT_MS_MAX;
use super::context::HttpCtx;
use super::error::{ApiError, ApiResult, JsonBody, Params};
use super::events::{Waited, wait_for_ticket};
use super::limits::unexpected;
use super::sessions::reply_json;
use weir_core::machine::{
    Acquire, AcquireParts, Command, Event, Part, Priority, Refusal, Reply, SessionId, TicketId,
};
use weir_proto::protocol::{Answer, Query};

/// An acquire's body: `session` and `ticket` are required, every other field has the
/// default its doc names (docs/openapi.yaml's `AcquireBody` says the same).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    session: SessionId,
    /// Chosen by the client, unique in the session; sending it again is idempotent.
    ticket: TicketId,
    /// The key of the limit, when it is keyed.
    #[serde(default)]
    key: Option<String>,
    /// Default 1.
    #[serde(default = "one")]
    units: u32,
    /// More limits of the tenant decided with this one: all granted under one fence, or
    /// none charged.
    #[serde(default)]
    parts: Vec<Part>,
    /// The units of the rate parts are an estimate, settled later (`.../settle`).
    #[serde(default)]
    estimate: bool,
    /// Priority level, higher first.
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    fairness_key: String,
    /// Default 1.
    #[serde(default = "one")]
    weight: u32,
    #[serde(default)]
    agent: Option<String>,
    /// Queue when there is no room (`false` answers 429 `Busy` instead). Default true.
    #[serde(default = "yes")]
    wait: bool,
    /// How long to hold the request open while the ticket waits, ms (at most
    /// [`WAIT_MS_MAX`]; default 30 s). When it passes the answer is 202 `queued`: the
    /// ticket stays queued, and the same acquire (or the event stream) learns its grant
    /// later.
    #[serde(default = "timeout_ms_default")]
    timeout_ms: u64,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

fn timeout_ms_default() -> u64 {
    30_000
}

/// Acquires a permit for the body's (session, ticket): 200 `granted` with its fence, 202
/// `queued` with its position once `timeout_ms` passes, or a refusal.
pub async fn acquire(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, limit)): Params<(String, String)>,
    JsonBody(b): JsonBody<AcquireBody>,
) -> ApiResult {
    if b.timeout_ms > WAIT_MS_MAX {
        return Err(ApiError::invalid(format!(
            "timeout_ms {} is above {WAIT_MS_MAX}",
            b.timeout_ms
        )));
    }
    let command = acquire_command(AcquireParts {
        session: b.session,
        ticket: b.ticket,
        tenant,
        parts: first_and(limit, b.key, b.units, b.parts),
        priority: Priority {
            level: b.priority,
            fairness_key: b.fairness_key,
            fairness_weight: b.weight,
        },
        agent: b.agent,
        wait: b.wait,
        estimate: b.estimate,
    });
    let deadline = Instant::now() + Duration::from_millis(b.timeout_ms);
    loop {
        // Subscribed before the acquire is sent: a grant applied right after it is seen.
        let mut applied = ctx.state().subscribe();
        let reply = ctx.write(command.clone()).await?;
        let Reply::Queued { position } = reply else {
            return Ok(Json(reply_json(&reply)).into_response());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(queued(position));
        }
        match wait_for_ticket(&mut applied, b.session, b.ticket, left).await {
            Waited::Event(Event::Granted { fence, units, .. }) => {
                return Ok(Json(reply_json(&Reply::Granted { fence, units })).into_response());
            }
            Waited::Event(Event::Refused { refusal, .. }) => {
                return Err(ApiError::refused(&refusal, ctx.now_ms()));
            }
            Waited::Event(_) => {
                let gone = Refusal::UnknownSession { session: b.session };
                return Err(ApiError::refused(&gone, ctx.now_ms()));
            }
            // Missed events, or time is up: ask again (idempotent), which also answers a
            // grant this node has not applied yet. With no time left it answers queued.
            Waited::Lagged => {}
            Waited::TimedOut => {
                return match ctx.write(command).await? {
                    Reply::Queued { position } => Ok(queued(position)),
                    reply => Ok(Json(reply_json(&reply)).into_response()),
                };
            }
        }
    }
}

/// 202: still queued when the request's time ran out.
fn queued(position: u32) -> axum::response::Response {
    (
        StatusCode::ACCEPTED,
        Json(json!({"status": "queued", "position": position})),
    )
        .into_response()
}

/// The parts of a request: the path's limit (with the body's key and units) first, then
/// the body's parts.
fn first_and(limit: String, key: Option<String>, units: u32, more: Vec<Part>) -> Vec<Part> {
    std::iter::once(Part { limit, key, units })
        .chain(more)
        .collect()
}

/// An `Acquire` for one keyless part without an estimate, an `AcquireParts` otherwise.
fn acquire_command(a: AcquireParts) -> Command {
    match a.parts.as_slice() {
        [part] if part.key.is_none() && !a.estimate => Command::Acquire(Acquire {
            session: a.session,
            ticket: a.ticket,
            tenant: a.tenant,
            limit: part.limit.clone(),
            units: part.units,
            priority: a.priority,
            agent: a.agent,
            wait: a.wait,
        }),
        _ => Command::AcquireParts(a),
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TakeBody {
    /// The key of the limit, when it is keyed.
    key: Option<String>,
    units: u32,
    /// More rate limits of the tenant taken from with this one, all or none.
    parts: Vec<Part>,
    agent: Option<String>,
}

impl Default for TakeBody {
    fn default() -> Self {
        TakeBody {
            key: None,
            units: 1,
            parts: Vec::new(),
            agent: None,
        }
    }
}

/// Takes `units` tokens from a rate-only limit now, or not at all: 200 with the tokens left
/// in the bucket, or 429 `Busy` with `Retry-After`. Runs as an acquire (`wait = false`) in
/// the node's own session, so it goes through the log like every other grant (G1). The
/// session is the node's, so the take goes to the tenant's group whatever group the request
/// names (`HttpCtx::for_tenant`).
pub async fn take(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, limit)): Params<(String, String)>,
    JsonBody(b): JsonBody<TakeBody>,
) -> ApiResult {
    let caller = ctx.for_tenant(super::callers::current(), &tenant);
    super::callers::act_as(caller, take_in(&ctx, tenant, limit, b)).await
}

/// [`take`], as the current caller.
async fn take_in(ctx: &HttpCtx, tenant: String, limit: String, b: TakeBody) -> ApiResult {
    // Another tenant's token learns nothing of this tenant's limits here (the take itself
    // is authorized by the client port).
    super::overview::tenant_reader(&tenant)?;
    // A take holds nothing, so a limit with a cap is refused: its permit would be held by
    // the node's session with no one to release it. The spec is read locally: it changes
    // rarely, and the acquire itself is checked by the machine. A limit this node has not
    // applied at all (a follower a moment behind its definition) is read from the leader.
    // A redefinition that adds a cap to a rate-only limit reaches a lagging node a moment
    // later: a take there meanwhile is granted, and its permit held by the node's take
    // session until that session's TTL.
    let parts = first_and(limit.clone(), b.key.clone(), b.units, b.parts.clone());
    for part in &parts {
        let local = ctx
            .state()
            .lock()
            .machine
            .limit_status(&tenant, &part.limit);
        let concurrent = match local {
            Some(l) => l.concurrent,
            None => match ctx
                .read(Query::Limit {
                    tenant: tenant.clone(),
                    name: part.limit.clone(),
                })
                .await?
            {
                // Unknown at the leader too: the acquire is refused `UnknownLimit`.
                Answer::Limit(l) => l.map_or(0, |l| l.concurrent),
                other => return Err(unexpected(other)),
            },
        };
        if concurrent > 0 {
            return Err(ApiError::invalid(format!(
                "{tenant}/{} has a concurrent cap: take is for rate-only limits; acquire a permit in a session",
                part.limit
            )));
        }
    }
    // The bucket left is told for one keyless part; a key's or several are not one bucket.
    let one_bucket = parts.len() == 1 && b.key.is_none();
    // Two tries: the node's session may have expired since the last take.
    for _ in 0..2 {
        let (session, ticket) = ctx.take_ticket().await?;
        let reply = ctx
            .client()
            .write(acquire_command(AcquireParts {
                session,
                ticket,
                tenant: tenant.clone(),
                parts: parts.clone(),
                priority: Priority::default(),
                agent: b.agent.clone(),
                wait: false,
                estimate: false,
            }))
            .await?;
        match reply {
            Reply::Granted { units, .. } if !one_bucket => {
                return Ok(Json(json!({"taken": units, "remaining": null})).into_response());
            }
            Reply::Granted { units, .. } => {
                let remaining = match ctx
                    .read(Query::Limit {
                        tenant: tenant.clone(),
                        name: limit.clone(),
                    })
                    .await?
                {
                    Answer::Limit(l) => l.map(|l| l.tokens),
                    other => return Err(unexpected(other)),
                };
                return Ok(Json(json!({"taken": units, "remaining": remaining})).into_response());
            }
            Reply::Refused(Refusal::UnknownSession { .. }) => ctx.take_session_lost(session).await,
            Reply::Refused(r) => return Err(ApiError::refused(&r, ctx.now_ms())),
            other => return Err(ApiError::invalid(format!("unexpected answer {other:?}"))),
        }
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        "the node's take session could not be opened",
    ))
}
