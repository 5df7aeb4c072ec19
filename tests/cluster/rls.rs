//! Envoy's rate-limit service on a real three-node cluster: a tonic client built from
//! Envoy's own types (`envoy-types`) calls `ShouldRateLimit` on a follower, against the
//! limits compiled from `docs/envoy-ratelimit.yaml` (envoyproxy/ratelimit's format).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint, Uri};
use weir::cli::limits_file::ratelimit_yaml as yaml;
use weir_client::Client;
use weir_core::machine::Reply;
use weir_launcher::{LocalCluster, loopback_addr};
use weir_proto::tls::{ClientSecurity, Connector, Stream};
use weir_server::security::certs::{DevCa, Validity};

use crate::harness::{phase, token_entries, write_certs};

/// The file every test here loads, as users run it with envoyproxy/ratelimit.
const RATELIMIT_YAML: &str = include_str!("../../docs/envoy-ratelimit.yaml");

/// Longest wait for an answer across a leader's loss (an election, then a forwarded take).
const FAILOVER_MAX: Duration = Duration::from_secs(20);

/// Starts three nodes, each with a gRPC port (`extra` applied to every config), and waits
/// for a leader: the cluster and its leader.
async fn start(tag: &str, each: impl Fn(&mut weir_server::config::Config)) -> (LocalCluster, u64) {
    start_with(
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), tag).unwrap(),
        each,
    )
    .await
}

async fn start_with(
    mut cluster: LocalCluster,
    each: impl Fn(&mut weir_server::config::Config),
) -> (LocalCluster, u64) {
    let mut configs = cluster.loopback_configs(3).unwrap();
    for c in &mut configs {
        c.grpc_listen = loopback_addr().unwrap();
        each(c);
    }
    cluster.add_and_start(configs).unwrap();
    let leader = cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");
    (cluster, leader)
}

/// Defines every limit of the ratelimit file through the log (the definitions the file
/// compiles to).
async fn apply_yaml(client: &Client) {
    apply_file(client, RATELIMIT_YAML).await;
}

/// Defines every limit of the ratelimit file `text` through the log.
async fn apply_file(client: &Client, text: &str) {
    let file = yaml::parse(text).unwrap();
    for definition in file.compile().unwrap() {
        let name = definition.name.clone();
        let reply = client.write(definition.into_command()).await.unwrap();
        assert_eq!(reply, Reply::Done, "define {name}");
    }
}

/// A descriptor of (key, value) entries.
fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: hits,
    }
}

struct Rls {
    client: RateLimitServiceClient<Channel>,
    token: Option<String>,
}

impl Rls {
    async fn plain(addr: &str) -> Rls {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Rls {
            client: RateLimitServiceClient::new(channel),
            token: None,
        }
    }

    async fn call(&mut self, r: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        let mut r = tonic::Request::new(r);
        r.set_timeout(FAILOVER_MAX);
        if let Some(t) = &self.token {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        self.client
            .should_rate_limit(r)
            .await
            .map(|a| a.into_inner())
    }

    /// Waits until the node answers with the file's limits: it matches on its own applied
    /// state, which has the definitions a heartbeat after the leader (a probe number
    /// charged meanwhile is never used again).
    async fn await_limits(&mut self) {
        let deadline = Instant::now() + FAILOVER_MAX;
        loop {
            let answer = self
                .ok(request(vec![descriptor(&[("to_number", "probe")])], 1))
                .await;
            if answer.statuses[0].current_limit.is_some() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the node never matched the file's limits"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn ok(&mut self, r: RateLimitRequest) -> RateLimitResponse {
        self.call(r).await.unwrap()
    }

    /// The one status of a one-descriptor request.
    async fn one(&mut self, entries: &[(&str, &str)], hits: u32) -> DescriptorStatus {
        let answer = self.ok(request(vec![descriptor(entries)], hits)).await;
        assert_eq!(answer.statuses.len(), 1);
        assert_eq!(answer.overall_code, answer.statuses[0].code);
        answer.statuses[0].clone()
    }
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// (code, requests_per_unit, unit, remaining) of a status with a limit.
fn seen(s: &DescriptorStatus) -> (i32, u32, i32, u32) {
    let l = s.current_limit.as_ref().expect("a current limit");
    (s.code, l.requests_per_unit, l.unit, s.limit_remaining)
}

const DAY: i32 = Unit::Day as i32;

/// The exposition line of the unmatched descriptors' count, up to its value.
const UNMATCHED: &str = "weir_rls_descriptors_total{kind=\"unmatched\"} ";

/// The value of the exposition line that starts with `prefix` (0 when there is none yet).
fn figure(text: &str, prefix: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map_or(0, |v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn should_rate_limit_decides_a_ratelimit_file_atomically_on_any_node_and_across_a_leader_kill()
 {
    let (mut cluster, leader) = start("weir-rls", |c| c.grpc_ratelimit_headers = true).await;
    let client = Client::new(cluster.servers());
    apply_yaml(&client).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let mut rls = Rls::plain(&cluster.node(follower).config.grpc_listen.clone()).await;
    rls.await_limits().await;
    let metrics_url = format!(
        "http://{}/metrics",
        cluster.node(follower).config.http_listen
    );
    let text = reqwest::get(&metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Probes answered before the node had applied the file counted as unmatched.
    let unmatched_before = figure(&text, UNMATCHED);

    phase("nested descriptor with a value, then a key alone: 3 a day per number");
    let marketing = |n| [("message_type", "marketing"), ("to_number", n)];
    for left in [2, 1, 0] {
        let s = rls.one(&marketing("555"), 0).await;
        assert_eq!(seen(&s), (OK, 3, DAY, left));
        // Until full again: (3 - left) tokens at 3 a day, the rate floored to whole
        // micro-tokens a second (34 µ/s, 2% under 3 a day).
        let reset = s.duration_until_reset.unwrap().seconds as u64;
        let token_s = 1_000_000 / 34;
        assert!(
            reset.abs_diff((3 - left as u64) * token_s) <= 60,
            "{reset} s, {left} left"
        );
    }
    assert_eq!(
        seen(&rls.one(&marketing("555"), 0).await),
        (OVER, 3, DAY, 0)
    );
    assert_eq!(seen(&rls.one(&marketing("556"), 0).await), (OK, 3, DAY, 2));

    phase("hits_addend: the request's, and a descriptor's overriding it");
    assert_eq!(
        seen(&rls.one(&[("to_number", "777")], 10).await),
        (OK, 100, DAY, 90)
    );
    let mut d = descriptor(&[("to_number", "777")]);
    d.hits_addend = Some(UInt64Value { value: 5 });
    let answer = rls.ok(request(vec![d], 10)).await;
    assert_eq!(seen(&answer.statuses[0]), (OK, 100, DAY, 85));

    phase("a request over one of two limits charges neither");
    let both = request(
        vec![
            descriptor(&[("to_number", "888")]),
            descriptor(&marketing("555")),
        ],
        1,
    );
    let answer = rls.ok(both).await;
    assert_eq!(answer.overall_code, OVER);
    assert_eq!(seen(&answer.statuses[0]), (OK, 100, DAY, 100));
    assert_eq!(seen(&answer.statuses[1]), (OVER, 3, DAY, 0));
    assert_eq!(
        seen(&rls.one(&[("to_number", "888")], 1).await),
        (OK, 100, DAY, 99)
    );

    phase("RateLimit-* headers name the tightest descriptor");
    let answer = rls
        .ok(request(
            vec![
                descriptor(&[("to_number", "999")]),
                descriptor(&marketing("557")),
            ],
            1,
        ))
        .await;
    let headers: Vec<(String, String)> = answer
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers[..2],
        [
            ("RateLimit-Limit".to_string(), "3".to_string()),
            ("RateLimit-Remaining".to_string(), "2".to_string()),
        ]
    );
    assert_eq!(headers[2].0, "RateLimit-Reset");
    let reset: u64 = headers[2].1.parse().unwrap();
    assert!((28_000..=30_000).contains(&reset), "{headers:?}");

    phase("shadow mode answers OK past its limit; unmatched and unlimited answer OK");
    for _ in 0..3 {
        let s = rls.one(&[("path", "/search")], 1).await;
        assert_eq!(
            (s.code, s.current_limit.unwrap().requests_per_unit),
            (OK, 1)
        );
    }
    for entries in [[("nothing", "matches")], [("remote_address", "127.0.0.1")]] {
        let s = rls.one(&entries, 1).await;
        assert_eq!((s.code, s.current_limit), (OK, None));
    }

    phase("replaces: the api_key rule drops the generic plan limit it replaces");
    let answer = rls
        .ok(request(
            vec![
                descriptor(&[("plan", "silver")]),
                descriptor(&[("api_key", "k")]),
            ],
            1,
        ))
        .await;
    assert_eq!(
        (answer.statuses[0].code, &answer.statuses[0].current_limit),
        (OK, &None)
    );
    assert_eq!(seen(&answer.statuses[1]), (OK, 5, Unit::Hour as i32, 4));
    let plan = rls.one(&[("plan", "silver")], 1).await;
    assert_eq!(seen(&plan), (OK, 60, Unit::Minute as i32, 59));

    phase("bad input is INVALID_ARGUMENT naming the field");
    let mut empty_domain = request(vec![descriptor(&[("to_number", "1")])], 1);
    empty_domain.domain.clear();
    let e = rls.call(empty_domain).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().starts_with("domain is 0 bytes"), "{e:?}");
    let e = rls
        .call(request(vec![descriptor(&[("to_number", "")])], 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message()
            .starts_with("descriptors[0].entries[0].value is 0 bytes"),
        "{e:?}"
    );
    let many = (0..17).map(|_| descriptor(&[("a", "b")])).collect();
    let e = rls.call(request(many, 1)).await.unwrap_err();
    assert!(e.message().contains("descriptors has 17 entries"), "{e:?}");

    phase("the unmatched and shadow figures are in /metrics");
    let text = reqwest::get(&metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(figure(&text, UNMATCHED), unmatched_before + 1, "{text}");
    assert!(
        text.contains("weir_rls_descriptors_total{kind=\"over_limit\"} 2"),
        "{text}"
    );
    let shadow = text
        .lines()
        .find(|l| {
            l.starts_with("weir_shadow_refusals{")
                && l.contains("tenant=\"edge\"")
                && l.contains("kind=\"Busy\"")
        })
        .unwrap_or_else(|| panic!("no shadow figure for edge:\n{text}"));
    assert!(shadow.ends_with(" 2"), "{shadow}");

    phase("the leader is killed: the follower answers once a new leader is elected");
    cluster.kill(leader);
    let deadline = Instant::now() + FAILOVER_MAX;
    let after = loop {
        match rls
            .call(request(vec![descriptor(&[("to_number", "999")])], 1))
            .await
        {
            Ok(a) => break a,
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
                assert!(
                    Instant::now() < deadline,
                    "no answer after the leader's loss: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // 100 a day, 1 taken before the kill, 1 now (and at most one more by a try whose
    // outcome was unknown).
    let (code, _, _, left) = seen(&after.statuses[0]);
    assert!(code == OK && (97..=98).contains(&left), "{after:?}");
}

/// A gRPC connector over Weir's TLS client (verified against the cluster CA).
#[derive(Clone)]
struct TlsConnect {
    connector: Connector,
    addr: String,
}

impl tower_service::Service<Uri> for TlsConnect {
    type Response = TokioIo<Stream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<Stream>, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect(&this.addr).await?;
            let stream = this.connector.connect(tcp, &this.addr).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn should_rate_limit_over_tls_authenticates_the_token_and_applies_its_role() {
    const ADMIN: &str = "rls-admin-secret";
    const EDGE: &str = "rls-edge-secret";
    const OTHER: &str = "rls-other-secret";
    let cluster = LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-rls-tls").unwrap();
    let certs = cluster.dir().join("certs");
    let ca = DevCa::new("cluster CA").unwrap();
    write_certs(
        &certs,
        &ca,
        &["node1", "node2", "node3"].map(|n| (n, Validity::Current)),
    );
    let ca_pem = certs.join("ca.pem");
    let security = ClientSecurity::new(Some(&ca_pem), Some(ADMIN.into())).unwrap();
    let cluster = cluster.security(security.clone());
    let tokens = token_entries(&[
        (ADMIN, "admin"),
        (EDGE, "tenant:edge"),
        (OTHER, "tenant:other"),
    ]);
    phase("three nodes with TLS and tokens on every port, the gRPC one included");
    let (cluster, leader) = start_with(cluster, |c| {
        c.tls = Some(crate::harness::tls_files(&certs, &format!("node{}", c.id)));
        c.tokens = tokens.clone();
    })
    .await;
    apply_yaml(&Client::with_security(cluster.servers(), security)).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let addr = cluster.node(follower).config.grpc_listen.clone();
    let connect = TlsConnect {
        connector: Connector::tls(weir_proto::tls::client_config(&ca_pem).unwrap()),
        addr: addr.clone(),
    };
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_with_connector(connect)
        .await
        .unwrap();
    let mut rls = Rls {
        client: RateLimitServiceClient::new(channel.clone()),
        token: None,
    };
    let ask = || request(vec![descriptor(&[("to_number", "1")])], 1);

    phase("no token: UNAUTHENTICATED; another tenant's token: PERMISSION_DENIED");
    let e = rls.call(ask()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    rls.token = Some("not-a-token".into());
    assert_eq!(
        rls.call(ask()).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    rls.token = Some(OTHER.into());
    let e = rls.call(ask()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("\"edge\""), "{e:?}");

    phase("a garbage body without a token is UNAUTHENTICATED, never decoded");
    for size in [3, 1 << 20] {
        let e = raw_call(&channel, vec![0xff; size], None)
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            tonic::Code::Unauthenticated,
            "{size} bytes: {e:?}"
        );
    }

    phase("another tenant's token with an oversized request: PERMISSION_DENIED, not invalid");
    let oversized = request((0..1_000).map(|_| descriptor(&[("a", "b")])).collect(), 1);
    let e = rls.call(oversized.clone()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");

    phase("the tenant's own token: a message above the bound is refused before decoding");
    let e = raw_call(&channel, vec![0xff; 1 << 20], Some(EDGE))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::OutOfRange, "{e:?}");
    assert!(e.message().contains("too large"), "{e:?}");
    rls.token = Some(EDGE.into());
    let e = rls.call(oversized).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    phase("a silent connection is closed within the port's first-request timeout");
    let silent = tokio::spawn(silent_until_closed(
        Connector::tls(weir_proto::tls::client_config(&ca_pem).unwrap()),
        addr.clone(),
    ));

    phase("the tenant's own token decides, through the follower");
    rls.token = Some(EDGE.into());
    rls.await_limits().await;
    assert_eq!(
        seen(&rls.one(&[("to_number", "1")], 1).await),
        (OK, 100, DAY, 99)
    );

    phase("and through the leader, which writes in process with the same checks");
    let leader_addr = cluster.node(leader).config.grpc_listen.clone();
    let connect = TlsConnect {
        connector: Connector::tls(weir_proto::tls::client_config(&ca_pem).unwrap()),
        addr: leader_addr.clone(),
    };
    let leader_channel = Endpoint::from_shared(format!("http://{leader_addr}"))
        .unwrap()
        .connect_with_connector(connect)
        .await
        .unwrap();
    let mut on_leader = Rls {
        client: RateLimitServiceClient::new(leader_channel),
        token: Some(EDGE.into()),
    };
    assert_eq!(
        seen(&on_leader.one(&[("to_number", "1")], 1).await),
        (OK, 100, DAY, 98)
    );
    on_leader.token = Some(OTHER.into());
    let e = on_leader.call(ask()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");

    phase("plaintext to the TLS port gets no answer");
    let plain = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    let refused = match plain.connect().await {
        Err(_) => true,
        Ok(channel) => {
            let mut c = RateLimitServiceClient::new(channel);
            c.should_rate_limit(ask()).await.is_err()
        }
    };
    assert!(refused);

    let waited = silent.await.unwrap();
    let bound = weir_http::bounds::RLS_FIRST_REQUEST_TIMEOUT + Duration::from_secs(5);
    assert!(waited < bound, "closed after {waited:?}");
}

/// Connects over TLS to `addr`, sends nothing, and reads until the node closes the
/// connection: how long that took (at most a minute, then a failure).
async fn silent_until_closed(connector: Connector, addr: String) -> Duration {
    use tokio::io::AsyncReadExt;
    let started = Instant::now();
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let mut stream = connector.connect(tcp, &addr).await.unwrap();
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(60), async {
        // The server's HTTP/2 settings come first; then nothing until it closes.
        while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    assert!(closed.is_ok(), "a silent connection was held for a minute");
    started.elapsed()
}

/// Calls `ShouldRateLimit` with `body` as its message, raw bytes (not a protobuf
/// encoding), with `token` as its bearer token.
async fn raw_call(
    channel: &Channel,
    body: Vec<u8>,
    token: Option<&str>,
) -> Result<Vec<u8>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut r = tonic::Request::new(body);
    r.set_timeout(Duration::from_secs(10));
    if let Some(t) = token {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    grpc.unary(r, path, RawCodec).await.map(|a| a.into_inner())
}

/// A gRPC message as its bytes, both ways.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let bytes = bytes::Buf::chunk(src).to_vec();
        bytes::Buf::advance(src, bytes.len());
        Ok(Some(bytes))
    }
}

/// The conformance cases: one file, every case a ratelimit configuration and requests with
/// their expected answers (the file's header says each field).
const CONFORMANCE: &str = include_str!("../fixtures/envoy_conformance.yaml");

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Cases {
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    behaviour: String,
    config: String,
    #[serde(default)]
    keys_max: Vec<String>,
    #[serde(default)]
    refused: Option<String>,
    #[serde(default)]
    requests: Vec<Ask>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Ask {
    descriptors: Vec<AskDescriptor>,
    #[serde(default)]
    hits: u32,
    #[serde(default = "once")]
    times: usize,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    statuses: Vec<Expected>,
}

fn once() -> usize {
    1
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AskDescriptor {
    entries: Vec<(String, String)>,
    #[serde(default)]
    hits: Option<u64>,
    #[serde(default)]
    limit: Option<(u32, String)>,
    #[serde(default)]
    negative: bool,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    code: String,
    /// `[requests_per_unit, UNIT]`, or `none`; absent: not checked.
    #[serde(default)]
    limit: Option<serde_json::Value>,
    #[serde(default)]
    remaining: Option<u32>,
    /// Seconds, within [`RESET_SLACK_S`].
    #[serde(default)]
    reset: Option<f64>,
}

/// How far an answer's `duration_until_reset` may be from a case's: the time the case's
/// requests take, at most.
const RESET_SLACK_S: f64 = 1.5;

impl Ask {
    /// The request of repetition `i`: `{i}` in a value is `i`.
    fn request(&self, domain: &str, i: usize) -> RateLimitRequest {
        use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
        use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
        let descriptors = self
            .descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: k.clone(),
                        value: v.replace("{i}", &i.to_string()),
                    })
                    .collect(),
                hits_addend: d.hits.map(|value| UInt64Value { value }),
                limit: d.limit.as_ref().map(|(requests, unit)| RateLimitOverride {
                    requests_per_unit: *requests,
                    unit: RateLimitUnit::from_str_name(unit).expect("a unit") as i32,
                }),
                is_negative_hits: d.negative,
            })
            .collect();
        RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: self.hits,
        }
    }

    /// Checks `answer` (of repetition `i` of case `case`) against the expectation.
    fn check(&self, case: &str, i: usize, answer: Result<RateLimitResponse, tonic::Status>) {
        let at = format!("case {case}, request repetition {i}");
        if let Some(error) = &self.error {
            let e = answer.expect_err(&at);
            assert_eq!(format!("{:?}", e.code()), camel(error), "{at}: {e:?}");
            return;
        }
        let answer = answer.unwrap_or_else(|e| panic!("{at}: {e:?}"));
        let code_name = |c: i32| Code::try_from(c).unwrap().as_str_name().to_owned();
        if let Some(code) = &self.code {
            assert_eq!(&code_name(answer.overall_code), code, "{at}: {answer:?}");
        }
        assert!(self.statuses.is_empty() || answer.statuses.len() == self.statuses.len());
        for (n, (s, want)) in answer.statuses.iter().zip(&self.statuses).enumerate() {
            let at = format!("{at}, status {n}: {s:?}");
            assert_eq!(code_name(s.code), want.code, "{at}");
            match &want.limit {
                None => {}
                Some(serde_json::Value::String(none)) if none == "none" => {
                    assert_eq!(s.current_limit, None, "{at}")
                }
                Some(l) => {
                    let (requests, unit): (u32, String) =
                        serde_json::from_value(l.clone()).unwrap();
                    let got = s.current_limit.as_ref().expect(&at);
                    let unit_name = Unit::try_from(got.unit).unwrap().as_str_name();
                    assert_eq!(
                        (got.requests_per_unit, unit_name),
                        (requests, unit.as_str()),
                        "{at}"
                    );
                }
            }
            if let Some(remaining) = want.remaining {
                assert_eq!(s.limit_remaining, remaining, "{at}");
            }
            if let Some(reset) = want.reset {
                let d = s.duration_until_reset.as_ref().expect(&at);
                let got = d.seconds as f64 + d.nanos as f64 / 1e9;
                assert!(
                    (got - reset).abs() <= RESET_SLACK_S,
                    "{at}: reset {got} s, not {reset}"
                );
            }
        }
    }
}

/// `INVALID_ARGUMENT` as tonic's `Debug` names the code: `InvalidArgument`.
fn camel(upper: &str) -> String {
    upper
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            let first = c.next().map(|f| f.to_string()).unwrap_or_default();
            first + &c.as_str().to_ascii_lowercase()
        })
        .collect()
}

/// Runs the `weir` CLI with `args` against `cluster`: (exit code, stdout, stderr).
fn cli(cluster: &LocalCluster, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env("WEIR_SERVERS", cluster.servers().join(","))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Requests of a case sent at once when they repeat with `{i}` (distinct values).
const CONCURRENT_ASKS: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_conformance_cases_answer_as_ratelimit_documents() {
    let cases: Cases = serde_norway::from_str(CONFORMANCE).unwrap();
    let (cluster, leader) = start("weir-rls-conformance", |_| {}).await;
    let client = Client::new(cluster.servers());
    let node = cluster.node(leader).config.clone();
    let mut rls = Rls::plain(&node.grpc_listen).await;
    for case in &cases.cases {
        phase(&format!("{}: {}", case.name, case.behaviour));
        let mut file = yaml::parse(&case.config).unwrap();
        file.domain = case.name.clone();
        let keys_max = weir::cli::limits_file::keys_max_flags(&case.keys_max).unwrap();
        let compiled = file.compile_with(&keys_max);
        if let Some(refused) = &case.refused {
            let e = compiled.expect_err(&case.name);
            assert!(e.contains(refused.as_str()), "{}: {e}", case.name);
            continue;
        }
        let definitions = compiled.unwrap();
        let applied = client.apply_limits(&case.name, definitions, true, false);
        applied.await.unwrap().unwrap();
        for ask in &case.requests {
            let repeated = ask
                .descriptors
                .iter()
                .any(|d| d.entries.iter().any(|e| e.1.contains("{i}")));
            let width = if repeated { CONCURRENT_ASKS } else { 1 };
            let mut i = 0;
            while i < ask.times {
                let batch: Vec<usize> = (i..ask.times.min(i + width)).collect();
                let calls = batch.iter().map(|&n| {
                    let mut rls = Rls {
                        client: rls.client.clone(),
                        token: None,
                    };
                    let r = ask.request(&case.name, n);
                    async move { (n, rls.call(r).await) }
                });
                for (n, answer) in futures_util::future::join_all(calls).await {
                    ask.check(&case.name, n, answer);
                }
                i += width;
            }
        }
    }

    phase("names as the file wrote them: reads find the escaped limit");
    let written = client
        .limit_status("wildcard", "envoy:path=/v1/*")
        .await
        .unwrap()
        .expect("the wildcard limit, named as written");
    assert_eq!(written.name, "envoy:path=%2Fv1%2F*");
    assert_eq!(
        written.keys_max,
        Some(weir_core::bounds::RLS_KEYS_MAX_DEFAULT)
    );

    let url = format!(
        "http://{}/v1/tenants/wildcard/limits/envoy:path=%2Fv1%2F*",
        node.http_listen
    );
    let shown: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    assert_eq!(shown["name"], "envoy:path=%2Fv1%2F*", "{shown}");
    let (code, out, err) = cli(
        &cluster,
        &["limit", "show", "envoy:path=/v1/*", "--tenant", "wildcard"],
    );
    assert_eq!(code, 0, "{out}{err}");

    let (code, out, err) = cli(
        &cluster,
        &[
            "limit",
            "remove",
            "envoy:path=/v1/health",
            "--tenant",
            "wildcard",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let gone = client.limit_status("wildcard", "envoy:path=%2Fv1%2Fhealth");
    assert_eq!(gone.await.unwrap(), None, "removed under its escaped name");

    phase("limits apply --keys-max sets a node's bound, and the next apply keeps it");
    let file = cluster.dir().join("gateway.yaml");
    std::fs::write(
        &file,
        "domain: gw\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 9}\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let keys_max = || async {
        let l = client.limit_status("gw", "envoy:api_key").await.unwrap();
        l.unwrap().keys_max
    };
    let (code, out, err) = cli(
        &cluster,
        &["limits", "apply", file, "--keys-max", "envoy:api_key=7"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(keys_max().await, Some(7));
    let (code, out, err) = cli(&cluster, &["limits", "apply", file]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        keys_max().await,
        Some(7),
        "kept by an apply without the flag"
    );
    let (code, out, err) = cli(&cluster, &["limits", "apply", file, "--keys-max", "250000"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(keys_max().await, Some(250_000));

    phase("a key refused for want of room is counted apart");
    let text = reqwest::get(format!("http://{}/metrics", node.http_listen))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        figure(&text, "weir_rls_descriptors_total{kind=\"keys_full\"} "),
        1,
        "{text}"
    );
    let _ = &mut rls;
}

/// The node-lease test's limits: hot descriptors at 1,000 and 20 a second, and at 1,000
/// and 20 a day.
const LEASE_YAML: &str = "domain: edge
descriptors:
  - key: hot
    value: fast
    rate_limit:
      unit: second
      requests_per_unit: 1000
  - key: hot
    value: slow
    rate_limit:
      unit: second
      requests_per_unit: 20
  - key: hot
    value: day
    rate_limit:
      unit: day
      requests_per_unit: 1000
  - key: hot
    value: scarce
    rate_limit:
      unit: day
      requests_per_unit: 20
";

/// More asks than make a descriptor hot on a node (`weir_http::rls`, node leases).
const HOT: usize = 17;

/// `weir_rls_local_decisions_total` of the node whose HTTP port is `http`.
async fn local_decisions(http: &str) -> u64 {
    node_figure(http, "weir_rls_local_decisions_total ").await
}

/// The figure of `/metrics` line `prefix` of the node whose HTTP port is `http`.
async fn node_figure(http: &str, prefix: &str) -> u64 {
    let text = reqwest::get(format!("http://{http}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    figure(&text, prefix)
}

/// The status of one call of `hot=value` with a timeout of `within`: `None` when it failed.
async fn hot(rls: &mut Rls, value: &str, within: Duration) -> Option<DescriptorStatus> {
    let mut r = tonic::Request::new(request(vec![descriptor(&[("hot", value)])], 1));
    r.set_timeout(within);
    let answer = tokio::time::timeout(within, rls.client.should_rate_limit(r)).await;
    match answer {
        Ok(Ok(a)) => Some(a.into_inner().statuses[0].clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_leases_decide_hot_descriptors_locally_within_the_rate_and_stop_at_the_belief_deadline()
 {
    // Node 3 decides every request on the cluster, as its config says.
    const OFF: u64 = 3;
    let (mut cluster, leader) = start("weir-rls-leases", |c| {
        c.grpc_local_leases = c.id != OFF;
    })
    .await;
    let client = Client::new(cluster.servers());
    apply_file(&client, LEASE_YAML).await;
    let follower = (1..=3).find(|id| *id != leader && *id != OFF).unwrap();
    let node = |id| cluster.node(id).config.clone();
    let http = node(follower).http_listen;
    let mut rls = Rls::plain(&node(follower).grpc_listen).await;

    phase("all parts from their leases or none: a request short on one charges no other");
    let day = [("hot", "day")];
    let scarce = [("hot", "scarce")];
    let deadline = Instant::now() + FAILOVER_MAX;
    let mut asked = 0;
    // Both parts hot: each gets a lease; the scarce one's 20 tokens a day run out.
    while asked < 30 || node_figure(&http, "weir_rls_leases ").await < 2 {
        assert_eq!(rls.one(&day, 1).await.code, OK);
        rls.one(&scarce, 1).await;
        asked += 1;
        assert!(Instant::now() < deadline, "no leases after {asked} asks");
    }
    let local_before = local_decisions(&http).await;
    let before = rls.one(&day, 1).await;
    assert_eq!(local_decisions(&http).await, local_before + 1, "{before:?}");
    for _ in 0..5 {
        let answer = rls
            .ok(request(vec![descriptor(&day), descriptor(&scarce)], 1))
            .await;
        assert_eq!(answer.overall_code, OVER, "{answer:?}");
        assert_eq!(answer.statuses[1].code, OVER, "{answer:?}");
    }
    let after = rls.one(&day, 1).await;
    assert_eq!(local_decisions(&http).await, local_before + 2, "{after:?}");
    // The day's local bucket lost only the two single takes (its refill, 0.009 a second,
    // adds no whole token meanwhile).
    assert_eq!(
        after.limit_remaining + 1,
        before.limit_remaining,
        "{before:?} then {after:?}"
    );
    // Negative hits on a leased part go back to its local bucket, reported as it is then
    // (two: the two single takes above left at least that much room below its size, which
    // a return never passes).
    let mut give = descriptor(&day);
    give.is_negative_hits = true;
    let answer = rls.ok(request(vec![give], 2)).await;
    assert_eq!(
        (answer.statuses[0].code, answer.statuses[0].limit_remaining),
        (OK, after.limit_remaining + 2),
        "{answer:?}"
    );
    let again = rls.one(&day, 1).await;
    assert_eq!(
        again.limit_remaining,
        after.limit_remaining + 1,
        "{again:?}"
    );

    phase("a hot descriptor gets a lease on the follower, which then answers it locally");
    let deadline = Instant::now() + FAILOVER_MAX;
    let base = local_decisions(&http).await;
    while local_decisions(&http).await == base {
        let s = hot(&mut rls, "fast", FAILOVER_MAX)
            .await
            .expect("an answer");
        assert_eq!(s.code, OK, "{s:?}");
        assert!(Instant::now() < deadline, "no lease was ever used");
    }
    let entries = |status: Option<weir_proto::protocol::NodeStatus>| {
        status.expect("the leader's status").last_log_index
    };
    let (local_before, log_before) = (
        local_decisions(&http).await,
        entries(cluster.status(leader).await),
    );
    const CALLS: u64 = 300;
    for _ in 0..CALLS {
        let s = hot(&mut rls, "fast", FAILOVER_MAX)
            .await
            .expect("an answer");
        // The local bucket's figures: at most the lease's cap, three quarters of the burst.
        assert_eq!(s.code, OK, "{s:?}");
        assert!(s.limit_remaining <= 750, "{s:?}");
        assert!(s.duration_until_reset.is_some(), "{s:?}");
    }
    let local = local_decisions(&http).await - local_before;
    let written = entries(cluster.status(leader).await) - log_before;
    eprintln!("{CALLS} calls: {local} decided locally, {written} log entries");
    assert!(local >= CALLS - 5, "{local} of {CALLS} decided locally");
    assert!(written < CALLS / 10, "{written} entries for {CALLS} calls");

    phase("G1 in spend time: 20 a second on two nodes, OK answers within burst + rate x window");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for id in [follower, follower, follower, leader, leader] {
        let addr = node(id).grpc_listen;
        tasks.push(tokio::spawn(async move {
            let mut rls = Rls::plain(&addr).await;
            let mut ok = 0u64;
            let mut last = started;
            while started.elapsed() < Duration::from_millis(2_500) {
                let s = hot(&mut rls, "slow", FAILOVER_MAX)
                    .await
                    .expect("an answer");
                if s.code == OK {
                    ok += 1;
                    last = Instant::now();
                }
            }
            (ok, last)
        }));
    }
    let (mut ok, mut last) = (0, started);
    for t in tasks {
        let (n, at) = t.await.unwrap();
        ok += n;
        last = last.max(at);
    }
    let window = last.duration_since(started).as_secs_f64();
    let bound = 20.0 + 20.0 * window;
    eprintln!("{ok} OK in {window:.3} s (bound {bound:.1})");
    assert!(ok as f64 <= bound + 1.0, "{ok} OK in {window:.3} s");
    assert!(ok >= 20, "{ok} OK: the limit's burst was never granted");

    phase("a node with grpc_local_leases = false asks the cluster for every request");
    let off_http = node(OFF).http_listen;
    let mut off = Rls::plain(&node(OFF).grpc_listen).await;
    for _ in 0..3 * HOT {
        let s = hot(&mut off, "fast", FAILOVER_MAX)
            .await
            .expect("an answer");
        assert_eq!(s.code, OK, "{s:?}");
    }
    assert_eq!(local_decisions(&off_http).await, 0);
    assert_eq!(node_figure(&off_http, "weir_rls_leases ").await, 0);

    phase("cut off from the others, the follower answers locally until its belief deadline");
    for _ in 0..50 {
        hot(&mut rls, "fast", FAILOVER_MAX)
            .await
            .expect("an answer");
    }
    let others: Vec<u64> = (1..=3).filter(|id| *id != follower).collect();
    for &id in &others {
        cluster.pause(id);
    }
    let paused = Instant::now();
    let (mut ok_after, mut last_ok) = (0u64, Duration::ZERO);
    // The lease session's TTL is 5 s: its belief deadline is at most 4.5 s away.
    while paused.elapsed() < Duration::from_secs(8) {
        let s = hot(&mut rls, "fast", Duration::from_millis(300)).await;
        if s.is_some_and(|s| s.code == OK) {
            ok_after += 1;
            last_ok = paused.elapsed();
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for &id in &others {
        cluster.resume(id);
    }
    eprintln!("{ok_after} OK after the cut, the last {last_ok:?} after it");
    assert!(ok_after >= 10, "{ok_after} OK without the cluster");
    assert!(
        last_ok <= Duration::from_millis(5_000),
        "answered OK {last_ok:?} after the cut, past the belief deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn should_rate_limit_decides_a_domain_placed_in_another_group_on_every_node() {
    let (cluster, _) = start("weir-rls-groups", |c| c.groups = 2).await;
    let client = Client::new(cluster.servers());
    phase("the domain's tenant placed in group 2, the file's limits defined there");
    assert_eq!(client.place_tenant("edge", Some(2)).await.unwrap(), 2);
    apply_yaml(&client).await;
    phase("every node matches in group 2's state and takes from its one bucket");
    let mut left = 100;
    for id in 1..=3 {
        let mut rls = Rls::plain(&cluster.node(id).config.grpc_listen.clone()).await;
        rls.await_limits().await;
        left -= 10;
        assert_eq!(
            seen(&rls.one(&[("to_number", "777")], 10).await),
            (OK, 100, DAY, left),
            "node {id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_leases_are_held_in_each_tenants_group_by_one_caller() {
    let (cluster, leader) = start("weir-rls-group-leases", |c| c.groups = 2).await;
    let client = Client::new(cluster.servers());
    phase("domain edge placed in group 2, domain near in group 1, the same limits in each");
    assert_eq!(client.place_tenant("edge", Some(2)).await.unwrap(), 2);
    assert_eq!(client.place_tenant("near", Some(1)).await.unwrap(), 1);
    let near_yaml = LEASE_YAML.replace("domain: edge", "domain: near");
    for text in [LEASE_YAML, near_yaml.as_str()] {
        apply_file(&client, text).await;
    }
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let node = cluster.node(follower).config.clone();
    let mut rls = Rls::plain(&node.grpc_listen).await;

    phase("one caller's hot descriptors of both domains: a lease in each group");
    let ask = |domain: &str| RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![descriptor(&[("hot", "day")])],
        hits_addend: 1,
    };
    let deadline = Instant::now() + FAILOVER_MAX;
    let mut asked = 0;
    while asked < HOT || node_figure(&node.http_listen, "weir_rls_leases ").await < 2 {
        for domain in ["edge", "near"] {
            let answer = rls.ok(ask(domain)).await;
            assert_eq!(answer.overall_code, OK, "{domain}: {answer:?}");
        }
        asked += 1;
        assert!(
            Instant::now() < deadline,
            "not a lease in each group after {asked} asks"
        );
    }
    let before = local_decisions(&node.http_listen).await;
    for domain in ["edge", "near"] {
        assert_eq!(rls.ok(ask(domain)).await.overall_code, OK);
    }
    assert_eq!(
        local_decisions(&node.http_listen).await,
        before + 2,
        "each domain decided from its lease"
    );
}
