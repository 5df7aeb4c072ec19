//! The operator console: a page served at `/ui` from files built into the binary
//! (`crates/weir-http/ui/`, by `include_str!`), and `GET /v1/whoami`, which tells the
//! page what its token may do so it offers only those actions.
//!
//! Invariants:
//! - The page and its assets are served without a token (they hold no data); every datum
//!   the page shows comes from `/v1` with the token it keeps in the tab's
//!   `sessionStorage`, through the same authorization as any client. Hiding a button is a
//!   courtesy; the client port is what refuses.
//! - Nothing is fetched from elsewhere: every answer carries a Content-Security-Policy of
//!   [`CSP`] (same origin only, no inline script or style, no framing), so even a bug in
//!   the page cannot load or send to another origin.
//! - Only the files of [`ASSETS`] are served; any other path under `/ui/` is a 404.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::context::HttpCtx;
use super::error::{ApiError, Params};

/// The policy on every console answer: this origin only, for scripts, styles, images and
/// `fetch`; no plugins, no base-URI rewriting, no forms posting elsewhere, no framing.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// Every file of the console: (name under `/ui/`, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    ("index.html", HTML, include_str!("../ui/index.html")),
    ("style.css", CSS, include_str!("../ui/style.css")),
    ("app.js", JS, include_str!("../ui/app.js")),
    ("api.js", JS, include_str!("../ui/api.js")),
    ("feed.js", JS, include_str!("../ui/feed.js")),
    ("dom.js", JS, include_str!("../ui/dom.js")),
    ("cluster.js", JS, include_str!("../ui/cluster.js")),
    ("limits.js", JS, include_str!("../ui/limits.js")),
    ("limit.js", JS, include_str!("../ui/limit.js")),
    ("tenants.js", JS, include_str!("../ui/tenants.js")),
    ("chart.js", JS, include_str!("../ui/chart.js")),
    ("icon.svg", SVG, include_str!("../ui/icon.svg")),
];

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// `GET /ui`: the page.
pub async fn page() -> Response {
    asset_named("index.html")
}

/// `GET /ui/{file}`: one of [`ASSETS`], or 404.
pub async fn asset(Params(file): Params<String>) -> Response {
    asset_named(&file)
}

fn asset_named(file: &str) -> Response {
    let Some((_, content_type, body)) = ASSETS.iter().find(|(name, _, _)| *name == file) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the console has no file {file:?}"),
        )
        .into_response();
    };
    (
        [
            (header::CONTENT_TYPE, *content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            // Built into the binary: a node upgraded in place serves the new page at once.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        *body,
    )
        .into_response()
}

/// `GET /v1/whoami`: the caller's role as the node's token table names it (`admin`,
/// `read`, `tenant:NAME`; `admin` where no tokens are configured), this node's id, the
/// data groups it hosts and the one the request speaks to (its `Weir-Group`).
pub async fn whoami(State(ctx): State<Arc<HttpCtx>>) -> impl IntoResponse {
    let caller = super::callers::current();
    Json(json!({
        "role": caller.principal.role.to_string(),
        "node": ctx.id,
        "group": ctx.group(),
        "groups": ctx.groups(),
    }))
}
