//! Halts: `/v1/tenants/{tenant}/halt` (the whole tenant), `/v1/tenants/{tenant}/agents/
//! {agent}/halt` (one agent), and the list of a tenant's halts.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::context::HttpCtx;
use super::error::{ApiResult, JsonBody, Params};
use super::limits::unexpected;
use weir_core::machine::{Command, HaltScope};
use weir_proto::protocol::{Answer, Query};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaltBody {
    reason: String,
}

/// `PUT /v1/tenants/{tenant}/halt`: halts the tenant.
pub async fn set_tenant(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
    JsonBody(b): JsonBody<HaltBody>,
) -> ApiResult {
    set(&ctx, tenant, HaltScope::Tenant, b.reason).await
}

/// `DELETE /v1/tenants/{tenant}/halt`: clears the tenant's halt.
pub async fn clear_tenant(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
) -> ApiResult {
    clear(&ctx, tenant, HaltScope::Tenant).await
}

/// `PUT /v1/tenants/{tenant}/agents/{agent}/halt`: halts one agent.
pub async fn set_agent(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, agent)): Params<(String, String)>,
    JsonBody(b): JsonBody<HaltBody>,
) -> ApiResult {
    set(&ctx, tenant, HaltScope::Agent(agent), b.reason).await
}

/// `DELETE /v1/tenants/{tenant}/agents/{agent}/halt`: clears an agent's halt.
pub async fn clear_agent(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, agent)): Params<(String, String)>,
) -> ApiResult {
    clear(&ctx, tenant, HaltScope::Agent(agent)).await
}

/// `GET /v1/tenants/{tenant}/halts`: the tenant's halts, tenant-wide first, as
/// `{"halts": [...]}`.
pub async fn list(State(ctx): State<Arc<HttpCtx>>, Params(tenant): Params<String>) -> ApiResult {
    match ctx.read(Query::Halts { tenant }).await? {
        Answer::Halts(h) => Ok(Json(json!({ "halts": halts_json(&h) })).into_response()),
        other => Err(unexpected(other)),
    }
}

async fn set(ctx: &HttpCtx, tenant: String, scope: HaltScope, reason: String) -> ApiResult {
    ctx.write(Command::SetHalt {
        tenant,
        scope: scope.clone(),
        reason,
    })
    .await?;
    Ok(Json(json!({"halted": scope.to_string()})).into_response())
}

async fn clear(ctx: &HttpCtx, tenant: String, scope: HaltScope) -> ApiResult {
    ctx.write(Command::ClearHalt {
        tenant,
        scope: scope.clone(),
    })
    .await?;
    Ok(Json(json!({"cleared": scope.to_string()})).into_response())
}

/// Halts as `[{"scope": "tenant" | "agent", "agent": A?, "reason": R}]`.
pub fn halts_json(halts: &[(HaltScope, String)]) -> Value {
    halts
        .iter()
        .map(|(scope, reason)| match scope {
            HaltScope::Tenant => json!({"scope": "tenant", "reason": reason}),
            HaltScope::Agent(a) => json!({"scope": "agent", "agent": a, "reason": reason}),
        })
        .collect()
}
