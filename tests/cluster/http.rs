//! The HTTP/JSON API against a real three-node cluster, with a real HTTP client: the routes
//! match `docs/openapi.yaml`, HTTP and CLI holders share one limit, a long poll and the
//! event stream learn a grant, and the README's `curl` examples run as written.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Cluster, phase};
use super::{CONVERGE, ELECTION};

/// The HTTP base URL of node `id`.
pub fn base(cluster: &Cluster, id: u64) -> String {
    format!("http://{}", cluster.node(id).config.http_listen)
}

/// A node that is not the leader: requests to it are served by forwarding.
pub async fn follower(cluster: &Cluster) -> u64 {
    let leader = cluster.leader(ELECTION).await;
    (1..=3).find(|id| *id != leader).unwrap()
}

/// One node's HTTP API through one HTTP client.
pub struct Api {
    pub http: reqwest::Client,
    /// The node's base URL ([`base`]).
    pub base: String,
}

impl Api {
    /// Node `id`'s API through a client of reqwest's defaults.
    pub fn of(cluster: &Cluster, id: u64) -> Api {
        Api {
            http: reqwest::Client::new(),
            base: base(cluster, id),
        }
    }

    /// Defines the limit at `path` (`/v1/tenants/T/limits/N`) with `concurrent` units.
    pub async fn define(&self, path: &str, concurrent: u32) -> (StatusCode, Value) {
        let body = json!({"concurrent": concurrent});
        self.call("PUT", path, Some(body)).await
    }

    /// Defines the limit at `path` with the spec `body`, which must be accepted.
    pub async fn define_spec(&self, path: &str, body: Value) {
        let (status, v) = self.call("PUT", path, Some(body)).await;
        assert_eq!(status, 200, "PUT {path}: {v}");
    }

    /// Sends `method path` with an optional JSON body; answers (status, JSON body or Null).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let response = self.send(method, path, body).await;
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Sends `method path` without a body: the response itself, for its headers or a stream.
    pub async fn response(&self, method: &str, path: &str) -> reqwest::Response {
        self.send(method, path, None).await
    }

    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> reqwest::Response {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            request = request.json(&b);
        }
        request.send().await.expect("the node answers HTTP")
    }

    /// Acquires on the limit at `path` (`/v1/tenants/T/limits/N`) with `body` (session,
    /// ticket and options).
    pub async fn acquire(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call("POST", &format!("{path}/acquire"), Some(body))
            .await
    }

    /// Opens a session of TTL 10 s: (status, the answer, whose `session` is its id).
    pub async fn open_session(&self) -> (StatusCode, Value) {
        let ttl = json!({"ttl_ms": 10_000});
        self.call("POST", "/v1/sessions", Some(ttl)).await
    }
}

/// (method, path) of every operation in docs/openapi.yaml, read from its layout: paths at
/// two spaces of indent, methods at four.
fn openapi_routes() -> BTreeSet<(String, String)> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.yaml")).unwrap();
    let mut routes = BTreeSet::new();
    let mut path = None;
    for line in text.lines() {
        if let Some(p) = line.strip_prefix("  /") {
            path = Some(format!("/{}", p.trim_end_matches(':')));
        } else if let Some(m) = line.strip_prefix("    ")
            && let Some(m) = m.strip_suffix(':')
            && ["get", "put", "post", "delete", "patch"].contains(&m)
        {
            routes.insert((
                m.to_uppercase(),
                path.clone().expect("a method under a path"),
            ));
        }
    }
    routes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_routes_are_exactly_the_openapi_ones_and_each_is_served_by_a_follower() {
    let listed = openapi_routes();
    let served: BTreeSet<(String, String)> = weir_http::served_routes()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        listed.difference(&served).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "listed in docs/openapi.yaml but not served"
    );
    assert_eq!(
        served.difference(&listed).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "served but not listed in docs/openapi.yaml"
    );
    let cluster = Cluster::start("http-routes", 3, "");
    let node = follower(&cluster).await;
    let url = base(&cluster, node);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let api = Api { http, base: url };
    phase("every listed route answers on a follower, none with the router's NotFound");
    for (method, path) in &listed {
        let concrete = path
            .replace("{tenant}", "t")
            .replace("{name}", "l")
            .replace("{session}", "1")
            .replace("{fence}", "1")
            .replace("{run}", "r")
            .replace("{period}", "p")
            .replace("{agent}", "a")
            .replace("{file}", "app.js");
        if concrete.ends_with("/events") {
            // An event stream answers its headers at once and then stays open. It needs a
            // session that exists (its owner is checked first): one opened for it.
            let (status, v) = api.open_session().await;
            assert_eq!(status, StatusCode::OK, "open for the event stream: {v}");
            let session = v["session"].as_u64().expect("a session id");
            let concrete = path.replace("{session}", &session.to_string());
            let r = api.response("GET", &concrete).await;
            assert_eq!(r.status(), StatusCode::OK, "{method} {path}");
            assert!(
                r.headers()["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with("text/event-stream")
            );
            continue;
        }
        let body = match concrete.as_str() {
            p if p.ends_with("/halt") && method == "PUT" => Some(json!({"reason": "r"})),
            p if p.ends_with("/release") && p.starts_with("/v1/sessions") => {
                Some(json!({"ticket": 1}))
            }
            _ if method == "PUT" || method == "POST" => Some(json!({})),
            _ => None,
        };
        let (status, v) = api.call(method, &concrete, body).await;
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_ne!(v["error"], "NotFound", "{method} {path}: {v}");
        assert!(
            !status.is_server_error(),
            "{method} {path} answered {status}: {v}"
        );
    }
    phase("errors are JSON with the refusal's name and a fitting status");
    let (status, v) = api.call("GET", "/v1/tenants/t/limits/nope", None).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("UnknownLimit"))
    );
    assert!(v["message"].as_str().unwrap().contains("t/nope"), "{v}");
    let (status, v) = api.call("GET", "/v1/nothing", None).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("NotFound"))
    );
    let (status, v) = api
        .call(
            "PUT",
            "/v1/tenants/t/limits/bad",
            Some(json!({"concurrent": "x"})),
        )
        .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Invalid"))
    );
    assert!(
        v["message"].as_str().unwrap().contains("field concurrent"),
        "{v}"
    );
    bodies_that_are_not_objects_are_refused(&api).await;
    phase("a halted tenant refuses with 409 Halted");
    api.define("/v1/tenants/h/limits/l", 1).await;
    api.call(
        "PUT",
        "/v1/tenants/h/halt",
        Some(json!({"reason": "incident"})),
    )
    .await;
    let (_, s) = api.open_session().await;
    let (status, v) = api
        .acquire(
            "/v1/tenants/h/limits/l",
            json!({"session": s["session"], "ticket": 1}),
        )
        .await;
    assert_eq!(
        (status, v["error"].as_str(), v["reason"].as_str()),
        (StatusCode::CONFLICT, Some("Halted"), Some("incident")),
        "{v}"
    );
    // Every refusal names its object: the halted tenant, in a field and in the text.
    assert_eq!(
        (v["tenant"].as_str(), v["message"].as_str()),
        (Some("h"), Some("halted h (tenant): incident")),
        "{v}"
    );
    let (status, v) = api.call("GET", "/v1/tenants/h", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["halts"][0]["reason"], "incident", "{v}");
    phase("an unknown session and a too-large acquire name the session and the limit");
    let (status, v) = api
        .acquire(
            "/v1/tenants/t/limits/db",
            json!({"session": 987654, "ticket": 1}),
        )
        .await;
    assert_eq!(
        (status, v["error"].as_str(), v["session"].as_u64()),
        (StatusCode::NOT_FOUND, Some("UnknownSession"), Some(987654)),
        "{v}"
    );
    assert_eq!(
        v["message"], "unknown session 987654 (closed or expired)",
        "{v}"
    );
    let (status, v) = api
        .acquire(
            "/v1/tenants/h/limits/l",
            json!({"session": s["session"], "ticket": 2, "units": 5}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "halted before too large: {v}");
    api.call("DELETE", "/v1/tenants/h/halt", None).await;
    let (status, v) = api
        .acquire(
            "/v1/tenants/h/limits/l",
            json!({"session": s["session"], "ticket": 3, "units": 5}),
        )
        .await;
    assert_eq!(
        (
            status,
            v["error"].as_str(),
            v["tenant"].as_str(),
            v["name"].as_str()
        ),
        (
            StatusCode::BAD_REQUEST,
            Some("TooLarge"),
            Some("h"),
            Some("l")
        ),
        "{v}"
    );
    assert_eq!(
        v["message"], "too large for h/l: 5 units, the limit grants at most 1",
        "{v}"
    );
    lists_answer_objects_and_limits_page(&api).await;
}

/// A body that is JSON but not an object is refused 400 naming what it is, on every route
/// that takes a body of fields all optional (where an array once read as a struct).
async fn bodies_that_are_not_objects_are_refused(api: &Api) {
    phase("a JSON array, null or number as a body is refused 400");
    let routes = [
        ("PUT", "/v1/tenants/t/limits/arr"),
        ("PUT", "/v1/tenants/t"),
        ("POST", "/v1/tenants/t/runs/r/reserve"),
        ("POST", "/v1/tenants/t/runs/r/release"),
    ];
    for (method, path) in routes {
        for (body, kind) in [
            (json!([]), "an array"),
            (json!([null, null]), "an array"),
            (json!(null), "null"),
            (json!(3), "a number"),
        ] {
            let (status, v) = api.call(method, path, Some(body.clone())).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{method} {path} {body}: {v}"
            );
            let expected = format!("request body: expected a JSON object, got {kind}");
            assert_eq!(v["message"], expected, "{method} {path} {body}");
        }
    }
    let (status, _) = api.call("GET", "/v1/tenants/t/limits/arr", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing was defined");
}

/// The names of a page of limits, and its `next`.
fn page_names(v: &Value) -> (Vec<&str>, Option<&str>) {
    let names = v["limits"].as_array().expect("limits is an array");
    let names = names.iter().map(|l| l["name"].as_str().unwrap()).collect();
    (names, v["next"].as_str())
}

/// `GET …/limits`, `…/runs` and `…/halts` answer objects; limits page by `prefix`, `after`
/// and `limit`, and a bad page size or an unknown parameter is refused naming it.
async fn lists_answer_objects_and_limits_page(api: &Api) {
    phase("lists answer objects; limits page by prefix, after and limit");
    for name in ["a0", "a1", "a2", "b0"] {
        api.define(&format!("/v1/tenants/lists/limits/{name}"), 1)
            .await;
    }
    let page = |q: &'static str| async move {
        let (status, v) = api
            .call("GET", &format!("/v1/tenants/lists/limits{q}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{q}: {v}");
        v
    };
    let all = page("").await;
    assert_eq!(
        page_names(&all),
        (vec!["a0", "a1", "a2", "b0"], None),
        "{all}"
    );
    assert_eq!(all["limits"][0]["tenant"], "lists", "{all}");
    let v = page("?limit=2").await;
    assert_eq!(page_names(&v), (vec!["a0", "a1"], Some("a1")), "{v}");
    let v = page("?limit=2&after=a1").await;
    assert_eq!(page_names(&v), (vec!["a2", "b0"], None), "{v}");
    let v = page("?prefix=a&limit=2&after=a1").await;
    assert_eq!(page_names(&v), (vec!["a2"], None), "{v}");
    let v = page("?prefix=b").await;
    assert_eq!(page_names(&v), (vec!["b0"], None), "{v}");
    for (q, named) in [
        ("?limit=0", "limit 0"),
        ("?limit=1001", "limit 1001"),
        ("?size=3", "size"),
    ] {
        let (status, v) = api
            .call("GET", &format!("/v1/tenants/lists/limits{q}"), None)
            .await;
        assert_eq!(
            (status, v["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("Invalid")),
            "{q}"
        );
        assert!(v["message"].as_str().unwrap().contains(named), "{q}: {v}");
    }
    let (status, _) = api
        .call("POST", "/v1/tenants/lists/runs/r1/reserve", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, v) = api.call("GET", "/v1/tenants/lists/runs", None).await;
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["runs"][0]["run"], "r1", "{v}");
    let halt = Some(json!({"reason": "stuck"}));
    api.call("PUT", "/v1/tenants/lists/agents/x/halt", halt)
        .await;
    let (_, v) = api.call("GET", "/v1/tenants/lists/halts", None).await;
    assert_eq!(
        v,
        json!({"halts": [{"scope": "agent", "agent": "x", "reason": "stuck"}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_cli_holders_share_one_limit_and_a_long_poll_and_the_event_stream_learn_the_grant()
{
    let cluster = Cluster::start("http-hold", 3, "");
    let node = follower(&cluster).await;
    let api = Api::of(&cluster, node);
    phase("define db with one permit over HTTP; the CLI takes it");
    let (status, _) = api.define("/v1/tenants/default/limits/db", 1).await;
    assert_eq!(status, StatusCode::OK);
    let mut holder = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["acquire", "db", "--hold", "3"])
        .env("WEIR_SERVERS", cluster.servers().join(","))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = api.call("GET", "/v1/tenants/default/limits/db", None).await;
        if v["in_use"] == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the CLI never got the permit: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    phase("while the CLI holds, HTTP is told Busy, then waits");
    let (_, s) = api
        .call("POST", "/v1/sessions", Some(json!({"ttl_ms": 15_000})))
        .await;
    let session = s["session"].as_u64().expect("a session id");
    let (status, v) = api
        .acquire(
            "/v1/tenants/default/limits/db",
            json!({"session": session, "ticket": 1, "wait": false}),
        )
        .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("Busy"))
    );
    let other = (1..=3).find(|id| *id != node).unwrap();
    let mut events = api
        .http
        .get(format!(
            "{}/v1/sessions/{session}/events",
            base(&cluster, other)
        ))
        .send()
        .await
        .unwrap();
    let started = Instant::now();
    let (status, v) = api
        .acquire(
            "/v1/tenants/default/limits/db",
            json!({"session": session, "ticket": 2, "timeout_ms": 20_000}),
        )
        .await;
    assert_eq!(
        (status, v["status"].as_str()),
        (StatusCode::OK, Some("granted")),
        "{v}"
    );
    assert!(
        started.elapsed() > Duration::from_secs(1),
        "held open until the CLI released"
    );
    let fence = v["fence"].as_u64().unwrap();
    assert_eq!(holder.wait().unwrap().code(), Some(0));
    phase("the event stream (on another node) delivered the grant");
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("event: granted") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.chunk()).await {
            Ok(Ok(Some(bytes))) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            other => panic!("no granted event: {other:?}; seen {seen:?}"),
        }
    }
    assert!(seen.contains(&format!("\"fence\":{fence}")), "{seen}");
    phase("while HTTP holds, the CLI is refused; the fence validates");
    let (code, _, err) = cluster.cli(&["acquire", "db", "--no-wait", "--hold", "1"]);
    assert_eq!(code, 3, "refused: {err}");
    let (_, v) = api
        .call(
            "GET",
            &format!("/v1/tenants/default/limits/db/fences/{fence}"),
            None,
        )
        .await;
    assert_eq!(v["held"], true);
    phase("never more than one holder: the limit's high-water mark is 1");
    let (_, v) = api.call("GET", "/v1/tenants/default/limits/db", None).await;
    assert_eq!(
        (v["in_use"].as_u64(), v["max_in_use"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    let (_, v) = api
        .call(
            "POST",
            &format!("/v1/sessions/{session}/release"),
            Some(json!({"ticket": 2})),
        )
        .await;
    assert_eq!(v["held"], true, "{v}");
    cluster.converged(CONVERGE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_answers_the_tokens_left_or_429_with_retry_after() {
    let cluster = Cluster::start("http-take", 3, "");
    let api = Api::of(&cluster, follower(&cluster).await);
    api.call(
        "PUT",
        "/v1/tenants/default/limits/api",
        Some(json!({"per_second": 0.5, "burst": 2})),
    )
    .await;
    let take = "/v1/tenants/default/limits/api/take";
    let (status, v) = api.call("POST", take, None).await;
    assert_eq!(
        (status, v["taken"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    assert_eq!(v["remaining"], 1, "{v}");
    api.call("POST", take, None).await;
    let response = api.response("POST", take).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=2).contains(&retry_after),
        "one token in 2 s: {retry_after}"
    );
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"], "Busy");
    phase("a take on a limit with a cap is refused: it would hold a permit");
    api.define("/v1/tenants/default/limits/cap", 1).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, v) = api
            .call("POST", "/v1/tenants/default/limits/cap/take", None)
            .await;
        if status == StatusCode::BAD_REQUEST {
            assert_eq!(v["error"], "Invalid");
            break;
        }
        // The follower has not applied the definition yet.
        assert!(Instant::now() < deadline, "{status} {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_on_a_node_behind_the_definition_reads_the_cap_from_the_leader() {
    use weir_bench::peer_proxy::{PeerProxies, source_ip};
    let mut cluster =
        weir_launcher::LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-take-behind")
            .unwrap();
    let mut configs = cluster.loopback_configs(3).unwrap();
    let mut fronts = vec![];
    for c in &mut configs {
        let listen = weir_launcher::loopback_addr().unwrap();
        fronts.push((c.id, c.peer_addr.clone(), listen.clone()));
        c.peer_listen = Some(listen);
        c.peer_source_ip = Some(source_ip(c.id));
        c.http_listen = weir_launcher::loopback_addr().unwrap();
    }
    let proxies = PeerProxies::start(&fronts).await.unwrap();
    cluster.add_and_start(configs).unwrap();
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    let behind = (1..=3).find(|id| *id != leader).unwrap();
    phase("a follower cut from its peers; a capped limit defined without it");
    proxies.isolate(behind, 3);
    let client = weir_client::Client::new(cluster.servers());
    client.write(crate::define("cap", 1)).await.unwrap();
    phase("its take of that limit is refused, the cap read from the leader");
    let api = Api {
        http: reqwest::Client::new(),
        base: format!("http://{}", cluster.node(behind).config.http_listen),
    };
    let (status, v) = api
        .call("POST", "/v1/tenants/t/limits/cap/take", None)
        .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Invalid")),
        "{v}"
    );
    let in_use = match client
        .read(weir_proto::protocol::Query::Limit {
            tenant: "t".into(),
            name: "cap".into(),
        })
        .await
        .unwrap()
    {
        weir_proto::protocol::Answer::Limit(Some(l)) => l.in_use,
        other => panic!("{other:?}"),
    };
    assert_eq!(in_use, 0, "no permit is held by the node's take session");
    proxies.heal();
}

/// The `curl` lines of README.md's HTTP example block.
fn readme_curls() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = readme
        .split("```sh http-example")
        .nth(1)
        .expect("README.md has a ```sh http-example block")
        .split("```")
        .next()
        .unwrap();
    block
        .lines()
        .map(|l| l.split("  #").next().unwrap().trim().to_string())
        .filter(|l| l.starts_with("curl "))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_curl_examples_run_against_a_follower() {
    let curls = readme_curls();
    for needed in ["/acquire", "/take", "/metrics"] {
        assert!(
            curls.iter().any(|c| c.contains(needed)),
            "the README shows curl for {needed}"
        );
    }
    let cluster = Cluster::start("http-readme", 3, "");
    let node = follower(&cluster).await;
    let addr = cluster.node(node).config.http_listen.clone();
    for line in curls {
        let line = line.replace("localhost:7611", &addr);
        phase(&line);
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{line}: {:?} {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!stdout.contains("\"error\""), "{line}: {stdout}");
        assert!(!stdout.trim().is_empty(), "{line} printed nothing");
    }
}

/// A keep-alive may carry the session's acknowledged mark: a finished ticket below it is
/// forgotten, and asking for it again is refused 400 `Invalid` naming the mark (never
/// granted a second time); a keep-alive without a body is as before, and an unknown field
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_with_a_mark_forgets_the_tickets_below_it() {
    let cluster = Cluster::start("http-mark", 3, "");
    let api = Api::of(&cluster, follower(&cluster).await);
    let db = "/v1/tenants/default/limits/db";
    assert_eq!(api.define(db, 1).await.0, StatusCode::OK);
    let (_, opened) = api.open_session().await;
    let session = opened["session"].as_u64().expect("a session");
    let ask = json!({"session": session, "ticket": 1, "wait": false});
    let (status, v) = api.acquire(db, ask.clone()).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let release = format!("/v1/sessions/{session}/release");
    let (status, _) = api.call("POST", &release, Some(json!({"ticket": 1}))).await;
    assert_eq!(status, StatusCode::OK);
    // Remembered: a late duplicate of the acquire is refused as released.
    let (status, v) = api.acquire(db, ask.clone()).await;
    assert_eq!(
        (status, &v["error"]),
        (StatusCode::CONFLICT, &json!("TicketReleased")),
        "{v}"
    );

    let keepalive = format!("/v1/sessions/{session}/keepalive");
    let (status, v) = api.call("POST", &keepalive, None).await;
    assert_eq!(
        (status, &v["status"]),
        (StatusCode::OK, &json!("kept_alive")),
        "{v}"
    );
    let (status, v) = api
        .call("POST", &keepalive, Some(json!({"acked_below": 2})))
        .await;
    assert_eq!(
        (status, &v["status"]),
        (StatusCode::OK, &json!("kept_alive")),
        "{v}"
    );
    let (status, v) = api.acquire(db, ask).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("below the session's acknowledged mark 2"),
        "{v}"
    );
    let (status, v) = api
        .call(
            "POST",
            &keepalive,
            Some(json!({"acked_below": 2, "mark": 3})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "an unknown field: {v}");
    cluster.converged(CONVERGE).await;
}

/// One name rule for every name, on writes and reads, on every port: control, bidi and
/// zero-width characters are refused, a read names nothing longer than a write could, a
/// JSON object may not name a key twice; and the CLI exits quietly when its reader goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_printable_on_every_port_and_a_json_key_is_given_once() {
    let cluster = Cluster::start("http-names", 1, "");
    cluster.leader(ELECTION).await;
    let api = Api::of(&cluster, 1);
    let refused = |status: StatusCode, v: &Value, needle: &str| {
        assert_eq!(status, 400, "{v}");
        assert!(v.to_string().contains(needle), "{v}");
    };

    phase("names with ESC, newline, NUL, RTL override or a zero-width space are refused");
    let (s, v) = api
        .call(
            "POST",
            "/v1/tenants/acme/runs/r%1B%5B31mX%0Aevil/reserve",
            None,
        )
        .await;
    refused(s, &v, "holds the character \\\\u{1b}");
    for name in ["a%00b", "evil%E2%80%AEtxt.exe", "zero%E2%80%8Bwidth"] {
        let (s, v) = api.define(&format!("/v1/tenants/t/limits/{name}"), 1).await;
        refused(s, &v, "holds the character");
        let (s, v) = api.define(&format!("/v1/tenants/{name}/limits/l"), 1).await;
        refused(s, &v, "holds the character");
    }
    let client = cluster.client();
    let e = client
        .write(weir_core::machine::Command::DefineLimit {
            tenant: "t".into(),
            name: "agent\u{202e}gnp.exe".into(),
            concurrent: 1,
            per_second: 0.0,
            burst: None,
        })
        .await;
    assert!(
        format!("{e:?}").contains("holds the character \\\\u{202e}"),
        "{e:?}"
    );

    phase("a read names nothing a write could not: a 10 KB key is refused");
    api.define("/v1/tenants/t/limits/keyed", 1).await;
    let long = "k".repeat(10_000);
    let (s, v) = api
        .call(
            "GET",
            &format!("/v1/tenants/t/limits/keyed/keys/{long}"),
            None,
        )
        .await;
    refused(s, &v, "key is 10000 bytes");

    phase("a JSON object that names a key twice is refused");
    let response = api
        .http
        .put(format!("{}/v1/tenants/t/limits/twice", api.base))
        .header("content-type", "application/json")
        .body(r#"{"concurrent":1,"concurrent":100000}"#)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let v: Value = response.json().await.unwrap();
    refused(status, &v, "the key \\\"concurrent\\\" appears twice");
    let (s, v) = api.call("GET", "/v1/tenants/t/limits/twice", None).await;
    assert_eq!(s, 404, "{v}");

    phase("`weir --tenant t limit list` whose reader has gone exits quietly");
    for i in 0..50 {
        api.define(&format!("/v1/tenants/t/limits/l{i}"), 1).await;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--tenant", "t", "limit", "list"])
        .env("WEIR_SERVERS", cluster.servers().join(","))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_leases_a_share_of_a_rate_limit_over_http_and_a_retry_changes_nothing() {
    let cluster = Cluster::start("http-lease", 3, "");
    let api = Api::of(&cluster, follower(&cluster).await);
    api.define_spec(
        "/v1/tenants/default/limits/api",
        json!({"per_second": 100, "burst": 40}),
    )
    .await;
    let (_, a) = api.open_session().await;
    let (_, b) = api.open_session().await;
    let lease = |session: &Value, seq: u64, rate: u64, cap: u64, returned: u64| {
        json!({"session": session["session"], "seq": seq, "parts": [{"limit": "api",
            "rate_micro_per_s": rate, "cap": cap, "returned_micro": returned}]})
    };
    let path = "/v1/tenants/default/leases";
    phase("the first holder gets what it asks: 50/s and 20 tokens moved from the full bucket");
    let (status, v) = api
        .call("POST", path, Some(lease(&a, 1, 50_000_000, 20, 0)))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"status": "leased", "parts": [{"rate_micro_per_s": 50_000_000, "cap": 20,
            "tokens_micro": 20_000_000, "fair_rate_micro_per_s": 75_000_000, "fair_cap": 30,
            "duplicate": false}]})
    );
    phase("the second gets what is left of 3/4 of rate and burst, and both are advised half");
    let (_, v) = api
        .call("POST", path, Some(lease(&b, 1, 50_000_000, 20, 0)))
        .await;
    let part = &v["parts"][0];
    assert_eq!(
        (
            &part["rate_micro_per_s"],
            &part["cap"],
            &part["tokens_micro"],
            &part["fair_rate_micro_per_s"],
            &part["fair_cap"]
        ),
        (
            &json!(25_000_000),
            &json!(10),
            &json!(10_000_000),
            &json!(37_500_000),
            &json!(15)
        ),
        "{v}"
    );
    phase("a retry of the first request (same seq) is answered as the lease stands");
    let (_, v) = api
        .call("POST", path, Some(lease(&a, 1, 1_000_000, 1, 0)))
        .await;
    assert_eq!(v["parts"][0]["duplicate"], true, "{v}");
    assert_eq!(v["parts"][0]["rate_micro_per_s"], 50_000_000, "{v}");
    phase("a share of 0 ends the lease; the limit's leased rate drops by it");
    let (_, v) = api
        .call("POST", path, Some(lease(&a, 2, 0, 0, 20_000_000)))
        .await;
    assert_eq!(
        (&v["parts"][0]["rate_micro_per_s"], &v["parts"][0]["cap"]),
        (&json!(0), &json!(0)),
        "{v}"
    );
    let (_, v) = api
        .call("POST", path, Some(lease(&b, 2, 50_000_000, 20, 0)))
        .await;
    assert_eq!(v["parts"][0]["rate_micro_per_s"], 50_000_000, "{v}");
    phase("refusals: an unknown limit, and a body that names no parts' fields");
    let body = json!({"session": a["session"], "seq": 3, "parts": [{"limit": "nope",
        "rate_micro_per_s": 1, "cap": 1, "returned_micro": 0}]});
    let (status, v) = api.call("POST", path, Some(body)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    let body = json!({"session": a["session"], "seq": 3, "parts": [{"limit": "api"}]});
    let (status, v) = api.call("POST", path, Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("rate_micro_per_s"),
        "{v}"
    );
}
