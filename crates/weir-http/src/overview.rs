//! What an on-call screen reads across the cluster, answered from this node's own applied
//! state and history (`history.rs`) without a round to the leader, so every node — a
//! follower too — answers it, and answers it while there is no leader:
//!
//! - `GET /v1/halts`: every halt standing, in tenant order, each with the log time this
//!   node saw it set (`since_ms`, `null` if it was set before the node was watching),
//!   beside the node's log clock `now_ms`: a halt set `now_ms - since_ms` ms ago.
//! - `GET /v1/tenants`: the tenants by name (after `after`, at most `limit`), each with
//!   its halts, running runs and ceiling.
//! - `GET /v1/tenants/{tenant}/history` and `.../limits/{name}/history`: the last 15
//!   minutes of in use, waiting, grants and refusals, a sample a second.
//!
//! Who may read: the two lists name every tenant, so they need the `admin` or `read` role
//! (a `tenant:NAME` token is answered 403, as for the cluster event stream); a history
//! needs admin, read, or the tenant's own token. These are the only reads this node
//! authorizes itself rather than the client port: they read no state a linearizable read
//! would, only this node's view of it, and say so (`node` in each answer).
//!
//! Invariants: every answer is bounded ([`HALTS_ANSWER_MAX`], [`TENANTS_PAGE_MAX`], the
//! history's rings), and the applied state's lock is held only to copy what it answers.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::context::HttpCtx;
use super::error::{ApiError, ApiResult, Params};
use weir_core::bounds::NAME_BYTES_MAX;
use weir_core::machine::{HaltScope, name_rule};
use weir_server::security::Role;

/// Most halts one `GET /v1/halts` answers (the machine keeps up to 10,000 of up to 1 KiB
/// each; a screen shows far fewer). `total` says how many there are.
pub const HALTS_ANSWER_MAX: usize = 1_000;

/// Most tenants one `GET /v1/tenants` page answers, and its default.
pub const TENANTS_PAGE_MAX: u32 = 1_000;

/// 403 unless the caller may read every tenant (admin or read).
fn cluster_reader(what: &str) -> Result<(), ApiError> {
    match &super::callers::current().principal.role {
        Role::Tenant(t) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("{what} needs the admin or read role, not tenant:{t} (it names every tenant)"),
        )),
        Role::Admin | Role::Read => Ok(()),
    }
}

/// 403 unless the caller may read `tenant` (admin, read, or the tenant's own token).
pub(super) fn tenant_reader(tenant: &str) -> Result<(), ApiError> {
    match &super::callers::current().principal.role {
        Role::Tenant(t) if t != tenant => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("role tenant:{t} may not read tenant {tenant:?}"),
        )),
        _ => Ok(()),
    }
}

/// 400 `Invalid` unless `name` is a name a write could have made (non-empty, by the name
/// rule of writes).
pub(super) fn valid_name(what: &str, name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::invalid(format!("{what} is empty")));
    }
    name_rule(what, name, NAME_BYTES_MAX).map_err(ApiError::invalid)
}

/// `GET /v1/halts`.
pub async fn halts(State(ctx): State<Arc<HttpCtx>>) -> ApiResult {
    cluster_reader("the list of every halt")?;
    let (now_ms, all) = {
        let applied = ctx.state().lock();
        let m = &applied.machine;
        let mut all: Vec<(String, HaltScope, String)> = Vec::new();
        let mut total = 0usize;
        for tenant in m.tenant_names() {
            for (scope, reason) in m.halts(&tenant) {
                total += 1;
                if all.len() < HALTS_ANSWER_MAX {
                    all.push((tenant.clone(), scope, reason));
                }
            }
        }
        (m.now_ms(), (all, total))
    };
    let (kept, total) = all;
    let items: Vec<_> = kept
        .into_iter()
        .map(|(tenant, scope, reason)| {
            let since = ctx.history().halt_since(&tenant, &scope.to_string());
            let mut v = json!({"tenant": tenant, "reason": reason, "since_ms": since});
            match scope {
                HaltScope::Tenant => v["scope"] = json!("tenant"),
                HaltScope::Agent(a) => {
                    v["scope"] = json!("agent");
                    v["agent"] = json!(a);
                }
            }
            v
        })
        .collect();
    Ok(
        Json(json!({"halts": items, "total": total, "now_ms": now_ms, "node": ctx.id}))
            .into_response(),
    )
}

/// The page of tenants asked for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantsPaging {
    after: Option<String>,
    limit: Option<u32>,
}

/// `GET /v1/tenants`.
pub async fn tenants(
    State(ctx): State<Arc<HttpCtx>>,
    q: Result<axum::extract::Query<TenantsPaging>, QueryRejection>,
) -> ApiResult {
    cluster_reader("the list of tenants")?;
    let TenantsPaging { after, limit } = q
        .map_err(|e| ApiError::invalid(format!("query: {}", e.body_text())))?
        .0;
    let limit = limit.unwrap_or(TENANTS_PAGE_MAX);
    if limit == 0 || limit > TENANTS_PAGE_MAX {
        return Err(ApiError::invalid(format!(
            "query: limit {limit} is outside 1..={TENANTS_PAGE_MAX}"
        )));
    }
    let applied = ctx.state().lock();
    let m = &applied.machine;
    let names = m.tenant_names();
    let total = names.len();
    let mut page: Vec<_> = names
        .into_iter()
        .filter(|n| after.as_ref().is_none_or(|a| n > a))
        .take(limit as usize + 1)
        .collect();
    let next = (page.len() > limit as usize).then(|| {
        page.truncate(limit as usize);
        page.last().cloned()
    });
    let items: Vec<_> = page
        .iter()
        .map(|name| {
            let t = m.tenant_status(name);
            json!({
                "name": name,
                "halts": m.halts(name).len(),
                "running": t.running,
                "max_running": t.max_running,
            })
        })
        .collect();
    drop(applied);
    Ok(Json(json!({
        "tenants": items,
        "total": total,
        "next": next.flatten(),
        "node": ctx.id,
    }))
    .into_response())
}

/// `GET /v1/tenants/{tenant}/history`.
pub async fn tenant_history(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
) -> ApiResult {
    valid_name("tenant", &tenant)?;
    tenant_reader(&tenant)?;
    let history = ctx.tenant_history(&tenant);
    history.track(&tenant, None);
    let series = history.series(&tenant, None);
    Ok(Json(json!({"tenant": tenant, "node": ctx.id, "history": series})).into_response())
}

/// `GET /v1/tenants/{tenant}/limits/{name}/history`; 404 for a limit this node does not
/// know.
pub async fn limit_history(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, name)): Params<(String, String)>,
) -> ApiResult {
    valid_name("tenant", &tenant)?;
    valid_name("limit", &name)?;
    tenant_reader(&tenant)?;
    if !ctx
        .tenant_state(&tenant)
        .lock()
        .machine
        .has_limit(&tenant, &name)
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "UnknownLimit",
            format!("unknown limit {tenant}/{name}"),
        ));
    }
    let history = ctx.tenant_history(&tenant);
    history.track(&tenant, Some(&name));
    let series = history.series(&tenant, Some(&name));
    Ok(Json(json!({
        "tenant": tenant,
        "limit": name,
        "node": ctx.id,
        "missed": history.missed(),
        "history": series,
    }))
    .into_response())
}
