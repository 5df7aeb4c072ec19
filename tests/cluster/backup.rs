//! Backups and disaster recovery: `weir snapshot save`, every data directory lost, three
//! nodes restored from the file under a new cluster identity, and a node of the old cluster
//! refused by them naming both identities.

use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use weir_client::Client;
use weir_core::machine::{Acquire, Command, Priority, Reply, Settle};
use weir_proto::protocol::{Answer, Query, Request, Response};
use weir_server::config::Config;

use crate::harness::{Cluster, phase};
use crate::{CONVERGE, ELECTION, define};

/// A process killed and reaped on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn read(client: &Client, query: Query) -> Answer {
    match client.request(Request::Read(query)).await {
        Ok(Response::Read(a)) => a,
        other => panic!("read failed: {other:?}"),
    }
}

/// Units held on limit `name` of tenant `t`, or `None` if the limit does not exist.
async fn in_use(client: &Client, name: &str) -> Option<u64> {
    let query = Query::Limit {
        tenant: "t".into(),
        name: name.into(),
    };
    match read(client, query).await {
        Answer::Limit(l) => l.map(|l| l.in_use),
        other => panic!("unexpected {other:?}"),
    }
}

async fn runs(client: &Client) -> Vec<String> {
    match read(client, Query::Running { tenant: "t".into() }).await {
        Answer::Running(r) => r.into_iter().map(|(run, _)| run).collect(),
        other => panic!("unexpected {other:?}"),
    }
}

async fn spent_tokens(client: &Client) -> u64 {
    let query = Query::Spent {
        tenant: "t".into(),
        period: "p".into(),
    };
    match read(client, query).await {
        Answer::Spent(s) => s.tokens,
        other => panic!("unexpected {other:?}"),
    }
}

fn reserve(run: &str) -> Command {
    Command::Reserve {
        tenant: "t".into(),
        run: run.into(),
        agent: None,
        period: Some("p".into()),
        hold_tokens: None,
        hold_minor: None,
    }
}

fn settle(run: &str, tokens: u64) -> Command {
    Command::Settle(Settle {
        tenant: "t".into(),
        run: run.into(),
        epoch: 1,
        period: Some("p".into()),
        tokens,
        minor_units: 0,
        release_slot: false,
    })
}

/// Acknowledged writes before the backup: ten limits, a session holding two permits, two
/// runs, one settlement. Returns the session.
async fn writes_before(cluster: &Cluster, client: &Client) -> u64 {
    for i in 0..10 {
        assert_eq!(
            cluster.write(client, define(&format!("l{i}"), 5)).await,
            Reply::Done
        );
    }
    let Reply::SessionOpened { session, .. } = cluster
        .write(client, Command::OpenSession { ttl_ms: 600_000 })
        .await
    else {
        panic!("no session");
    };
    for ticket in 1..=2 {
        let acquire = Command::Acquire(Acquire {
            session,
            ticket,
            tenant: "t".into(),
            limit: "l0".into(),
            units: 1,
            priority: Priority::default(),
            agent: None,
            wait: false,
        });
        let reply = cluster.write(client, acquire).await;
        assert!(matches!(reply, Reply::Granted { .. }), "{reply:?}");
    }
    for run in ["r1", "r2"] {
        assert_eq!(cluster.write(client, reserve(run)).await, Reply::Admitted);
    }
    let settled = cluster.write(client, settle("r1", 100)).await;
    assert!(matches!(settled, Reply::Settled { .. }), "{settled:?}");
    session
}

/// Acknowledged writes after the backup, which a restore must not show.
async fn writes_after(cluster: &Cluster, client: &Client) {
    assert_eq!(cluster.write(client, define("after", 1)).await, Reply::Done);
    assert_eq!(cluster.write(client, reserve("r3")).await, Reply::Admitted);
    let settled = cluster.write(client, settle("r2", 50)).await;
    assert!(matches!(settled, Reply::Settled { .. }), "{settled:?}");
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Waits (bounded) until the file at `path` holds every one of `needles` on one line.
fn wait_for_line(path: &Path, needles: &[&str], within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return Some(line.to_owned());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Starts the old cluster's node 3 on its own data, on new ports: its Raft state still names
/// the old members' addresses, which the restored nodes now use.
/// The last `n` lines of the log at `path` (empty when it cannot be read), for a failure's
/// message.
fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn start_old_node(cluster: &Cluster, old_data: &Path) -> (Killed, PathBuf) {
    let dir = cluster.node(3).config_path.parent().unwrap().to_owned();
    let mut config = Config {
        data_dir: old_data.to_owned(),
        client_addr: weir_launcher::loopback_addr().unwrap(),
        peer_addr: weir_launcher::loopback_addr().unwrap(),
        http_listen: weir_launcher::loopback_addr().unwrap(),
        ..cluster.node(3).config.clone()
    };
    for peer in config.peers.iter_mut().filter(|p| p.id == 3) {
        peer.peer = config.peer_addr.clone();
        peer.client = config.client_addr.clone();
    }
    let path = dir.join("old3.toml");
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
    let log = dir.join("old3.log");
    let child = Process::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    (Killed(child), log)
}

/// Restores every (stopped, emptied) node of `cluster` from the backup `file` with `weir
/// snapshot restore`, checks each took the cluster identity `restored`, starts them all and
/// waits for a leader; a client of the restored cluster.
async fn restore_every_node(cluster: &mut Cluster, file: &str, restored: &str) -> Client {
    for id in 1..=3u64 {
        let node = cluster.node(id);
        let answer = json(&cluster.cli_ok(&[
            "--json",
            "snapshot",
            "restore",
            file,
            "--data-dir",
            node.config.data_dir.to_str().unwrap(),
            "--id",
            &id.to_string(),
            "--config",
            node.config_path.to_str().unwrap(),
        ]));
        assert_eq!(answer["cluster"], restored, "{answer}");
    }
    for id in 1..=3 {
        cluster.start_node(id);
    }
    cluster.leader(ELECTION).await;
    cluster.client()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restored_from_a_backup_has_every_write_up_to_it_and_refuses_the_old_one() {
    let mut cluster = Cluster::start("backup", 3, "");
    cluster.leader(ELECTION).await;
    let client = cluster.client();
    phase("acknowledged writes, then a backup, then more writes");
    writes_before(&cluster, &client).await;
    let dir = cluster.node(1).config_path.parent().unwrap().to_owned();
    let file = dir.join("cluster.wbak");
    let file_arg = file.to_str().unwrap();
    let saved = json(&cluster.cli_ok(&["--json", "snapshot", "save", file_arg]));
    writes_after(&cluster, &client).await;
    assert_eq!(in_use(&client, "after").await, Some(0));

    phase("inspect: what the file holds, verified");
    let seen = json(&cluster.cli_ok(&["--json", "snapshot", "inspect", file_arg]));
    assert_eq!(seen["verified"], true);
    let backup = &seen["backup"];
    assert_eq!(backup["index"], saved["index"]);
    assert_eq!(backup["contents"]["limits"], 10);
    assert_eq!(backup["contents"]["holders"], 2);
    assert_eq!(backup["contents"]["runs"], 2);
    assert_eq!(backup["contents"]["settlements"], 1);
    assert_eq!(backup["members"].as_array().unwrap().len(), 3);
    let old_cluster = backup["cluster"].as_str().unwrap().to_owned();
    let new_cluster = backup["restored_cluster"].as_str().unwrap().to_owned();
    assert_ne!(old_cluster, new_cluster);

    phase("a damaged copy is refused by inspect and restore, naming the file");
    let damaged = dir.join("damaged.wbak");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&damaged, &bytes).unwrap();
    let damaged_arg = damaged.to_str().unwrap();
    let (code, _, err) = cluster.cli(&["snapshot", "inspect", damaged_arg]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(damaged_arg) && err.contains("checksum mismatch"),
        "{err}"
    );
    let node1 = cluster.node(1);
    let (code, _, err) = cluster.cli(&[
        "snapshot",
        "restore",
        file_arg,
        "--data-dir",
        node1.config.data_dir.to_str().unwrap(),
        "--id",
        "1",
        "--config",
        node1.config_path.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "a restore over a live data directory: {err}");
    assert!(err.contains("not empty"), "{err}");

    phase("every data directory lost; node 3's is kept aside as the old cluster's");
    for id in 1..=3 {
        cluster.kill(id);
    }
    let old_data = dir.join("old-data3");
    std::fs::rename(cluster.node(3).config.data_dir.clone(), &old_data).unwrap();
    for id in 1..=2 {
        std::fs::remove_dir_all(&cluster.node(id).config.data_dir).unwrap();
    }

    phase("restore three nodes from the file, start them");
    let client = restore_every_node(&mut cluster, file_arg, &new_cluster).await;

    phase("every write up to the backup is there, none after it");
    for i in 0..10 {
        assert!(
            in_use(&client, &format!("l{i}")).await.is_some(),
            "l{i} lost"
        );
    }
    assert_eq!(in_use(&client, "l0").await, Some(2), "the held permits");
    assert_eq!(in_use(&client, "after").await, None);
    let mut running = runs(&client).await;
    running.sort();
    assert_eq!(running, vec!["r1".to_string(), "r2".to_string()]);
    assert_eq!(spent_tokens(&client).await, 100);

    phase("the restored cluster serves");
    assert_eq!(cluster.write(&client, define("new", 1)).await, Reply::Done);
    cluster.converged(CONVERGE).await;

    phase("a node of the old cluster is refused, naming both identities");
    let (_old, old_log) = start_old_node(&cluster, &old_data);
    let refused = [old_cluster.as_str(), new_cluster.as_str(), "refused"];
    let on_old = wait_for_line(&old_log, &refused, Duration::from_secs(20));
    assert!(
        on_old.is_some(),
        "the old node logged no refusal naming both identities; its log ends:\n{}",
        log_tail(&old_log, 30)
    );
    let on_restored = wait_for_line(&cluster.node(1).log, &refused, Duration::from_secs(5))
        .or_else(|| wait_for_line(&cluster.node(2).log, &refused, Duration::from_secs(5)));
    assert!(on_restored.is_some(), "no restored node logged the refusal");
    eprintln!(
        "old node: {}\nrestored: {}",
        on_old.unwrap(),
        on_restored.unwrap()
    );
    assert_eq!(
        cluster.write(&client, define("still", 1)).await,
        Reply::Done
    );
    cluster.converged(CONVERGE).await;
}

/// The upgrade across a change of the peer protocol: a backup taken by the release before
/// (the shipped fixture `backup.wbak-1`, whose machine snapshot is version 5) restores every
/// node of a cluster of this release; all start from the same converted state, so they
/// agree (equal digests), and the cluster serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_the_release_before_restores_a_cluster_of_this_one() {
    let mut cluster = Cluster::start("oldbackup", 3, "");
    cluster.leader(ELECTION).await;
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats/backup.wbak-1");
    let file_arg = fixture.to_str().unwrap();
    phase("inspect reads the version 5 snapshot inside");
    let seen = json(&cluster.cli_ok(&["--json", "snapshot", "inspect", file_arg]));
    assert_eq!(seen["verified"], true, "{seen}");
    let backup = &seen["backup"];
    assert_eq!(backup["index"], 3, "{seen}");
    assert_eq!(backup["contents"]["limits"], 1, "{seen}");
    assert_eq!(backup["contents"]["holders"], 1, "{seen}");
    let restored = backup["restored_cluster"].as_str().unwrap().to_owned();

    phase("every node stopped and emptied, restored from the old release's file");
    for id in 1..=3 {
        cluster.kill(id);
        std::fs::remove_dir_all(&cluster.node(id).config.data_dir).unwrap();
    }
    let client = restore_every_node(&mut cluster, file_arg, &restored).await;
    let limit = match read(
        &client,
        Query::Limit {
            tenant: "t".into(),
            name: "l".into(),
        },
    )
    .await
    {
        Answer::Limit(Some(l)) => l,
        other => panic!("the backup's limit: {other:?}"),
    };
    assert_eq!((limit.concurrent, limit.max_in_use), (2, 1), "{limit:?}");

    phase("the restored cluster serves, and its nodes agree");
    assert_eq!(cluster.write(&client, define("new", 1)).await, Reply::Done);
    assert_eq!(in_use(&client, "new").await, Some(0));
    cluster.converged(CONVERGE).await;
}

/// Copies directory `from` to `to`, files and subdirectories.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of node 3's data directory (a VM clone, a copied volume, a restore beside the
/// original) started at another address while node 3 runs: the other nodes refuse it at
/// its hello, naming both addresses, and the cluster goes on as it was: the same leader in
/// the same term, node 3 a follower that applies what the leader commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_a_nodes_data_directory_started_elsewhere_is_refused_and_disturbs_nothing() {
    let mut cluster = Cluster::start("copy", 3, "");
    cluster.leader(ELECTION).await;
    let client = cluster.client();
    assert_eq!(
        cluster.write(&client, define("before", 1)).await,
        Reply::Done
    );
    cluster.converged(CONVERGE).await;

    phase("node 3 stopped, its data directory copied, node 3 started again on its own");
    let dir = cluster.node(3).config_path.parent().unwrap().to_owned();
    let copy = dir.join("copy-data3");
    cluster.stop(3);
    copy_dir(&cluster.node(3).config.data_dir, &copy);
    cluster.start_node(3);
    let leader = cluster.leader(ELECTION).await;
    cluster.converged(CONVERGE).await;
    let term = cluster.status(leader).await.unwrap().term;

    phase("the copy starts at another address");
    let (_copy, copy_log) = start_old_node(&cluster, &copy);
    // Elections time out within a second: three seconds let the copy campaign several
    // times, as it did when it was let in.
    tokio::time::sleep(Duration::from_secs(3)).await;

    phase("the same leader in the same term, and node 3 follows it");
    let status = cluster.status(leader).await.unwrap();
    assert_eq!(
        (status.state.as_str(), status.term),
        ("Leader", term),
        "{status:?}"
    );
    assert_eq!(
        cluster.write(&client, define("after", 1)).await,
        Reply::Done
    );
    cluster.converged(CONVERGE).await;
    let three = cluster.status(3).await.unwrap();
    assert_eq!(
        (three.term, three.leader),
        (term, Some(leader)),
        "{three:?}"
    );

    phase("the others refused the copy, naming both addresses, and the copy knows it");
    let refused = ["says it is node 3", "refused"];
    let seen = wait_for_line(&cluster.node(1).log, &refused, Duration::from_secs(5))
        .or_else(|| wait_for_line(&cluster.node(2).log, &refused, Duration::from_secs(5)));
    assert!(
        seen.is_some(),
        "neither node 1 nor node 2 logged the refusal"
    );
    assert!(
        wait_for_line(&copy_log, &refused, Duration::from_secs(5)).is_some(),
        "the copy did not log that it was refused"
    );
}
