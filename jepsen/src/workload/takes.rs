//! Rate processes: takes of the rate limit, each of 1 to [`UNITS_MAX`] tokens (seeded),
//! recorded with its invoke time, its units and the limit's rate, for the rate checker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_client::{AcquireError, AcquireOptions, Session};

use super::setup::{LIMITS, TENANT, TTL};
use crate::history::{Kind, Recorder};

/// The most tokens one take asks for: below the burst (5), so every take can be served.
pub const UNITS_MAX: u64 = 3;

/// A rate process: takes of the rate limit, each recorded with its invoke time.
pub async fn takes(
    process: u64,
    servers: Vec<String>,
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = crate::rng::Rng::new(seed);
    let client = crate::secure::client(servers, crate::secure::Access::Tenant(TENANT));
    let (_, _, per_second, burst) = LIMITS[2];
    while !stop.load(Ordering::Relaxed) {
        let Ok(session) = Session::open(&client, TTL).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let mut options = AcquireOptions::new(TENANT, "rate");
            let units = rng.range(1, UNITS_MAX);
            options.units = units as u32;
            options.timeout = Some(Duration::from_secs(5));
            let invoked = history.record(
                process,
                Kind::Invoke,
                "take",
                json!({"limit": "rate", "units": units}),
            );
            match session.acquire(options).await {
                Ok(permit) => {
                    let fence = permit.consume();
                    history.record(process, Kind::Ok, "take", json!({"limit": "rate", "fence": fence, "units": units, "invoke_ns": invoked, "per_second": per_second, "burst": burst}));
                }
                Err(AcquireError::TimedOut) => {
                    history.record(process, Kind::Fail, "take", json!({"error": "timed out"}));
                }
                Err(e) => {
                    history.record(process, Kind::Info, "take", json!({"error": e.to_string()}));
                    break;
                }
            }
        }
    }
}
