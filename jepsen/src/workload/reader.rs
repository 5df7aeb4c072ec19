//! Readers: one per node, each entering the cluster through its own node, validating the
//! fences other processes were just granted (on every capped limit), so `ValidateFence` is
//! judged on others' permits — held, released, expired, taken over — and not only by a
//! holder on its own fresh fence. Each validation is a `validate` op with its limit; the
//! linearizability checker judges them against the grants and the belief ends.

use std::time::Duration;

use serde_json::json;

use super::process::Process;
use crate::history::Kind;
use crate::setup::TENANT;

/// How many of the latest ops a reader looks through for grants to validate.
const WINDOW: usize = 400;

/// A reader through its process's one server: validates a recent grant's fence every few
/// milliseconds.
pub async fn reader(p: Process) {
    let mut rng = p.rng();
    // Validating a fence only reads.
    let client = p.client(crate::secure::Access::Read);
    while p.running() {
        let grants = p.history.recent_oks("acquire", WINDOW);
        let picked = (!grants.is_empty())
            .then(|| &grants[rng.range(0, grants.len() as u64 - 1) as usize])
            .and_then(|g| {
                let limit = g.value.get("limit")?.as_str()?.to_string();
                let fence = g.value.get("fence")?.as_u64()?;
                // Only the harness tenant's limits (the halted tenant's are another's).
                g.value.get("tenant").is_none().then_some((limit, fence))
            });
        let Some((limit, fence)) = picked else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let v = json!({"limit": limit, "fence": fence, "paused": false, "reader": true});
        let at = p.history.record(p.id, Kind::Invoke, "validate", v.clone());
        match client.validate_fence(TENANT, &limit, fence).await {
            Ok(held) => {
                let mut v = v;
                v["invoke_ns"] = at.into();
                v["held"] = held.into();
                p.history.record(p.id, Kind::Ok, "validate", v)
            }
            Err(e) => {
                let mut v = v;
                v["error"] = e.to_string().into();
                p.history.record(p.id, Kind::Info, "validate", v)
            }
        };
        tokio::time::sleep(Duration::from_millis(rng.range(5, 30))).await;
    }
}
