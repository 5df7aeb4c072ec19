//! Three `weir` processes with `groups = 2`: each hosts the metadata group and data groups
//! 1 and 2, each group replicated to every node in its own directory; the client port
//! serves data group 1 (requests are not yet routed by tenant); a node killed and
//! restarted recovers every group; a changed count of groups is refused at start.

use std::process::{Command as Process, Stdio};

use weir_core::machine::Reply;

use crate::harness::{Cluster, phase};
use crate::{CONVERGE, ELECTION, acquire, define, limit_names, open, release};

/// The bytes in the `.wal` segments of group `group` in node `id`'s data directory: more
/// than none once the group's leader has replicated to it (a segment is created empty).
fn group_log_bytes(cluster: &Cluster, id: u64, group: u32) -> u64 {
    let dir = cluster
        .node(id)
        .config
        .data_dir
        .join("groups")
        .join(group.to_string())
        .join("log");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_of_two_groups_serve_permits_and_recover_every_group_after_a_kill() {
    let mut cluster = Cluster::start("groups", 3, "groups = 2");
    let leader = cluster.leader(ELECTION).await;
    let client = cluster.client();
    cluster.write(&client, define("one", 1)).await;
    for i in 0..5 {
        cluster.write(&client, define(&format!("g{i}"), 1)).await;
    }
    phase("a permit acquired and released");
    let session = open(&client).await;
    assert!(matches!(
        cluster.write(&client, acquire(session, 1)).await,
        Reply::Granted { units: 1, .. }
    ));
    assert_eq!(
        cluster.write(&client, release(session, 1)).await,
        Reply::Released {
            held: true,
            withdrawn: false
        }
    );
    let before = cluster.converged(CONVERGE).await;

    phase("every group has its own log on every node, replicated");
    for id in 1..=3 {
        for group in 0..=2 {
            assert!(
                group_log_bytes(&cluster, id, group) > 0,
                "node {id}, group {group}: nothing in its log"
            );
        }
        assert!(!cluster.node(id).config.data_dir.join("log").exists());
    }

    phase("kill -9 the leader, restart it");
    cluster.kill(leader);
    cluster.start_node(leader);
    cluster.leader(ELECTION).await;
    assert_eq!(limit_names(&cluster).await.len(), 6);
    assert_eq!(cluster.converged(CONVERGE).await, before);
    let session = open(&client).await;
    assert!(matches!(
        cluster.write(&client, acquire(session, 1)).await,
        Reply::Granted { units: 1, .. }
    ));

    phase("node 3 stopped, then started with groups = 3: refused");
    assert_eq!(cluster.stop(3), Some(0));
    let config = &cluster.node(3).config;
    let mut text = toml::to_string(config).unwrap();
    assert!(text.contains("groups = 2"), "{text}");
    text = text.replace("groups = 2", "groups = 3");
    let path = config.data_dir.with_extension("groups-3.toml");
    std::fs::write(&path, text).unwrap();
    let out = Process::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr
            .contains("this data directory holds groups {0, 1, 2}, but the config says groups = 3"),
        "{stderr}"
    );
}
