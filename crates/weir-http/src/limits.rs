//! `/v1/tenants/{tenant}/limits`: define, show, list and remove limits, apply a tenant's
//! limits at once, and export them (`/v1/tenants/{tenant}/definitions`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::bounds::LIMITS_PAGE_DEFAULT;
use super::context::HttpCtx;
use super::error::{ApiError, ApiResult, JsonBody, Params, QueryParams};
use weir_core::bounds::{LIMITS_MAX, LIMITS_PAGE_MAX};
use weir_core::machine::{Command, Definition, Reply};
use weir_proto::protocol::{Answer, Query};

/// A limit's spec; every field optional (a limit of nothing caps nothing).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Spec {
    /// Units held at once, at most; 0 is no cap.
    concurrent: u32,
    /// Token refill per second; 0 is no rate.
    per_second: f64,
    /// Bucket size; default `max(per_second, 1)`.
    burst: Option<u64>,
    /// One bucket or semaphore per key: every acquire or take names a key.
    keyed: bool,
    /// Most live keys of a keyed limit (implies `keyed`).
    keys_max: Option<u32>,
    /// Evaluated and counted, never refuses.
    shadow: bool,
}

impl Spec {
    /// The definition of (tenant, name) with this spec.
    fn definition(self, tenant: &str, name: &str) -> Definition {
        Definition {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
            concurrent: self.concurrent,
            per_second: self.per_second,
            burst: self.burst,
            keyed: self.keyed || self.keys_max.is_some(),
            keys_max: self.keys_max,
            shadow: self.shadow,
        }
    }
}

/// The body of `PUT /v1/tenants/{tenant}/limits`: the tenant's limits by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyBody {
    /// Each limit's spec, as `PUT …/limits/{name}` takes it.
    limits: std::collections::BTreeMap<String, Spec>,
    /// Remove the tenant's limits not named.
    #[serde(default)]
    prune: bool,
    /// Answer the change without making it.
    #[serde(default)]
    dry_run: bool,
}

/// `GET /v1/tenants/{tenant}/definitions`: the tenant's limits as the body `PUT …/limits`
/// takes, `{limits: {name: spec}}`, every field given and `burst` resolved, so putting it
/// back changes nothing (`weir limits export` over HTTP). Limits removed and still
/// draining are left out. Read page by page (each linearizable), as `weir limits export`
/// does; a tenant has at most `LIMITS_MAX` limits, so the pages are bounded.
pub async fn export(State(ctx): State<Arc<HttpCtx>>, Params(tenant): Params<String>) -> ApiResult {
    let mut limits = serde_json::Map::new();
    let mut after = None;
    for _ in 0..=LIMITS_MAX / LIMITS_PAGE_MAX {
        let query = Query::Limits {
            tenant: tenant.clone(),
            prefix: String::new(),
            after: after.take(),
            max: LIMITS_PAGE_MAX as u32,
        };
        let page = match ctx.read(query).await? {
            Answer::Limits(page) => page,
            other => return Err(unexpected(other)),
        };
        for l in page.limits.iter().filter(|l| !l.removing) {
            let spec = json!({"concurrent": l.concurrent, "per_second": l.per_second,
                "burst": l.burst, "keyed": l.keys_max.is_some(), "keys_max": l.keys_max,
                "shadow": l.shadow});
            limits.insert(l.name.clone(), spec);
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(Json(json!({ "limits": limits })).into_response()),
        }
    }
    Err(ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        format!("tenant {tenant} answered more than {LIMITS_MAX} limits"),
    ))
}

/// `PUT /v1/tenants/{tenant}/limits`: sets the tenant's definitions in one entry (all or
/// nothing), answering `{created, changed, removed, unchanged, applied}`; with `dry_run`
/// the change comes from a linearizable read and `applied` is false.
pub async fn apply(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
    JsonBody(b): JsonBody<ApplyBody>,
) -> ApiResult {
    let definitions: Vec<Definition> = b
        .limits
        .into_iter()
        .map(|(name, spec)| spec.definition(&tenant, &name))
        .collect();
    let change = if b.dry_run {
        let query = Query::LimitsChange {
            tenant,
            definitions,
            prune: b.prune,
        };
        match ctx.read(query).await? {
            Answer::LimitsChange(Ok(change)) => change,
            Answer::LimitsChange(Err(refusal)) => {
                return Err(ApiError::refused(&refusal, ctx.now_ms()));
            }
            other => return Err(unexpected(other)),
        }
    } else {
        let command = Command::ApplyLimits {
            tenant,
            definitions,
            prune: b.prune,
        };
        match ctx.write(command).await? {
            Reply::LimitsApplied(change) => change,
            other => return Err(unexpected_reply(other)),
        }
    };
    Ok(
        Json(json!({"created": change.created, "changed": change.changed,
        "removed": change.removed, "unchanged": change.unchanged, "applied": !b.dry_run}))
        .into_response(),
    )
}

/// A write answered with another write's reply: a broken node.
fn unexpected_reply(reply: Reply) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        format!("unexpected reply {reply:?}"),
    )
}

/// `PUT /v1/tenants/{tenant}/limits/{name}`: defines the limit, or changes its spec.
pub async fn define(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, name)): Params<(String, String)>,
    JsonBody(spec): JsonBody<Spec>,
) -> ApiResult {
    let definition = spec.definition(&tenant, &name);
    ctx.write(definition.into_command()).await?;
    Ok(Json(json!({"tenant": tenant, "name": name, "defined": true})).into_response())
}

/// The limit `name` names in `tenant` on this node's applied state: itself, or a limit
/// compiled from a ratelimit file whose name reads as `name` (`envoy:path=/beta`, as the
/// file wrote it, for `envoy:path=%2Fbeta`: a URL decodes `%2F` to `/`). Reads find such a
/// name on their own (`weir_server::server::reader`); a removal is a write, named here.
pub fn as_named(ctx: &HttpCtx, tenant: &str, name: String) -> String {
    let state = ctx.tenant_state(tenant).lock();
    state
        .machine
        .limit_as_written(tenant, &name)
        .unwrap_or(name)
}

/// `GET /v1/tenants/{tenant}/limits/{name}`: its spec and use (the CLI's `limit show --json`).
pub async fn show(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, name)): Params<(String, String)>,
) -> ApiResult {
    match ctx
        .read(Query::Limit {
            tenant: tenant.clone(),
            name: name.clone(),
        })
        .await?
    {
        Answer::Limit(Some(l)) => Ok(Json(l).into_response()),
        Answer::Limit(None) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "UnknownLimit",
            format!("unknown limit {tenant}/{name}"),
        )),
        other => Err(unexpected(other)),
    }
}

/// The query of `GET /v1/tenants/{tenant}/limits`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only names starting with this.
    #[serde(default)]
    prefix: String,
    /// Only names strictly after this (the `next` of the page before).
    after: Option<String>,
    /// Page size, `1..=LIMITS_PAGE_MAX`.
    #[serde(default = "page_default")]
    limit: u32,
}

fn page_default() -> u32 {
    LIMITS_PAGE_DEFAULT
}

/// `GET /v1/tenants/{tenant}/limits`: one page of the tenant's limits, by name, as
/// `{"limits": [...], "next": NAME | null}` (`next`: the `after` of the next page).
pub async fn list(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
    QueryParams(p): QueryParams<ListParams>,
) -> ApiResult {
    if !(1..=LIMITS_PAGE_MAX as u32).contains(&p.limit) {
        return Err(ApiError::invalid(format!(
            "query: limit {} is outside 1..={LIMITS_PAGE_MAX}",
            p.limit
        )));
    }
    let query = Query::Limits {
        tenant,
        prefix: p.prefix,
        after: p.after,
        max: p.limit,
    };
    match ctx.read(query).await? {
        Answer::Limits(page) => Ok(Json(page).into_response()),
        other => Err(unexpected(other)),
    }
}

/// `DELETE /v1/tenants/{tenant}/limits/{name}`: removes it; its waiters are refused.
pub async fn remove(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, name)): Params<(String, String)>,
) -> ApiResult {
    let name = as_named(&ctx, &tenant, name);
    ctx.write(Command::RemoveLimit {
        tenant: tenant.clone(),
        name: name.clone(),
    })
    .await?;
    Ok(Json(json!({"tenant": tenant, "name": name, "removed": true})).into_response())
}

/// `GET /v1/tenants/{tenant}/limits/{name}/fences/{fence}`: whether a permit with that
/// fence is held now (linearizable).
pub async fn validate_fence(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, limit, fence)): Params<(String, String, u64)>,
) -> ApiResult {
    match ctx
        .read(Query::ValidateFence {
            tenant,
            limit,
            fence,
        })
        .await?
    {
        Answer::FenceHeld(held) => Ok(Json(json!({"fence": fence, "held": held})).into_response()),
        other => Err(unexpected(other)),
    }
}

/// A read answered with another read's answer: a broken node, never the caller's fault.
pub fn unexpected(answer: Answer) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        format!("unexpected answer {answer:?}"),
    )
}
