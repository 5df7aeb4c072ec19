//! `/v1/sessions`: open, keep alive, close, and release a ticket; and a session's token
//! leases (`/v1/tenants/{tenant}/leases`). A session opened here is
//! an ordinary session: the HTTP client keeps it alive (`POST .../keepalive` well within its
//! TTL), and the cluster expires it when keep-alives stop, releasing what it holds.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::context::HttpCtx;
use super::error::{ApiResult, JsonBody, Params};
use weir_core::machine::{Command, LeasePart, LeaseTokens, Reply, SessionId, TicketId};

/// Default session TTL, ms (the TTL G9 is promised for).
const TTL_MS_DEFAULT: u64 = 3_000;

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenBody {
    ttl_ms: u64,
}

impl Default for OpenBody {
    fn default() -> Self {
        OpenBody {
            ttl_ms: TTL_MS_DEFAULT,
        }
    }
}

/// `POST /v1/sessions`: opens a session; answers its id and TTL.
pub async fn open(State(ctx): State<Arc<HttpCtx>>, JsonBody(b): JsonBody<OpenBody>) -> ApiResult {
    let reply = ctx.write(Command::OpenSession { ttl_ms: b.ttl_ms }).await?;
    Ok(Json(reply_json(&reply)).into_response())
}

/// A keep-alive's body, optional: `acked_below`, the session's acknowledged mark. A caller
/// that names its tickets 1, 2, 3, … sends its lowest ticket it may still ask about (or
/// retry): the cluster forgets the finished tickets below it and refuses them `Invalid`
/// from then on (`weir_core::machine::session`). Without it the session's finished tickets
/// are kept for their log-time window, as for every caller that carries no mark.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeepAliveBody {
    acked_below: Option<TicketId>,
}

/// `POST /v1/sessions/{session}/keepalive`: renews the lease for another TTL (and raises
/// the session's acknowledged mark, when the body names one).
pub async fn keep_alive(
    State(ctx): State<Arc<HttpCtx>>,
    Params(session): Params<SessionId>,
    JsonBody(b): JsonBody<KeepAliveBody>,
) -> ApiResult {
    let command = match b.acked_below {
        None => Command::KeepAlive { session },
        Some(acked_below) => Command::KeepAliveAcked {
            session,
            acked_below,
        },
    };
    let reply = ctx.write(command).await?;
    Ok(Json(reply_json(&reply)).into_response())
}

/// `DELETE /v1/sessions/{session}`: closes it, releasing its permits and withdrawing its
/// tickets.
pub async fn close(
    State(ctx): State<Arc<HttpCtx>>,
    Params(session): Params<SessionId>,
) -> ApiResult {
    ctx.write(Command::CloseSession { session }).await?;
    Ok(Json(json!({"session": session, "closed": true})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    ticket: TicketId,
}

/// `POST /v1/sessions/{session}/release`: frees the ticket's permit or withdraws it from
/// its queue. Idempotent.
pub async fn release(
    State(ctx): State<Arc<HttpCtx>>,
    Params(session): Params<SessionId>,
    JsonBody(b): JsonBody<ReleaseBody>,
) -> ApiResult {
    let reply = ctx
        .write(Command::Release {
            session,
            ticket: b.ticket,
        })
        .await?;
    Ok(Json(reply_json(&reply)).into_response())
}

/// A settlement's body: the take (granted with `estimate`) and its actual cost in tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleTakeBody {
    ticket: TicketId,
    cost: u64,
}

/// `POST /v1/sessions/{session}/settle`: settles a take granted with an estimate at its
/// actual cost: `settled` (the difference returned), or `overrun` with what was charged
/// above the estimate. Idempotent: a retry answers `settled` with `duplicate`.
pub async fn settle_take(
    State(ctx): State<Arc<HttpCtx>>,
    Params(session): Params<SessionId>,
    JsonBody(b): JsonBody<SettleTakeBody>,
) -> ApiResult {
    let reply = ctx
        .write(Command::SettleTake {
            session,
            ticket: b.ticket,
            cost: b.cost,
        })
        .await?;
    Ok(Json(reply_json(&reply)).into_response())
}

/// A successful reply as JSON: `{"status": NAME, ...fields}`.
pub fn reply_json(reply: &Reply) -> serde_json::Value {
    match reply {
        Reply::Done => json!({"status": "done"}),
        Reply::SessionOpened { session, ttl_ms } => {
            json!({"status": "opened", "session": session, "ttl_ms": ttl_ms})
        }
        Reply::KeptAlive { ttl_ms } => json!({"status": "kept_alive", "ttl_ms": ttl_ms}),
        Reply::Granted { fence, units } => {
            json!({"status": "granted", "fence": fence, "units": units})
        }
        Reply::Queued { position } => json!({"status": "queued", "position": position}),
        Reply::Released { held, withdrawn } => {
            json!({"status": "released", "held": held, "withdrawn": withdrawn})
        }
        Reply::Admitted => json!({"status": "admitted"}),
        Reply::Settled { duplicate } => json!({"status": "settled", "duplicate": duplicate}),
        Reply::Overrun {
            tokens,
            minor_units,
        } => {
            json!({"status": "overrun", "overrun_tokens": tokens, "overrun_minor_units": minor_units})
        }
        Reply::LimitsApplied(c) => json!({"status": "applied", "created": c.created,
            "changed": c.changed, "removed": c.removed, "unchanged": c.unchanged}),
        Reply::Refused(r) => json!({"status": "refused", "refusal": r.to_string()}),
        Reply::Leased(shares) => json!({"status": "leased", "parts": shares}),
        Reply::Placed { group } => json!({"status": "placed", "group": group}),
    }
}

/// A lease request's body: the session, its lease request counter (`seq`, above every
/// earlier one of the session; a retry repeats it), and each part's share asked
/// ([`LeaseTokens`] in the machine's terms).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseBody {
    session: SessionId,
    seq: u64,
    parts: Vec<LeasePart>,
}

/// `POST /v1/tenants/{tenant}/leases`: sets the session's token leases on the parts' rate
/// limits (or keys) to the shares asked, as far as the limits have room, in one entry:
/// `leased` with each part's lease as it now stands (what the holder may spend locally,
/// and until when by the belief rule of its session), or a refusal that changed nothing.
/// A share of 0 (rate and cap) ends that part's lease.
pub async fn lease(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
    JsonBody(b): JsonBody<LeaseBody>,
) -> ApiResult {
    let reply = ctx
        .write(Command::LeaseTokens(LeaseTokens {
            session: b.session,
            tenant,
            seq: b.seq,
            parts: b.parts,
        }))
        .await?;
    Ok(Json(reply_json(&reply)).into_response())
}
