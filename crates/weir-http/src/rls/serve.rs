//! The gRPC port: the HTTP port's accept loop and TLS handshakes (`http::HttpListener`,
//! each handshake in its own bounded task), with ALPN `h2` offered over TLS as gRPC
//! clients ask, and tonic's HTTP/2 server serving [`RlsService`] behind the [`Gate`] until
//! shutdown.
//!
//! Every bound of the port is here, with its value in `crate::bounds` (`RLS_*`): the
//! connections open at once (one past them is closed as it is accepted), the streams of
//! one connection, a request's bytes (before decoding) and time, and each connection's
//! deadline (`gate.rs`).

use std::io;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::gate::{Gate, GrpcIo};
use super::service::RlsService;
use crate::bounds::{
    RLS_CONNECTIONS_MAX, RLS_MESSAGE_BYTES_MAX, RLS_REQUEST_TIMEOUT, RLS_STREAMS_PER_CONNECTION_MAX,
};
use crate::callers::Callers;
use crate::listener::HttpListener;
use weir_server::security::tls::server_config;
use weir_server::security::{Acceptor, TlsFiles};
use weir_server::shutdown::Shutdown;

/// The gRPC port's acceptor: plaintext without `[tls]`, else the client port's certificate
/// with ALPN `h2`.
pub fn grpc_acceptor(tls: Option<&TlsFiles>) -> Result<Acceptor, String> {
    let Some(files) = tls else {
        return Ok(Acceptor::plain());
    };
    let mut config = (*server_config(files)?).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Acceptor::tls(Arc::new(config)))
}

/// Serves `service` on `listener` until `shutdown` begins, admitting requests whose token
/// `callers` knows.
pub async fn serve_grpc(
    listener: TcpListener,
    acceptor: Acceptor,
    service: RlsService,
    callers: Arc<Callers>,
    mut shutdown: Shutdown,
) {
    let listener = match HttpListener::new(listener, acceptor) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("grpc server: {e}");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(RLS_CONNECTIONS_MAX));
    let incoming = futures_util::stream::unfold(listener, move |mut listener| {
        let slots = slots.clone();
        async move {
            loop {
                let (stream, peer) = axum::serve::Listener::accept(&mut listener).await;
                match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        return Some((Ok::<_, io::Error>(GrpcIo::new(stream, slot)), listener));
                    }
                    // Dropped: closed at once, costing nothing more.
                    Err(_) => tracing::debug!(
                        "grpc connection from {} closed: {RLS_CONNECTIONS_MAX} connections \
                         are open",
                        peer
                    ),
                }
            }
        }
    });
    let service =
        RateLimitServiceServer::new(service).max_decoding_message_size(RLS_MESSAGE_BYTES_MAX);
    let served = tonic::transport::Server::builder()
        .max_concurrent_streams(RLS_STREAMS_PER_CONNECTION_MAX)
        .timeout(RLS_REQUEST_TIMEOUT)
        .add_service(Gate::new(service, callers))
        .serve_with_incoming_shutdown(incoming, async move { shutdown.begun().await })
        .await;
    if let Err(e) = served {
        tracing::warn!("grpc server: {e}");
    }
}
