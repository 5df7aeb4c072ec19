//! The gRPC port: the HTTP port's accept loop and TLS handshakes (`http::HttpListener`,
//! each handshake in its own bounded task), with ALPN `h2` offered over TLS as gRPC
//! clients ask, and tonic's HTTP/2 server serving [`RlsService`] until shutdown.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

use super::service::RlsService;
use crate::listener::HttpListener;
use weir_proto::tls::Stream;
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

/// Serves `service` on `listener` until `shutdown` begins.
pub async fn serve_grpc(
    listener: TcpListener,
    acceptor: Acceptor,
    service: RlsService,
    mut shutdown: Shutdown,
) {
    let listener = match HttpListener::new(listener, acceptor) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("grpc server: {e}");
            return;
        }
    };
    let incoming = futures_util::stream::unfold(listener, |mut listener| async move {
        let (stream, _peer) = axum::serve::Listener::accept(&mut listener).await;
        Some((Ok::<_, io::Error>(GrpcIo(stream)), listener))
    });
    let served = tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_incoming_shutdown(incoming, async move { shutdown.begun().await })
        .await;
    if let Err(e) = served {
        tracing::warn!("grpc server: {e}");
    }
}

/// A connection as tonic takes it (tonic asks what it knows of the peer: nothing here).
struct GrpcIo(Stream);

impl tonic::transport::server::Connected for GrpcIo {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

impl AsyncRead for GrpcIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for GrpcIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
