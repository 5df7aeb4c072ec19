//! The HTTP port under TLS and tokens (G10, docs/security.md): HTTPS verified against the cluster CA,
//! `Authorization: Bearer` tokens authenticated and authorized by the client port exactly
//! as a binary client's, 401 without a token, 403 outside the token's tenant (a limit, a
//! tenant's export), and
//! plaintext HTTP refused by the TLS port.
//!
//! The HTTPS client is written here over tokio-rustls (one HTTP/1.1 request per
//! connection), so the test needs no TLS stack in reqwest.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_launcher::LocalCluster;
use weir_proto::tls::{ClientSecurity, Connector, Stream};
use weir_server::security::certs::{DevCa, Validity};

use crate::harness::{phase, start_secured, token_entries, write_certs};

const ADMIN: &str = "http-admin-secret";
const TENANT_A: &str = "http-tenant-a-secret";

/// Longest one HTTP exchange may take: a write through the log over loopback takes ms; a
/// follower forwarding to a leader just elected takes longer, well within this.
const EXCHANGE_MAX: Duration = Duration::from_secs(20);

/// One node's HTTPS port, verified against the cluster CA. Every request opens its own
/// connection.
#[derive(Clone)]
struct Https {
    connector: Connector,
    addr: String,
}

impl Https {
    /// A TLS connection with a request head written: `Authorization: Bearer` when a token is
    /// given; with a body length, `Content-Length` and `Connection: close`.
    async fn open(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body_len: Option<usize>,
    ) -> Stream {
        let addr = &self.addr;
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut stream = self.connector.connect(tcp, addr).await.unwrap();
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
        if let Some(len) = body_len {
            head.push_str(&format!(
                "Connection: close\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n"
            ));
        }
        if let Some(t) = token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        stream
    }

    /// One request with an optional JSON body: status and JSON answer.
    async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let exchange = async {
            let body = body.map(|b| b.to_string()).unwrap_or_default();
            let mut stream = self.open(method, path, token, Some(body.len())).await;
            stream.write_all(body.as_bytes()).await.unwrap();
            stream.flush().await.unwrap();
            let mut raw = Vec::new();
            // A TLS peer may end without close_notify after `Connection: close`; what was
            // read is the answer.
            let _ = stream.read_to_end(&mut raw).await;
            let text = String::from_utf8_lossy(&raw).into_owned();
            let (head, rest) = text.split_once("\r\n\r\n").expect("an HTTP answer");
            let chunked = head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked");
            let body = if chunked {
                dechunk(rest)
            } else {
                rest.to_owned()
            };
            (status_of(head), json_of(&body))
        };
        bounded(exchange).await
    }

    /// A request that must succeed (200): its JSON answer.
    async fn ok(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> Value {
        let (status, v) = self.call(method, path, Some(token), body).await;
        assert_eq!(status, 200, "{method} {path}: {v}");
        v
    }

    /// Opens a session as `token`'s principal: its id.
    async fn open_session(&self, token: &str, ttl_ms: u64) -> u64 {
        let s = self
            .ok(
                "POST",
                "/v1/sessions",
                token,
                Some(json!({ "ttl_ms": ttl_ms })),
            )
            .await;
        s["session"].as_u64().expect("a session id")
    }

    /// A request that must be refused with `status` and the refusal named `error`.
    async fn refused(
        &self,
        (method, path, token, body): (&str, &str, Option<&str>, Option<Value>),
        status: u16,
        error: &str,
    ) {
        let (got, v) = self.call(method, path, token, body).await;
        assert_eq!(
            (got, v["error"].as_str()),
            (status, Some(error)),
            "{method} {path}: {v}"
        );
    }

    /// The status and head of a GET to `path`, read up to the end of the head only: an event
    /// stream answered 200 never ends on its own.
    async fn head(&self, path: &str, token: &str) -> (u16, String) {
        let exchange = async {
            let mut stream = self.open("GET", path, Some(token), None).await;
            stream.flush().await.unwrap();
            let mut raw = Vec::new();
            let mut byte = [0u8; 1];
            while !raw.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap() == 1 {
                raw.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&raw).into_owned();
            (status_of(&head), head)
        };
        bounded(exchange).await
    }

    /// A POST with a raw `body` of any size: the status and the JSON answer, read after the
    /// whole body was sent (a reset under the write or before the answer panics).
    async fn post_bytes(&self, path: &str, token: Option<&str>, body: &[u8]) -> (u16, Value) {
        let exchange = async {
            let mut stream = self.open("POST", path, token, Some(body.len())).await;
            // As curl does: the whole body is sent before the answer is read. A node that
            // answers and closes without reading it resets the connection under the write.
            stream
                .write_all(body)
                .await
                .expect("the node read the whole body before it closed");
            stream.flush().await.unwrap();
            let mut raw = Vec::new();
            let read = stream.read_to_end(&mut raw).await;
            let text = String::from_utf8_lossy(&raw).into_owned();
            let Some((head, rest)) = text.split_once("\r\n\r\n") else {
                panic!("no HTTP answer ({read:?}): {text:?}");
            };
            (status_of(head), json_of(rest))
        };
        bounded(exchange).await
    }

    /// Follows an event stream until it ends; returns everything read after the head.
    async fn follow_events(self, path: String, token: &str) -> String {
        let mut stream = self.open("GET", &path, Some(token), None).await;
        stream.flush().await.unwrap();
        let mut raw = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
            }
            // The stream's last chunk: the body ended.
            if raw.ends_with(b"0\r\n\r\n") {
                break;
            }
        }
        String::from_utf8_lossy(&raw).into_owned()
    }
}

/// `exchange`, failing the test if it takes longer than [`EXCHANGE_MAX`].
async fn bounded<T>(exchange: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(EXCHANGE_MAX, exchange)
        .await
        .expect("bounded")
}

/// The status code of an HTTP answer's head.
fn status_of(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line")
}

/// A body as JSON; `Null` when it is none.
fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// The payload of a chunked body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_tokens_authenticates_and_authorizes_through_the_client_port() {
    let mut cluster =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-http-sec").unwrap();
    let certs = cluster.dir().join("certs");
    let ca = DevCa::new("cluster CA").unwrap();
    let nodes = ["node1", "node2", "node3"].map(|n| (n, Validity::Current));
    write_certs(&certs, &ca, &nodes);
    let ca_pem = certs.join("ca.pem");
    cluster = cluster.security(ClientSecurity::new(Some(&ca_pem), Some(ADMIN.into())).unwrap());
    let connector = Connector::tls(weir_proto::tls::client_config(&ca_pem).unwrap());

    phase("three nodes with TLS and tokens on every port elect a leader");
    let tokens = token_entries(&[(ADMIN, "admin"), (TENANT_A, "tenant:a")]);
    let leader = start_secured(&mut cluster, Some(&certs), &tokens).await;
    // A follower, so the request is also carried to the leader with its token.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let addr = cluster.node(follower).config.http_listen.clone();
    let node = Https {
        connector,
        addr: addr.clone(),
    };

    phase("HTTPS with the cluster CA and an admin token: define, open a session, acquire");
    let limit = "/v1/tenants/b/limits/x";
    node.ok("PUT", limit, ADMIN, Some(json!({"concurrent": 1})))
        .await;
    let session = node.open_session(ADMIN, 15_000).await;
    let acquire = json!({"session": session, "ticket": 1, "wait": false});
    node.ok("POST", &format!("{limit}/acquire"), ADMIN, Some(acquire))
        .await;

    phase("a tenant:a token is refused in tenant b (403), allowed in a");
    let define = Some(json!({"concurrent": 5}));
    node.refused(("PUT", limit, Some(TENANT_A), define), 403, "Forbidden")
        .await;
    node.refused(("GET", limit, Some(TENANT_A), None), 403, "Forbidden")
        .await;
    node.ok("GET", "/v1/tenants/a/limits", TENANT_A, None).await;
    let export_b = ("GET", "/v1/tenants/b/definitions", Some(TENANT_A), None);
    node.refused(export_b, 403, "Forbidden").await;
    node.ok("GET", "/v1/tenants/a/definitions", TENANT_A, None)
        .await;
    // A tenant's placement: found (no group named) by its own token, never another's;
    // choosing a group is admin's. A take in b is refused before b's limits are read.
    let placement_b = ("GET", "/v1/tenants/b/placement", Some(TENANT_A), None);
    node.refused(placement_b, 403, "Forbidden").await;
    let place_b = (
        "PUT",
        "/v1/tenants/b/placement",
        Some(TENANT_A),
        Some(json!({})),
    );
    node.refused(place_b, 403, "Forbidden").await;
    let chosen = Some(json!({"group": 0}));
    let place_a = (
        "PUT",
        "/v1/tenants/a/placement",
        Some(TENANT_A),
        chosen.clone(),
    );
    node.refused(place_a, 403, "Forbidden").await;
    node.ok("PUT", "/v1/tenants/a/placement", TENANT_A, Some(json!({})))
        .await;
    node.ok("PUT", "/v1/tenants/a/placement", ADMIN, chosen)
        .await;
    node.ok("GET", "/v1/tenants/a/placement", TENANT_A, None)
        .await;
    let take_b = (
        "POST",
        "/v1/tenants/b/limits/x/take",
        Some(TENANT_A),
        Some(json!({})),
    );
    node.refused(take_b, 403, "Forbidden").await;

    phase("the controls over tenant a are admin's: tenant:a gets 403 on each, even in a");
    let halt = Some(json!({"reason": "incident"}));
    node.ok("PUT", "/v1/tenants/a/halt", ADMIN, halt).await;
    let controls = [
        ("DELETE", "/v1/tenants/a/halt", None),
        (
            "PUT",
            "/v1/tenants/a",
            Some(json!({"budget_tokens": 1_000_000, "max_running": 100})),
        ),
        (
            "PUT",
            "/v1/tenants/a/limits/x",
            Some(json!({"concurrent": 1})),
        ),
        ("DELETE", "/v1/tenants/a/limits/x", None),
    ];
    for (method, path, body) in controls {
        node.refused((method, path, Some(TENANT_A), body), 403, "Forbidden")
            .await;
    }
    node.ok("DELETE", "/v1/tenants/a/halt", ADMIN, None).await;

    phase("a session's event stream is refused to another principal (403), served to its owner");
    let events = format!("/v1/sessions/{session}/events");
    node.refused(("GET", &events, Some(TENANT_A), None), 403, "Forbidden")
        .await;
    let (status, head) = node.head(&events, ADMIN).await;
    assert_eq!(status, 200, "admin following its own session: {head}");
    assert!(
        head.to_ascii_lowercase().contains("text/event-stream"),
        "{head}"
    );
    let unknown = format!("/v1/sessions/{}/events", session.wrapping_add(1));
    node.refused(("GET", &unknown, Some(ADMIN), None), 404, "UnknownSession")
        .await;

    phase("no token, or an unknown one, is 401 Unauthenticated; /healthz stays open");
    for token in [None, Some("guess")] {
        node.refused(("GET", limit, token, None), 401, "Unauthenticated")
            .await;
    }
    let (status, _) = node.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200);

    phase("a body above the bound is 413; without a token a large body is answered 401, not reset");
    // Above the body bound, and above what socket buffers absorb.
    let big = vec![b' '; 12 << 20];
    for (token, refusal) in [
        (Some(ADMIN), (413, "PayloadTooLarge")),
        (None, (401, "Unauthenticated")),
    ] {
        let (status, v) = node.post_bytes("/v1/sessions", token, &big).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (refusal.0, Some(refusal.1)),
            "{v}"
        );
    }
    phase("a request head sent a byte a second is closed after the header read timeout");
    let slow = (0..5).map(|_| {
        let (connector, addr) = (node.connector.clone(), addr.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let tcp = TcpStream::connect(&addr).await.unwrap();
            let mut stream = connector.connect(tcp, &addr).await.unwrap();
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "
                .iter()
                .cycle()
            {
                if stream.write_all(&[*byte]).await.is_err() || stream.flush().await.is_err() {
                    break;
                }
                let mut probe = [0u8; 64];
                let read = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut probe));
                if let Ok(Ok(0) | Err(_)) = read.await {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "still open after 60 s"
                );
            }
            started.elapsed()
        })
    });
    for open in slow.collect::<Vec<_>>() {
        let open = open.await.unwrap();
        let timeout = weir_http::HEADER_READ_TIMEOUT;
        assert!(
            open <= timeout + Duration::from_secs(5),
            "a slow head kept its connection {open:?}"
        );
        assert!(
            open >= timeout - Duration::from_secs(2),
            "closed after {open:?}, before the timeout: for another reason"
        );
    }

    phase("an admin closes another principal's session (a tenant:a session, over HTTP)");
    let theirs = node.open_session(TENANT_A, 60_000).await;
    assert!(
        theirs < 1 << 53,
        "session id {theirs} is not exact in a JSON double"
    );

    phase("revoking tenant:a's token (SIGHUP) ends its event stream with `revoked`");
    let stream = tokio::spawn(
        node.clone()
            .follow_events(format!("/v1/sessions/{theirs}/events"), TENANT_A),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in 1..=3 {
        let mut config = cluster.node(id).config.clone();
        config.tokens.retain(|t| t.role != "tenant:a");
        std::fs::write(
            &cluster.node(id).config_path,
            toml::to_string(&config).unwrap(),
        )
        .unwrap();
        cluster.signal(id, "-HUP");
    }
    let text = tokio::time::timeout(Duration::from_secs(15), stream)
        .await
        .expect("the stream of a revoked token ended")
        .unwrap();
    assert!(text.contains("event: revoked"), "{text}");
    assert!(text.contains("was revoked"), "{text}");
    let v = node
        .ok("DELETE", &format!("/v1/sessions/{theirs}"), ADMIN, None)
        .await;
    assert_eq!(v["closed"], json!(true), "{v}");

    phase("plain HTTP to the TLS port gets no HTTP answer");
    let plain = async {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        let ask = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let _ = tcp.write_all(ask.as_bytes()).await;
        let mut raw = Vec::new();
        let _ = tcp.read_to_end(&mut raw).await;
        raw
    };
    let raw = tokio::time::timeout(EXCHANGE_MAX, plain)
        .await
        .expect("the TLS port closes a plaintext connection");
    assert!(
        !String::from_utf8_lossy(&raw).starts_with("HTTP/"),
        "plaintext HTTP was answered on the TLS port: {:?}",
        String::from_utf8_lossy(&raw)
    );
    cluster.kill_all();
}

/// `/metrics` names every tenant: with tokens, a loopback scraper reads it without one
/// unless `metrics_loopback_open = false`, and then it needs an admin or read token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_may_require_a_token_from_loopback_too() {
    const READ: &str = "http-metrics-read-secret";
    let mut cluster =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-http-metrics-token")
            .unwrap()
            .security(ClientSecurity::new(None, Some(ADMIN.into())).unwrap());
    let tokens = token_entries(&[(ADMIN, "admin"), (READ, "read"), (TENANT_A, "tenant:a")]);
    let mut config = cluster.loopback_configs(1).unwrap().remove(0);
    config.tokens = tokens;
    config.metrics_loopback_open = false;
    let url = format!("http://{}/metrics", config.http_listen);
    cluster.add_and_start(vec![config]).unwrap();
    cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");
    let http = reqwest::Client::new();
    let get = |token: Option<&'static str>| {
        let mut request = http.get(&url);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    phase("from loopback: no token 401, a tenant's 403, read and admin 200");
    assert_eq!(get(None).await, 401);
    assert_eq!(get(Some(TENANT_A)).await, 403);
    assert_eq!(get(Some(READ)).await, 200);
    assert_eq!(get(Some(ADMIN)).await, 200);
}
