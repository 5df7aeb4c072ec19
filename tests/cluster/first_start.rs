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
