//! The `RateLimitResponse` of a decided [`Plan`]: one status per descriptor in order,
//! `overall_code`, and the `RateLimit-*` headers when configured.
//!
//! What a status says: on `OK`, the whole tokens left and the time until the bucket is
//! full again; on `OVER_LIMIT`, `limit_remaining` 0 (the request did not fit) and
//! `duration_until_reset` the time until the request's hits would fit (what a client turns
//! into `Retry-After`). A part dropped for want of room for a new key (its limit at its
//! `keys_max`) never reports the caller's rate: remaining 0, no reset, `OK` or
//! `OVER_LIMIT` as the node's `grpc_keys_full_over_limit` says. A request decided from this
//! node's token leases (`leases.rs`) reports each part's local bucket, the one it was
//! taken from: its whole tokens and the time until it is full at the lease's rate; a
//! negative descriptor given back to a lease reports that lease's bucket likewise.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration;
use weir_client::LeaseBucket;
use weir_core::machine::{BucketNow, Machine};

use super::plan::{Plan, Target};
use weir_server::metrics;

/// Envoy's units, shortest first, with their seconds (a month is 30 days, a year 365, as
/// `weir_core::rls::unit_seconds` counts them).
const UNITS: [(Unit, u64); 7] = [
    (Unit::Second, 1),
    (Unit::Minute, 60),
    (Unit::Hour, 3_600),
    (Unit::Day, 86_400),
    (Unit::Week, 7 * 86_400),
    (Unit::Month, 30 * 86_400),
    (Unit::Year, 365 * 86_400),
];

/// The limit as Envoy names it. A bucket compiled from a ratelimit file (`burst =
/// requests_per_unit`, `per_second = burst / unit`) gives back its unit and requests; any
/// other gives its rate in the shortest unit in which it is at least one request.
pub fn rate_limit_of(name: &str, bucket: &BucketNow) -> RateLimit {
    let per_second = bucket.spec.per_second;
    let burst = bucket.spec.burst as f64;
    let exact = UNITS
        .iter()
        .find(|(_, s)| (per_second * *s as f64 - burst).abs() <= burst * 1e-9);
    let (unit, requests) = match exact {
        Some((unit, _)) => (*unit, bucket.spec.burst),
        None => {
            let (unit, secs) = UNITS
                .iter()
                .find(|(_, s)| per_second * *s as f64 >= 1.0)
                .unwrap_or(&UNITS[UNITS.len() - 1]);
            (*unit, (per_second * *secs as f64).round() as u64)
        }
    };
    RateLimit {
        name: name.to_owned(),
        requests_per_unit: u32::try_from(requests).unwrap_or(u32::MAX),
        unit: unit as i32,
    }
}

/// How the take of a plan ended, as the answer reports it.
pub struct Taken {
    /// Whether part `n` was refused for want of room (all `false` when granted).
    pub over: Vec<bool>,
    /// Whether part `n` was left out of the take: its limit had no room for a new key.
    pub keys_full: Vec<bool>,
    /// How a left-out part answers: `OVER_LIMIT` when true, else `OK`.
    pub keys_full_over_limit: bool,
    /// Per part: units granted through this node that its machine has not applied yet
    /// (`pending.rs`), counted off what its buckets show.
    pub unapplied: Vec<u64>,
    /// Per part, the local bucket it was taken from, when the request was decided from
    /// this node's leases (every part then was).
    pub local: Option<Vec<LeaseBucket>>,
    /// Per return part, the local bucket it went back to, when a lease took it.
    pub returned: Vec<Option<LeaseBucket>>,
}

/// The answer to `plan` taken as `taken`.
pub fn response(plan: &Plan, machine: &Machine, taken: &Taken, headers: bool) -> RateLimitResponse {
    let over = &taken.over;
    let mut statuses = Vec::with_capacity(plan.targets.len());
    for target in &plan.targets {
        let (status, kind) = match target {
            Target::Unmatched => (ok_status(), "unmatched"),
            Target::Unlimited => (ok_status(), "unlimited"),
            Target::Part(n) if taken.keys_full[*n] => {
                let code = if taken.keys_full_over_limit {
                    Code::OverLimit
                } else {
                    Code::Ok
                };
                let part = &plan.parts[*n];
                let status = DescriptorStatus {
                    code: code as i32,
                    current_limit: machine
                        .bucket_now(&plan.tenant, &part.limit, part.key.as_deref())
                        .map(|b| rate_limit_of(&part.limit, &b)),
                    limit_remaining: 0,
                    ..Default::default()
                };
                (status, "keys_full")
            }
            Target::Return(n) => (
                return_status(plan, machine, *n, taken.returned.get(*n).copied().flatten()),
                "returned",
            ),
            Target::Part(n) => {
                let status = part_status(plan, machine, *n, taken);
                let kind = if over[*n] { "over_limit" } else { "ok" };
                (status, kind)
            }
        };
        metrics::get()
            .rls_descriptors
            .get_or_create(&metrics::KindLabel { kind: kind.into() })
            .inc();
        statuses.push(status);
    }
    let overall = if statuses.iter().any(|s| s.code == Code::OverLimit as i32) {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let response_headers_to_add = if headers {
        ratelimit_headers(&statuses)
    } else {
        Vec::new()
    };
    RateLimitResponse {
        overall_code: overall as i32,
        statuses,
        response_headers_to_add,
        ..Default::default()
    }
}

fn ok_status() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

/// Part `n`'s status, its bucket read on this node now.
fn part_status(plan: &Plan, machine: &Machine, n: usize, taken: &Taken) -> DescriptorStatus {
    let part = &plan.parts[n];
    let over = taken.over[n];
    let code = if over { Code::OverLimit } else { Code::Ok } as i32;
    let Some(mut bucket) = machine.bucket_now(&plan.tenant, &part.limit, part.key.as_deref())
    else {
        // Removed since the plan was made: the decision stands, there is nothing to report.
        return DescriptorStatus {
            code,
            ..Default::default()
        };
    };
    if let Some(local) = &taken.local {
        return leased_status(&part.limit, &bucket, &local[n]);
    }
    let units = taken.unapplied[n];
    if units > 0 && bucket.spec.rates() {
        // At the machine's own rate (whole micro-tokens a second, `rates()` says above 0).
        let taken_ms =
            (units as u128 * 1_000_000_000).div_ceil(bucket.spec.rate_micro_per_s as u128);
        let taken_ms = u64::try_from(taken_ms).unwrap_or(u64::MAX);
        bucket.tokens = bucket.tokens.saturating_sub(units);
        bucket.full_in_ms = bucket.full_in_ms.saturating_add(taken_ms);
    }
    let (remaining, reset_ms) = if over {
        (0, fits_in_ms(&bucket, part.units))
    } else {
        (bucket.tokens, bucket.full_in_ms)
    };
    DescriptorStatus {
        code,
        current_limit: Some(rate_limit_of(&part.limit, &bucket)),
        limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(Duration {
            seconds: (reset_ms / 1000) as i64,
            nanos: ((reset_ms % 1000) * 1_000_000) as i32,
        }),
        ..Default::default()
    }
}

/// An `OK` status read on a lease's local bucket (the limit as `bucket`, the machine's,
/// names it).
fn leased_status(name: &str, bucket: &BucketNow, local: &LeaseBucket) -> DescriptorStatus {
    let reset_ms = local.full_in_ms.min(u64::MAX / 2);
    DescriptorStatus {
        code: Code::Ok as i32,
        current_limit: Some(rate_limit_of(name, bucket)),
        limit_remaining: u32::try_from(local.tokens).unwrap_or(u32::MAX),
        duration_until_reset: Some(Duration {
            seconds: i64::try_from(reset_ms / 1000).unwrap_or(i64::MAX),
            nanos: ((reset_ms % 1000) * 1_000_000) as i32,
        }),
        ..Default::default()
    }
}

/// Return part `n`'s status: `OK`, and the bucket it went back to as it is now (a lease's,
/// `local`, or the cluster's as this node reads it).
fn return_status(
    plan: &Plan,
    machine: &Machine,
    n: usize,
    local: Option<LeaseBucket>,
) -> DescriptorStatus {
    let part = &plan.returns[n];
    let Some(bucket) = machine.bucket_now(&plan.tenant, &part.limit, part.key.as_deref()) else {
        return ok_status();
    };
    if let Some(local) = local {
        return leased_status(&part.limit, &bucket, &local);
    }
    let reset_ms = bucket.full_in_ms;
    DescriptorStatus {
        code: Code::Ok as i32,
        current_limit: Some(rate_limit_of(&part.limit, &bucket)),
        limit_remaining: u32::try_from(bucket.tokens).unwrap_or(u32::MAX),
        duration_until_reset: Some(Duration {
            seconds: (reset_ms / 1000) as i64,
            nanos: ((reset_ms % 1000) * 1_000_000) as i32,
        }),
        ..Default::default()
    }
}

/// Ms until `bucket` holds `units` tokens (0 when it does; when it never can, a bucket
/// smaller than `units`, the time until it is full): the bucket is full in `full_in_ms`,
/// and the tokens above `units` take `(burst - units) / rate` of that.
pub fn fits_in_ms(bucket: &BucketNow, units: u32) -> u64 {
    let units = units as u64;
    if bucket.tokens >= units || !bucket.spec.rates() {
        return 0;
    }
    let above = bucket.spec.burst.saturating_sub(units) as u128;
    let above_ms = above * 1_000_000_000 / bucket.spec.rate_micro_per_s as u128;
    bucket
        .full_in_ms
        .saturating_sub(u64::try_from(above_ms).unwrap_or(u64::MAX))
}

/// `RateLimit-Limit`, `-Remaining` and `-Reset` (whole seconds, rounded up) of the
/// descriptor with the least remaining, among those with a limit; none without one.
fn ratelimit_headers(statuses: &[DescriptorStatus]) -> Vec<HeaderValue> {
    let Some(tightest) = statuses
        .iter()
        .filter(|s| s.current_limit.is_some())
        .min_by_key(|s| s.limit_remaining)
    else {
        return Vec::new();
    };
    let limit = tightest
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = tightest
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds + i64::from(d.nanos > 0));
    [
        ("RateLimit-Limit", limit.to_string()),
        ("RateLimit-Remaining", tightest.limit_remaining.to_string()),
        ("RateLimit-Reset", reset.to_string()),
    ]
    .into_iter()
    .map(|(key, value)| HeaderValue {
        key: key.into(),
        value,
        ..Default::default()
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::machine::limit::LimitSpec;

    fn bucket(per_second: f64, burst: u64, tokens: u64, full_in_ms: u64) -> BucketNow {
        BucketNow {
            spec: LimitSpec::new(0, per_second, Some(burst)).unwrap(),
            tokens,
            full_in_ms,
        }
    }

    #[test]
    fn a_compiled_window_gives_back_its_unit_and_another_rate_the_shortest_whole_unit() {
        let of = |b: &BucketNow| {
            let l = rate_limit_of("n", b);
            (l.requests_per_unit, l.unit)
        };
        assert_eq!(of(&bucket(3.0 / 86_400.0, 3, 0, 0)), (3, Unit::Day as i32));
        assert_eq!(of(&bucket(10.0, 10, 0, 0)), (10, Unit::Second as i32));
        assert_eq!(of(&bucket(1.0, 60, 0, 0)), (60, Unit::Minute as i32));
        // Burst 20 at 10/s is no window: its rate, per second.
        assert_eq!(of(&bucket(10.0, 20, 0, 0)), (10, Unit::Second as i32));
        assert_eq!(of(&bucket(0.5, 1, 0, 0)), (30, Unit::Minute as i32));
    }

    #[test]
    fn a_key_without_room_answers_as_the_operator_chose_and_never_with_tokens_left() {
        use weir_core::machine::{Batch, Definition, Leadership, Part};
        let mut machine = Machine::new();
        let define = Definition {
            tenant: "d".into(),
            name: "envoy:k".into(),
            concurrent: 0,
            per_second: 10.0,
            burst: Some(10),
            keyed: true,
            keys_max: Some(1),
            shadow: false,
        };
        let batch = Batch {
            leadership: Leadership::default(),
            clock_ms: 0,
            wall_ms: 0,
            commands: vec![define.into_command()],
        };
        machine.apply(1, &batch);
        let plan = Plan {
            tenant: "d".into(),
            targets: vec![Target::Part(0)],
            parts: vec![Part {
                limit: "envoy:k".into(),
                key: Some("new".into()),
                units: 1,
            }],
            returns: Vec::new(),
            overrides: Vec::new(),
        };
        for (over_limit, code) in [(false, Code::Ok), (true, Code::OverLimit)] {
            let taken = Taken {
                over: vec![false],
                keys_full: vec![true],
                keys_full_over_limit: over_limit,
                unapplied: vec![0],
                local: None,
                returned: Vec::new(),
            };
            let answer = response(&plan, &machine, &taken, true);
            assert_eq!(answer.overall_code, code as i32);
            let s = &answer.statuses[0];
            assert_eq!((s.code, s.limit_remaining), (code as i32, 0));
            assert_eq!(s.duration_until_reset, None);
            assert_eq!(s.current_limit.as_ref().unwrap().requests_per_unit, 10);
        }
    }

    #[test]
    fn a_request_fits_when_its_hits_are_back_not_when_the_bucket_is_full() {
        // 2 a minute, empty, full in 60 s: one token is back in 30 s, two in 60 s.
        let empty = bucket(2.0 / 60.0, 2, 0, 60_000);
        assert_eq!(fits_in_ms(&empty, 1), 30_000);
        assert_eq!(fits_in_ms(&empty, 2), 60_000);
        // 10 a second, 3 left, full in 700 ms: 5 fit in 200 ms; 3 fit now.
        let some = bucket(10.0, 10, 3, 700);
        assert_eq!(fits_in_ms(&some, 5), 200);
        assert_eq!(fits_in_ms(&some, 3), 0);
        // More than the burst never fits: the time until full.
        assert_eq!(fits_in_ms(&some, 50), 700);
    }

    #[test]
    fn headers_name_the_tightest_limited_descriptor() {
        let status = |remaining, requests, reset_ms: u64| DescriptorStatus {
            code: Code::Ok as i32,
            current_limit: Some(RateLimit {
                name: "n".into(),
                requests_per_unit: requests,
                unit: Unit::Second as i32,
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(Duration {
                seconds: (reset_ms / 1000) as i64,
                nanos: ((reset_ms % 1000) * 1_000_000) as i32,
            }),
            ..Default::default()
        };
        let statuses = [status(5, 10, 500), ok_status(), status(2, 3, 1_001)];
        let headers: Vec<(String, String)> = ratelimit_headers(&statuses)
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
        let expected = [
            ("RateLimit-Limit", "3"),
            ("RateLimit-Remaining", "2"),
            ("RateLimit-Reset", "2"),
        ];
        assert_eq!(
            headers,
            expected.map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert!(ratelimit_headers(&[ok_status()]).is_empty());
    }
}
