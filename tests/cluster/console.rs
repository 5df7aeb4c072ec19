//! The operator console's server side: the page and its assets served without a token
//! under a strict Content-Security-Policy; the cluster event stream `GET /v1/events`
//! (grants, releases, halts set and cleared, named by tenant and limit; 403 for a tenant
//! token); a limit's holders and waiters in serving order, paged; a node's record of leader
//! changes in `GET /v1/status` after a leader is killed; the read role's node table, every
//! halt, every tenant and a limit's history answered by any node. The page itself is tested
//! in headless Chromium by `tests/console` (`.ci/run`).

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio::time::Instant;
use weir_launcher::LocalCluster;
use weir_proto::tls::ClientSecurity;

use crate::harness::{phase, start_secured, token_entries};

const ADMIN: &str = "console-admin-secret";
const READ: &str = "console-read-secret";
const ACME: &str = "console-acme-secret";

/// Longest a wait for an event on the stream lasts: a write through the log and its apply
/// on the node serving the stream take milliseconds on loopback.
const EVENT_WAIT: Duration = Duration::from_secs(15);

/// A three-node cluster with admin, read and tenant:acme tokens (no TLS: loopback); the
/// HTTP base URL of node 1.
async fn cluster(tag: &str) -> (LocalCluster, String) {
    let mut cluster = LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), tag)
        .unwrap()
        .security(ClientSecurity::new(None, Some(ADMIN.into())).unwrap());
    let tokens = token_entries(&[(ADMIN, "admin"), (READ, "read"), (ACME, "tenant:acme")]);
    start_secured(&mut cluster, None, &tokens).await;
    let base = format!("http://{}", cluster.node(1).config.http_listen);
    (cluster, base)
}

/// An HTTP client that sends `token` (none: no Authorization header).
fn client(token: Option<&str>) -> reqwest::Client {
    let mut headers = HeaderMap::new();
    if let Some(t) = token {
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
        );
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// `method url` with an optional JSON body: (status, JSON body or Null).
async fn call(
    http: &reqwest::Client,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = http.request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url);
    if let Some(b) = body {
        request = request.json(&b);
    }
    let r = request.send().await.expect("the node answers HTTP");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Server-sent events read from one response, as (name, JSON data).
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    /// The next event whose name and data satisfy `wanted`, skipping others; panics after
    /// [`EVENT_WAIT`] naming what was seen.
    async fn until(&mut self, what: &str, wanted: impl Fn(&str, &Value) -> bool) -> Value {
        let deadline = Instant::now() + EVENT_WAIT;
        let mut seen = Vec::new();
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut name, mut data) = ("message".to_owned(), String::new());
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event:") {
                        name = n.trim().to_owned();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    }
                }
                let Ok(value) = serde_json::from_str::<Value>(&data) else {
                    continue;
                };
                if wanted(&name, &value) {
                    return value;
                }
                seen.push(format!("{name} {value}"));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.response.chunk()).await {
                Ok(Ok(Some(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                other => panic!("no {what} within {EVENT_WAIT:?} ({other:?}); seen: {seen:#?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_without_a_token_under_a_same_origin_policy() {
    let (_cluster, base) = cluster("weir-console-page").await;
    let anyone = client(None);
    phase("the page: HTML, no token, a CSP of this origin only, no inline script");
    let r = anyone.get(format!("{base}/ui")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let html = r.text().await.unwrap();
    assert!(
        html.contains(r#"<script type="module" src="/ui/app.js"></script>"#),
        "{html}"
    );
    assert_eq!(
        html.matches("<script").count(),
        1,
        "one script, by src: {html}"
    );
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "nothing from elsewhere"
    );

    phase("every module the page imports is served, as JavaScript; other names are 404");
    let mut pending = vec!["app.js".to_owned()];
    let mut served = Vec::new();
    while let Some(file) = pending.pop() {
        if served.contains(&file) {
            continue;
        }
        let r = anyone
            .get(format!("{base}/ui/{file}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "/ui/{file}");
        assert_eq!(
            r.headers()["content-type"],
            "text/javascript; charset=utf-8",
            "{file}"
        );
        let text = r.text().await.unwrap();
        for import in text.split("from './").skip(1) {
            pending.push(import.split('\'').next().unwrap().to_owned());
        }
        served.push(file);
    }
    assert!(served.len() >= 8, "the page's modules: {served:?}");
    let (status, v) = call(&anyone, "GET", &format!("{base}/ui/secret.txt"), None).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("NotFound"))
    );

    phase("data is not open: /v1/whoami needs a token, and names its role");
    let (status, _) = call(&anyone, "GET", &format!("{base}/v1/whoami"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, v) = call(
        &client(Some(READ)),
        "GET",
        &format!("{base}/v1/whoami"),
        None,
    )
    .await;
    assert_eq!((status, v["role"].as_str()), (StatusCode::OK, Some("read")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_grants_releases_and_halts_to_read_and_refuses_a_tenant() {
    let (_cluster, base) = cluster("weir-console-events").await;
    let admin = client(Some(ADMIN));
    let limit = format!("{base}/v1/tenants/acme/limits/db");
    let (status, v) = call(&admin, "PUT", &limit, Some(json!({"concurrent": 2}))).await;
    assert_eq!(status, StatusCode::OK, "{v}");

    phase("a tenant token is refused the cluster-wide stream");
    let (status, v) = call(
        &client(Some(ACME)),
        "GET",
        &format!("{base}/v1/events"),
        None,
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("Forbidden"))
    );

    phase("a read token follows it: hello with the leader, then what the cluster does");
    let response = client(Some(READ))
        .get(format!("{base}/v1/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = Events {
        response,
        buffer: String::new(),
    };
    let hello = events.until("hello", |n, _| n == "hello").await;
    assert!(hello["leader"].as_u64().is_some(), "{hello}");

    let (_, v) = call(
        &admin,
        "POST",
        &format!("{base}/v1/sessions"),
        Some(json!({"ttl_ms": 10_000})),
    )
    .await;
    let session = v["session"].as_u64().expect("a session");
    let body = json!({"session": session, "ticket": 7, "units": 1, "agent": "etl"});
    let (status, v) = call(&admin, "POST", &format!("{limit}/acquire"), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let granted = events.until("granted", |n, _| n == "granted").await;
    assert_eq!(
        (
            &granted["tenant"],
            &granted["limit"],
            &granted["session"],
            &granted["ticket"]
        ),
        (&json!("acme"), &json!("db"), &json!(session), &json!(7)),
        "{granted}"
    );
    assert_eq!(
        granted["fence"], v["fence"],
        "the grant's fence: {granted} {v}"
    );

    let release = format!("{base}/v1/sessions/{session}/release");
    let (status, v) = call(&admin, "POST", &release, Some(json!({"ticket": 7}))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let released = events.until("released", |n, _| n == "released").await;
    assert_eq!(
        (&released["limit"], &released["ticket"], &released["held"]),
        (&json!("db"), &json!(7), &json!(true)),
        "a release names the limit its ticket held: {released}"
    );

    let halt = format!("{base}/v1/tenants/acme/agents/etl/halt");
    let (status, v) = call(&admin, "PUT", &halt, Some(json!({"reason": "runaway"}))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let set = events.until("halt_set", |n, _| n == "halt_set").await;
    assert_eq!(
        (&set["tenant"], &set["scope"], &set["reason"]),
        (&json!("acme"), &json!("agent etl"), &json!("runaway"))
    );
    let (status, _) = call(&admin, "DELETE", &halt, None).await;
    assert_eq!(status, StatusCode::OK);
    let cleared = events
        .until("halt_cleared", |n, _| n == "halt_cleared")
        .await;
    assert_eq!(cleared["scope"], json!("agent etl"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_and_waiters_answer_the_permits_and_the_queue_in_serving_order() {
    let (_cluster, base) = cluster("weir-console-queue").await;
    let admin = client(Some(ADMIN));
    let limit = format!("{base}/v1/tenants/acme/limits/gpu");
    let (status, v) = call(&admin, "PUT", &limit, Some(json!({"concurrent": 1}))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let open = || async {
        let (_, v) = call(
            &admin,
            "POST",
            &format!("{base}/v1/sessions"),
            Some(json!({"ttl_ms": 30_000})),
        )
        .await;
        v["session"].as_u64().expect("a session")
    };
    phase("one holder, then two waiters: a low level first in time, a high level after");
    let (holder, low, high) = (open().await, open().await, open().await);
    let acquire = |session: u64, priority: i32, key: &str| {
        json!({"session": session, "ticket": 1, "units": 1, "wait": true, "timeout_ms": 1,
               "priority": priority, "fairness_key": key, "agent": "a", "weight": priority + 1})
    };
    let (status, held) = call(
        &admin,
        "POST",
        &format!("{limit}/acquire"),
        Some(acquire(holder, 0, "")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{held}");
    for (session, priority, key) in [(low, 0, "batch"), (high, 5, "interactive")] {
        let (status, v) = call(
            &admin,
            "POST",
            &format!("{limit}/acquire"),
            Some(acquire(session, priority, key)),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "queued: {v}");
    }

    let reader = client(Some(READ));
    let (status, hs) = call(&reader, "GET", &format!("{limit}/holders"), None).await;
    assert_eq!(status, StatusCode::OK, "{hs}");
    assert_eq!((hs["total"].as_u64(), &hs["next"]), (Some(1), &Value::Null));
    let h = &hs["items"][0];
    assert_eq!(
        (&h["session"], &h["fence"], &h["units"]),
        (&json!(holder), &held["fence"], &json!(1)),
        "{hs}"
    );
    assert!(h["lease_expires_at_ms"].as_u64().unwrap() > 0, "{hs}");
    // Held for: the page's log clock less the grant's, both on the log clock.
    let granted_at_ms = h["granted_at_ms"].as_u64().expect("a grant time");
    assert!(hs["now_ms"].as_u64().unwrap() >= granted_at_ms, "{hs}");

    phase("waiters in serving order: the higher level first, then the earlier low one");
    let (status, ws) = call(&reader, "GET", &format!("{limit}/waiters"), None).await;
    assert_eq!(status, StatusCode::OK, "{ws}");
    let order: Vec<_> = ws["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["session"].as_u64().unwrap(),
                w["position"].as_u64().unwrap(),
                w["level"].as_i64().unwrap(),
                w["fairness_key"].as_str().unwrap().to_owned(),
                w["weight"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        order,
        vec![
            (high, 0, 5, "interactive".to_owned(), 6),
            (low, 1, 0, "batch".to_owned(), 1)
        ]
    );

    phase("pages: one at a time, with the offset of the next; a bad page size is 400");
    let (_, first) = call(&reader, "GET", &format!("{limit}/waiters?limit=1"), None).await;
    assert_eq!(
        (
            first["items"].as_array().unwrap().len(),
            &first["next"],
            &first["total"]
        ),
        (1, &json!(1), &json!(2))
    );
    let (_, second) = call(
        &reader,
        "GET",
        &format!("{limit}/waiters?limit=1&after=1"),
        None,
    )
    .await;
    assert_eq!(
        (&second["items"][0]["session"], &second["next"]),
        (&json!(low), &Value::Null)
    );
    let (status, v) = call(&reader, "GET", &format!("{limit}/waiters?limit=0"), None).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Invalid")),
        "{v}"
    );
    let (status, v) = call(
        &reader,
        "GET",
        &format!("{base}/v1/tenants/acme/limits/nope/holders"),
        None,
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("UnknownLimit")),
        "{v}"
    );
    let (status, _) = call(
        &client(Some(ACME)),
        "GET",
        &format!("{base}/v1/tenants/other/limits/gpu/waiters"),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a tenant token reads its own tenant only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_leader_history_keeps_the_killed_leader_and_names_the_new_one() {
    let (mut cluster, _) = cluster("console-leaders").await;
    let since_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let old = cluster.leader(EVENT_WAIT).await.expect("a leader");
    let viewer = (1..=3).find(|id| *id != old).unwrap();
    let status_url = format!(
        "http://{}/v1/status",
        cluster.node(viewer).config.http_listen
    );
    phase("the leader is killed; a follower's record names it, then the new leader");
    cluster.kill(old);
    let admin = client(Some(ADMIN));
    let deadline = Instant::now() + EVENT_WAIT;
    let history = loop {
        let (status, body) = call(&admin, "GET", &status_url, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let history = body["leader_history"].clone();
        let newest = &history["changes"][0]["leader"];
        if newest.as_u64().is_some_and(|l| l != old) {
            break history;
        }
        assert!(Instant::now() < deadline, "no new leader recorded: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(history["node"].as_u64(), Some(viewer), "{history}");
    let changes = history["changes"].as_array().unwrap();
    let terms: Vec<u64> = changes
        .iter()
        .map(|c| c["term"].as_u64().unwrap())
        .collect();
    assert!(
        terms.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {history}"
    );
    let old_term = changes
        .iter()
        .find(|c| c["leader"].as_u64() == Some(old))
        .unwrap_or_else(|| panic!("the killed leader is in the record: {history}"))["term"]
        .as_u64()
        .unwrap();
    assert!(
        terms[0] > old_term,
        "a new term for the new leader: {history}"
    );
    for c in changes {
        let at = c["at_ms"].as_u64().unwrap();
        assert!(at + 60_000 >= since_ms, "seen since the node started: {c}");
    }
}

/// GETs `url` as `http` until `wanted` holds of the 200 answer; panics after
/// [`EVENT_WAIT`] with the last answer.
async fn until_answer(http: &reqwest::Client, url: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + EVENT_WAIT;
    loop {
        let (status, v) = call(http, "GET", url, None).await;
        assert_eq!(status, StatusCode::OK, "GET {url}: {v}");
        if wanted(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "GET {url} never answered as wanted: {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_role_sees_status_halts_tenants_and_history_from_any_node_and_changes_nothing() {
    let (cluster, base) = cluster("weir-console-overview").await;
    // Node 2 answers from its own applied state and history, whether it leads or follows.
    let other = format!("http://{}", cluster.node(2).config.http_listen);
    let (admin, reader, acme) = (client(Some(ADMIN)), client(Some(READ)), client(Some(ACME)));
    let limit = format!("{base}/v1/tenants/acme/limits/db");
    let (status, v) = call(&admin, "PUT", &limit, Some(json!({"concurrent": 1}))).await;
    assert_eq!(status, StatusCode::OK, "{v}");

    phase("read sees the node table; a write with it is still 403");
    let (status, v) = call(&reader, "GET", &format!("{base}/v1/status"), None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["nodes"].as_array().map(Vec::len), Some(3), "{v}");
    assert!(v["nodes"][0]["digest"].is_string(), "{v}");
    let halt = format!("{base}/v1/tenants/acme/agents/etl/halt");
    let (status, v) = call(&reader, "PUT", &halt, Some(json!({"reason": "no"}))).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("Forbidden"))
    );
    let (status, v) = call(&acme, "GET", &format!("{base}/v1/status"), None).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a tenant token sees no node table: {v}"
    );

    phase("every halt and every tenant, from a node of its own state, with when it was set");
    let (status, v) = call(
        &admin,
        "PUT",
        &halt,
        Some(json!({"reason": "runaway loop"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let halts = until_answer(&reader, &format!("{other}/v1/halts"), |v| {
        v["total"].as_u64() == Some(1)
    })
    .await;
    let h = &halts["halts"][0];
    assert_eq!(
        (&h["tenant"], &h["scope"], &h["agent"], &h["reason"]),
        (
            &json!("acme"),
            &json!("agent"),
            &json!("etl"),
            &json!("runaway loop")
        ),
        "{halts}"
    );
    let since = h["since_ms"].as_u64().expect("node 2 saw the halt set");
    assert!(since <= halts["now_ms"].as_u64().unwrap(), "{halts}");
    let (status, tenants) = call(&reader, "GET", &format!("{other}/v1/tenants"), None).await;
    assert_eq!(status, StatusCode::OK, "{tenants}");
    let listed = tenants["tenants"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|t| t["name"] == "acme" && t["halts"] == 1),
        "{tenants}"
    );
    for path in ["/v1/halts", "/v1/tenants"] {
        let (status, v) = call(&acme, "GET", &format!("{other}{path}"), None).await;
        assert_eq!(
            status,
            StatusCode::FORBIDDEN,
            "{path} names every tenant: {v}"
        );
    }
    let (status, v) = call(&reader, "GET", &format!("{other}/v1/tenants?limit=0"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    let (status, _) = call(&admin, "DELETE", &halt, None).await;
    assert_eq!(status, StatusCode::OK);
    until_answer(&reader, &format!("{other}/v1/halts"), |v| v["total"] == 0).await;

    phase("a limit's history on another node: the grant and the refusal, a second apart at most");
    let history = format!("{other}/v1/tenants/acme/limits/db/history");
    let (status, v) = call(&reader, "GET", &history, None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    for ticket in [1, 2] {
        let (_, s) = call(
            &admin,
            "POST",
            &format!("{base}/v1/sessions"),
            Some(json!({"ttl_ms": 30_000})),
        )
        .await;
        let body = json!({"session": s["session"], "ticket": ticket, "units": 1, "wait": false});
        let (status, v) = call(&admin, "POST", &format!("{limit}/acquire"), Some(body)).await;
        let want = if ticket == 1 {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(status, want, "{v}");
    }
    let sampled = |v: &Value, field: &str| -> u64 {
        v["history"]["samples"]
            .as_array()
            .map_or(0, |s| s.iter().map(|x| x[field].as_u64().unwrap()).sum())
    };
    let v = until_answer(&reader, &history, |v| {
        sampled(v, "grants") == 1 && sampled(v, "refusals") == 1
    })
    .await;
    let samples = v["history"]["samples"].as_array().unwrap();
    assert_eq!(samples.last().unwrap()["in_use"], 1, "{v}");
    assert_eq!(v["history"]["interval_ms"], 1000, "{v}");
    let tenant = until_answer(&acme, &format!("{other}/v1/tenants/acme/history"), |v| {
        sampled(v, "grants") >= 1
    })
    .await;
    assert_eq!(tenant["tenant"], "acme", "{tenant}");
    let (status, v) = call(
        &acme,
        "GET",
        &format!("{other}/v1/tenants/beta/history"),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "another tenant's history: {v}"
    );
    phase(
        "a keyed limit of more keys than a sample sums: its in use is not sampled, its grants are",
    );
    let keyed = format!("{base}/v1/tenants/acme/limits/per-user");
    let (status, v) = call(
        &admin,
        "PUT",
        &keyed,
        Some(json!({"per_second": 0.01, "keyed": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    for user in 0..=weir_http::KEYED_SAMPLE_KEYS_MAX {
        let body = json!({"key": format!("user-{user}")});
        let (status, v) = call(&admin, "POST", &format!("{keyed}/take"), Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let v = until_answer(
        &reader,
        &format!("{other}/v1/tenants/acme/limits/per-user/history"),
        |v| sampled(v, "grants") > u64::from(weir_http::KEYED_SAMPLE_KEYS_MAX),
    )
    .await;
    let last = v["history"]["samples"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (&last["in_use"], &last["waiting"]),
        (&Value::Null, &Value::Null),
        "{v}"
    );
    let (status, v) = call(
        &reader,
        "GET",
        &format!("{other}/v1/tenants/acme/limits/nope/history"),
        None,
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("UnknownLimit"))
    );
}
