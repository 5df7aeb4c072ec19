//! [`AbortOnDrop`]: ties a spawned task's life to an owner.
//!
//! Tokio detaches a task when its `JoinHandle` is dropped; the task would run on after its
//! owner is gone. The client's connection reader and writer, a session's keep-alive task and
//! the server's per-connection event forwarder must all stop with what owns them, so each is
//! held through this guard. It holds no logic beyond that and knows nothing above it.

use tokio::task::JoinHandle;

/// Aborts the task when dropped.
///
/// Aborting is all it does: a task that must finish cleanly (flush, reply) needs its own
/// shutdown signal, not this.
#[derive(Debug)]
pub struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_the_guard_aborts_the_task() {
        let guard = AbortOnDrop(tokio::spawn(std::future::pending()));
        let task = guard.0.abort_handle();
        assert!(
            !task.is_finished(),
            "a pending task runs while its guard lives"
        );
        drop(guard);
        for _ in 0..100 {
            if task.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(
            task.is_finished(),
            "the task ends once its guard is dropped"
        );
    }
}
