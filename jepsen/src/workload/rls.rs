//! Envoy holders ([`rls_holder`]): processes calling the nodes' `ShouldRateLimit` (Envoy's
//! rate-limit service, over plaintext gRPC, with Envoy's own message types) on
//! [`RLS_LIMIT`], as an Envoy proxy in front of a service does.
//!
//! Each request is in domain [`TENANT`] with the one descriptor `rls: hot` and 1 or 2 hits.
//! A holder asks one node at a time, one request after another with 2–12 ms between an
//! answer and the next request (20–35 a second on a loaded 2-core machine: more than the 16 within a second that make a descriptor hot there, so that node leases the limit and decides from
//! its lease), for a stay of 3–6 s, then moves to the next node: holder `i` starts on node
//! `i`, so the holders spread over the nodes, followers and leader alike, and a node they
//! left gives its cold lease back. A node the nemesis kills or stops while it holds a
//! lease is thus asked before and after.
//!
//! Every request is a `lease-take` op on the harness clock: its invoke before the send and
//! its completion at the answer's receipt (the node decided it in between, from its lease
//! or through the cluster, which the answer does not tell: `"rls": true` marks it). `OK` is
//! a take of its hits, `OVER_LIMIT` a refusal, anything else (an error status, no answer
//! within [`ANSWER_WAIT`]) unknown. The `leased` checker judges these takes with every other
//! take of the limit against `burst + rate × window`.
//!
//! Never: a take recorded outside the interval in which it was decided; a call left waiting
//! past [`ANSWER_WAIT`].

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::json;
use tonic::transport::{Channel, Endpoint};

use super::process::Process;
use crate::history::Kind;
use crate::setup::{RLS_LIMIT, TENANT};

/// Longest wait for an answer: a node stopped or cut holds the call; the holder goes on.
pub const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// The descriptor every request carries: `rls: hot` (the limit [`RLS_LIMIT`] names).
fn descriptor() -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: "rls".into(),
            value: "hot".into(),
        }],
        ..Default::default()
    }
}

/// Envoy holder `i`, asking the nodes at `grpc` (one address per node) until the run stops.
pub async fn rls_holder(p: Process, i: u64, grpc: Vec<String>) {
    let mut rng = p.rng();
    if grpc.is_empty() || grpc.iter().any(|a| a.is_empty()) {
        return;
    }
    let mut stay = i as usize;
    while p.running() {
        let node = stay % grpc.len();
        stay += 1;
        let until = Instant::now() + Duration::from_millis(rng.range(3_000, 6_000));
        let endpoint = match Endpoint::from_shared(format!("http://{}", grpc[node])) {
            Ok(e) => e.connect_timeout(ANSWER_WAIT),
            Err(_) => return,
        };
        // A lazy channel: it connects at the first call and again after a node's restart.
        let mut client = RateLimitServiceClient::new(endpoint.connect_lazy());
        while p.running() && Instant::now() < until {
            let hits = rng.range(1, 2);
            if !ask(&p, &mut client, node as u64 + 1, hits).await {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(rng.range(2, 12))).await;
        }
    }
}

/// One request of `hits` to node `node`, recorded; `false` when its outcome is unknown.
async fn ask(
    p: &Process,
    client: &mut RateLimitServiceClient<Channel>,
    node: u64,
    hits: u64,
) -> bool {
    let (limit, per_second, burst) = RLS_LIMIT;
    let invoked = p.history.record(
        p.id,
        Kind::Invoke,
        "lease-take",
        json!({"limit": limit, "units": hits, "node": node, "rls": true}),
    );
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: TENANT.into(),
        descriptors: vec![descriptor()],
        hits_addend: hits as u32,
    });
    request.set_timeout(ANSWER_WAIT);
    let answer = tokio::time::timeout(ANSWER_WAIT, client.should_rate_limit(request)).await;
    let error = match answer {
        Ok(Ok(a)) => {
            let a = a.into_inner();
            if a.overall_code == Code::Ok as i32 {
                p.history.record(
                    p.id,
                    Kind::Ok,
                    "lease-take",
                    json!({"limit": limit, "units": hits, "invoke_ns": invoked,
                        "per_second": per_second, "burst": burst, "node": node, "rls": true}),
                );
                return true;
            }
            if a.overall_code == Code::OverLimit as i32 {
                p.history.record(
                    p.id,
                    Kind::Fail,
                    "lease-take",
                    json!({"limit": limit, "error": "over limit", "node": node, "rls": true}),
                );
                return true;
            }
            format!("overall code {}", a.overall_code)
        }
        Ok(Err(status)) => format!("{:?}: {}", status.code(), status.message()),
        Err(_) => format!("no answer within {ANSWER_WAIT:?}"),
    };
    p.history.record(
        p.id,
        Kind::Info,
        "lease-take",
        json!({"limit": limit, "error": error, "node": node, "rls": true}),
    );
    false
}
