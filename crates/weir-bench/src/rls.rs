//! `--workload rls`: the take of `rate-take` as Envoy asks for it, over gRPC
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! Every request has the tenant as its domain and one descriptor, `(bench, take)`, whose
//! limit (`envoy:bench=take`, the name a ratelimit file's node `key: bench, value: take`
//! compiles to) is a rate no run reaches, as `rate-take`'s: each answer must be OK and name
//! the limit (a descriptor no limit matches also answers OK, uncharged, so that counts as
//! an error here). The client is tonic's, with Envoy's own message types (`envoy-types`),
//! over one HTTP/2 connection that `--clients-per-connection` clients share and call
//! directly ([`Direct`]), as Envoy's workers call the service: a request goes from its
//! caller to the connection, not through tonic's `Channel`, whose queue hands every request
//! to a task of its own (a wake-up and a hop a request, which cost the bench's client
//! about as much CPU as the node spent answering). The bench's Redis client is as direct.
//!
//! With `--rls-keys N` every request names the next of N distinct API keys, in turn across
//! the clients, as descriptor `(api_key, k<n>)` on the keyed limit `envoy:api_key` (100 a
//! minute per key, `keys_max` N, what a ratelimit file's `key: api_key` node compiles to):
//! a gateway's per-key rule seeing N keys in every round. An answer must be OK with a reset
//! time: one whose key found no room (answered OK with nothing remaining and no reset)
//! counts as an error, so a run without errors ran in steady state within the keys bound.
//! The report's `keys` says how many distinct keys a minute that was, how often each key
//! was asked, the most live keys the rule held (sampled on the leader every 250 ms) and
//! the answers that found no room.
//!
//! With `--spawn` the run prints the log entries it wrote per 1,000 takes (the leader's
//! log over the measured window): each node decides the descriptors it is asked often from
//! token leases it holds (`weir_http::rls`, node leases), so a hot descriptor costs a few
//! entries a second, not one per take.
//!
//! With `--spawn` the clients call the leader's gRPC port (the nodes of a spawned cluster
//! each have one); against given `--servers`, the gRPC addresses in `--grpc`, the
//! connections spread over them in turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::task::JoinHandle;
use tonic::codegen::http;

use super::args::BenchArgs;
use super::cpu::CpuClock;
use super::load::{TENANT, node_pids};
use super::report::{KeysReport, LoadReport, Recorder, histogram, measured_window};
use crate::output::{EXIT_OK, Exit, Output};
use weir_client::Client;
use weir_core::machine::{Definition, Reply};
use weir_core::rls::path::{Segment, limit_name};
use weir_launcher::{LocalCluster, leader_among_with};
use weir_proto::tls::ClientSecurity;

/// The descriptor of every request: its one entry's key and value.
const KEY: &str = "bench";
const VALUE: &str = "take";

/// With `--rls-keys`: the descriptor's key, and each key's rate (per minute).
const KEYED_KEY: &str = "api_key";
const KEYED_PER_MINUTE: u64 = 100;

/// What each request asks: one descriptor, or the next of `keys` distinct API keys.
#[derive(Clone)]
struct Asks {
    keys: u32,
    next: Arc<AtomicU64>,
    /// Answers that found no room for their key.
    keys_full: Arc<AtomicU64>,
}

impl Asks {
    /// The next request: one hit of the bench's descriptor, or of the next key.
    fn request(&self) -> RateLimitRequest {
        let (key, value) = if self.keys == 0 {
            (KEY.to_owned(), VALUE.to_owned())
        } else {
            let n = self.next.fetch_add(1, Ordering::Relaxed) % u64::from(self.keys);
            (KEYED_KEY.to_owned(), format!("k{n}"))
        };
        RateLimitRequest {
            domain: TENANT.into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry { key, value }],
                ..Default::default()
            }],
            hits_addend: 1,
        }
    }
}

/// Longest wait for an answer, and for the node asked to match the limit at the start.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// The channel of bench clients to one node's gRPC port.
type Rls = RateLimitServiceClient<Direct>;

/// Runs `--workload rls` and prints its report.
pub async fn run(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    spawned: Option<&LocalCluster>,
    out: &Output,
) -> Result<Exit, String> {
    let report = measure(args, servers, security, spawned).await?;
    report.print(out);
    Ok(EXIT_OK)
}

/// Runs `--workload rls` against `servers` (the client ports, for the definition) and
/// returns its report; `spawned` is the cluster whose leader the clients call.
pub async fn measure(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    spawned: Option<&LocalCluster>,
) -> Result<LoadReport, String> {
    let admin = Client::with_security(servers.to_vec(), security.clone());
    if args.rls_keys == 0 {
        let limit = limit_name(&[Segment::of_node(KEY, Some(VALUE))]);
        admin
            .define_limit(TENANT, &limit, 0, 1e9, Some(1_000_000_000))
            .await
            .map_err(|e| format!("define {limit}: {e}"))?;
    } else {
        let limit = limit_name(&[Segment::of_node(KEYED_KEY, None)]);
        let definition = Definition {
            tenant: TENANT.into(),
            name: limit.clone(),
            concurrent: 0,
            per_second: KEYED_PER_MINUTE as f64 / 60.0,
            burst: Some(KEYED_PER_MINUTE),
            keyed: true,
            keys_max: Some(args.rls_keys),
            shadow: false,
        };
        match admin.write(definition.into_command()).await {
            Ok(Reply::Done) => {}
            other => return Err(format!("define {limit}: {other:?}")),
        }
    }
    let targets = targets(args, servers, security, spawned).await?;
    let recorder = Arc::new(Recorder::new());
    let asks = Asks {
        keys: args.rls_keys,
        next: Arc::new(AtomicU64::new(0)),
        keys_full: Arc::new(AtomicU64::new(0)),
    };
    let clients = start_clients(args, &targets, &recorder, &asks).await?;
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    let cpu = spawned.and_then(|c| CpuClock::start(&node_pids(c)));
    let sampler = (args.rls_keys > 0).then(|| tokio::spawn(live_keys_max(admin, recorder.clone())));
    let log_before = leader_log(spawned, servers, security).await;
    let elapsed = measured_window(args, &recorder, "rls").await;
    let cpu = cpu.and_then(|c| c.stop(recorder.ops.load(Ordering::Relaxed)));
    if let (Some(before), Some(after)) = (log_before, leader_log(spawned, servers, security).await)
    {
        let ops = recorder.ops.load(Ordering::Relaxed).max(1);
        let entries = after.saturating_sub(before);
        eprintln!(
            "[bench] rls: {entries} log entries over {ops} takes, {:.1} per 1,000 (the nodes \
             decide hot descriptors from their token leases unless `grpc_local_leases = false`)",
            entries as f64 * 1000.0 / ops as f64
        );
    }
    for c in clients {
        let _ = c.await;
    }
    // Nothing to verify: a take of a limit that never runs short holds nothing to lose.
    let mut report = LoadReport::new(args, &recorder, elapsed, vec![], vec![], true);
    report.cpu = cpu;
    if let Some(sampler) = sampler {
        let live_max = sampler.await.unwrap_or(0);
        let per_minute = report.ops as f64 * 60.0 / elapsed.as_secs_f64().max(1e-9);
        report.keys = Some(KeysReport {
            keys: args.rls_keys,
            keys_max: args.rls_keys,
            distinct_per_minute: (per_minute as u64).min(u64::from(args.rls_keys)),
            rounds: report.ops as f64 / f64::from(args.rls_keys),
            live_max,
            keys_full: asks.keys_full.load(Ordering::Relaxed),
        });
    }
    Ok(report)
}

/// The most live keys the keyed rule holds, sampled every [`LIVE_SAMPLE`] until the
/// recorder stops (each sample a linearizable read of the leader's state).
async fn live_keys_max(admin: Client, recorder: Arc<Recorder>) -> u64 {
    let limit = limit_name(&[Segment::of_node(KEYED_KEY, None)]);
    let mut most = 0;
    while !recorder.stop.load(Ordering::Relaxed) {
        if let Ok(Some(status)) = admin.limit_status(TENANT, &limit).await {
            most = most.max(status.live_keys);
        }
        tokio::time::sleep(LIVE_SAMPLE).await;
    }
    most
}

/// The spawned cluster leader's last log index (with `--spawn`; `None` otherwise): the
/// entries a run wrote are its difference over the run.
async fn leader_log(
    spawned: Option<&LocalCluster>,
    servers: &[String],
    security: &ClientSecurity,
) -> Option<u64> {
    let cluster = spawned?;
    let leader = leader_among_with(servers, ANSWER_WAIT, security).await?;
    Some(cluster.status(leader).await?.last_log_index)
}

/// How often a run of `--rls-keys` reads its rule's live keys.
const LIVE_SAMPLE: Duration = Duration::from_millis(250);

/// The gRPC addresses to call: the spawned leader's, or `--grpc`.
async fn targets(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    spawned: Option<&LocalCluster>,
) -> Result<Vec<String>, String> {
    let Some(cluster) = spawned else {
        return Ok(args.grpc.clone());
    };
    let leader = leader_among_with(servers, ANSWER_WAIT, security)
        .await
        .ok_or("no leader to call over gRPC")?;
    Ok(vec![cluster.node(leader).config.grpc_listen.clone()])
}

/// Connects (`--clients-per-connection` clients to a channel, the channels over `targets`
/// in turn), waits until each node matches the limit, and starts the clients.
async fn start_clients(
    args: &BenchArgs,
    targets: &[String],
    recorder: &Arc<Recorder>,
    asks: &Asks,
) -> Result<Vec<JoinHandle<()>>, String> {
    let mut channels: Vec<Rls> = vec![];
    let mut clients = vec![];
    for n in 0..args.clients {
        if n % args.clients_per_connection == 0 {
            let target = &targets[channels.len() % targets.len()];
            let mut rls = connect(target).await?;
            if channels.len() < targets.len() {
                matched(&mut rls, target, asks).await?;
            }
            channels.push(rls);
        }
        let rls = channels.last().expect("connected above").clone();
        clients.push(tokio::spawn(client(rls, recorder.clone(), asks.clone())));
    }
    Ok(clients)
}

async fn connect(target: &str) -> Result<Rls, String> {
    let tcp = tokio::time::timeout(ANSWER_WAIT, tokio::net::TcpStream::connect(target))
        .await
        .map_err(|_| format!("gRPC {target}: no connection within {ANSWER_WAIT:?}"))?
        .map_err(|e| format!("gRPC {target}: {e}"))?;
    tcp.set_nodelay(true)
        .map_err(|e| format!("gRPC {target}: {e}"))?;
    let (send, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .map_err(|e| format!("gRPC {target}: {e}"))?;
    // Ends when the connection closes (every sender dropped, or the node gone).
    tokio::spawn(connection);
    let authority = target.parse().map_err(|e| format!("gRPC {target}: {e}"))?;
    Ok(RateLimitServiceClient::new(Direct { send, authority }))
}

/// A gRPC channel of one HTTP/2 connection, its requests sent on it by their callers
/// (module doc). Clones share the connection.
#[derive(Clone)]
pub struct Direct {
    send: hyper::client::conn::http2::SendRequest<tonic::body::Body>,
    authority: http::uri::Authority,
}

impl tower_service::Service<http::Request<tonic::body::Body>> for Direct {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, hyper::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), hyper::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        // tonic's generated client names the path only; HTTP/2 wants the scheme and
        // authority too (tonic's `Channel` adds them the same way).
        let mut parts = request.uri().clone().into_parts();
        parts.scheme = Some(http::uri::Scheme::HTTP);
        parts.authority = Some(self.authority.clone());
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
        Box::pin(self.send.send_request(request))
    }
}

/// The error of an answer whose key found no room in its rule's `keys_max`.
const NO_ROOM: &str = "no room for the key";

/// A take granted: the answer is OK and its one status names the limit.
fn granted(
    answer: Result<tonic::Response<RateLimitResponse>, tonic::Status>,
) -> Result<(), String> {
    let answer = answer.map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
    let answer = answer.into_inner();
    match answer.statuses.first() {
        Some(s) if s.current_limit.is_none() => Err("no limit matched the descriptor".into()),
        // OK with no reset: a key that found no room in its limit's keys_max.
        Some(s) if s.duration_until_reset.is_none() => Err(NO_ROOM.into()),
        Some(_) if answer.overall_code == Code::Ok as i32 => Ok(()),
        Some(_) => Err(format!("overall_code {}", answer.overall_code)),
        None => Err("an answer without statuses".into()),
    }
}

/// Waits (bounded) until the node at `target` matches the limit: it matches on its own
/// applied state, which has the definition a heartbeat after the leader.
async fn matched(rls: &mut Rls, target: &str, asks: &Asks) -> Result<(), String> {
    let deadline = Instant::now() + ANSWER_WAIT;
    loop {
        let answer = tokio::time::timeout(ANSWER_WAIT, rls.should_rate_limit(asks.request()));
        match answer
            .await
            .map(granted)
            .unwrap_or_else(|_| Err("no answer".into()))
        {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("gRPC {target} does not grant the take: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// One bench client: takes until told to stop.
async fn client(mut rls: Rls, recorder: Arc<Recorder>, asks: Asks) {
    let mut hist = histogram();
    while !recorder.stop.load(Ordering::Relaxed) {
        let sent = recorder.ns();
        let taken =
            match tokio::time::timeout(ANSWER_WAIT, rls.should_rate_limit(asks.request())).await {
                Ok(answer) => granted(answer),
                Err(_) => Err(format!("no answer within {ANSWER_WAIT:?}")),
            };
        if matches!(&taken, Err(e) if e == NO_ROOM) && recorder.measuring.load(Ordering::Relaxed) {
            asks.keys_full.fetch_add(1, Ordering::Relaxed);
        }
        recorder.record_result(&mut hist, sent, &taken);
    }
    recorder.merge(&hist);
}
