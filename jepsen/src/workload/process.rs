//! What every workload process is given: its number in the history, the nodes' client
//! addresses, the history it records into, the run's stop flag and its own seed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use weir_client::{Client, Session};

use crate::history::Recorder;
use crate::rng::Rng;
use crate::secure::Access;

/// One workload process's share of the run.
pub struct Process {
    /// Its number in the history (the `process` of its ops); from 1.
    pub id: u64,
    /// The nodes' client addresses.
    pub servers: Vec<String>,
    pub history: Recorder,
    /// Set when the run's workloads are to stop.
    pub stop: Arc<AtomicBool>,
    /// Its own seed, derived from the run's.
    pub seed: u64,
}

impl Process {
    /// Its own generator, from its seed.
    pub fn rng(&self) -> Rng {
        Rng::new(self.seed)
    }

    /// A client of the cluster with the token of `access` (in a secure run).
    pub fn client(&self, access: Access) -> Client {
        crate::secure::client(self.servers.clone(), access)
    }

    /// Whether the run's workloads go on.
    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    /// A session of `ttl` through `client`, tried every 100 ms while the run goes on; `None`
    /// once it stops.
    pub async fn session(&self, client: &Client, ttl: Duration) -> Option<Session> {
        while self.running() {
            match Session::open(client, ttl).await {
                Ok(session) => return Some(session),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        None
    }
}
