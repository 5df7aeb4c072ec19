//! `GET /metrics`: the node's [`weir_server::metrics`] in Prometheus' text format, with the view
//! gauges (role, term, indexes, sessions, per-tenant use) read at the scrape.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::context::HttpCtx;
use weir_server::metrics::{self, RaftView};

/// The content type of Prometheus' text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn scrape(State(ctx): State<Arc<HttpCtx>>) -> impl IntoResponse {
    let m = ctx.door().raft.metrics().borrow().clone();
    let applied = m.last_applied.map_or(0, |l| l.index);
    // openraft reports no commit index. The leader's is the highest index a quorum has
    // (itself included); a follower applies only committed entries, so its applied index
    // is the highest it knows committed.
    let commit_index = match &m.replication {
        Some(replication) => {
            let voters: Vec<u64> = m.membership_config.voter_ids().collect();
            let mut matched: Vec<u64> = voters
                .iter()
                .map(|id| {
                    if *id == m.id {
                        m.last_log_index.unwrap_or(0)
                    } else {
                        replication
                            .get(id)
                            .copied()
                            .flatten()
                            .map_or(0, |l| l.index)
                    }
                })
                .collect();
            matched.sort_unstable_by(|a, b| b.cmp(a));
            matched.get(voters.len() / 2).copied().unwrap_or(applied)
        }
        None => applied,
    };
    let view = RaftView {
        role: format!("{:?}", m.state),
        term: m.current_term,
        commit_index,
    };
    let text = {
        let state = ctx.state().lock();
        metrics::get().scrape(&view, &state.machine)
    };
    ([(header::CONTENT_TYPE, TEXT_FORMAT)], text)
}
