//! The routes: one table of (method, path, handler) that both builds the router and is
//! what [`served_routes`] reports, so the OpenAPI test compares `docs/openapi.yaml` with
//! what is really served. Every route but `/healthz`, `/readyz` and the console's page
//! (`/ui`, `/ui/{file}`: no data) passes the token middleware (`callers.rs`). Serving: [`serve_http`] runs the listener (`listener.rs`,
//! TLS when `[tls]` is configured) until shutdown, each connection on hyper's HTTP/1.1
//! server with a header read timeout ([`HEADER_READ_TIMEOUT`]); request bodies are bounded
//! in bytes ([`super::bounds::BODY_BYTES_MAX`]) and in time (`error.rs`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::DefaultBodyLimit;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower_service::Service;

use weir_server::security::Acceptor;
use weir_server::shutdown::Shutdown;

use super::context::HttpCtx;
use super::error::ApiError;
use super::listener::{HttpListener, PeerAddr};
use super::{
    callers, cluster, console, events, halts, keys, limits, metrics, overview, permits, placement,
    queue, runs, sessions, watch,
};

type Route = (&'static str, &'static str, MethodRouter<Arc<HttpCtx>>);

/// Every route, as (method, path, handler).
fn table() -> Vec<Route> {
    const LIMIT: &str = "/v1/tenants/{tenant}/limits/{name}";
    vec![
        ("GET", "/healthz", get(cluster::healthz)),
        ("GET", "/readyz", get(cluster::readyz)),
        ("GET", "/metrics", get(metrics::scrape)),
        ("GET", "/v1/status", get(cluster::status)),
        ("GET", "/v1/events", get(watch::stream)),
        ("GET", "/v1/whoami", get(console::whoami)),
        ("GET", "/v1/halts", get(overview::halts)),
        ("GET", "/v1/tenants", get(overview::tenants)),
        (
            "GET",
            "/v1/tenants/{tenant}/history",
            get(overview::tenant_history),
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/limits/{name}/history",
            get(overview::limit_history),
        ),
        ("GET", "/ui", get(console::page)),
        ("GET", "/ui/{file}", get(console::asset)),
        (
            "GET",
            "/v1/tenants/{tenant}/limits/{name}/holders",
            get(queue::holders),
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/limits/{name}/waiters",
            get(queue::waiters),
        ),
        ("GET", "/v1/tenants/{tenant}/limits", get(limits::list)),
        ("PUT", "/v1/tenants/{tenant}/limits", put(limits::apply)),
        (
            "GET",
            "/v1/tenants/{tenant}/definitions",
            get(limits::export),
        ),
        ("PUT", LIMIT, put(limits::define)),
        ("GET", LIMIT, get(limits::show)),
        ("DELETE", LIMIT, delete(limits::remove)),
        (
            "GET",
            "/v1/tenants/{tenant}/limits/{name}/fences/{fence}",
            get(limits::validate_fence),
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/limits/{name}/keys",
            get(keys::list),
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/limits/{name}/keys/{key}",
            get(keys::show),
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/limits/{name}/acquire",
            post(permits::acquire),
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/limits/{name}/take",
            post(permits::take),
        ),
        ("POST", "/v1/tenants/{tenant}/leases", post(sessions::lease)),
        ("POST", "/v1/sessions", post(sessions::open)),
        ("DELETE", "/v1/sessions/{session}", delete(sessions::close)),
        (
            "POST",
            "/v1/sessions/{session}/keepalive",
            post(sessions::keep_alive),
        ),
        (
            "POST",
            "/v1/sessions/{session}/release",
            post(sessions::release),
        ),
        (
            "POST",
            "/v1/sessions/{session}/settle",
            post(sessions::settle_take),
        ),
        ("GET", "/v1/sessions/{session}/events", get(events::stream)),
        ("GET", "/v1/tenants/{tenant}", get(runs::show_tenant)),
        ("PUT", "/v1/tenants/{tenant}", put(runs::set_tenant)),
        ("GET", "/v1/tenants/{tenant}/runs", get(runs::list_runs)),
        (
            "POST",
            "/v1/tenants/{tenant}/runs/{run}/reserve",
            post(runs::reserve),
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/runs/{run}/release",
            post(runs::release_run),
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/runs/{run}/settle",
            post(runs::settle),
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/spent/{period}",
            get(runs::spent),
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/placement",
            get(placement::show),
        ),
        (
            "PUT",
            "/v1/tenants/{tenant}/placement",
            put(placement::place),
        ),
        ("GET", "/v1/tenants/{tenant}/halts", get(halts::list)),
        ("PUT", "/v1/tenants/{tenant}/halt", put(halts::set_tenant)),
        (
            "DELETE",
            "/v1/tenants/{tenant}/halt",
            delete(halts::clear_tenant),
        ),
        (
            "PUT",
            "/v1/tenants/{tenant}/agents/{agent}/halt",
            put(halts::set_agent),
        ),
        (
            "DELETE",
            "/v1/tenants/{tenant}/agents/{agent}/halt",
            delete(halts::clear_agent),
        ),
    ]
}

/// Every (method, path) served, paths in OpenAPI's `{param}` form.
pub fn served_routes() -> Vec<(&'static str, &'static str)> {
    table().into_iter().map(|(m, p, _)| (m, p)).collect()
}

/// The router over `ctx`: the table, JSON 404 and 405 answers, and the request counter.
pub fn router(ctx: Arc<HttpCtx>) -> Router {
    table()
        .into_iter()
        .fold(Router::new(), |r, (_, path, handler)| {
            r.route(path, handler)
        })
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "NotFound", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "this route does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(super::bounds::BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(
            ctx.callers.clone(),
            callers::authenticate,
        ))
        .layer(middleware::from_fn(count))
        .with_state(ctx)
}

async fn count(request: Request, next: Next) -> Response {
    weir_server::metrics::get().http_requests.inc();
    next.run(request).await.into_response()
}

/// How long a client may take to send a request's head (the request line and headers):
/// a slow sender holds its connection only this long, then it is closed. A head is a few
/// hundred bytes; 10 s is far above what any client needs to send them, on any network.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves HTTP/1.1 on `listener` (TLS when `acceptor` is) until the node shuts down, each
/// connection in a task of its own with [`HEADER_READ_TIMEOUT`] on every request head;
/// requests in flight (long polls, event streams) end with the process.
pub async fn serve_http(
    listener: TcpListener,
    acceptor: Acceptor,
    ctx: Arc<HttpCtx>,
    mut shutdown: Shutdown,
) {
    let mut listener = match HttpListener::new(listener, acceptor) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("http server: {e}");
            return;
        }
    };
    let app = router(ctx);
    loop {
        let (stream, peer) = tokio::select! {
            c = axum::serve::Listener::accept(&mut listener) => c,
            () = shutdown.begun() => return,
        };
        let app = app.clone();
        // The router, with the connection's remote address for `ConnectInfo`.
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let mut request = request.map(axum::body::Body::new);
            request.extensions_mut().insert(ConnectInfo(PeerAddr(peer)));
            // The router is always ready: no `poll_ready` needed before `call`.
            app.clone().call(request)
        });
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = connection => {
                    if let Err(e) = r {
                        tracing::debug!("http connection from {peer}: {e}");
                    }
                }
                () = stop.begun() => {}
            }
        });
    }
}
