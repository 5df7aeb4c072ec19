//! How a request enters one of the node's queues (the proposer's writes, the reader's
//! reads): never by waiting. Each queue is bounded (`weir_core::bounds`), and a full one
//! answers `Unavailable` at once, so a client backs off and retries instead of piling
//! requests up in the node's memory.

use tokio::sync::mpsc::{self, error::TrySendError};

use weir_proto::protocol::Failure;

/// Puts `item` on `queue` (named `name` in the failure) without waiting: `Unavailable` if
/// it is full or its task has stopped (the node is shutting down).
pub fn enqueue<T>(queue: &mpsc::Sender<T>, item: T, name: &str) -> Result<(), Failure> {
    queue.try_send(item).map_err(|e| match e {
        TrySendError::Full(_) => Failure::Unavailable(format!("{name} full")),
        TrySendError::Closed(_) => Failure::Unavailable("node shutting down".into()),
    })
}
