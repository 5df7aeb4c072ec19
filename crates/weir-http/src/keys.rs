//! `/v1/tenants/{tenant}/limits/{name}/keys`: the keys of a keyed limit. `GET …/keys/{key}`
//! answers one key's status (a fresh key's — a full bucket, an idle semaphore — when the key
//! is not live, never 404 for a key); `GET …/keys?after=K&limit=N` answers a page of live
//! keys in key order, `{"keys": [...], "next": K}` (`next` is null on the last page), at
//! most `bounds::KEYS_PAGE_MAX` a page. An unknown or unkeyed limit answers 404
//! `UnknownLimit`; a bad query string 400 `Invalid` naming the parameter.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::context::HttpCtx;
use super::error::{ApiError, ApiResult, Params};
use super::limits::unexpected;
use weir_core::bounds::KEYS_PAGE_MAX;
use weir_proto::protocol::{Answer, Query};

/// Keys per page when the request names no `limit`.
const PAGE_DEFAULT: u32 = 100;

/// The query string of `GET …/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    /// Start after this key (the `next` of the previous page).
    after: Option<String>,
    /// Keys in the page, 1 to `KEYS_PAGE_MAX`.
    limit: Option<u32>,
}

fn no_keyed_limit(tenant: &str, name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "UnknownLimit",
        format!("unknown keyed limit {tenant}/{name}"),
    )
}

/// `GET /v1/tenants/{tenant}/limits/{name}/keys/{key}`: the key's status, in the shape of a
/// limit's.
pub async fn show(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, name, key)): Params<(String, String, String)>,
) -> ApiResult {
    let query = Query::Key {
        tenant: tenant.clone(),
        name: name.clone(),
        key,
    };
    match ctx.read(query).await? {
        Answer::Key(Some(status)) => Ok(Json(status).into_response()),
        Answer::Key(None) => Err(no_keyed_limit(&tenant, &name)),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/tenants/{tenant}/limits/{name}/keys?after=K&limit=N`: a page of live keys.
pub async fn list(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, name)): Params<(String, String)>,
    raw: axum::extract::RawQuery,
) -> ApiResult {
    let params: PageParams = parse_query(raw.0.as_deref())?;
    let limit = params.limit.unwrap_or(PAGE_DEFAULT);
    if limit == 0 || limit > KEYS_PAGE_MAX {
        return Err(ApiError::invalid(format!(
            "query: limit must be in 1..={KEYS_PAGE_MAX}, got {limit}"
        )));
    }
    let query = Query::Keys {
        tenant: tenant.clone(),
        name: name.clone(),
        after: params.after,
        limit,
    };
    match ctx.read(query).await? {
        Answer::Keys(Some(page)) => {
            Ok(Json(json!({"keys": page.keys, "next": page.next})).into_response())
        }
        Answer::Keys(None) => Err(no_keyed_limit(&tenant, &name)),
        other => Err(unexpected(other)),
    }
}

/// Parses a query string (absent: no parameters) into `T`, or 400 `Invalid` naming the
/// problem.
fn parse_query<T: serde::de::DeserializeOwned>(raw: Option<&str>) -> Result<T, ApiError> {
    let uri: axum::http::Uri = format!("/?{}", raw.unwrap_or(""))
        .parse()
        .map_err(|e| ApiError::invalid(format!("query: {e}")))?;
    axum::extract::Query::<T>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::invalid(format!("query: {e}")))
}
