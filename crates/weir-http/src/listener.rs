//! [`HttpListener`]: the HTTP port's listener, plaintext or TLS with the
//! node's server certificate (`security::tls::server_config`, the client port's).
//!
//! TCP connections are accepted by a task of their own, and each TLS handshake runs in its
//! own task (bounded by `security::tls::HANDSHAKE_TIMEOUT`), so a client that stalls in
//! its handshake never holds up the next one. Finished connections reach axum through a
//! bounded channel of [`READY_MAX`].
//!
//! Invariants:
//! - With TLS on, nothing but a completed handshake reaches the router: plaintext HTTP to
//!   the port fails its handshake and is closed.
//! - The accept task ends with the listener (when `serve_http` returns at shutdown).

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::mpsc;

use weir_proto::tls::Stream;
use weir_server::security::Acceptor;

/// Connections past their handshake, waiting for axum to take them. Axum takes each at once;
/// the bound only stops a flood of handshakes from queueing without limit.
const READY_MAX: usize = 64;

/// Pause after a failed TCP accept (out of file descriptors, mostly), so the loop does not
/// spin while the cause lasts.
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The remote address of an HTTP connection, put in every request's `ConnectInfo` by
/// `router::serve_http` (the loopback rule of `/metrics`).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

/// A listener whose connections are TLS when its acceptor is.
pub struct HttpListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(Stream, SocketAddr)>,
    /// Ends the accept task when the listener is dropped.
    _accept: AbortOnDrop,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl HttpListener {
    pub fn new(tcp: TcpListener, acceptor: Acceptor) -> io::Result<HttpListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_MAX);
        let accept = tokio::spawn(accept_loop(tcp, acceptor, tx));
        Ok(HttpListener {
            local,
            ready,
            _accept: AbortOnDrop(accept),
        })
    }
}

async fn accept_loop(tcp: TcpListener, acceptor: Acceptor, tx: mpsc::Sender<(Stream, SocketAddr)>) {
    loop {
        let (socket, peer) = match tcp.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("http accept: {e}");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let acceptor = acceptor.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            match acceptor.accept(socket).await {
                Ok(stream) => {
                    let _ = tx.send((stream, peer)).await;
                }
                Err(e) => tracing::debug!("http connection from {peer}: {e}"),
            }
        });
    }
}

impl axum::serve::Listener for HttpListener {
    type Io = Stream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Stream, SocketAddr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept task never drops its sender while the listener lives; if it died
            // (a panic), no connection comes again.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
