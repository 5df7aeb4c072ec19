//! The node and the cluster: `GET /v1/status` (every member as `weir status --json` shows
//! it, with its readiness by the rule of `/readyz`, and the leader changes this node saw),
//! `/healthz` (the process serves) and `/readyz` (a member with a known leader whose
//! applied index is close to its log).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

use super::context::HttpCtx;
use super::error::{ApiError, ApiResult};
use weir_client::{Client, ClientError};
use weir_proto::protocol::{Failure, NodeStatus, Request, Response};
use weir_proto::tls::ClientSecurity;
use weir_server::raft::Raft;

/// Entries a node may have in its log beyond what it applied and still be ready. Applying
/// runs thousands of entries a second, so a healthy node is far below this; one catching up
/// after a restart or a partition is far above it.
const READY_LAG_MAX: u64 = 1_000;

/// `GET /v1/status`: this node's view of every member, each asked for its own status
/// (`null` for one that does not answer), and this node's record of leader changes
/// (`leader_history`). Needs no leader.
pub async fn status(State(ctx): State<Arc<HttpCtx>>) -> ApiResult {
    // Asked with the request's own token: status needs `admin` or `read` (docs/security.md),
    // which the client port decides, as for `weir status`.
    let security = ctx.client().security().clone();
    let me = match ask(&ctx.client_addr, &security).await {
        Ok(s) => s,
        Err(e @ ClientError::Failed(Failure::Forbidden(_))) => return Err(ApiError::client(&e)),
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                "this node's client port does not answer",
            ));
        }
    };
    let mut nodes = Vec::new();
    for m in &me.members {
        let status = if m.id == me.id {
            Some(me.clone())
        } else {
            ask(&m.client, &security).await.ok()
        };
        nodes.push(match status {
            Some(s) => {
                let member = s.members.iter().any(|m| m.id == s.id);
                let (ready, why) = ready_rule(member, s.leader, s.applied, s.last_log_index);
                let mut v = serde_json::to_value(s).expect("plain data");
                v["ready"] = json!(ready);
                v["ready_reason"] = json!(why);
                v
            }
            None => json!({"id": m.id, "addr": m.client, "state": "Unreachable"}),
        });
    }
    let history = json!({"node": me.id, "changes": ctx.leaders.newest_first()});
    Ok(Json(json!({
        "leader": me.leader,
        "term": me.term,
        "nodes": nodes,
        "leader_history": history,
    }))
    .into_response())
}

async fn ask(addr: &str, security: &ClientSecurity) -> Result<NodeStatus, ClientError> {
    match Client::ask_node_with(addr, &Request::Status, security).await? {
        Response::Status(s) => Ok(s),
        Response::Failed(f) => Err(ClientError::Failed(f)),
        other => Err(ClientError::Protocol(format!(
            "unexpected answer to status: {other:?}"
        ))),
    }
}

/// `GET /healthz`: 200 while the process serves HTTP.
pub async fn healthz() -> impl IntoResponse {
    Json(json!({"ok": true}))
}

/// `GET /readyz`: 200 when this node is a member with a known leader and has applied its
/// log to within [`READY_LAG_MAX`] entries; 503 with the reason otherwise.
pub async fn readyz(State(ctx): State<Arc<HttpCtx>>) -> impl IntoResponse {
    let (ready, why) = readiness(&ctx.door().raft);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(json!({"ready": ready, "reason": why})))
}

fn readiness(raft: &Raft) -> (bool, String) {
    let m = raft.metrics().borrow().clone();
    let member = m.membership_config.nodes().any(|(id, _)| *id == m.id);
    let applied = m.last_applied.map_or(0, |l| l.index);
    let log = m.last_log_index.unwrap_or(0);
    ready_rule(member, m.current_leader, applied, log)
}

/// The rule of `/readyz`, from a node's figures: what `/v1/status` reports for each node
/// (`ready`, `ready_reason`), so the console shows every node's readiness from one node.
fn ready_rule(member: bool, leader: Option<u64>, applied: u64, log: u64) -> (bool, String) {
    if !member {
        return (false, "not a member of the cluster".into());
    }
    let Some(leader) = leader else {
        return (false, "no leader known".into());
    };
    if log.saturating_sub(applied) > READY_LAG_MAX {
        return (
            false,
            format!("applied {applied} is more than {READY_LAG_MAX} behind the log at {log}"),
        );
    }
    (true, format!("leader {leader}, applied {applied} of {log}"))
}
