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
}
