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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_limits_keys_are_read_through_the_cli_the_library_and_http() {
    use crate::http::{Api, follower};
    use serde_json::json;

    let cluster = Cluster::start("keyed-reads", 3, "");
    cluster.leader(ELECTION).await;
    let ok = |args: &[&str]| cluster.cli_ok(args);
    let json_of = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(ok(args).trim()).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    };
    #[rustfmt::skip]
    ok(&["limit", "define", "api", "--per-second", "0.01", "--burst", "5", "--keyed", "--shadow"]);
    for key in ["carol", "alice", "bob"] {
        ok(&[
            "acquire", "api", "--key", key, "--units", "2", "--hold", "0",
        ]);
    }
    // A shadow limit never refuses: 4 tokens for bob's 3 are granted, counted, not taken.
    #[rustfmt::skip]
    ok(&["acquire", "api", "--key", "bob", "--units", "4", "--no-wait", "--hold", "0"]);

    phase("CLI: limit show --key, limit show of the definition, limit keys paged");
    let alice = json_of(&["limit", "show", "api", "--key", "alice", "--json"]);
    assert_eq!(
        (alice["tokens"].as_u64(), alice["key"].as_str()),
        (Some(3), Some("alice"))
    );
    let dave = json_of(&["limit", "show", "api", "--key", "dave", "--json"]);
    assert_eq!(
        dave["tokens"].as_u64(),
        Some(5),
        "a key not live is fresh: {dave}"
    );
    let text = ok(&["limit", "show", "api"]);
    assert!(text.contains("keyed; live keys 3 of 1000"), "{text}");
    assert!(
        text.contains("shadow; would have refused 1 (busy 1"),
        "{text}"
    );
    let page = json_of(&["limit", "keys", "api", "--limit", "2", "--json"]);
    assert_eq!(page, json!({"keys": ["alice", "bob"], "next": "bob"}));
    let page = json_of(&["limit", "keys", "api", "--after", "bob", "--json"]);
    assert_eq!(page, json!({"keys": ["carol"], "next": null}));
    let (code, _, err) = cluster.cli(&["limit", "keys", "api", "--limit", "1001"]);
    assert_eq!(code, 2, "{err}");
    ok(&["limit", "define", "flat", "--per-second", "1"]);
    let (code, _, err) = cluster.cli(&["limit", "keys", "flat"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("unknown keyed limit default/flat"), "{err}");

    phase("library: key_status and keys");
    let client = cluster.client();
    let bob = client
        .key_status("default", "api", "bob")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((bob.tokens, bob.name.as_str()), (3, "api"));
    let page = client
        .keys("default", "api", Some("alice"), 10)
        .await
        .unwrap();
    let page = page.unwrap();
    assert_eq!(
        (page.keys, page.next),
        (vec!["bob".into(), "carol".into()], None)
    );
    assert!(
        client
            .keys("default", "flat", None, 10)
            .await
            .unwrap()
            .is_none()
    );

    phase("HTTP on a follower: GET …/keys/{key} and GET …/keys?after&limit");
    let api = Api::of(&cluster, follower(&cluster).await);
    let (status, v) = api
        .call("GET", "/v1/tenants/default/limits/api/keys/carol", None)
        .await;
    assert_eq!(
        (status.as_u16(), v["tokens"].as_u64()),
        (200, Some(3)),
        "{v}"
    );
    let (status, v) = api
        .call("GET", "/v1/tenants/default/limits/api/keys/zed", None)
        .await;
    assert_eq!(
        (status.as_u16(), v["tokens"].as_u64()),
        (200, Some(5)),
        "fresh: {v}"
    );
    let (_, v) = api
        .call("GET", "/v1/tenants/default/limits/api/keys?limit=2", None)
        .await;
    assert_eq!(v, json!({"keys": ["alice", "bob"], "next": "bob"}));
    let (_, v) = api
        .call(
            "GET",
            "/v1/tenants/default/limits/api/keys?after=bob&limit=2",
            None,
        )
        .await;
    assert_eq!(v, json!({"keys": ["carol"], "next": null}));
    let (_, v) = api
        .call("GET", "/v1/tenants/default/limits/api", None)
        .await;
    assert_eq!(
        (
            v["live_keys"].as_u64(),
            v["shadow_refusals"]["busy"].as_u64()
        ),
        (Some(3), Some(1)),
        "{v}"
    );
    for (path, status, error) in [
        (
            "/v1/tenants/default/limits/api/keys?limit=0",
            400,
            "Invalid",
        ),
        (
            "/v1/tenants/default/limits/api/keys?limit=x",
            400,
            "Invalid",
        ),
        ("/v1/tenants/default/limits/api/keys?page=2", 400, "Invalid"),
        ("/v1/tenants/default/limits/flat/keys", 404, "UnknownLimit"),
        (
            "/v1/tenants/default/limits/nope/keys/k",
            404,
            "UnknownLimit",
        ),
    ] {
        let (got, v) = api.call("GET", path, None).await;
        assert_eq!(
            (got.as_u16(), v["error"].as_str()),
            (status, Some(error)),
            "{path}: {v}"
        );
    }
    cluster.converged(CONVERGE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_settles_an_estimate_at_the_cost_its_command_reports() {
    let cluster = Cluster::start("keyed-estimate", 3, "");
    cluster.leader(ELECTION).await;
    let ok = |args: &[&str]| cluster.cli_ok(args);
    let status =
        |args: &[&str]| -> serde_json::Value { serde_json::from_str(ok(args).trim()).unwrap() };
    #[rustfmt::skip]
    ok(&["limit", "define", "tpm", "--per-second", "0.01", "--burst", "1000", "--keyed"]);
    let estimated = |cost: &str, exit: i32| {
        let script =
            format!("echo units=$WEIR_UNITS; printf '{cost}' > \"$WEIR_SETTLE_FILE\"; exit {exit}");
        #[rustfmt::skip]
        let args = ["acquire", "tpm", "--key", "u", "--units", "500", "--estimate", "--json", "--", "sh", "-c", &script];
        cluster.cli(&args)
    };

    phase("below the estimate: the difference returns to the key's bucket");
    let (code, out, err) = estimated("320\n", 0);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("units=500"), "{out}");
    assert!(
        err.contains(r#"{"overrun_tokens":0,"settled":320}"#),
        "{err}"
    );
    let key = status(&["limit", "show", "tpm", "--key", "u", "--json"]);
    assert_eq!(key["tokens"].as_u64(), Some(680), "180 returned: {key}");

    phase("above it: charged (down to an empty bucket) and recorded as an overrun");
    let (code, _, err) = estimated("600", 4);
    assert_eq!(code, 4, "the command's status: {err}");
    assert!(err.contains(r#""overrun_tokens":100"#), "{err}");
    let key = status(&["limit", "show", "tpm", "--key", "u", "--json"]);
    assert_eq!(key["tokens"].as_u64(), Some(80), "680 - 600: {key}");
    let def = status(&["limit", "show", "tpm", "--json"]);
    assert_eq!(def["overrun_tokens"].as_u64(), Some(100), "{def}");

    phase("nothing written: the estimate stands; not a count: an error, nothing settled");
    ok(&[
        "limit",
        "define",
        "flat",
        "--per-second",
        "0.01",
        "--burst",
        "100",
    ]);
    let (code, _, err) = cluster.cli(&[
        "acquire",
        "flat",
        "--units",
        "40",
        "--estimate",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cluster.cli(&[
        "acquire",
        "flat",
        "--units",
        "10",
        "--estimate",
        "--",
        "sh",
        "-c",
        "echo lots > \"$WEIR_SETTLE_FILE\"",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains(r#"holds "lots", not a count of tokens"#),
        "{err}"
    );
    let flat = status(&["limit", "show", "flat", "--json"]);
    assert_eq!(
        flat["tokens"].as_u64(),
        Some(50),
        "both estimates stand: {flat}"
    );
    let (code, _, err) = cluster.cli(&["acquire", "flat", "--estimate", "--hold", "0"]);
    assert_eq!(code, 2, "{err}");
    let leftovers = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("weir-settle-")
        })
        .count();
    assert_eq!(leftovers, 0, "settle files are removed");
    cluster.converged(CONVERGE).await;
}
