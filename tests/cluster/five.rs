//! The README's five-node quick start, as it is written: certificates for five nodes, the
//! shipped `config/node1.toml` .. `node5.toml` (their shape: ids, peers, TLS files; each
//! address replaced by a free loopback port), nodes 1 to 3 started, then nodes 4 and 5
//! each started and made a voter with `weir cluster add`, and `weir status` showing five
//! voters. Five nodes survive two failures: a write is acknowledged with two of them
//! stopped (the leader among them), and refused with three stopped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir_launcher::{LocalCluster, loopback_addr};
use weir_proto::tls::ClientSecurity;
use weir_server::config::Config;

use crate::harness::phase;

/// The shipped config of node `id`, as the quick start uses it, moved into `dir`: every
/// address the shipped files use is replaced by the free port `ports` maps it to (the same
/// address in two files gets the same port), the data directory is the cluster's, and the
/// TLS files are those `weir certs init` wrote into `certs`.
fn shipped(
    id: u64,
    cluster: &LocalCluster,
    certs: &Path,
    ports: &mut BTreeMap<String, String>,
) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("config/node{id}.toml"));
    let mut config = Config::load(&path).unwrap();
    let mut port = |addr: &mut String| {
        let fresh = ports
            .entry(addr.clone())
            .or_insert_with(|| loopback_addr().unwrap());
        *addr = fresh.clone();
    };
    port(&mut config.client_addr);
    port(&mut config.peer_addr);
    port(&mut config.http_listen);
    port(&mut config.grpc_listen);
    for peer in &mut config.peers {
        port(&mut peer.peer);
        port(&mut peer.client);
    }
    config.data_dir = cluster.data_dir(id);
    let tls = config
        .tls
        .as_mut()
        .expect("the shipped configs turn TLS on");
    let moved = |file: &PathBuf| certs.join(file.file_name().expect("a file name"));
    tls.cert = moved(&tls.cert);
    tls.key = moved(&tls.key);
    tls.ca = moved(&tls.ca);
    config
}

/// `weir ARGS` against `servers`, verifying the nodes against `ca`, killed if it has not
/// exited within 60 s: (exit code, stdout, stderr).
fn weir(servers: &[String], ca: &Path, args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env("WEIR_SERVERS", servers.join(","))
        .env("WEIR_CA", ca)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `weir ARGS`, which must exit 0; its stdout.
fn weir_ok(servers: &[String], ca: &Path, args: &[&str]) -> String {
    let (code, out, err) = weir(servers, ca, args);
    assert_eq!(code, 0, "weir {args:?}: {out} {err}");
    out
}

/// The rows of `weir status --json`: (id, state).
fn status_rows(servers: &[String], ca: &Path) -> Vec<(u64, String)> {
    let out = weir_ok(servers, ca, &["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    status["nodes"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|n| {
            (
                n["id"].as_u64().expect("an id"),
                n["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Kills every node on drop (the launcher's drop does), and keeps the directory with the
/// logs' tails printed when the test failed.
struct Keep(LocalCluster);

impl Drop for Keep {
    fn drop(&mut self) {
        self.0.kill_all();
        if std::thread::panicking() {
            self.0.keep_dir();
            eprintln!("cluster logs kept in {}", self.0.dir().display());
            for n in self.0.nodes() {
                eprintln!("--- node {} log tail ---", n.id);
                for line in self.0.log_tail(n.id, 15) {
                    eprintln!("{line}");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_five_node_quick_start_makes_five_voters_that_survive_two_failures_not_three() {
    let cluster = LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-five").unwrap();
    let certs = cluster.dir().join("certs");
    let ca = certs.join("ca.pem");
    phase("weir certs init certs --nodes 5");
    weir_ok(
        &[],
        &ca,
        &[
            "certs",
            "init",
            &certs.display().to_string(),
            "--nodes",
            "5",
        ],
    );
    let mut ports = BTreeMap::new();
    let configs: Vec<Config> = (1..=5)
        .map(|id| shipped(id, &cluster, &certs, &mut ports))
        .collect();
    let mut cluster = Keep(cluster.security(ClientSecurity::new(Some(&ca), None).unwrap()));
    let all: Vec<String> = configs.iter().map(|c| c.client_addr.clone()).collect();
    let three = &all[..3];

    phase("nodes 1 to 3 form the cluster");
    let mut configs = configs.into_iter();
    cluster
        .0
        .add_and_start(configs.by_ref().take(3).collect())
        .unwrap();
    cluster
        .0
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");

    for config in configs {
        let id = config.id;
        phase(&format!("start node {id}, then weir cluster add {id}"));
        let (peer, client) = (config.peer_addr.clone(), config.client_addr.clone());
        cluster.0.add(config).unwrap();
        cluster.0.start(id).unwrap();
        let id_text = id.to_string();
        weir_ok(
            three,
            &ca,
            &[
                "cluster", "add", &id_text, "--peer", &peer, "--client", &client,
            ],
        );
    }

    phase("weir status: five voters, one leader");
    let rows = status_rows(&all, &ca);
    let ids: Vec<u64> = rows.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5], "{rows:?}");
    let leaders = rows.iter().filter(|(_, s)| s == "Leader").count();
    let followers = rows.iter().filter(|(_, s)| s == "Follower").count();
    assert_eq!((leaders, followers), (1, 4), "{rows:?}");
    let leader = cluster
        .0
        .leader(Duration::from_secs(10))
        .await
        .expect("a leader");
    let members = cluster.0.status(leader).await.expect("a status").members;
    assert_eq!(members.len(), 5, "{members:?}");
    assert!(members.iter().all(|m| m.voter), "{members:?}");

    phase("two stopped, the leader among them: a write is acknowledged");
    let other = if leader == 5 { 4 } else { 5 };
    cluster.0.kill(leader);
    cluster.0.kill(other);
    weir_ok(&all, &ca, &["limit", "define", "db", "--concurrent", "3"]);
    let out = weir_ok(&all, &ca, &["limit", "show", "db", "--json"]);
    assert!(
        out.contains("\"concurrent\": 3") || out.contains("\"concurrent\":3"),
        "{out}"
    );

    phase("three stopped: a write is refused, not acknowledged");
    let third = (1..=5)
        .find(|id| cluster.0.is_running(*id))
        .expect("three run");
    cluster.0.kill(third);
    let (code, out, err) = weir(&all, &ca, &["limit", "define", "db2", "--concurrent", "1"]);
    assert_ne!(code, 0, "a write with two of five nodes up: {out} {err}");
    assert!(!err.is_empty(), "the refusal says why: {out}");

    phase("the two left applied the first write, not the second");
    let left: Vec<String> = (1..=5)
        .filter(|id| cluster.0.is_running(*id))
        .map(|id| cluster.0.node(id).client.clone())
        .collect();
    assert_eq!(left.len(), 2);
    for server in &left {
        let one = std::slice::from_ref(server);
        weir_ok(one, &ca, &["limit", "show", "db", "--stale"]);
        let (code, out, _) = weir(one, &ca, &["limit", "show", "db2", "--stale"]);
        assert_ne!(code, 0, "{server} applied an unacknowledged write: {out}");
    }
}
