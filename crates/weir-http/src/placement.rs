//! `/v1/tenants/{tenant}/placement`: which data group decides a tenant, on a cluster of
//! several Raft groups, and placing it (`weir tenant place` over HTTP).
//!
//! - `PUT` places the tenant in the body's `group`, or with no group finds where it lives
//!   and places it in the default group if nowhere; through the caller's internal client,
//!   so the client port authorizes it as `PlaceTenant` (a chosen group is `admin`'s; a
//!   tenant's own token may ask with no group) and proposes it in the metadata group. A
//!   placement is made once and for good: another group is answered 421 `WrongGroup`
//!   naming the one it has.
//! - `GET` answers from this node's placements, without a round: a placement never changes,
//!   so a node's answer is never wrong, only possibly late (404 `Unplaced` for a tenant
//!   this node has not seen placed). A node of one group answers group 0 for every tenant.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::context::HttpCtx;
use super::error::{ApiError, ApiResult, JsonBody, Params};
use weir_client::ClientError;
use weir_proto::protocol::Failure;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlaceBody {
    group: Option<u64>,
}

/// `PUT /v1/tenants/{tenant}/placement`: places the tenant (module doc); answers the group
/// it lives in.
pub async fn place(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
    JsonBody(b): JsonBody<PlaceBody>,
) -> ApiResult {
    let group = match ctx.client().place_tenant(&tenant, b.group).await {
        Ok(group) => group,
        Err(ClientError::Failed(Failure::WrongGroup { tenant, group })) => {
            let mut error = ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "WrongGroup",
                format!("tenant {tenant} is placed in group {group}, once and for good"),
            );
            error.body.insert("tenant".into(), json!(tenant));
            error.body.insert("group".into(), json!(group));
            return Err(error);
        }
        Err(e) => return Err(ApiError::client(&e)),
    };
    Ok(Json(json!({"tenant": tenant, "group": group})).into_response())
}

/// `GET /v1/tenants/{tenant}/placement`: the group this node's placements put the tenant
/// in.
pub async fn show(State(ctx): State<Arc<HttpCtx>>, Params(tenant): Params<String>) -> ApiResult {
    super::overview::valid_name("tenant", &tenant)?;
    super::overview::tenant_reader(&tenant)?;
    match ctx.placed(&tenant) {
        Some(group) => Ok(Json(json!({"tenant": tenant, "group": group})).into_response()),
        None => {
            let mut error = ApiError::new(
                StatusCode::NOT_FOUND,
                "Unplaced",
                format!("tenant {tenant} is placed in no group, as far as this node has applied"),
            );
            error.body.insert("tenant".into(), json!(tenant));
            Err(error)
        }
    }
}
