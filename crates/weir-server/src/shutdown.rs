//! A node's shutdown signal: one [`ShutdownSender`] held by the node, and a [`Shutdown`]
//! clone in every task that must stop with it (the accept loops, the proposer, the reader,
//! the stand-in's backstop, the HTTP server).
//!
//! Invariants:
//! - The signal only ever goes one way: once begun, a shutdown is never taken back.
//! - A dropped sender counts as a shutdown, so a task never outlives the node that started
//!   it by waiting on a signal nobody can send.

use tokio::sync::watch;

/// The node's side: begins the shutdown (or drops, which does the same).
#[derive(Debug)]
pub struct ShutdownSender(watch::Sender<bool>);

/// A task's side: resolves [`Shutdown::begun`] once the node shuts down.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// A new signal, not yet begun.
pub fn shutdown_channel() -> (ShutdownSender, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownSender(tx), Shutdown(rx))
}

impl ShutdownSender {
    /// Tells every [`Shutdown`] to stop. Idempotent.
    pub fn begin(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Resolves once the shutdown has begun or its sender is gone; at once if it already has.
    /// Cancel-safe.
    pub async fn begun(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// The raw watch, for [`crate::accept::accept_loop`], which takes one.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn begun_resolves_on_begin_and_on_a_dropped_sender() {
        let (sender, mut shutdown) = shutdown_channel();
        let early = tokio::time::timeout(Duration::from_millis(20), shutdown.begun()).await;
        assert!(early.is_err(), "a shutdown not begun must not resolve");
        sender.begin();
        for _ in 0..2 {
            // Still begun when asked again: the signal never goes back.
            tokio::time::timeout(Duration::from_secs(1), shutdown.begun())
                .await
                .expect("a begun shutdown resolves, every time it is asked");
        }

        let (sender, mut shutdown) = shutdown_channel();
        drop(sender);
        tokio::time::timeout(Duration::from_secs(1), shutdown.begun())
            .await
            .expect("a dropped sender is a shutdown");
    }
}
