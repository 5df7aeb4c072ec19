//! Incidents (G9): a leader that stops answering while its process lives on (SIGSTOP, as a
//! frozen VM or a stalled disk would) costs no holder its permit.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::harness::{Cluster, phase};

const ELECTION: Duration = Duration::from_secs(10);
/// How long the leader is stopped: longer than the default session TTL (3 s).
const STALL: Duration = Duration::from_secs(4);
const HOLDERS: usize = 12;

/// Kills the holder processes still running when the test ends, however it ends.
struct Holders(Vec<Child>);

impl Drop for Holders {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Resumes the stopped node when the test ends, however it ends (the cluster's own drop
/// resumes it too; this makes the SIGCONT explicit on the failure paths).
struct Stopped<'a> {
    cluster: &'a mut Cluster,
    id: u64,
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.cluster.resume(self.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_holders_keep_their_permits_through_a_stopped_leader() {
    let mut cluster = Cluster::start("stall", 3, "");
    let leader = cluster.leader(ELECTION).await;
    let (code, _, err) = cluster.cli(&["limit", "define", "bar", "--concurrent", "100"]);
    assert_eq!(code, 0, "{err}");

    phase("twelve holders, default TTL (3 s), each holding for 12 s");
    let mut holders = Holders(
        (0..HOLDERS)
            .map(|_| cluster.spawn_cli(&["acquire", "bar", "--hold", "12"]))
            .collect(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = cluster.cli(&["limit", "show", "bar", "--json"]).1;
        let held = serde_json::from_str::<serde_json::Value>(&v)
            .ok()
            .and_then(|v| v["in_use"].as_u64())
            .unwrap_or(0);
        if held as usize == HOLDERS {
            break;
        }
        assert!(Instant::now() < deadline, "holders not granted: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    phase("the leader is stopped (SIGSTOP) for 4 s");
    let stopped = Stopped {
        cluster: &mut cluster,
        id: leader,
    };
    stopped.cluster.pause(leader);
    let stalled_at = Instant::now();
    let (code, _, err) = stopped.cluster.cli(&["acquire", "bar", "--hold", "0"]);
    let fresh = stalled_at.elapsed();
    eprintln!("a fresh acquire during the stall took {fresh:?}");
    assert_eq!(code, 0, "a fresh acquire during the stall: {err}");
    tokio::time::sleep(STALL.saturating_sub(stalled_at.elapsed())).await;
    drop(stopped);

    phase("every holder exits 0 after its hold");
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, h) in holders.0.iter_mut().enumerate() {
        let status = loop {
            if let Some(s) = h.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "holder {i} still running");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        if let Some(mut e) = h.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        assert_eq!(status.code(), Some(0), "holder {i} lost its permit: {err}");
    }
}
