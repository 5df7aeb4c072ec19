//! Permit processes: acquire, hold, release, each belief interval recorded as a `hold` op
//! as the application saw it ([`Belief`]).

use std::time::Duration;

use serde_json::json;

use super::acquire::{next_permit, release_recorded};
use super::belief::Belief;
use super::process::Process;
use crate::setup::TTL;

/// A permit process: acquire, work for `hold_ms` (a range, seeded; in steps, each preceded
/// by `lost_reason()` and raced against `lost()`) or until told the permit may be lost,
/// release; each belief interval recorded as a `hold` op. Long holds (longer than the
/// session TTL) live on keep-alives, and span faults.
pub async fn permits(p: Process, limit: &'static str, cap: u64, hold_ms: (u64, u64)) {
    let mut rng = p.rng();
    let client = p.client(crate::secure::Access::Tenant(crate::setup::TENANT));
    while let Some(session) = p.session(&client, TTL).await {
        while let Some((permit, from)) = next_permit(&p, &session, limit).await {
            let hold = Duration::from_millis(rng.range(hold_ms.0, hold_ms.1));
            let mut belief = Belief::new(&permit, &p.history, from);
            belief.work(hold).await;
            let fields = json!({"limit": limit, "cap": cap, "fence": permit.fence()});
            belief.record(p.id, &session, fields);
            release_recorded(p.id, permit, &p.history).await;
        }
    }
}
