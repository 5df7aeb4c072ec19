//! [`accept_loop`]: the accept loop of the node's framed ports (the client port and the
//! peer port), one task per connection.
//!
//! Invariants:
//! - A connection's failure is its own: it is logged with its reason under the port's name
//!   and closed; accept errors (out of file descriptors, say) are logged and retried after a
//!   pause, never fatal.
//! - Every connection task ends at shutdown, with the loop.
//!
//! It knows nothing of what a connection carries, and imports nothing of this crate.

/// Accepts connections on `listener` until `shutdown` turns true, serving each with
/// `serve(stream)` in a task of its own that also ends at shutdown. A connection that ends
/// with an error is logged with its reason under `port`'s name; accept errors (out of file
/// descriptors, say) are logged and retried after a pause, never fatal.
pub async fn accept_loop<F, Fut, E>(
    port: &'static str,
    listener: tokio::net::TcpListener,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    serve: F,
) where
    F: Fn(tokio::net::TcpStream) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let (stream, from) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("{port} port: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = serve(stream);
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = connection => {
                    if let Err(reason) = r {
                        tracing::info!(%from, "{port} connection closed: {reason}");
                    }
                }
                _ = shutdown.changed() => {}
            }
        });
    }
}
