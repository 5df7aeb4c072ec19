//! Rate processes: takes of the rate limit, each of 1 to [`UNITS_MAX`] tokens (seeded),
//! recorded with its invoke time, its units and the limit's rate, for the rate checker.

use std::time::Duration;

use serde_json::json;
use weir_client::{AcquireError, AcquireOptions};

use super::process::Process;
use crate::history::Kind;
use crate::setup::{LIMITS, TENANT, TTL};

/// The most tokens one take asks for: below the burst (5), so every take can be served.
pub const UNITS_MAX: u64 = 3;

/// A rate process: takes of the rate limit, each recorded with its invoke time.
pub async fn takes(p: Process) {
    let mut rng = p.rng();
    let client = p.client(crate::secure::Access::Tenant(TENANT));
    let (_, _, per_second, burst) = LIMITS[2];
    while let Some(session) = p.session(&client, TTL).await {
        while p.running() {
            let mut options = AcquireOptions::new(TENANT, "rate");
            let units = rng.range(1, UNITS_MAX);
            options.units = units as u32;
            options.timeout = Some(Duration::from_secs(5));
            let invoked = p.history.record(
                p.id,
                Kind::Invoke,
                "take",
                json!({"limit": "rate", "units": units}),
            );
            match session.acquire(options).await {
                Ok(permit) => {
                    let fence = permit.consume();
                    p.history.record(p.id, Kind::Ok, "take", json!({"limit": "rate", "fence": fence, "units": units, "invoke_ns": invoked, "per_second": per_second, "burst": burst}));
                }
                Err(AcquireError::TimedOut) => {
                    p.history
                        .record(p.id, Kind::Fail, "take", json!({"error": "timed out"}));
                }
                Err(e) => {
                    p.history
                        .record(p.id, Kind::Info, "take", json!({"error": e.to_string()}));
                    break;
                }
            }
        }
    }
}
