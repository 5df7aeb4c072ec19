//! A tenant's limits set in one entry (`ApplyLimits`) on a real three-node cluster: over
//! HTTP on a follower (dry run, apply, re-apply, a refused apply) and through the Rust
//! client, each seeing the other's writes.

use reqwest::StatusCode;
use serde_json::{Value, json};
use weir_core::machine::{Definition, LimitsChange};

use super::harness::{Cluster, phase};
use super::http::{Api, follower};

/// The names of the tenant's limits, read over HTTP.
async fn names(api: &Api) -> Vec<String> {
    let (_, v) = api.call("GET", "/v1/tenants/f/limits", None).await;
    v["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_apply_over_http_and_the_client_all_or_nothing_with_a_dry_run() {
    let cluster = Cluster::start("apply", 3, "");
    let api = Api::of(&cluster, follower(&cluster).await);
    api.define("/v1/tenants/f/limits/old", 1).await;
    let file = |dry_run: bool| {
        json!({"limits": {"db": {"concurrent": 2}, "api": {"per_second": 5, "burst": 5}},
               "prune": true, "dry_run": dry_run})
    };
    let apply = |body: Value| async { api.call("PUT", "/v1/tenants/f/limits", Some(body)).await };

    phase("a dry run answers the change and makes none");
    let (status, v) = apply(file(true)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let expected = json!({"created": ["api", "db"], "changed": [], "removed": ["old"],
                          "unchanged": [], "applied": false});
    assert_eq!(v, expected);
    assert_eq!(names(&api).await, ["old"]);

    phase("the apply makes it; a second apply changes nothing");
    let (_, v) = apply(file(false)).await;
    assert_eq!(v["applied"], true, "{v}");
    assert_eq!(v["removed"], json!(["old"]), "{v}");
    assert_eq!(names(&api).await, ["api", "db"]);
    let (_, v) = apply(file(false)).await;
    let unchanged = json!({"created": [], "changed": [], "removed": [],
                           "unchanged": ["api", "db"], "applied": true});
    assert_eq!(v, unchanged);

    phase("an invalid definition refuses the whole apply, naming it");
    let bad = json!({"limits": {"db": {"concurrent": 9}, "zz": {"per_second": 1, "burst": 0}}});
    let (status, v) = apply(bad).await;
    // Refused at the edge, before the log (as every invalid definition is).
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("BadRequest"))
    );
    assert!(
        v["message"].as_str().unwrap().contains("definition zz"),
        "{v}"
    );
    let (_, db) = api.call("GET", "/v1/tenants/f/limits/db", None).await;
    assert_eq!(db["concurrent"], 2, "nothing changed: {db}");

    phase("the Rust client applies and dry-runs against the same state");
    let client = cluster.client();
    let def = |name: &str, concurrent: u32| Definition {
        concurrent,
        ..Definition::from_legacy("f", name, 0, 0.0, None)
    };
    let defs = vec![def("db", 3)];
    let dry = client
        .apply_limits("f", defs.clone(), false, true)
        .await
        .unwrap();
    let change = LimitsChange {
        changed: vec!["db".into()],
        ..LimitsChange::default()
    };
    assert_eq!(dry, Ok(change.clone()));
    let applied = client.apply_limits("f", defs, false, false).await.unwrap();
    assert_eq!(applied, Ok(change));
    let (_, db) = api.call("GET", "/v1/tenants/f/limits/db", None).await;
    assert_eq!(db["concurrent"], 3, "{db}");

    phase("an export is the body PUT takes: putting it back changes nothing");
    let keyed = json!({"per_second": 0.3, "keyed": true, "keys_max": 500, "shadow": true});
    api.define_spec("/v1/tenants/f/limits/k", keyed).await;
    let (status, exported) = api.call("GET", "/v1/tenants/f/definitions", None).await;
    assert_eq!(status, StatusCode::OK, "{exported}");
    let db = json!({"concurrent": 3, "per_second": 0.0, "burst": 1, "keyed": false,
                    "keys_max": null, "shadow": false});
    let k = json!({"concurrent": 0, "per_second": 0.3, "burst": 1, "keyed": true,
                   "keys_max": 500, "shadow": true});
    assert_eq!(exported["limits"]["db"], db, "{exported}");
    assert_eq!(exported["limits"]["k"], k, "{exported}");
    let mut back = exported.clone();
    back["prune"] = json!(true);
    let (_, v) = apply(back).await;
    let unchanged = json!({"created": [], "changed": [], "removed": [],
                           "unchanged": ["api", "db", "k"], "applied": true});
    assert_eq!(v, unchanged);
    let (_, again) = api.call("GET", "/v1/tenants/f/definitions", None).await;
    assert_eq!(again, exported);
    let (status, none) = api
        .call("GET", "/v1/tenants/nobody/definitions", None)
        .await;
    assert_eq!((status, none), (StatusCode::OK, json!({"limits": {}})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_apply_and_export_through_the_cli_round_trip_with_no_change() {
    let cluster = Cluster::start("apply-cli", 3, "");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/limits.toml");
    let json = |out: String| serde_json::from_str::<Value>(&out).unwrap();
    cluster.cli_ok(&[
        "limit",
        "define",
        "--tenant",
        "acme",
        "stale",
        "--concurrent",
        "1",
    ]);

    phase("a dry run of the shipped example prints the change and makes none");
    let out = cluster.cli_ok(&[
        "limits",
        "apply",
        example,
        "--tenant",
        "acme",
        "--prune",
        "--dry-run",
        "--json",
    ]);
    let expected = json!({"created": ["api", "db", "tokens"], "changed": [],
        "removed": ["stale"], "unchanged": [], "applied": false});
    assert_eq!(json(out), expected);
    let text = cluster.cli_ok(&["limits", "apply", example, "--tenant", "acme", "--dry-run"]);
    assert!(text.contains("would be created: api, db, tokens"), "{text}");

    phase("the apply makes it; export then apply changes nothing");
    let out = cluster.cli_ok(&["limits", "apply", example, "--tenant", "acme", "--prune"]);
    assert!(
        out.contains("created: api, db, tokens") && out.contains("removed: stale"),
        "{out}"
    );
    let exported = cluster.cli_ok(&["limits", "export", "--tenant", "acme"]);
    assert!(
        exported.contains("[limits.api]") && exported.contains("keys_max = 10000"),
        "{exported}"
    );
    let dir = tempfile_dir();
    let file = dir.join("acme.toml");
    std::fs::write(&file, &exported).unwrap();
    let path = file.to_str().unwrap();
    let out = cluster.cli_ok(&[
        "limits", "apply", path, "--tenant", "acme", "--prune", "--json",
    ]);
    let unchanged = json!({"created": [], "changed": [], "removed": [],
        "unchanged": ["api", "db", "tokens"], "applied": true});
    assert_eq!(json(out), unchanged);

    phase("a file with an unknown key or format is refused before anything is sent");
    std::fs::write(&file, "[limits.x]\nconcurent = 3\n").unwrap();
    let (code, _, err) = cluster.cli(&["limits", "apply", path, "--tenant", "acme"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown field `concurent`"), "{err}");
    let other = dir.join("acme.ini");
    std::fs::write(&other, "[limits]\n").unwrap();
    let (code, _, err) = cluster.cli(&["limits", "apply", other.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown limits file format"), "{err}");

    phase("an envoyproxy/ratelimit file applies to its domain, one limit per node");
    let ratelimit = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/envoy-ratelimit.yaml");
    let compiled =
        weir::cli::limits_file::ratelimit_yaml::parse(&std::fs::read_to_string(ratelimit).unwrap())
            .unwrap()
            .compile()
            .unwrap();
    let mut expected: Vec<String> = compiled.iter().map(|d| d.name.clone()).collect();
    expected.sort();
    let (code, _, err) = cluster.cli(&["limits", "apply", ratelimit, "--tenant", "acme"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("domain \"edge\" is its tenant, but --tenant names \"acme\""),
        "{err}"
    );
    let out = json(cluster.cli_ok(&["limits", "apply", ratelimit, "--json"]));
    assert_eq!(out["created"], json!(expected), "{out}");
    assert!(
        expected.contains(&"envoy:remote_address".to_owned()),
        "{expected:?}"
    );
    let listed = json(cluster.cli_ok(&["limit", "list", "--tenant", "edge", "--json"]));
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(expected.len()),
        "{listed}"
    );
    let again = json(cluster.cli_ok(&["limits", "apply", ratelimit, "--tenant", "edge", "--json"]));
    assert_eq!(again["unchanged"], json!(expected), "{again}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fresh directory under the system's temp dir, named for this process.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-limits-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
