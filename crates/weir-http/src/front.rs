//! [`Front`]: the node's front doors, HTTP/JSON and Envoy's rate-limit service, started by
//! the node (`weir_server::server::front`) on the listeners it bound, in this order: HTTP,
//! then gRPC. Both share one [`HttpCtx`]: one internal client (and take session) per
//! token, whose servers are this node's client address first, then the other initial
//! voters'.

use std::sync::Arc;

use tokio::net::TcpListener;
use weir_server::config::Config;
use weir_server::security::Acceptor;
use weir_server::server::front::{Doors, FrontDoors};
use weir_server::shutdown::Shutdown;

use crate::callers::Callers;
use crate::context::HttpCtx;
use crate::rls;
use crate::router::serve_http;

/// Starts HTTP (if `http_listen` is set) and Envoy's rate-limit service (if `grpc_listen`
/// is) on a node.
pub struct Front;

impl FrontDoors for Front {
    fn start(&self, config: &Config, doors: Doors) -> Result<(), String> {
        let edge = edge_ctx(config, &doors);
        if let Some(listener) = doors.http {
            start_http(
                config,
                listener,
                &doors.client_acceptor,
                &edge,
                &doors.shutdown,
            );
        }
        if let Some(listener) = doors.grpc {
            start_grpc(config, listener, edge, &doors.shutdown)?;
        }
        Ok(())
    }
}

/// What the HTTP and gRPC ports share: one internal client (and take session) per token.
/// Each request reaches the client port with its own token over TLS verified against the
/// node's CA, so it is authenticated and authorized there, as a binary client's is.
fn edge_ctx(config: &Config, doors: &Doors) -> Arc<HttpCtx> {
    let callers = Callers::new(
        http_servers(config),
        doors.internal_connector.clone(),
        doors.tokens.clone(),
    )
    .metrics_loopback_open(config.metrics_loopback_open);
    Arc::new(HttpCtx::new(
        config.id,
        config.client_addr.clone(),
        callers,
        doors,
    ))
}

/// Serves HTTP on `listener`.
fn start_http(
    config: &Config,
    listener: TcpListener,
    acceptor: &Acceptor,
    edge: &Arc<HttpCtx>,
    shutdown: &Shutdown,
) {
    tokio::spawn(serve_http(
        listener,
        acceptor.clone(),
        edge.clone(),
        shutdown.clone(),
    ));
    let scheme = if config.tls.is_some() {
        "HTTPS"
    } else {
        "HTTP"
    };
    tracing::info!("serving {scheme} on {}", config.http_listen);
}

/// Serves Envoy's rate-limit service on `listener`.
fn start_grpc(
    config: &Config,
    listener: TcpListener,
    edge: Arc<HttpCtx>,
    shutdown: &Shutdown,
) -> Result<(), String> {
    let acceptor = rls::grpc_acceptor(config.tls.as_ref())?;
    let callers = edge.callers.clone();
    let service = rls::RlsService::new(edge, config.grpc_ratelimit_headers)
        .keys_full_over_limit(config.grpc_keys_full_over_limit)
        .local_leases(config.grpc_local_leases);
    tokio::spawn(rls::serve_grpc(
        listener,
        acceptor,
        service,
        callers,
        shutdown.clone(),
    ));
    tracing::info!(
        "serving Envoy's rate-limit service (gRPC) on {}",
        config.grpc_listen
    );
    Ok(())
}

/// Where the HTTP layer's internal client reaches the cluster: this node first (it answers
/// at once when it leads), then the other initial voters; redirects find the rest.
fn http_servers(config: &Config) -> Vec<String> {
    let mut servers = vec![config.client_addr.clone()];
    servers.extend(
        config
            .voters()
            .into_iter()
            .map(|v| v.client)
            .filter(|c| *c != config.client_addr),
    );
    servers
}
