//! A simulated session kept alive, and the belief it gives: the send time of its last
//! acknowledged keep-alive (or of the open) plus the TTL, less the client library's margin.
//!
//! Owns the keep-alive task of a session opened here: a keep-alive each fifth of the TTL
//! (the library's rhythm), each acknowledgement moving the belief deadline on from the time
//! the library credits it with (`keep_alive_credit`: its send). Used by the
//! simulated processes that hold something on a session beside their own work (the keyed
//! requests, the token-lease holder).
//!
//! Invariants:
//! - The deadline only moves later, and only on an acknowledged keep-alive.
//! - The keep-alive task ends when the [`Kept`] is dropped (so a process aborted from
//!   outside stops keeping its session alive too), or when the cluster says the session is
//!   gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use weir_client::{keep_alive_credit, margin_for};
use weir_core::machine::{Command, Refusal, Reply, SessionId};

use super::client::{Door, KEEPALIVES_PER_TTL, boot, local_of};
use crate::history::Recorder;
use crate::setup::TTL;

/// A session of [`TTL`] kept alive, and its belief deadline (simulated ns).
pub struct Kept {
    pub id: SessionId,
    deadline_ns: Arc<AtomicU64>,
    keeper: tokio::task::JoinHandle<()>,
}

impl Kept {
    /// The belief deadline now, simulated ns.
    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns.load(Ordering::Relaxed)
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// The belief deadline of a lease acknowledged for a request credited at `sent_ns`.
fn deadline_after(sent_ns: u64) -> u64 {
    sent_ns + (TTL - margin_for(TTL)).as_nanos() as u64
}

/// Opens a session of [`TTL`] and keeps it alive; `None` when no node opened one.
pub async fn open(door: &Door, history: &Recorder) -> Option<Kept> {
    let sent = history.now_ns();
    let ttl_ms = TTL.as_millis() as u64;
    let Ok((_, Reply::SessionOpened { session, .. })) =
        door.write(Command::OpenSession { ttl_ms }).await
    else {
        return None;
    };
    let deadline_ns = Arc::new(AtomicU64::new(deadline_after(sent)));
    let keeper = tokio::spawn(keep_alive(
        door.clone(),
        session,
        deadline_ns.clone(),
        history.clone(),
    ));
    Some(Kept {
        id: session,
        deadline_ns,
        keeper,
    })
}

/// Keeps `session` alive, moving the deadline on at each acknowledgement.
async fn keep_alive(
    door: Door,
    session: SessionId,
    deadline_ns: Arc<AtomicU64>,
    history: Recorder,
) {
    loop {
        tokio::time::sleep(TTL / KEEPALIVES_PER_TTL).await;
        // The send of the whole keep-alive, its first try's, as the library counts it.
        let sent = history.now_ns();
        match door.write(Command::KeepAlive { session }).await {
            Ok((_, Reply::KeptAlive { .. })) => {
                // The library's credit: the send time, whenever the answer arrived.
                let every = TTL / KEEPALIVES_PER_TTL;
                let credit = keep_alive_credit(boot(sent), boot(history.now_ns()), every);
                let credit_ns = local_of(credit);
                deadline_ns.fetch_max(deadline_after(credit_ns), Ordering::Relaxed);
            }
            Ok((_, Reply::Refused(Refusal::UnknownSession { .. }))) => return,
            _ => {}
        }
    }
}
