//! Cluster tests: the real `weir` binary as three processes on loopback.

mod add_node;
mod apply;
mod backup;
mod bench_incident;
mod cli;
mod client_port;
mod conformance;
mod console;
mod edge;
mod fatal;
mod first_start;
mod groups;
mod five;
mod harness;
mod http;
mod http_security;
mod incidents;
mod keyed;
mod library;
mod metrics;
mod owners;
mod readme;
mod readme_library;
mod rls;
mod security;
mod soak;
mod upgrade;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_core::machine::{Acquire, Command, Priority, Reply};
use weir_proto::protocol::{Answer, Query, Request, Response};

use harness::{Cluster, phase};

pub const ELECTION: Duration = Duration::from_secs(10);
pub const CONVERGE: Duration = Duration::from_secs(20);

pub fn define(name: &str, concurrent: u32) -> Command {
    Command::DefineLimit {
        tenant: "t".into(),
        name: name.into(),
        concurrent,
        per_second: 0.0,
        burst: None,
    }
}

pub async fn limit_names(cluster: &Cluster) -> BTreeSet<String> {
    let client = cluster.client();
    match client.request(Request::Read(Query::limits("t"))).await {
        Ok(Response::Read(Answer::Limits(page))) => {
            page.limits.into_iter().map(|l| l.name).collect()
        }
        other => panic!("read failed: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_a_leader_apply_writes_on_all_and_agree_on_digests() {
    let cluster = Cluster::start("form", 3, "");
    phase("elect");
    let leader = cluster.leader(ELECTION).await;
    phase("write through any node");
    let client = cluster.client();
    for i in 0..20 {
        assert_eq!(
            cluster.write(&client, define(&format!("l{i}"), 2)).await,
            Reply::Done
        );
    }
    phase("all three apply and agree");
    let digest = cluster.converged(CONVERGE).await;
    for id in 1..=3 {
        let s = cluster.status(id).await.unwrap();
        assert_eq!(s.digest, digest);
        assert_eq!(s.leader, Some(leader));
        assert_eq!(s.members.len(), 3);
    }
    assert_eq!(limit_names(&cluster).await.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_under_writes_loses_no_acknowledged_write_and_it_rejoins() {
    let mut cluster = Cluster::start("kill", 3, "");
    let first = cluster.leader(ELECTION).await;
    phase("stream writes; kill -9 the leader after 30 of them");
    let servers = cluster.servers();
    let writer = tokio::spawn(async move {
        let client = weir_client::Client::new(servers);
        let mut acked = vec![];
        for i in 0..120 {
            let name = format!("w{i}");
            if let Ok(Response::Written {
                reply: Reply::Done, ..
            }) = client.request(Request::Write(define(&name, 1))).await
            {
                acked.push(name);
            }
        }
        acked
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while limit_names(&cluster).await.len() < 30 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.kill(first);
    let acked = writer.await.unwrap();
    phase("a new leader; every acknowledged write is there (G3)");
    let second = cluster.leader(ELECTION).await;
    assert_ne!(second, first);
    assert!(
        acked.len() >= 100,
        "most writes are acknowledged across one failover: {}",
        acked.len()
    );
    let present = limit_names(&cluster).await;
    for name in &acked {
        assert!(present.contains(name), "acknowledged {name} lost");
    }
    phase("the old leader restarts and catches up");
    cluster.start_node(first);
    let digest = cluster.converged(CONVERGE).await;
    assert_eq!(cluster.status(first).await.unwrap().digest, digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_three_killed_and_restarted_come_back_identical() {
    let mut cluster = Cluster::start("restart", 3, "");
    cluster.leader(ELECTION).await;
    let client = cluster.client();
    for i in 0..15 {
        cluster.write(&client, define(&format!("r{i}"), 3)).await;
    }
    let before = cluster.converged(CONVERGE).await;
    let names = limit_names(&cluster).await;
    phase("kill -9 all three, restart");
    for id in 1..=3 {
        cluster.kill(id);
    }
    for id in 1..=3 {
        cluster.start_node(id);
    }
    cluster.leader(ELECTION).await;
    phase("state identical to before");
    assert_eq!(limit_names(&cluster).await, names);
    // New leaders append blank entries, which change no state: the digest is the same.
    let after = cluster.converged(CONVERGE).await;
    assert_eq!(after, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_stopped_past_a_snapshot_catches_up_by_installing_it() {
    let extra = "[raft]\nsnapshot_logs_since_last = 40\nmax_in_snapshot_log_to_keep = 0\npurge_batch_size = 1\n";
    let mut cluster = Cluster::start("snap", 3, extra);
    let leader = cluster.leader(ELECTION).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    phase("stop a follower; move the log far past a snapshot");
    assert_eq!(cluster.stop(follower), Some(0), "SIGTERM is a clean exit");
    let client = cluster.client();
    for i in 0..150 {
        cluster.write(&client, define(&format!("s{i}"), 1)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let purged = loop {
        let s = cluster.status(leader).await.unwrap();
        if let Some(p) = s.purged_index.filter(|p| *p > 100) {
            break p;
        }
        assert!(Instant::now() < deadline, "the leader never purged: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    phase("restart it: it can only catch up by snapshot");
    cluster.start_node(follower);
    let digest = cluster.converged(CONVERGE).await;
    let s = cluster.status(follower).await.unwrap();
    assert!(
        s.snapshot_index.is_some_and(|i| i >= purged),
        "installed a snapshot: {s:?}"
    );
    assert_eq!(s.digest, digest, "G4: byte-identical after the install");
    assert_eq!(limit_names(&cluster).await.len(), 150);
}

/// The `.wal` segment files of node `id`'s log, by name (so in sequence order).
fn segments(cluster: &Cluster, id: u64) -> Vec<String> {
    let dir = cluster.node(id).config.data_dir.join("log");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_log_segments_rotate_go_behind_snapshots_and_read_back_after_a_restart() {
    let extra = "[raft]\nsnapshot_logs_since_last = 40\nmax_in_snapshot_log_to_keep = 0\npurge_batch_size = 1\nlog_segment_bytes = 65536\n";
    let mut cluster = Cluster::start("segments", 1, extra);
    cluster.leader(ELECTION).await;
    assert_eq!(segments(&cluster, 1), ["00000000000000000001.wal"]);
    phase("write well past several 64 KiB segments");
    let client = cluster.client();
    let pad = "x".repeat(100);
    for i in 0..1_500 {
        cluster
            .write(&client, define(&format!("{pad}{i}"), 1))
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let names = loop {
        let names = segments(&cluster, 1);
        if names
            .first()
            .is_some_and(|n| n != "00000000000000000001.wal")
        {
            break names;
        }
        assert!(
            Instant::now() < deadline,
            "the first segment was never deleted behind a snapshot: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let newest: u64 = names
        .last()
        .unwrap()
        .trim_end_matches(".wal")
        .parse()
        .unwrap();
    assert!(newest >= 3, "rotated at least twice: {names:?}");
    let digest = cluster.converged(CONVERGE).await;
    phase("restart: the log opens from the segments left");
    assert_eq!(cluster.stop(1), Some(0), "SIGTERM is a clean exit");
    cluster.start_node(1);
    cluster.leader(ELECTION).await;
    assert_eq!(
        cluster.converged(CONVERGE).await,
        digest,
        "the same state after the restart"
    );
}

async fn open(client: &weir_client::Client) -> u64 {
    match client
        .request(Request::Write(Command::OpenSession { ttl_ms: 10_000 }))
        .await
    {
        Ok(Response::Written {
            reply: Reply::SessionOpened { session, .. },
            ..
        }) => session,
        other => panic!("open: {other:?}"),
    }
}

fn release(session: u64, ticket: u64) -> Command {
    Command::Release { session, ticket }
}

fn acquire(session: u64, ticket: u64) -> Command {
    Command::Acquire(Acquire {
        session,
        ticket,
        tenant: "t".into(),
        limit: "one".into(),
        units: 1,
        priority: Priority::default(),
        agent: None,
        wait: true,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_survive_failover_with_their_fence_and_the_log_clock_never_outruns_real_time() {
    let mut cluster = Cluster::start("permits", 3, "");
    let first = cluster.leader(ELECTION).await;
    let client = cluster.client();
    cluster.write(&client, define("one", 1)).await;
    let holder = open(&client).await;
    let waiter = open(&client).await;
    let fence = match cluster.write(&client, acquire(holder, 1)).await {
        Reply::Granted { fence, .. } => fence,
        other => panic!("grant: {other:?}"),
    };
    assert_eq!(
        cluster.write(&client, acquire(waiter, 1)).await,
        Reply::Queued { position: 0 }
    );
    phase("log time over a stretch of real time");
    // The keep-alive's entry is stamped after `real_start`, and the status after it is read
    // once it is applied, so `log_start` is at least that entry's log time; `log_end` is an
    // entry stamped before the last read. The log clock may not gain on the real one.
    let real_start = Instant::now();
    assert_eq!(
        cluster
            .write(&client, Command::KeepAlive { session: waiter })
            .await,
        Reply::KeptAlive { ttl_ms: 10_000 }
    );
    let log_start = cluster.status(first).await.unwrap().log_ms;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let log_end = cluster.status(first).await.unwrap().log_ms;
    let real = real_start.elapsed().as_millis() as u64;
    assert!(
        log_end > log_start,
        "ticks move the log clock while sessions exist"
    );
    assert!(
        log_end - log_start <= real,
        "log clock ran {} ms in {real} ms",
        log_end - log_start
    );
    phase("kill the leader; the holder keeps its permit and fence");
    cluster.kill(first);
    cluster.leader(ELECTION).await;
    assert_eq!(
        cluster
            .write(&client, Command::KeepAlive { session: holder })
            .await,
        Reply::KeptAlive { ttl_ms: 10_000 }
    );
    assert_eq!(
        cluster.write(&client, acquire(holder, 1)).await,
        Reply::Granted { fence, units: 1 }
    );
    assert_eq!(
        cluster.write(&client, acquire(waiter, 1)).await,
        Reply::Queued { position: 0 }
    );
    let status = match client
        .request(Request::Read(Query::Limit {
            tenant: "t".into(),
            name: "one".into(),
        }))
        .await
    {
        Ok(Response::Read(Answer::Limit(Some(l)))) => l,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (status.in_use, status.waiting, status.max_in_use),
        (1, 1, 1)
    );
    phase("release: the waiter is granted, with a larger fence");
    cluster.write(&client, release(holder, 1)).await;
    match cluster.write(&client, acquire(waiter, 1)).await {
        Reply::Granted { fence: f, .. } => assert!(f > fence),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_peer_port_closes_that_connection_and_the_node_keeps_serving() {
    let cluster = Cluster::start("garbage", 3, "");
    cluster.leader(ELECTION).await;
    let target = cluster.node(1).peer.clone();
    let cases: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        // An oversized length: refused before any allocation.
        [u32::MAX.to_le_bytes(), 0u32.to_le_bytes()].concat(),
        // A good length, a bad checksum.
        [4u32.to_le_bytes().as_slice(), &[1, 2, 3, 4], &[9, 9, 9, 9]].concat(),
        // A good checksum over bytes that decode to nothing.
        {
            let payload = [0xffu8; 12];
            [
                12u32.to_le_bytes().as_slice(),
                &crc32c::crc32c(&payload).to_le_bytes(),
                &payload,
            ]
            .concat()
        },
    ];
    for bytes in cases {
        let mut s = tokio::net::TcpStream::connect(&target).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the node closes the connection")
            .unwrap_or(0);
        assert_eq!(n, 0, "nothing is answered to garbage");
    }
    phase("the cluster still serves, node 1 included");
    let client = cluster.client();
    assert_eq!(
        cluster.write(&client, define("after", 1)).await,
        Reply::Done
    );
    cluster.converged(CONVERGE).await;
    let log = std::fs::read_to_string(&cluster.node(1).log).unwrap();
    assert!(
        log.contains("peer connection closed: frame of 4294967295 bytes is above the bound"),
        "reason logged"
    );
    assert!(!log.contains("panicked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_added_as_learner_then_voter_catches_up_by_snapshot_and_one_is_removed() {
    let extra = "[raft]\nsnapshot_logs_since_last = 30\nmax_in_snapshot_log_to_keep = 0\npurge_batch_size = 1\n";
    let mut cluster = Cluster::start("members", 3, extra);
    let leader = cluster.leader(ELECTION).await;
    let client = cluster.client();
    for i in 0..80 {
        cluster.write(&client, define(&format!("m{i}"), 1)).await;
    }
    phase("the log is purged past its start");
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster
        .status(leader)
        .await
        .unwrap()
        .purged_index
        .is_none_or(|p| p < 30)
    {
        assert!(Instant::now() < deadline, "no purge");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    phase("start node 4 empty and add it with the CLI");
    let four = cluster.spare(extra);
    cluster.start_node(four);
    let client_addr = cluster.node(four).client.clone();
    let peer_addr = cluster.node(four).peer.clone();
    let (code, _, err) = cluster.cli(&[
        "cluster",
        "add",
        "4",
        "--peer",
        &peer_addr,
        "--client",
        &client_addr,
    ]);
    assert_eq!(code, 0, "{err}");
    let digest = cluster.converged(CONVERGE).await;
    let s = cluster.status(four).await.unwrap();
    assert_eq!(s.state, "Follower", "a voter now");
    assert!(s.snapshot_index.is_some(), "caught up by snapshot: {s:?}");
    assert_eq!(s.digest, digest);
    phase("remove a node that is not the leader");
    let gone = (1..=3).find(|id| *id != leader).unwrap();
    let (code, _, err) = cluster.cli(&["cluster", "remove", &gone.to_string()]);
    assert_eq!(code, 0, "{err}");
    let s = cluster.status(leader).await.unwrap();
    let voters: Vec<u64> = s.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
    assert!(
        !voters.contains(&gone) && voters.contains(&4) && voters.len() == 3,
        "{voters:?}"
    );
    cluster.kill(gone);
    phase("the new membership serves writes");
    assert_eq!(
        cluster.write(&client, define("after", 1)).await,
        Reply::Done
    );
    assert!(!cluster.is_running(gone));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_status_and_limits_end_to_end_with_exit_codes_and_json_keys() {
    let cluster = Cluster::start("cli", 3, "");
    cluster.leader(ELECTION).await;
    phase("status --watch into a pipe: each table under its time, no terminal codes");
    let mut watch = cluster.spawn_cli(&["status", "--watch"]);
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    watch.kill().unwrap();
    let drawn = watch.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&drawn.stdout);
    assert!(
        !screen.contains('\x1b'),
        "no terminal codes into a pipe: {screen:?}"
    );
    let stamps: Vec<&str> = screen.lines().filter(|l| l.starts_with("-- ")).collect();
    assert!(
        stamps.len() >= 2 && stamps.iter().all(|l| l.ends_with(" GMT")),
        "fewer than two tables, each under its time, in 2.6 s: {screen:?}"
    );
    assert!(screen.contains("Leader"), "{screen}");
    phase("limit define / show / list");
    let (code, out, err) = cluster.cli(&[
        "limit",
        "define",
        "db",
        "--concurrent",
        "3",
        "--tenant",
        "acme",
    ]);
    assert_eq!((code, out.trim()), (0, "defined acme/db"), "{err}");
    let (code, out, _) = cluster.cli(&["--json", "--tenant", "acme", "limit", "show", "db"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "tenant",
        "name",
        "concurrent",
        "per_second",
        "burst",
        "in_use",
        "waiting",
        "max_in_use",
    ] {
        assert!(v.get(key).is_some(), "limit show --json lacks {key}: {out}");
    }
    assert_eq!(
        (
            v["tenant"].as_str(),
            v["concurrent"].as_u64(),
            v["in_use"].as_u64()
        ),
        (Some("acme"), Some(3), Some(0))
    );
    let (code, out, _) = cluster.cli(&["--tenant", "acme", "limit", "show", "db"]);
    assert_eq!(
        (code, out.trim()),
        (
            0,
            "acme/db: concurrent 3; in use 0, waiting 0, max in use 0"
        ),
        "a concurrency-only limit shows no rate"
    );
    let (code, out, _) = cluster.cli(&["limit", "list", "--tenant", "acme", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    phase("errors: unknown limit, invalid spec, usage");
    let (code, _, err) = cluster.cli(&["limit", "show", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown limit default/nope"), "{err}");
    let (code, _, err) = cluster.cli(&["limit", "define", "bad", "--per-second=-1"]);
    assert_eq!(code, 2);
    assert!(err.contains("per_second -1 is not a rate"), "{err}");
    let (code, _, _) = cluster.cli(&["limit", "define"]);
    assert_eq!(code, 2, "clap usage error");
    phase("status --json: every node, agreeing digests");
    cluster.converged(CONVERGE).await;
    let (code, out, err) = cluster.cli(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["leader"].as_u64().is_some() && v["term"].as_u64().is_some(),
        "{out}"
    );
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for n in nodes {
        for key in ["id", "addr", "state", "applied", "digest"] {
            assert!(n.get(key).is_some(), "status node lacks {key}: {out}");
        }
    }
    assert_eq!(nodes.iter().filter(|n| n["state"] == "Leader").count(), 1);
    phase("unreachable cluster: exit 1");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["status", "--servers", "127.0.0.1:1,127.0.0.1:2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no server answered")
            && err.contains("127.0.0.1:1")
            && err.contains("127.0.0.1:2"),
        "each server's failure is named: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_is_told_of_its_grant_by_push_without_asking_again() {
    use weir_proto::protocol::{CLIENT_FRAME_MAX, ClientFrame, PROTOCOL_VERSION, ServerFrame};
    use weir_proto::wire;
    let cluster = Cluster::start("push", 3, "");
    let leader = cluster.leader(ELECTION).await;
    let client = cluster.client();
    cluster.write(&client, define("one", 1)).await;
    let holder = open(&client).await;
    cluster.write(&client, acquire(holder, 1)).await;
    phase("the waiter queues on its own connection to the leader");
    let mut conn = tokio::net::TcpStream::connect(&cluster.node(leader).client)
        .await
        .unwrap();
    wire::write_frame(
        &mut conn,
        &ClientFrame::Hello {
            version: PROTOCOL_VERSION,
            token: None,
        },
    )
    .await
    .unwrap();
    let welcome: ServerFrame = wire::read_frame(&mut conn, CLIENT_FRAME_MAX).await.unwrap();
    assert!(matches!(
        welcome,
        ServerFrame::Welcome {
            version: PROTOCOL_VERSION,
            ..
        }
    ));
    let request = |id, command| ClientFrame::Request {
        id,
        request: Request::Write(command),
    };
    wire::write_frame(
        &mut conn,
        &request(1, Command::OpenSession { ttl_ms: 10_000 }),
    )
    .await
    .unwrap();
    let waiter = match wire::read_frame(&mut conn, CLIENT_FRAME_MAX).await.unwrap() {
        ServerFrame::Response {
            id: 1,
            response:
                Response::Written {
                    reply: Reply::SessionOpened { session, .. },
                    ..
                },
        } => session,
        other => panic!("{other:?}"),
    };
    wire::write_frame(&mut conn, &request(2, acquire(waiter, 9)))
        .await
        .unwrap();
    let queued: ServerFrame = wire::read_frame(&mut conn, CLIENT_FRAME_MAX).await.unwrap();
    assert!(
        matches!(
            queued,
            ServerFrame::Response {
                id: 2,
                response: Response::Written {
                    reply: Reply::Queued { .. },
                    ..
                }
            }
        ),
        "{queued:?}"
    );
    phase("the holder releases on another connection; the waiter only listens");
    let released_at = Instant::now();
    cluster.write(&client, release(holder, 1)).await;
    let pushed: ServerFrame = tokio::time::timeout(
        Duration::from_secs(5),
        wire::read_frame(&mut conn, CLIENT_FRAME_MAX),
    )
    .await
    .expect("a push within 5 s")
    .unwrap();
    eprintln!(
        "push arrived {:?} after the release was acknowledged",
        released_at.elapsed()
    );
    match pushed {
        ServerFrame::Event(weir_core::machine::Event::Granted {
            session,
            ticket,
            units,
            ..
        }) => {
            assert_eq!((session, ticket, units), (waiter, 9, 1));
        }
        other => panic!("expected a pushed grant, got {other:?}"),
    }
}
