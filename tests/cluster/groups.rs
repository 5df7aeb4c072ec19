//! Three `weir` processes with `groups = 2`: each hosts the metadata group and data groups
//! 1 and 2, each group replicated to every node, the node's groups sharing one log; a node killed and
//! restarted recovers every group; a changed count of groups is refused at start. Requests
//! are routed by tenant: a tenant placed in a group is served by a connection to that group
//! alone, told `WrongGroup` elsewhere; a tenant placed nowhere is placed in the default
//! group by the library; `weir tenant place` places and shows.

use std::process::{Command as Process, Stdio};

use openraft::storage::RaftLogStorage;
use weir_server::raft::log_store::LogStore;

use weir_client::{Client, ClientError};
use weir_core::machine::{Command, Reply};
use weir_proto::protocol::{Answer, Failure, Query, Request, Response};

use crate::harness::{Cluster, phase};
use crate::{CONVERGE, ELECTION, acquire, define, limit_names, open, release};

/// The bytes in the `.wal` segments of the log node `id`'s groups share (a segment is
/// created empty).
fn shared_log_bytes(cluster: &Cluster, id: u64) -> u64 {
    let dir = cluster.node(id).config.data_dir.join("groups").join("log");
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

    phase("every node's groups share one log");
    for id in 1..=3 {
        assert!(
            shared_log_bytes(&cluster, id) > 0,
            "node {id}: nothing in its shared log"
        );
        let data = &cluster.node(id).config.data_dir;
        assert!(!data.join("log").exists());
        for group in 0..=2 {
            let own = data.join("groups").join(group.to_string()).join("log");
            assert!(!own.exists(), "{} exists", own.display());
        }
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

    phase("node 3 stopped: its shared log holds every group's entries");
    assert_eq!(cluster.stop(3), Some(0));
    {
        let shared = cluster.node(3).config.data_dir.join("groups").join("log");
        let logs = LogStore::open_shared(&shared, 64 << 20, &[0, 1, 2], &[]).unwrap();
        for (group, mut log) in logs {
            let last = log.get_log_state().await.unwrap().last_log_id;
            assert!(
                last.is_some(),
                "group {group}: no entry in node 3's shared log"
            );
        }
    }

    phase("node 3 started with groups = 3: refused");
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

/// `DefineLimit` of a one-slot semaphore `name` in tenant `tenant`.
fn define_in(tenant: &str, name: &str) -> Command {
    Command::DefineLimit {
        tenant: tenant.into(),
        name: name.into(),
        concurrent: 1,
        per_second: 0.0,
        burst: None,
    }
}

/// The names of tenant `tenant`'s limits, read through `client`.
async fn names_in(client: &Client, tenant: &str) -> Result<Vec<String>, ClientError> {
    match client.request(Request::Read(Query::limits(tenant))).await? {
        Response::Read(Answer::Limits(page)) => {
            Ok(page.limits.into_iter().map(|l| l.name).collect())
        }
        Response::Failed(f) => Err(ClientError::Failed(f)),
        other => panic!("read: {other:?}"),
    }
}

/// Asserts `result` failed `WrongGroup` naming `tenant` and `group`.
fn assert_wrong_group<T: std::fmt::Debug>(
    result: Result<T, ClientError>,
    tenant: &str,
    group: u64,
) {
    match result {
        Err(ClientError::Failed(Failure::WrongGroup {
            tenant: t,
            group: g,
        })) => {
            assert_eq!((t.as_str(), g), (tenant, group));
        }
        other => panic!("expected WrongGroup({tenant}, {group}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_served_by_the_group_they_are_placed_in_and_told_where_elsewhere() {
    let cluster = Cluster::start("routing", 3, "groups = 2");
    cluster.leader(ELECTION).await;
    let plain = cluster.client();
    let two = cluster.client().in_group(2);

    phase("an operator places tenant b in group 2, once");
    assert_eq!(plain.place_tenant("b", Some(2)).await.unwrap(), 2);
    assert_eq!(plain.place_tenant("b", Some(2)).await.unwrap(), 2);
    assert_eq!(plain.place_tenant("b", None).await.unwrap(), 2);
    assert_wrong_group(plain.place_tenant("b", Some(1)).await, "b", 2);

    phase("group 2 serves b; a session of the default group is told where b lives");
    assert_eq!(two.write(define_in("b", "x")).await.unwrap(), Reply::Done);
    let in_one = open_in(&plain).await;
    assert_wrong_group(plain.write(ask_b(in_one)).await, "b", 2);
    let in_two = open_in(&two).await;
    assert!(matches!(
        two.write(ask_b(in_two)).await.unwrap(),
        Reply::Granted { units: 1, .. }
    ));

    phase("a request of no session follows its tenant to its group");
    assert_eq!(plain.write(define_in("b", "w")).await.unwrap(), Reply::Done);
    assert_eq!(names_in(&plain, "b").await.unwrap(), ["w", "x"]);
    assert_eq!(names_in(&two, "b").await.unwrap(), ["w", "x"]);

    phase("a tenant placed nowhere is placed in the default group by the library");
    assert_eq!(plain.write(define_in("c", "y")).await.unwrap(), Reply::Done);
    assert_eq!(plain.place_tenant("c", None).await.unwrap(), 1);
    assert_eq!(names_in(&plain, "c").await.unwrap(), ["y"]);
    let in_two = open_in(&two).await;
    let mut ask_c = ask_b(in_two);
    if let Command::Acquire(a) = &mut ask_c {
        a.tenant = "c".into();
        a.limit = "y".into();
    }
    assert_wrong_group(two.write(ask_c).await, "c", 1);

    phase("a group the nodes do not host, in a hello or a placement, is refused naming it");
    let err = cluster
        .client()
        .in_group(7)
        .write(define_in("c", "z"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("group 7 is not hosted by this node, which hosts groups 0, 1, 2"),
        "{err}"
    );
    let err = plain.place_tenant("d", Some(3)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("group 3 is not a data group of this node, which hosts data groups 1 to 2"),
        "{err}"
    );

    phase("the CLI places, shows, and speaks to the group it is told");
    let out = cluster.cli_ok(&["tenant", "place", "2", "--tenant", "e"]);
    assert_eq!(
        out.trim(),
        "e lives in group 2 (speak to it with --group 2)"
    );
    let out = cluster.cli_ok(&["tenant", "place", "--tenant", "e", "--json"]);
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown, serde_json::json!({"tenant": "e", "group": 2}));
    let (code, _, err) = cluster.cli(&["tenant", "place", "1", "--tenant", "e"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("tenant e lives in group 2: ask that group"),
        "{err}"
    );
    let define = |name: &'static str| {
        [
            "limit",
            "define",
            name,
            "--concurrent",
            "1",
            "--tenant",
            "e",
        ]
    };
    cluster.cli_ok(&define("q"));
    let mut in_group_2 = define("r").to_vec();
    in_group_2.extend(["--group", "2"]);
    cluster.cli_ok(&in_group_2);
    assert_eq!(names_in(&two, "e").await.unwrap(), ["q", "r"]);
    // An acquire is a session's: the CLI must speak to the tenant's group.
    let (code, _, err) = cluster.cli(&["acquire", "q", "--tenant", "e", "--", "true"]);
    assert_ne!(code, 0);
    assert!(err.contains("tenant e lives in group 2"), "{err}");
    cluster.cli_ok(&[
        "acquire", "q", "--tenant", "e", "--group", "2", "--", "true",
    ]);

    phase("a read places nothing: a tenant placed nowhere is told so");
    assert!(matches!(
        names_in(&plain, "nobody").await,
        Err(ClientError::Failed(Failure::Unplaced { tenant })) if tenant == "nobody"
    ));

    phase("a client of protocol 6: the node places its unplaced tenant, and tells it in words");
    let written = ask_v6_anywhere(&cluster, Request::Write(define_in("f", "p"))).await;
    assert!(
        matches!(
            written,
            Response::Written {
                reply: Reply::Done,
                ..
            }
        ),
        "{written:?}"
    );
    assert_eq!(plain.place_tenant("f", None).await.unwrap(), 1);
    let told = ask_v6_anywhere(&cluster, Request::Write(define_in("b", "u"))).await;
    let Response::Failed(Failure::BadRequest(why)) = told else {
        panic!("protocol 6 was answered {told:?}");
    };
    assert!(
        why.contains("tenant b lives in group 2: ask that group (with client protocol 7 or later)"),
        "{why}"
    );
    let placed = ask_v6_anywhere(
        &cluster,
        Request::PlaceTenant {
            tenant: "g".into(),
            group: Some(2),
        },
    )
    .await;
    assert!(
        matches!(&placed, Response::Failed(Failure::BadRequest(w)) if w.contains("a placement needs client protocol 7")),
        "{placed:?}"
    );
}

/// `request` on a connection of client protocol 6 to each node in turn until one answers
/// other than `NotLeader` (bounded: 30 rounds).
async fn ask_v6_anywhere(cluster: &Cluster, request: Request) -> Response {
    use tokio::io::AsyncWriteExt;
    use weir_proto::protocol::{CLIENT_FRAME_MAX, ClientFrame, ServerFrame};
    use weir_proto::wire;
    let mut last = None;
    for _ in 0..30 {
        for addr in cluster.servers() {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let hello = ClientFrame::Hello {
                version: 6,
                token: None,
            };
            let ask = ClientFrame::Request {
                id: 1,
                request: request.clone(),
            };
            let mut bytes = Vec::new();
            wire::write_frame(&mut bytes, &hello).await.unwrap();
            wire::write_frame(&mut bytes, &ask).await.unwrap();
            s.write_all(&bytes).await.unwrap();
            let answer = loop {
                match wire::read_frame::<_, ServerFrame>(&mut s, CLIENT_FRAME_MAX).await {
                    Ok(ServerFrame::Response { response, .. }) => break response,
                    Ok(ServerFrame::Welcome { version, .. }) => assert_eq!(version, 6),
                    Ok(_) => {}
                    Err(e) => panic!("{addr}: {e}"),
                }
            };
            match answer {
                Response::Failed(Failure::NotLeader { .. }) => last = Some(answer),
                answer => return answer,
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("no node served it: {last:?}")
}

/// A session opened through `client` (in its group).
async fn open_in(client: &Client) -> u64 {
    match client
        .write(Command::OpenSession { ttl_ms: 10_000 })
        .await
        .unwrap()
    {
        Reply::SessionOpened { session, .. } => session,
        other => panic!("open: {other:?}"),
    }
}

/// An acquire of one unit of `b/x` in `session`.
fn ask_b(session: u64) -> Command {
    Command::Acquire(weir_core::machine::Acquire {
        session,
        ticket: 1,
        tenant: "b".into(),
        limit: "x".into(),
        units: 1,
        priority: Default::default(),
        agent: None,
        wait: true,
    })
}

/// `method path` on node `node`'s HTTP port with an optional JSON body, naming `group` in
/// the `Weir-Group` header when given: (status, JSON body or Null).
async fn http_in(
    cluster: &Cluster,
    node: u64,
    group: Option<&str>,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (reqwest::StatusCode, serde_json::Value) {
    let url = format!("{}{path}", crate::http::base(cluster, node));
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::Client::new().request(method, url);
    if let Some(g) = group {
        request = request.header("Weir-Group", g);
    }
    if let Some(b) = body {
        request = request.json(&b);
    }
    let response = request.send().await.expect("the node answers HTTP");
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// `method path` on node `node` without a body or a group, asked again every 50 ms until
/// `done` holds of its answer (bounded by `CONVERGE`): that answer's body. Every answer
/// before it is checked by `meanwhile`.
async fn until(
    cluster: &Cluster,
    node: u64,
    method: &str,
    path: &str,
    done: impl Fn(reqwest::StatusCode, &serde_json::Value) -> bool,
    meanwhile: impl Fn(reqwest::StatusCode, &serde_json::Value),
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + CONVERGE;
    loop {
        let (status, v) = http_in(cluster, node, None, method, path, None).await;
        if done(status, &v) {
            return v;
        }
        meanwhile(status, &v);
        assert!(
            std::time::Instant::now() < deadline,
            "{method} {path} on node {node}: {status} {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_door_serves_a_tenant_of_any_group() {
    use reqwest::StatusCode;
    use serde_json::json;
    let cluster = Cluster::start("http-groups", 3, "groups = 2");
    let node = crate::http::follower(&cluster).await;

    phase("b placed in group 2 over HTTP, once and for good; the node answers where it lives");
    let placement = "/v1/tenants/b/placement";
    for _ in 0..2 {
        let (status, v) = http_in(
            &cluster,
            node,
            None,
            "PUT",
            placement,
            Some(json!({"group": 2})),
        )
        .await;
        assert_eq!(
            (status, v),
            (StatusCode::OK, json!({"tenant": "b", "group": 2}))
        );
    }
    let (status, v) = http_in(
        &cluster,
        node,
        None,
        "PUT",
        placement,
        Some(json!({"group": 1})),
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str(), v["group"].as_u64()),
        (StatusCode::MISDIRECTED_REQUEST, Some("WrongGroup"), Some(2)),
        "{v}"
    );
    let (status, v) = http_in(
        &cluster,
        node,
        None,
        "PUT",
        placement,
        Some(json!({"group": 7})),
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("BadRequest")),
        "{v}"
    );
    let ok = |status: StatusCode, _: &serde_json::Value| status == StatusCode::OK;
    // Unplaced until the node applies the placement.
    let unplaced = |_: StatusCode, v: &serde_json::Value| assert_eq!(v["error"], "Unplaced", "{v}");
    let v = until(&cluster, node, "GET", placement, ok, unplaced).await;
    assert_eq!(v, json!({"tenant": "b", "group": 2}));
    let (status, v) = http_in(
        &cluster,
        node,
        None,
        "GET",
        "/v1/tenants/nobody/placement",
        None,
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("Unplaced")),
        "{v}"
    );

    phase("definitions of b go to group 2 with no header");
    for (name, spec) in [
        ("db", json!({"concurrent": 1})),
        ("api", json!({"per_second": 0.5, "burst": 2})),
    ] {
        let path = format!("/v1/tenants/b/limits/{name}");
        let (status, v) = http_in(&cluster, node, None, "PUT", &path, Some(spec)).await;
        assert_eq!(status, StatusCode::OK, "PUT {path}: {v}");
    }
    assert_eq!(
        names_in(&cluster.client().in_group(2), "b").await.unwrap(),
        ["api", "db"]
    );

    phase("a take of b is taken in group 2, in the node's take session there");
    let take = "/v1/tenants/b/limits/api/take";
    // Refused until the follower applies the definition (and the placement).
    let v = until(&cluster, node, "POST", take, ok, |_, _| ()).await;
    assert_eq!(
        (v["taken"].as_u64(), v["remaining"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    let (status, v) = http_in(&cluster, node, None, "POST", take, None).await;
    assert_eq!(
        (status, v["remaining"].as_u64()),
        (StatusCode::OK, Some(0)),
        "{v}"
    );
    let (status, v) = http_in(&cluster, node, None, "POST", take, None).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("Busy")),
        "{v}"
    );
    // Its cap is read in group 2's state: a take of it would hold a permit. Asked once the
    // node has applied db's definition (its history is answered from the node's own state).
    let db_history = "/v1/tenants/b/limits/db/history";
    until(&cluster, node, "GET", db_history, ok, |_, _| ()).await;
    let (status, v) = http_in(
        &cluster,
        node,
        None,
        "POST",
        "/v1/tenants/b/limits/db/take",
        None,
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Invalid")),
        "{v}"
    );

    phase("a session of the default group is told where b lives, and how to get there");
    let ttl = Some(json!({"ttl_ms": 10_000}));
    let (_, s) = http_in(&cluster, node, None, "POST", "/v1/sessions", ttl.clone()).await;
    let acquire = "/v1/tenants/b/limits/db/acquire";
    let ask = json!({"session": s["session"], "ticket": 1, "wait": false});
    let (status, v) = http_in(&cluster, node, None, "POST", acquire, Some(ask)).await;
    assert_eq!(
        (
            status,
            v["error"].as_str(),
            v["tenant"].as_str(),
            v["group"].as_u64()
        ),
        (
            StatusCode::MISDIRECTED_REQUEST,
            Some("WrongGroup"),
            Some("b"),
            Some(2)
        ),
        "{v}"
    );
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains("open one with the header `Weir-Group: 2`"),
        "{message}"
    );

    phase("a session opened with Weir-Group: 2 holds b's permit, kept alive and released there");
    let two = Some("2");
    let (status, s) = http_in(&cluster, node, two, "POST", "/v1/sessions", ttl.clone()).await;
    assert_eq!(status, StatusCode::OK, "{s}");
    let session = s["session"].as_u64().unwrap();
    let ask = json!({"session": session, "ticket": 1, "wait": false});
    let (status, v) = http_in(&cluster, node, two, "POST", acquire, Some(ask)).await;
    assert_eq!(
        (status, v["units"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    assert!(v["fence"].as_u64().is_some(), "{v}");
    let (_, shown) = plain_limit(&cluster, "b", "db").await;
    assert_eq!(shown, 1, "group 2 holds the permit");
    // The limit's history is sampled in its tenant's group, header or not.
    let held = |_: StatusCode, v: &serde_json::Value| {
        let samples = v["history"]["samples"].as_array().unwrap();
        samples.iter().any(|s| s["in_use"] == 1)
    };
    let answered = |status: StatusCode, v: &serde_json::Value| {
        assert_eq!(status, StatusCode::OK, "{v}");
    };
    until(&cluster, node, "GET", db_history, held, answered).await;
    let keepalive = format!("/v1/sessions/{session}/keepalive");
    let (status, v) = http_in(&cluster, node, two, "POST", &keepalive, None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // Without the header the request speaks to the default group, which has no such session.
    let (status, v) = http_in(&cluster, node, None, "POST", &keepalive, None).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("UnknownSession")),
        "{v}"
    );
    // Its event stream, asked in the default group, is told the session's group at once.
    let events = format!("/v1/sessions/{session}/events");
    let (status, v) = http_in(&cluster, node, None, "GET", &events, None).await;
    assert_eq!(
        (status, v["error"].as_str(), v["group"].as_u64()),
        (StatusCode::MISDIRECTED_REQUEST, Some("WrongGroup"), Some(2)),
        "{v}"
    );
    let release = format!("/v1/sessions/{session}/release");
    let (status, v) = http_in(
        &cluster,
        node,
        two,
        "POST",
        &release,
        Some(json!({"ticket": 1})),
    )
    .await;
    assert_eq!(
        (status, v["held"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{v}"
    );
    let (status, _) = http_in(
        &cluster,
        node,
        two,
        "DELETE",
        &format!("/v1/sessions/{session}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    phase("a group the node does not host, or no number, is refused before anything is sent");
    for bad in ["0", "3", "two"] {
        let (status, v) = http_in(
            &cluster,
            node,
            Some(bad),
            "POST",
            "/v1/sessions",
            ttl.clone(),
        )
        .await;
        assert_eq!(
            (status, v["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("BadRequest")),
            "{v}"
        );
        assert_eq!(
            v["message"],
            format!(
                "the Weir-Group header names a data group of this node, one of [1, 2]; got \"{bad}\""
            ),
        );
    }
}

/// `in_use` of limit `name` of `tenant`, read through the library (which follows the tenant
/// to its group): (the answer, in use).
async fn plain_limit(cluster: &Cluster, tenant: &str, name: &str) -> (Answer, u64) {
    let answer = cluster
        .client()
        .read(Query::Limit {
            tenant: tenant.into(),
            name: name.into(),
        })
        .await
        .unwrap();
    let in_use = match &answer {
        Answer::Limit(Some(l)) => l.in_use,
        other => panic!("{other:?}"),
    };
    (answer, in_use)
}

/// Copies the directory `from` into `to`, recursively.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let path = e.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(e.file_name()));
        } else {
            std::fs::copy(&path, to.join(e.file_name())).unwrap();
        }
    }
}

/// Runs `weir` with `args` against the node at `server`; its standard output, or `None` if
/// it failed.
fn cli(server: &str, args: &[&str]) -> Option<String> {
    let out = Process::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--servers")
        .arg(server)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The data directory of a one-node cluster of `groups = 2` written by a build whose groups
/// each kept their own log (`tests/fixtures/formats/datadir.groups-2.logs-apart`: tenant
/// alpha placed in group 1 with a limit `gpu` of 4, beta in group 2 with `api` of 2 at 10
/// a second) starts on this build: each group's log is adopted into the shared log and
/// removed, every group serves what it held, and so again after a kill -9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_whose_groups_kept_their_own_logs_is_adopted_and_serves() {
    let mut cluster =
        weir_launcher::LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-groups-apart")
            .unwrap();
    let mut config = cluster.loopback_configs(1).unwrap().remove(0);
    config.groups = 2;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/formats/datadir.groups-2.logs-apart");
    copy_tree(&fixture, &config.data_dir);
    let data = config.data_dir.clone();
    let server = config.client_addr.clone();
    cluster.add_and_start(vec![config]).unwrap();
    for round in ["adopted", "after a kill -9"] {
        phase(&format!("every group serves what it held: {round}"));
        let mut beta = None;
        for _ in 0..100 {
            beta = cli(
                &server,
                &["--tenant", "beta", "--group", "2", "limit", "list"],
            );
            if beta.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let beta = beta.expect("the node serves group 2 within 10 s");
        assert!(
            beta.contains("beta/api: concurrent 2") && beta.contains("per_second 10"),
            "{beta}"
        );
        let alpha = cli(
            &server,
            &["--tenant", "alpha", "--group", "1", "limit", "list"],
        );
        assert!(
            alpha
                .as_deref()
                .is_some_and(|a| a.contains("alpha/gpu: concurrent 4")),
            "{alpha:?}"
        );
        let placed = cli(&server, &["--tenant", "beta", "tenant", "place"]);
        assert!(
            placed
                .as_deref()
                .is_some_and(|p| p.contains("beta lives in group 2")),
            "{placed:?}"
        );
        assert!(data.join("groups").join("log").is_dir());
        for g in 0..=2 {
            let gdir = data.join("groups").join(g.to_string());
            for left in ["log", "log.adopted"] {
                let left = gdir.join(left);
                assert!(!left.exists(), "{} was not removed", left.display());
            }
        }
        cluster.kill(1);
        cluster.start(1).unwrap();
    }
}
