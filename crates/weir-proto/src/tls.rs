//! TLS for clients: [`Stream`], one socket type for plaintext and TLS so the wire code
//! ([`crate::wire`]) does not care which it reads, and the client side of a handshake
//! ([`Connector`], [`ClientSecurity`]). The server side (acceptors, node certificates,
//! mutual TLS between peers) belongs to the server crate and builds on these.
//!
//! Invariants:
//! - A client verifies the server's certificate against its CA file and the host name it
//!   dialed; it presents no certificate (its token authenticates it).
//! - A handshake is bounded by [`HANDSHAKE_TIMEOUT`] on either side.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Longest a TLS handshake may take, either side. A loopback handshake takes a few ms; a
/// peer that stalls in it is cut off well before the hello's own timeout.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected socket, with or without TLS.
pub enum Stream {
    Plain(TcpStream),
    /// Accepted by a TLS server port.
    Server(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// Dialed by a TLS client.
    Client(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The client side: plaintext, or TLS verifying the server against a CA.
#[derive(Clone, Default)]
pub struct Connector(Option<tokio_rustls::TlsConnector>);

impl Connector {
    pub fn plain() -> Connector {
        Connector(None)
    }

    pub fn tls(config: Arc<ClientConfig>) -> Connector {
        Connector(Some(config.into()))
    }

    /// Whether connections are TLS.
    pub fn is_tls(&self) -> bool {
        self.0.is_some()
    }

    /// Wraps a connected socket to `addr` (`host:port`; the host is the name the server's
    /// certificate must carry), running the handshake.
    pub async fn connect(&self, tcp: TcpStream, addr: &str) -> io::Result<Stream> {
        let Some(connector) = &self.0 else {
            return Ok(Stream::Plain(tcp));
        };
        let name = server_name(addr)?;
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp)).await {
            Ok(Ok(s)) => Ok(Stream::Client(Box::new(s))),
            // Kept `InvalidData` (what tokio-rustls gives a refused certificate): the caller
            // tells a refusal, which retrying cannot cure, from a network failure.
            Ok(Err(e)) => Err(io::Error::new(
                e.kind(),
                format!("TLS handshake with {addr}: {e}"),
            )),
            Err(_) => Err(io::Error::other(format!(
                "TLS handshake with {addr}: none within {HANDSHAKE_TIMEOUT:?}"
            ))),
        }
    }
}

/// What a client of the client port needs to get in: the CA its servers' certificates
/// chain to (`None`: plaintext) and its token (`None`: none sent).
#[derive(Clone, Default)]
pub struct ClientSecurity {
    pub connector: Connector,
    pub token: Option<String>,
}

impl ClientSecurity {
    /// TLS verified against the CA in `ca` (PEM) if given, and `token` if given.
    pub fn new(ca: Option<&Path>, token: Option<String>) -> Result<ClientSecurity, String> {
        let connector = match ca {
            Some(ca) => Connector::tls(client_config(ca)?),
            None => Connector::plain(),
        };
        Ok(ClientSecurity { connector, token })
    }
}

/// The host part of `host:port` as a TLS server name (a DNS name or an IP address).
fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    ServerName::try_from(host.to_owned())
        .map_err(|e| io::Error::other(format!("{addr}: not a TLS server name: {e}")))
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in the PEM file at `path`.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let certs = rustls_pemfile::certs(&mut text.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

/// A root store holding every certificate in the PEM file at `ca`.
pub fn roots(ca: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(ca)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", ca.display()))?;
    }
    Ok(roots)
}

/// A client's configuration: verifies servers against the CA in `ca`.
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, String> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots(ca)?)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
