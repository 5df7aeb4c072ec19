//! Keyed limits and requests of several parts on a real three-node cluster: defined and
//! used through the CLI, a waiting request of several parts granted through the client
//! library when its last part frees, and every node ending on the same digest.

use std::time::Duration;

use weir_client::{AcquireError, AcquireOptions, Session};
use weir_core::machine::{Part, Refusal};

use crate::harness::{Cluster, phase};
use crate::{CONVERGE, ELECTION};

const TTL: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_limits_and_parts_through_the_cli_and_the_library() {
    let cluster = Cluster::start("keyed", 3, "");
    cluster.leader(ELECTION).await;
    let ok = |args: &[&str]| cluster.cli_ok(args);
    let refused = |args: &[&str], words: &str| {
        let (code, _, err) = cluster.cli(args);
        assert_eq!(code, 3, "weir {args:?} should be refused: {err}");
        assert!(err.contains(words), "weir {args:?}: {err}");
    };
    phase("define: a keyed rate per user, a global rate, a pool of one slot");
    #[rustfmt::skip]
    ok(&["limit", "define", "api", "--per-second", "0.1", "--burst", "2", "--keyed", "--keys-max", "2"]);
    ok(&[
        "limit",
        "define",
        "global",
        "--per-second",
        "0.1",
        "--burst",
        "10",
    ]);
    ok(&["limit", "define", "pool", "--concurrent", "1"]);

    phase("each key its own bucket; a key is required; keys_max bounds the live keys");
    ok(&[
        "acquire", "api", "--key", "alice", "--units", "2", "--hold", "0",
    ]);
    refused(
        &[
            "acquire",
            "api",
            "--key",
            "alice",
            "--no-wait",
            "--hold",
            "0",
        ],
        "busy",
    );
    ok(&["acquire", "api", "--key", "bob", "--hold", "0"]);
    let (code, _, err) = cluster.cli(&["acquire", "api", "--hold", "0"]);
    assert_ne!(code, 0, "a keyed limit without a key: {err}");
    assert!(err.contains("is keyed"), "{err}");
    refused(
        &["acquire", "api", "--key", "carol", "--hold", "0"],
        "keys of limit default/api",
    );

    phase("parts: all or nothing; a refused part charges none of the others");
    ok(&[
        "acquire", "global", "--units", "3", "--part", "pool", "--hold", "0",
    ]);
    let tokens = |out: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["tokens"].as_u64().unwrap()
    };
    assert_eq!(tokens(&ok(&["limit", "show", "global", "--json"])), 7);
    refused(
        &[
            "acquire",
            "global",
            "--units",
            "1",
            "--part",
            "api:1@alice",
            "--no-wait",
            "--hold",
            "0",
        ],
        "busy",
    );
    assert_eq!(
        tokens(&ok(&["limit", "show", "global", "--json"])),
        7,
        "nothing taken from global when api refused"
    );

    phase("a waiting request of parts is granted, by push, when its last part frees");
    ok(&[
        "limit",
        "define",
        "pool",
        "--concurrent",
        "1",
        "--tenant",
        "t",
    ]);
    let client = cluster.client();
    let holder = Session::open(&client, TTL).await.unwrap();
    let held = holder
        .acquire(AcquireOptions::new("t", "pool"))
        .await
        .unwrap_or_else(|e| panic!("pool: {e:?}"));
    let waiter = Session::open(&client, TTL).await.unwrap();
    let mut both = AcquireOptions::new("t", "global");
    both.parts = vec![Part {
        limit: "pool".into(),
        key: None,
        units: 1,
    }];
    // Tenant t has no `global` yet: refused naming it, nothing charged.
    match waiter.acquire(both.clone()).await {
        Err(AcquireError::Refused(Refusal::UnknownLimit { name, .. })) => {
            assert_eq!(name, "global")
        }
        Err(other) => panic!("expected UnknownLimit, got {other:?}"),
        Ok(_) => panic!("granted on a limit tenant t does not have"),
    }
    ok(&[
        "limit",
        "define",
        "global",
        "--per-second",
        "5",
        "--tenant",
        "t",
    ]);
    let waiting = tokio::spawn(async move {
        let permit = waiter.acquire(both).await;
        (permit, waiter)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "pool is held: the request waits");
    held.release().await.unwrap();
    let (permit, waiter) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("granted after the release")
        .unwrap();
    let permit = permit.unwrap();
    let fence = permit.fence();
    assert!(client.validate_fence("t", "pool", fence).await.unwrap());
    permit.release().await.unwrap();
    waiter.close().await.unwrap();
    holder.close().await.unwrap();

    phase("every node applied the same log to the same state");
    cluster.converged(CONVERGE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_takes_parts_and_a_settled_estimate_over_http() {
    use crate::http::{Api, follower};
    use serde_json::json;

    let cluster = Cluster::start("keyed-http", 3, "");
    let api = Api::of(&cluster, follower(&cluster).await);
    phase("define a keyed rate per user and a tenant-wide rate over HTTP");
    api.define_spec(
        "/v1/tenants/acme/limits/user",
        json!({"per_second": 0.1, "burst": 3, "keyed": true}),
    )
    .await;
    api.define_spec(
        "/v1/tenants/acme/limits/all",
        json!({"per_second": 0.1, "burst": 100}),
    )
    .await;

    phase("takes: per key, all parts or none");
    let take = |body| api.call("POST", "/v1/tenants/acme/limits/user/take", Some(body));
    let (status, v) =
        take(json!({"key": "u1", "units": 3, "parts": [{"limit": "all", "units": 10}]})).await;
    assert_eq!(
        (status.as_u16(), v["taken"].as_u64()),
        (200, Some(3)),
        "{v}"
    );
    let (status, v) = take(json!({"key": "u1", "parts": [{"limit": "all", "units": 10}]})).await;
    assert_eq!(
        (status.as_u16(), v["error"].as_str()),
        (429, Some("Busy")),
        "{v}"
    );
    let (_, v) = api.call("GET", "/v1/tenants/acme/limits/all", None).await;
    assert_eq!(
        v["tokens"].as_u64(),
        Some(90),
        "the refused take charged nothing: {v}"
    );
    let (status, v) = take(json!({"units": 1})).await;
    assert_eq!(status, 400, "a keyed limit needs a key: {v}");

    phase("an acquire with an estimate, settled below it over HTTP");
    let (_, v) = api
        .call("POST", "/v1/sessions", Some(json!({"ttl_ms": 10_000})))
        .await;
    let session = v["session"].as_u64().unwrap();
    let (status, v) = api
        .call(
            "POST",
            "/v1/tenants/acme/limits/all/acquire",
            Some(json!({"session": session, "ticket": 1, "units": 50, "estimate": true})),
        )
        .await;
    assert_eq!(
        (status.as_u16(), v["status"].as_str()),
        (200, Some("granted")),
        "{v}"
    );
    let (_, v) = api.call("GET", "/v1/tenants/acme/limits/all", None).await;
    assert_eq!(v["tokens"].as_u64(), Some(40));
    let settle = json!({"ticket": 1, "cost": 20});
    let path = format!("/v1/sessions/{session}/settle");
    let (status, v) = api.call("POST", &path, Some(settle.clone())).await;
    assert_eq!(
        (status.as_u16(), v["duplicate"].as_bool()),
        (200, Some(false)),
        "{v}"
    );
    let (_, v) = api.call("POST", &path, Some(settle)).await;
    assert_eq!(v["duplicate"].as_bool(), Some(true), "{v}");
    let (_, v) = api.call("GET", "/v1/tenants/acme/limits/all", None).await;
    assert_eq!(v["tokens"].as_u64(), Some(70), "30 returned: {v}");

    phase("a shadow limit never refuses; /metrics counts what it would have refused");
    api.define_spec(
        "/v1/tenants/acme/limits/trial",
        json!({"per_second": 0.1, "burst": 1, "shadow": true}),
    )
    .await;
    let trial = |body| api.call("POST", "/v1/tenants/acme/limits/trial/take", Some(body));
    for _ in 0..3 {
        let (status, v) = trial(json!({"units": 1})).await;
        assert_eq!(status, 200, "{v}");
    }
    cluster.converged(CONVERGE).await;
    let text = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = r#"weir_shadow_refusals{tenant="acme",kind="Busy"} 2"#;
    assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
}
