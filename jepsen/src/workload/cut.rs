//! The cut client: one process whose connections all come from [`CUT_CLIENT_IP`]
//! (`Client::with_local_addr`), so the client fronts can fault its links and no one else's
//! ([`crate::client_front`]). It holds the one unit of [`CUT`] now and then, with waiters of
//! ordinary addresses behind it ([`super::permits`] on the same limit). The client nemeses
//! pin it first ([`CutClient`]): at its next grant it holds the permit until it may be lost
//! or the nemesis lets go, so the fault meets a holder with waiters behind it.
//!
//! Its belief intervals are `hold` facts like every permit process's, as its application
//! saw them ([`Belief`]), judged by P1, capacity, the linearizability checker and `told`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_client::Client;

use super::acquire::{next_permit, release_recorded};
use super::belief::Belief;
use super::process::Process;
use crate::client_front::CUT_CLIENT_IP;
use crate::setup::{CUT, TTL};

/// The nemesis's handle on the cut client.
#[derive(Default)]
pub struct CutClient {
    /// Asked for: hold the next grant until lost or let go.
    requested: AtomicBool,
    /// The fence of the permit held under a pin; 0 when none.
    holding: AtomicU64,
    /// Bumped by [`CutClient::let_go`]: a pinned hold ends when it changes.
    let_go: AtomicU64,
}

impl CutClient {
    /// Asks the client to hold its next grant (until lost or [`CutClient::let_go`]).
    pub fn pin(&self) {
        self.requested.store(true, Ordering::SeqCst);
    }

    /// The fence of the permit the client holds under a pin, if it does.
    pub fn holding(&self) -> Option<u64> {
        Some(self.holding.load(Ordering::SeqCst)).filter(|f| *f != 0)
    }

    /// Takes the pin asked for, if one is: the let-go epoch (the pinned hold ends when
    /// [`CutClient::let_go_epoch`] moves past it).
    pub fn take_pin(&self) -> Option<u64> {
        self.requested
            .swap(false, Ordering::SeqCst)
            .then(|| self.let_go_epoch())
    }

    /// Says which fence the pinned holder holds (0: none).
    pub fn set_holding(&self, fence: u64) {
        self.holding.store(fence, Ordering::SeqCst);
    }

    /// How many let-gos there were.
    pub fn let_go_epoch(&self) -> u64 {
        self.let_go.load(Ordering::SeqCst)
    }

    /// Ends a pinned hold (the client releases) and withdraws a pin not taken yet.
    pub fn let_go(&self) {
        self.requested.store(false, Ordering::SeqCst);
        self.let_go.fetch_add(1, Ordering::SeqCst);
    }
}

/// The cut client's process: acquire [`CUT`], hold 10–150 ms (or, pinned, until the permit
/// may be lost or the nemesis lets go), release; every belief recorded as a `hold` fact.
/// `bound`: its connections come from [`CUT_CLIENT_IP`] (when the run has client fronts;
/// in namespace mode a loopback source could not even reach the nodes' addresses).
pub async fn cut_holder(p: Process, bound: bool, handle: Arc<CutClient>) {
    let mut rng = p.rng();
    let client = match bound {
        true => Client::new(p.servers.clone()).with_local_addr(CUT_CLIENT_IP),
        false => Client::new(p.servers.clone()),
    };
    let client = crate::secure::in_run_group(client);
    while let Some(session) = p.session(&client, TTL).await {
        while let Some((permit, from)) = next_permit(&p, &session, CUT).await {
            let mut belief = Belief::new(&permit, &p.history, from);
            if let Some(epoch) = handle.take_pin() {
                handle.set_holding(permit.fence());
                let let_go = async {
                    while handle.let_go_epoch() == epoch && p.running() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                };
                if belief.race(let_go).await.is_ok() {
                    belief.check();
                }
                handle.set_holding(0);
            } else {
                belief.work(Duration::from_millis(rng.range(10, 150))).await;
            }
            let fields =
                json!({"limit": CUT, "cap": 1, "fence": permit.fence(), "cut_client": true});
            belief.record(p.id, &session, fields);
            release_recorded(p.id, permit, &p.history).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_is_held_until_let_go_and_a_pin_not_taken_is_withdrawn() {
        let h = CutClient::default();
        assert_eq!(h.holding(), None);
        h.pin();
        assert!(
            h.requested.swap(false, Ordering::SeqCst),
            "taken at a grant"
        );
        h.holding.store(7, Ordering::SeqCst);
        assert_eq!(h.holding(), Some(7));
        h.pin();
        h.let_go();
        assert!(!h.requested.load(Ordering::SeqCst), "withdrawn");
        assert_eq!(h.let_go.load(Ordering::SeqCst), 1);
    }
}
