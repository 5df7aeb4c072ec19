//! A node whose Raft stops on its own (here a storage error: its log directory removed
//! under it, so the next segment cannot be created) exits with an error naming why, rather
//! than holding its ports open while answering nothing.

use std::time::{Duration, Instant};

use weir_launcher::LocalCluster;
use weir_server::server::RAFT_STOPPED;

use crate::harness::phase;
use crate::{ELECTION, define};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_raft_stops_on_a_storage_error_exits_with_the_reason() {
    let mut nodes =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-cluster-fatal").unwrap();
    let mut config = nodes.loopback_configs(1).unwrap().remove(0);
    // The least segment size: a few hundred writes begin a new segment.
    config.raft.log_segment_bytes = weir_server::config::LOG_SEGMENT_BYTES_MIN;
    let log_dir = config.data_dir.join("log");
    let id = nodes.add(config).unwrap();
    nodes.start(id).unwrap();
    assert!(nodes.leader(ELECTION).await.is_some(), "no leader");
    let client = weir_client::Client::new(nodes.servers());
    client.write(define("before", 1)).await.unwrap();
    phase("the log directory is removed; writes go on until a new segment is needed");
    std::fs::remove_dir_all(&log_dir).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0u32;
    while nodes.pid(id).is_some() && Instant::now() < deadline {
        n += 1;
        // Each write's outcome is beside the point: some are written to the open segment,
        // then one needs a segment that cannot be created.
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            client.write(define(&format!("limit-{n}"), 1)),
        )
        .await;
        if let Ok(code) = nodes.exited_within(id, Duration::ZERO) {
            assert_eq!(code, Some(1), "the node exits with an error");
            break;
        }
    }
    let log = std::fs::read_to_string(&nodes.node(id).log).unwrap();
    assert!(
        !nodes.is_running(id),
        "the node still runs {n} writes after its log directory went; its log ends:\n{}",
        nodes.log_tail(id, 10).join("\n")
    );
    assert!(
        log.contains(RAFT_STOPPED) && log.contains("No such file or directory"),
        "the node's log names why it stopped:\n{}",
        nodes.log_tail(id, 10).join("\n")
    );
}
