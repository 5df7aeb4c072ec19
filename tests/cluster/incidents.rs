//! Incidents (G9): a leader that stops answering while its process lives on (SIGSTOP, as a
//! frozen VM or a stalled disk would) costs no holder its permit, nor does a stall followed
//! by a kill of the node that took over; a follower with no leader to forward to says so
//! instead of holding the request.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::harness::{Cluster, phase};
use crate::http::Api;

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
    held(&cluster, "bar", HOLDERS as u64).await;
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

    every_holder_kept_its_permit(&mut holders);
}

/// Waits (bounded) for every holder to exit, and asserts each exited 0: it kept its permit
/// for its whole hold.
fn every_holder_kept_its_permit(holders: &mut Holders) {
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

/// Waits (bounded) until `count` permits of `limit` are held.
async fn held(cluster: &Cluster, limit: &str, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = cluster.cli(&["limit", "show", limit, "--json"]).1;
        let in_use = serde_json::from_str::<serde_json::Value>(&v)
            .ok()
            .and_then(|v| v["in_use"].as_u64())
            .unwrap_or(0);
        if in_use == count {
            return;
        }
        assert!(Instant::now() < deadline, "holders not granted: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_holders_keep_their_permits_through_a_stall_then_a_kill_of_the_next_leader() {
    let mut cluster = Cluster::start("stallkill", 3, "");
    let first = cluster.leader(ELECTION).await;
    let (code, _, err) = cluster.cli(&["limit", "define", "bar", "--concurrent", "100"]);
    assert_eq!(code, 0, "{err}");

    phase("eight holders, default TTL (3 s), each holding for 16 s");
    let mut holders = Holders(
        (0..8)
            .map(|_| cluster.spawn_cli(&["acquire", "bar", "--hold", "16"]))
            .collect(),
    );
    held(&cluster, "bar", 8).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    phase("the leader is stopped for 5 s; the node that took over is killed 3 s after");
    let stalled_at = Instant::now();
    let stopped = Stopped {
        cluster: &mut cluster,
        id: first,
    };
    stopped.cluster.pause(first);
    let second = stopped.cluster.leader(ELECTION).await;
    assert_ne!(second, first, "a running node took over");
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(stalled_at.elapsed())).await;
    drop(stopped);
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.kill(second);
    let third = cluster.leader(ELECTION).await;
    eprintln!("leaders: {first}, stalled; {second}, killed; then {third}");

    every_holder_kept_its_permit(&mut holders);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_without_a_leader_answers_no_leader_yet_instead_of_holding_the_request() {
    let mut cluster = Cluster::start("noleader", 3, "");
    let leader = cluster.leader(ELECTION).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let api = Api::of(&cluster, follower);
    let (status, v) = api.define("/v1/tenants/default/limits/forwarded", 1).await;
    assert_eq!(status, 200, "served by forwarding: {v}");

    phase("the leader and the other follower are killed: no quorum, no leader");
    for id in (1..=3).filter(|id| *id != follower) {
        cluster.kill(id);
    }
    let asked = Instant::now();
    let (status, v) = api
        .call(
            "POST",
            "/v1/sessions",
            Some(serde_json::json!({"ttl_ms": 3000})),
        )
        .await;
    eprintln!("answered {status} after {:?}: {v}", asked.elapsed());
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"], "NoLeader", "{v}");
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no leader known yet") && message.contains("another node"),
        "the answer tells the caller to go elsewhere: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_down_is_one_warning_when_it_goes_and_one_line_when_it_comes_back() {
    let mut cluster = Cluster::start("peerlog", 3, "");
    let leader = cluster.leader(ELECTION).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();

    phase("a follower is killed for 3 s, then started again");
    let log = cluster.node(leader).log.clone();
    // Only what the leader logs from the kill on is judged.
    let before = std::fs::read_to_string(&log).unwrap().len();
    cluster.kill(follower);
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.start_node(follower);
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap()[before..].to_owned();
        if text.contains(&format!("node {follower} answers again")) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the leader never logged node {follower} back:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lines = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(
        lines("RPCError"),
        0,
        "openraft's per-RPC error lines are not logged:\n{text}"
    );
    assert_eq!(
        lines(&format!("node {follower} is unreachable")),
        1,
        "one warning when it went:\n{text}"
    );
    let back = text
        .lines()
        .find(|l| l.contains(&format!("node {follower} answers again")))
        .unwrap();
    assert!(back.contains(" INFO "), "{back}");
    assert!(back.contains("failed RPCs not logged"), "{back}");
    eprintln!("{back}");
}
