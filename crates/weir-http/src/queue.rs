//! A limit's permits and queue, for the console's "one limit" view:
//! `GET /v1/tenants/{tenant}/limits/{name}/holders` (permits held now, by key then fence)
//! and `.../waiters` (tickets waiting, in the order they will be served). Both are
//! linearizable reads (`Query::Holders`, `Query::Waiters`) paged by offset: `after` items
//! skipped (default 0), at most `limit` answered (default and most `QUEUE_PAGE_MAX`). The
//! answer is `{"items": [...], "total": N, "next": OFFSET|null, "now_ms": T}`, `next` being
//! the `after` of the following page and `now_ms` the log clock the page was read at: a
//! holder's `granted_at_ms` is on that clock, so "held for" is `now_ms - granted_at_ms`
//! with no wall clock involved. A waiter carries `queued_at_ms`, the log time this node saw
//! it queued (`history.rs`; `null` if it was queued before the node was watching), so
//! "waiting for" is `now_ms - queued_at_ms` on the same clock.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::context::HttpCtx;
use super::error::{ApiError, ApiResult, Params};
use super::limits::unexpected;
use weir_core::bounds::QUEUE_PAGE_MAX;
use weir_core::machine::QueuePage;
use weir_proto::protocol::{Answer, Query};

/// The page asked for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paging {
    #[serde(default)]
    after: u64,
    #[serde(default = "page_max")]
    limit: u32,
}

fn page_max() -> u32 {
    QUEUE_PAGE_MAX
}

/// The query string as [`Paging`], or 400 `Invalid` naming what is wrong.
fn paging(q: Result<axum::extract::Query<Paging>, QueryRejection>) -> Result<Paging, ApiError> {
    let Paging { after, limit } = q
        .map_err(|e| ApiError::invalid(format!("query: {}", e.body_text())))?
        .0;
    if limit == 0 || limit > QUEUE_PAGE_MAX {
        return Err(ApiError::invalid(format!(
            "query: limit {limit} is outside 1..={QUEUE_PAGE_MAX}"
        )));
    }
    Ok(Paging { after, limit })
}

/// `GET /v1/tenants/{tenant}/limits/{name}/holders`.
pub async fn holders(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, name)): Params<(String, String)>,
    q: Result<axum::extract::Query<Paging>, QueryRejection>,
) -> ApiResult {
    let Paging { after, limit } = paging(q)?;
    let query = Query::Holders {
        tenant: tenant.clone(),
        name: name.clone(),
        after,
        max: limit,
    };
    match ctx.read(query).await? {
        Answer::Holders(page) => answer(page, after, &tenant, &name),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/tenants/{tenant}/limits/{name}/waiters`.
pub async fn waiters(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, name)): Params<(String, String)>,
    q: Result<axum::extract::Query<Paging>, QueryRejection>,
) -> ApiResult {
    let Paging { after, limit } = paging(q)?;
    let query = Query::Waiters {
        tenant: tenant.clone(),
        name: name.clone(),
        after,
        max: limit,
    };
    match ctx.read(query).await? {
        Answer::Waiters(page) => {
            let mut body = answer_json(page.as_ref(), after, &tenant, &name)?;
            // When this node saw each ticket queued (log clock; `null` if before it watched).
            if let (Some(page), Some(items)) = (page, body["items"].as_array_mut()) {
                for (item, w) in items.iter_mut().zip(&page.items) {
                    item["queued_at_ms"] =
                        json!(ctx.tenant_history(&tenant).queued_at(w.session, w.ticket));
                }
            }
            Ok(Json(body).into_response())
        }
        other => Err(unexpected(other)),
    }
}

/// A page as JSON with the offset of the next one, or 404 `UnknownLimit`.
fn answer<T: Serialize>(
    page: Option<QueuePage<T>>,
    after: u64,
    tenant: &str,
    name: &str,
) -> ApiResult {
    Ok(Json(answer_json(page.as_ref(), after, tenant, name)?).into_response())
}

/// The body of [`answer`].
fn answer_json<T: Serialize>(
    page: Option<&QueuePage<T>>,
    after: u64,
    tenant: &str,
    name: &str,
) -> Result<serde_json::Value, ApiError> {
    let Some(page) = page else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "UnknownLimit",
            format!("unknown limit {tenant}/{name}"),
        ));
    };
    let end = after.saturating_add(page.items.len() as u64);
    let next = (end < page.total).then_some(end);
    Ok(json!({"items": page.items, "total": page.total, "next": next, "now_ms": page.now_ms}))
}
