//! `/v1/tenants/{tenant}` and its runs: the tenant's ceilings and budgets, run slots
//! (reserve, release, settle, list), and the spend of a period.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;
use serde::{Deserialize, Deserializer};
use serde_json::json;

use super::context::HttpCtx;
use super::error::{ApiResult, JsonBody, Params};
use super::limits::unexpected;
use super::sessions::reply_json;
use weir_core::machine::{Change, Command, Settle};
use weir_proto::protocol::{Answer, Query};

/// A ceiling in `PUT /v1/tenants/{tenant}`: absent keeps it, a number sets it, `null`
/// clears it (no ceiling).
fn change<'de, D, T>(d: D) -> Result<Change<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(match Option::<T>::deserialize(d)? {
        Some(v) => Change::Set(v),
        None => Change::Clear,
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantBody {
    #[serde(deserialize_with = "change")]
    max_running: Change<u32>,
    #[serde(deserialize_with = "change")]
    budget_tokens: Change<u64>,
    #[serde(deserialize_with = "change")]
    budget_minor: Change<u64>,
}

/// `PUT /v1/tenants/{tenant}`: sets, keeps or clears each ceiling.
pub async fn set_tenant(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
    JsonBody(b): JsonBody<TenantBody>,
) -> ApiResult {
    ctx.write(Command::SetTenant {
        tenant: tenant.clone(),
        max_running: b.max_running,
        budget_tokens: b.budget_tokens,
        budget_minor: b.budget_minor,
    })
    .await?;
    show_tenant(State(ctx), Params(tenant)).await
}

/// `GET /v1/tenants/{tenant}`: ceilings, budgets, running count and halts.
pub async fn show_tenant(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
) -> ApiResult {
    let status = match ctx
        .read(Query::Tenant {
            tenant: tenant.clone(),
        })
        .await?
    {
        Answer::Tenant(t) => t,
        other => return Err(unexpected(other)),
    };
    let halts = match ctx
        .read(Query::Halts {
            tenant: tenant.clone(),
        })
        .await?
    {
        Answer::Halts(h) => h,
        other => return Err(unexpected(other)),
    };
    let mut v = serde_json::to_value(status).expect("plain data");
    v["tenant"] = json!(tenant);
    v["halts"] = super::halts::halts_json(&halts);
    Ok(Json(v).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReserveBody {
    agent: Option<String>,
    period: Option<String>,
    /// Tokens of the period's budget held for the run (needs `period`), G6.
    hold_tokens: Option<u64>,
    /// Minor units of the period's budget held for the run (needs `period`), G6.
    hold_minor: Option<u64>,
}

/// `POST /v1/tenants/{tenant}/runs/{run}/reserve`: admits the run (idempotent per run).
pub async fn reserve(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, run)): Params<(String, String)>,
    JsonBody(b): JsonBody<ReserveBody>,
) -> ApiResult {
    let reply = ctx
        .write(Command::Reserve {
            tenant,
            run,
            agent: b.agent,
            period: b.period,
            hold_tokens: b.hold_tokens,
            hold_minor: b.hold_minor,
        })
        .await?;
    Ok(Json(reply_json(&reply)).into_response())
}

/// The body of a release: no fields (an empty body reads as `{}`); anything else is
/// refused, so a client that means to send something learns it is not read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// `POST /v1/tenants/{tenant}/runs/{run}/release`: frees the run's slot. Idempotent.
pub async fn release_run(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, run)): Params<(String, String)>,
    JsonBody(NoFields {}): JsonBody<NoFields>,
) -> ApiResult {
    let reply = ctx.write(Command::ReleaseRun { tenant, run }).await?;
    Ok(Json(reply_json(&reply)).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SettleBody {
    epoch: u64,
    period: Option<String>,
    tokens: u64,
    minor_units: u64,
    release_slot: bool,
}

/// `POST /v1/tenants/{tenant}/runs/{run}/settle`: charges one pass once per epoch.
pub async fn settle(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, run)): Params<(String, String)>,
    JsonBody(b): JsonBody<SettleBody>,
) -> ApiResult {
    let reply = ctx
        .write(Command::Settle(Settle {
            tenant,
            run,
            epoch: b.epoch,
            period: b.period,
            tokens: b.tokens,
            minor_units: b.minor_units,
            release_slot: b.release_slot,
        }))
        .await?;
    Ok(Json(reply_json(&reply)).into_response())
}

/// `GET /v1/tenants/{tenant}/runs`: the running set, with admission times, as
/// `{"runs": [...]}`.
pub async fn list_runs(
    State(ctx): State<Arc<HttpCtx>>,
    Params(tenant): Params<String>,
) -> ApiResult {
    match ctx.read(Query::Running { tenant }).await? {
        Answer::Running(runs) => {
            let rows: Vec<_> = runs
                .into_iter()
                .map(|(run, slot)| {
                    json!({"run": run, "agent": slot.agent,
                           "admitted_at_wall_ms": slot.admitted_at_wall_ms,
                           "admitted_at_log_ms": slot.admitted_at_log_ms})
                })
                .collect();
            Ok(Json(json!({ "runs": rows })).into_response())
        }
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/tenants/{tenant}/spent/{period}`: the CLI's `spent --json`.
pub async fn spent(
    State(ctx): State<Arc<HttpCtx>>,
    Params((tenant, period)): Params<(String, String)>,
) -> ApiResult {
    match ctx
        .read(Query::Spent {
            tenant: tenant.clone(),
            period: period.clone(),
        })
        .await?
    {
        Answer::Spent(s) => Ok(Json(json!({"tenant": tenant, "period": period,
            "tokens": s.tokens, "minor_units": s.minor_units,
            "held_tokens": s.held_tokens, "held_minor": s.held_minor,
            "overrun_tokens": s.overrun_tokens, "overrun_minor": s.overrun_minor}))
        .into_response()),
        other => Err(unexpected(other)),
    }
}
