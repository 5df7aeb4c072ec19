//! Permit processes: acquire, hold, release, each belief interval recorded as a `hold` op.

use std::time::Duration;

use serde_json::json;

use super::acquire::{belief_end, next_permit, release_recorded};
use super::process::Process;
use super::setup::TTL;
use crate::history::Kind;

/// A permit process: acquire, hold for `hold_ms` (a range, seeded) or until the permit may
/// be lost, release; each belief interval recorded as a `hold` op. Long holds (longer than
/// the session TTL) live on keep-alives, and span faults.
pub async fn permits(p: Process, limit: &'static str, cap: u64, hold_ms: (u64, u64)) {
    let mut rng = p.rng();
    let client = p.client(crate::secure::Access::Tenant(super::setup::TENANT));
    while let Some(session) = p.session(&client, TTL).await {
        while let Some((permit, from)) = next_permit(&p, &session, limit).await {
            let hold = Duration::from_millis(rng.range(hold_ms.0, hold_ms.1));
            let lost = tokio::select! {
                _ = tokio::time::sleep(hold) => permit.lost_reason(),
                why = permit.lost() => Some(why),
            };
            let (to, seen, deadline) = belief_end(&p.history, &session, from);
            p.history.record_at(p.id, Kind::Ok, "hold", json!({"limit": limit, "cap": cap, "fence": permit.fence(), "from_ns": from, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline, "lost": lost.map(|l| l.to_string())}), seen);
            release_recorded(p.id, permit, &p.history).await;
        }
    }
}
