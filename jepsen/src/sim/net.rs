//! The simulated network: carries a request from one endpoint to another and its answer
//! back, each leg with its own fate ([`Links::fate`]) on simulated time.
//!
//! Owns the endpoints (each node's way to answer a request) and the waits of delivery.
//! A message on a leg is lost (the sender learns so after a while), or arrives after its
//! delay; one that arrives while either end is stalled is held until the stall ends, then
//! delivered (unless the link went down meanwhile: then it is lost). A request whose answer
//! is lost on the way back was still answered: its effect stays, as on a real network.
//!
//! Invariants:
//! - Every wait is on tokio's clock (paused in a run), never the machine's.
//! - A dead endpoint receives nothing and nothing it answered arrives.
//! - The network's lock is never held across an await.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::links::{Fate, Links, NodeId};

/// A future the network can hold across threads.
pub type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One node's side of the network: how it answers a request (`None`: it went down before
/// it answered).
pub trait Endpoint<Req, Resp>: Send + Sync + 'static {
    fn answer(&self, request: Req) -> Boxed<Option<Resp>>;
}

/// The network of one run.
pub struct Net<Req, Resp> {
    links: Mutex<Links>,
    /// Bumped at every change of the faults, so held messages look again.
    changed: watch::Sender<u64>,
    endpoints: Mutex<BTreeMap<NodeId, Arc<dyn Endpoint<Req, Resp>>>>,
}

impl<Req: Send + 'static, Resp: Send + 'static> Net<Req, Resp> {
    /// A whole network with no endpoints, its fates drawn from `seed`.
    pub fn new(seed: u64) -> Arc<Self> {
        Arc::new(Net {
            links: Mutex::new(Links::new(seed)),
            changed: watch::channel(0).0,
            endpoints: Mutex::new(BTreeMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the faults (`f` on the links), and lets every held message look again.
    pub fn change<R>(&self, f: impl FnOnce(&mut Links) -> R) -> R {
        let out = f(&mut self.lock());
        self.changed.send_modify(|g| *g += 1);
        out
    }

    /// Reads the faults.
    pub fn look<R>(&self, f: impl FnOnce(&Links) -> R) -> R {
        f(&self.lock())
    }

    /// Makes `endpoint` answer what is sent to `node`.
    pub fn attach(&self, node: NodeId, endpoint: Arc<dyn Endpoint<Req, Resp>>) {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node, endpoint);
    }

    /// Leaves `node` with no endpoint: what reaches it is lost.
    pub fn detach(&self, node: NodeId) {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&node);
    }

    /// Carries `request` from `from` to `to` and its answer back; `None` when either leg
    /// was lost or `to` had no endpoint.
    pub async fn carry(&self, from: NodeId, to: NodeId, request: Req) -> Option<Resp> {
        self.leg(from, to).await?;
        // The endpoint is let go before the answer is awaited: a crashed node must not be
        // kept by a call into it.
        let answering = self
            .endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&to)?
            .answer(request);
        let answer = answering.await;
        // An endpoint that went down is dead on the network: this leg is lost, and the
        // sender learns so after a while, as from a silent peer.
        self.leg(to, from).await?;
        answer
    }

    /// One message's way from `from` to `to`: `Some` when it arrived (after its delay, and
    /// any stall of either end), `None` when it was lost (after the time the sender takes
    /// to learn so).
    pub async fn leg(&self, from: NodeId, to: NodeId) -> Option<()> {
        let fate = self.lock().fate(from, to);
        match fate {
            Fate::Lost(after) => {
                tokio::time::sleep(after).await;
                return None;
            }
            Fate::Deliver(delay) => tokio::time::sleep(delay).await,
        }
        let mut changed = self.changed.subscribe();
        loop {
            let (up, held) = {
                let links = self.lock();
                let held = links.is_stalled(from) || links.is_stalled(to);
                (links.up(from, to), held)
            };
            if !up {
                return None;
            }
            if !held {
                return Some(());
            }
            // The sender is `self`'s, so the channel never closes while this runs.
            changed.changed().await.ok()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::sim::links::{DELAY_US, LOST_AFTER_US};

    /// Answers a number with its double, counting what it answered.
    struct Doubler(AtomicU64);

    impl Endpoint<u64, u64> for Doubler {
        fn answer(&self, request: u64) -> Boxed<Option<u64>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move { Some(request * 2) })
        }
    }

    fn paused() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime")
    }

    fn net() -> (Arc<Net<u64, u64>>, Arc<Doubler>) {
        let net = Net::new(11);
        let doubler = Arc::new(Doubler(AtomicU64::new(0)));
        net.attach(2, doubler.clone());
        net.attach(3, Arc::new(Doubler(AtomicU64::new(0))));
        (net, doubler)
    }

    /// Longer than any delivery or loss takes, both legs.
    const AFTER_ALL: Duration = Duration::from_micros(4 * (DELAY_US.1 + LOST_AFTER_US.1));

    #[test]
    fn a_message_is_answered_across_a_whole_network() {
        paused().block_on(async {
            let (net, doubler) = net();
            assert_eq!(net.carry(1, 2, 21).await, Some(42));
            assert_eq!(doubler.0.load(Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn a_partition_drops_what_crosses_it() {
        paused().block_on(async {
            let (net, doubler) = net();
            let groups = vec![BTreeSet::from([1]), BTreeSet::from([2, 3])];
            net.change(|l| l.partition(groups));
            for _ in 0..20 {
                assert_eq!(net.carry(1, 2, 1).await, None);
            }
            assert_eq!(doubler.0.load(Ordering::Relaxed), 0, "nothing crossed");
            assert_eq!(net.carry(3, 2, 5).await, Some(10));
            net.change(Links::heal);
            assert_eq!(net.carry(1, 2, 1).await, Some(2));
        });
    }

    #[test]
    fn a_stall_holds_messages_then_delivers_them() {
        paused().block_on(async {
            let (net, doubler) = net();
            net.change(|l| l.stall(2));
            let sent = {
                let net = net.clone();
                tokio::spawn(async move { net.carry(1, 2, 4).await })
            };
            tokio::time::sleep(AFTER_ALL * 10).await;
            assert!(!sent.is_finished(), "held while node 2 is stalled");
            assert_eq!(doubler.0.load(Ordering::Relaxed), 0);
            net.change(|l| l.unstall(2));
            let answer = tokio::time::timeout(AFTER_ALL, sent).await;
            assert_eq!(
                answer.expect("delivered after the stall").ok(),
                Some(Some(8))
            );
            assert_eq!(doubler.0.load(Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn a_dead_node_gets_nothing_and_a_detached_one_answers_nothing() {
        paused().block_on(async {
            let (net, doubler) = net();
            net.change(|l| l.set_dead(2, true));
            assert_eq!(net.carry(1, 2, 1).await, None);
            assert_eq!(doubler.0.load(Ordering::Relaxed), 0);
            net.change(|l| l.set_dead(2, false));
            net.detach(2);
            assert_eq!(net.carry(1, 2, 1).await, None);
        });
    }
}
