//! A failed first start leaves the data directory labelled but Raft empty: the next start
//! must still form the cluster (initialization is decided by Raft's state, not by the label).

use std::time::{Duration, Instant};

use weir_launcher::LocalCluster;

use crate::harness::phase;
use crate::{ELECTION, define};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_that_failed_on_a_taken_port_forms_the_cluster_on_the_next_start() {
    let mut nodes =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-cluster-firststart").unwrap();
    let config = nodes.loopback_configs(1).unwrap().remove(0);
    let id = nodes.add(config.clone()).unwrap();
    phase("first start: the client port is taken, the start fails");
    let taken = std::net::TcpListener::bind(&config.client_addr).unwrap();
    nodes.start(id).unwrap();
    let log = nodes.node(id).log.clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("client port")
    {
        assert!(Instant::now() < deadline, "the first start did not fail");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let code = nodes.stop(id);
    assert_ne!(code, Some(0), "the failed start exits with an error");
    assert!(
        config
            .data_dir
            .join(weir_server::server::IDENTITY_FILE)
            .exists(),
        "the failed start labelled the directory"
    );
    drop(taken);
    phase("second start: the node forms its cluster and serves writes");
    nodes.start(id).unwrap();
    if nodes.leader(ELECTION).await.is_none() {
        nodes.keep_dir();
        panic!(
            "no leader after the second start; logs in {}",
            nodes.dir().display()
        );
    }
    let client = weir_client::Client::new(nodes.servers());
    client.write(define("formed", 1)).await.unwrap();
    nodes.kill_all();
}

/// Every path under `dir` with its mode (permission bits), sorted.
fn modes(dir: &std::path::Path) -> Vec<(String, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut all = vec![(
        dir.display().to_string(),
        std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
    )];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all.extend(modes(&path));
        } else {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            all.push((path.display().to_string(), mode));
        }
    }
    all.sort();
    all
}

/// Whether every directory in `seen` is 0700 and every file 0600.
fn private(seen: &[(String, u32)]) -> bool {
    seen.iter().all(|(path, mode)| {
        let dir = std::path::Path::new(path).is_dir();
        *mode == if dir { 0o700 } else { 0o600 }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_0700_its_files_and_backups_0600_and_looser_ones_are_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let mut cluster = crate::harness::Cluster::start("modes", 1, "");
    cluster.leader(ELECTION).await;
    let client = cluster.client();
    cluster.write(&client, define("kept", 1)).await;
    let dir = cluster.node(1).config.data_dir.clone();

    phase("a node's data directory and its files, as created");
    let seen = modes(&dir);
    assert!(seen.len() >= 4, "{seen:?}");
    assert!(private(&seen), "{seen:?}");

    phase("a backup file is 0600");
    let backup = dir.parent().unwrap().join("saved.wbak");
    cluster.cli_ok(&["snapshot", "save", backup.to_str().unwrap()]);
    let mode = std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", backup.display());

    phase("loosened while stopped: tightened at the next start, with a log line");
    cluster.stop(1);
    for (path, _) in modes(&dir) {
        let loose = if std::path::Path::new(&path).is_dir() {
            0o755
        } else {
            0o644
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).unwrap();
    }
    assert!(!private(&modes(&dir)));
    cluster.start_node(1);
    cluster.leader(ELECTION).await;
    let seen = modes(&dir);
    assert!(private(&seen), "{seen:?}");
    let log = std::fs::read_to_string(&cluster.node(1).log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("paths were readable by others") && l.contains("now 700")),
        "{log}"
    );
}
