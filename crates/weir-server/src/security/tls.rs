//! TLS on a node's ports: the config's certificate files ([`TlsFiles`]) and the rustls
//! configurations built from them. The socket type and the client side of a handshake are
//! the protocol crate's ([`weir_proto::tls`]), which this builds on.
//!
//! - Client port (and any other server port, HTTP included: [`server_config`]): the node
//!   presents its certificate; clients verify it against their CA file and the host name
//!   they dialed. Clients present no certificate: their token authenticates them.
//! - Peer port: mutual TLS ([`peer_server_config`], [`peer_client_config`]). Both ends
//!   present a certificate, and each verifies the other's chain to the one cluster CA, so a
//!   node whose certificate another CA issued cannot send a vote or an AppendEntries.
//!
//! Invariants:
//! - An expired or not-yet-valid certificate fails the handshake (webpki checks validity
//!   against the current time on both sides).
//! - A handshake is bounded by [`HANDSHAKE_TIMEOUT`]; one that stalls costs only its own
//!   task, never the accept loop.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::PrivateKeyDer;
use rustls::{ClientConfig, ServerConfig};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use weir_proto::tls::{HANDSHAKE_TIMEOUT, Stream, load_certs, provider, roots};

/// TLS files (PEM). With them the client port is TLS and the peer port mutual TLS; see
/// [`crate::security::tls`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// This node's certificate chain, good for server and client authentication.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The cluster CA: peers' certificates must chain to it.
    pub ca: PathBuf,
}

/// The server side of a port: plaintext, or TLS with a rustls configuration.
#[derive(Clone, Default)]
pub struct Acceptor(Option<tokio_rustls::TlsAcceptor>);

impl Acceptor {
    /// Plaintext.
    pub fn plain() -> Acceptor {
        Acceptor(None)
    }

    pub fn tls(config: Arc<ServerConfig>) -> Acceptor {
        Acceptor(Some(config.into()))
    }

    pub fn is_tls(&self) -> bool {
        self.0.is_some()
    }

    /// Wraps an accepted socket, running the handshake (bounded by [`HANDSHAKE_TIMEOUT`]).
    pub async fn accept(&self, tcp: TcpStream) -> io::Result<Stream> {
        let Some(acceptor) = &self.0 else {
            return Ok(Stream::Plain(tcp));
        };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
            Ok(Ok(s)) => Ok(Stream::Server(Box::new(s))),
            Ok(Err(e)) => Err(io::Error::other(format!("TLS handshake: {e}"))),
            Err(_) => Err(io::Error::other(format!(
                "TLS handshake: none within {HANDSHAKE_TIMEOUT:?}"
            ))),
        }
    }
}

/// The private key in the PEM file at `path`.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    rustls_pemfile::private_key(&mut text.as_slice())
        .map_err(|e| format!("{}: {e}", path.display()))?
        .ok_or_else(|| format!("{}: no private key in it", path.display()))
}

/// A server port's configuration: presents `files.cert`, asks no client certificate. The
/// client port uses it, and so can any other port a node serves to clients (HTTP).
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, String> {
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_no_client_auth()
        .with_single_cert(load_certs(&files.cert)?, load_key(&files.key)?)
        .map_err(|e| format!("tls: {}: {e}", files.cert.display()))?;
    Ok(Arc::new(config))
}

/// The peer port's configuration: presents `files.cert` and requires the peer's
/// certificate, chained to `files.ca`.
pub fn peer_server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, String> {
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots(&files.ca)?),
        provider(),
    )
    .build()
    .map_err(|e| format!("tls: {}: {e}", files.ca.display()))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(load_certs(&files.cert)?, load_key(&files.key)?)
        .map_err(|e| format!("tls: {}: {e}", files.cert.display()))?;
    Ok(Arc::new(config))
}

/// Dialing a peer: verifies it against `files.ca` and presents `files.cert`.
pub fn peer_client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, String> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots(&files.ca)?)
        .with_client_auth_cert(load_certs(&files.cert)?, load_key(&files.key)?)
        .map_err(|e| format!("tls: {}: {e}", files.cert.display()))?;
    Ok(Arc::new(config))
}
