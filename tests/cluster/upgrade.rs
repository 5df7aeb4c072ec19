//! A rolling upgrade: under light load, every node in turn is stopped and started again on
//! its own data directory (a new binary would be started the same way), followers first and
//! the leader last, each waited for until it has caught up; no acknowledged write is lost
//! and no holder with a 3 s TTL loses its permit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_client::{AcquireOptions, Client, Session};
use weir_core::machine::Reply;

use crate::harness::{Cluster, phase};
use crate::{CONVERGE, ELECTION, define, limit_names};

const TTL: Duration = Duration::from_secs(3);

/// Writes limits `w0`, `w1`, … one after another until `stop`, recording each acknowledged
/// one; a write that fails (a restart under it) is retried under a new name, never counted.
fn load(
    client: Client,
    stop: Arc<AtomicBool>,
) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<String>>>) {
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = acked.clone();
    let task = tokio::spawn(async move {
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) && i < 100_000 {
            let name = format!("w{i}");
            i += 1;
            if let Ok(Reply::Done) = client.write(define(&name, 1)).await {
                record.lock().unwrap().push(name);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (task, acked)
}

/// Waits (bounded) until node `id` has applied at least what the leader had when asked.
async fn caught_up(cluster: &Cluster, id: u64, within: Duration) {
    let deadline = Instant::now() + within;
    let leader = cluster.leader(ELECTION).await;
    let target = cluster.status(leader).await.map_or(0, |s| s.applied);
    while Instant::now() < deadline {
        if cluster
            .status(id)
            .await
            .is_some_and(|s| s.applied >= target)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("node {id} did not reach index {target} within {within:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_no_write_and_no_permit() {
    let mut cluster = Cluster::start("rolling", 3, "");
    let first = cluster.leader(ELECTION).await;
    let client = cluster.client();
    client.write(define("held", 1)).await.unwrap();
    let holder = Session::open(&client, TTL).await.unwrap();
    let permit = holder
        .acquire(AcquireOptions::new("t", "held"))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (writer, acked) = load(Client::new(cluster.servers()), stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut order: Vec<u64> = (1..=3).filter(|id| *id != first).collect();
    order.push(first);
    for id in order {
        phase(&format!("restart node {id} on its data directory"));
        assert_eq!(
            cluster.stop(id),
            Some(0),
            "node {id} stops cleanly on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.start_node(id);
        caught_up(&cluster, id, CONVERGE).await;
        assert_eq!(permit.lost_reason(), None, "the holder kept its permit");
    }

    phase("a TTL later the holder still believes, and the cluster agrees");
    tokio::time::sleep(TTL).await;
    phase("then stop the load: every acknowledged write is there, the permit still held");
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 10, "the load ran: {} writes", acked.len());
    eprintln!("{} acknowledged writes during the restarts", acked.len());
    let names = limit_names(&cluster).await;
    let lost: Vec<&String> = acked.iter().filter(|n| !names.contains(*n)).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert_eq!(permit.lost_reason(), None);
    assert!(
        client
            .validate_fence("t", "held", permit.fence())
            .await
            .unwrap()
    );
    cluster.converged(CONVERGE).await;
}
