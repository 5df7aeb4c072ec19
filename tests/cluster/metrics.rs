//! `/metrics`, `/healthz` and `/readyz` on a real cluster: the exposition passes
//! `promtool check metrics`, and the counters move as operations run.

use std::io::Write;
use std::process::{Command, Stdio};

use reqwest::StatusCode;
use serde_json::json;

use super::ELECTION;
use super::harness::{Cluster, phase};
use super::http::Api;

/// The value of the sample `name` (a full sample name with labels, as exposed).
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

async fn scrape(http: &reqwest::Client, url: &str) -> String {
    let r = http.get(format!("{url}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.text().await.unwrap()
}

/// Runs `promtool check metrics` on `text`; `None` when promtool is not installed.
fn promtool(text: &str) -> Option<(bool, String)> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), said))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_and_move_with_operations_and_health_answers() {
    let cluster = Cluster::start("metrics", 3, "");
    let leader = cluster.leader(ELECTION).await;
    let api = Api::of(&cluster, leader);
    phase("healthz and readyz");
    let (status, _) = api.call("GET", "/healthz", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, v) = api.call("GET", "/readyz", None).await;
    assert_eq!(
        (status, v["ready"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{v}"
    );
    phase("scrape before; promtool accepts the exposition");
    let before = scrape(&api.http, &api.base).await;
    match promtool(&before) {
        Some((ok, said)) => assert!(ok, "promtool check metrics: {said}\n{before}"),
        None => eprintln!("WARNING: promtool is not installed; the exposition was not checked"),
    }
    assert_eq!(
        sample(&before, "weir_role{role=\"Leader\"}"),
        Some(1.0),
        "{before}"
    );
    for name in [
        "weir_term",
        "weir_commit_index",
        "weir_applied_index",
        "weir_proposer_queue_depth",
        "weir_connections",
        "weir_pushes_dropped_total",
        "weir_snapshot_bytes",
        "weir_batch_commands_count",
        "weir_commit_seconds_count",
        "weir_fsync_seconds_count",
        "weir_log_moves_total",
        "weir_snapshot_build_seconds_count",
        "weir_snapshot_freeze_seconds_count",
        "weir_snapshot_install_seconds_count",
    ] {
        assert!(sample(&before, name).is_some(), "{name} missing:\n{before}");
    }
    phase("run operations: define, a holder and a waiter, a refusal");
    let proposed_before = sample(&before, "weir_entries_proposed_total").unwrap();
    api.define("/v1/tenants/acme/limits/db", 1).await;
    let (_, s) = api.open_session().await;
    let session = s["session"].as_u64().unwrap();
    let acquire = |ticket: u64, wait: bool| json!({"session": session, "ticket": ticket, "wait": wait, "timeout_ms": 0});
    let path = "/v1/tenants/acme/limits/db/acquire";
    let (status, _) = api.call("POST", path, Some(acquire(1, true))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.call("POST", path, Some(acquire(2, true))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "queued");
    let (status, _) = api.call("POST", path, Some(acquire(3, false))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let after = scrape(&api.http, &api.base).await;
    if let Some((ok, said)) = promtool(&after) {
        assert!(ok, "promtool check metrics: {said}\n{after}");
    }
    let moved =
        |name: &str| sample(&after, name).unwrap_or(0.0) - sample(&before, name).unwrap_or(0.0);
    assert!(
        sample(&after, "weir_entries_proposed_total").unwrap() >= proposed_before + 5.0,
        "{after}"
    );
    assert!(moved("weir_batch_commands_count") >= 5.0);
    assert!(moved("weir_commit_seconds_count") >= 5.0);
    assert!(moved("weir_fsync_seconds_count") >= 5.0);
    // A new log's one segment: a move waits for four.
    assert_eq!(sample(&after, "weir_log_segments"), Some(1.0), "{after}");
    assert_eq!(sample(&after, "weir_log_moves_total"), Some(0.0), "{after}");
    assert!(moved("weir_http_requests_total") >= 6.0);
    assert_eq!(moved("weir_refusals_total{kind=\"Busy\"}"), 1.0, "{after}");
    assert_eq!(
        sample(&after, "weir_held_units{tenant=\"acme\"}"),
        Some(1.0),
        "{after}"
    );
    assert_eq!(
        sample(&after, "weir_waiters{tenant=\"acme\"}"),
        Some(1.0),
        "{after}"
    );
    assert!(sample(&after, "weir_sessions").unwrap() >= 1.0);
    assert!(
        sample(&after, "weir_connections").unwrap() >= 1.0,
        "the HTTP layer's client"
    );
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_the_node_exposes() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/grafana-dashboard.json"
    ))
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exposed = [
        "weir_role",
        "weir_term",
        "weir_commit_index",
        "weir_applied_index",
        "weir_entries_proposed_total",
        "weir_batch_commands_bucket",
        "weir_commit_seconds_bucket",
        "weir_fsync_seconds_bucket",
        "weir_proposer_queue_depth",
        "weir_sessions",
        "weir_held_units",
        "weir_waiters",
        "weir_refusals_total",
        "weir_connections",
        "weir_pushes_dropped_total",
        "weir_http_requests_total",
        "weir_snapshot_bytes",
        "weir_snapshot_build_seconds_sum",
        "weir_snapshot_build_seconds_count",
        "weir_snapshot_install_seconds_sum",
        "weir_snapshot_install_seconds_count",
    ];
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let names: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("weir_"))
                .collect();
            assert!(!names.is_empty(), "{expr}");
            for n in names {
                assert!(exposed.contains(&n), "dashboard queries {n}, not exposed");
            }
        }
    }
}
