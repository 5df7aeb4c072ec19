//! Permit processes: acquire, hold, release, each belief interval recorded as a `hold` op.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_client::Session;

use super::acquire::{Acquired, acquire_recorded, belief_end, release_recorded};
use super::setup::TTL;
use crate::history::{Kind, Recorder};
use crate::rng::Rng;

/// A permit process: acquire, hold for `hold_ms` (a range, seeded) or until the permit may
/// be lost, release; each belief interval recorded as a `hold` op. Long holds (longer than
/// the session TTL) live on keep-alives, and span faults.
#[allow(clippy::too_many_arguments)]
pub async fn permits(
    process: u64,
    servers: Vec<String>,
    limit: &'static str,
    cap: u64,
    hold_ms: (u64, u64),
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let client =
        crate::secure::client(servers, crate::secure::Access::Tenant(super::setup::TENANT));
    while !stop.load(Ordering::Relaxed) {
        let Ok(session) = Session::open(&client, TTL).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let (permit, from) = match acquire_recorded(process, &session, limit, &history).await {
                Acquired::Held(permit, from) => (permit, from),
                Acquired::TimedOut => continue,
                Acquired::Ended => break,
            };
            let hold = Duration::from_millis(rng.range(hold_ms.0, hold_ms.1));
            let lost = tokio::select! {
                _ = tokio::time::sleep(hold) => permit.lost_reason(),
                why = permit.lost() => Some(why),
            };
            let (to, seen, deadline) = belief_end(&history, &session, from);
            history.record_at(process, Kind::Ok, "hold", json!({"limit": limit, "cap": cap, "fence": permit.fence(), "from_ns": from, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline, "lost": lost.map(|l| l.to_string())}), seen);
            release_recorded(process, permit, &history).await;
        }
    }
}
