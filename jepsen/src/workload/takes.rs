//! Rate processes: takes of the rate limit, each recorded with its invoke time and the
//! limit's rate, for the rate checker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir::client::{AcquireError, AcquireOptions, Client, Session};

use super::{LIMITS, TENANT, TTL};
use crate::history::{Kind, Recorder};

/// A rate process: takes of the rate limit, each recorded with its invoke time.
pub async fn takes(process: u64, servers: Vec<String>, history: Recorder, stop: Arc<AtomicBool>) {
    let client = Client::new(servers);
    let (_, _, per_second, burst) = LIMITS[2];
    while !stop.load(Ordering::Relaxed) {
        let Ok(session) = Session::open(&client, TTL).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let mut options = AcquireOptions::new(TENANT, "rate");
            options.timeout = Some(Duration::from_secs(5));
            let invoked = history.record(process, Kind::Invoke, "take", json!({"limit": "rate"}));
            match session.acquire(options).await {
                Ok(permit) => {
                    let fence = permit.consume();
                    history.record(process, Kind::Ok, "take", json!({"limit": "rate", "fence": fence, "units": 1, "invoke_ns": invoked, "per_second": per_second, "burst": burst}));
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
