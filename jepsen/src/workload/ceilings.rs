//! Ceilings raced: a setter changes tenant [`CEIL_TENANT`]'s `max_running` (1 to 3) every
//! few hundred milliseconds while admitters reserve runs in it, hold them a little and
//! release them. The ceilings checker wants no run admitted while as many runs as the
//! highest ceiling possibly in effect were certainly running.

use std::time::Duration;

use serde_json::json;
use weir_core::machine::{Change, Reply};

use super::process::Process;
use crate::history::Kind;

use crate::setup::CEIL_TENANT;

/// The setter: `max_running` to a seeded value in 1..=3, every 200–500 ms.
pub async fn ceiling_setter(p: Process) {
    let mut rng = p.rng();
    // A tenant's ceiling is the operator's control: the admin role sets it.
    let client = p.client(crate::secure::Access::Admin);
    while p.running() {
        let n = rng.range(1, 3) as u32;
        let v = json!({"tenant": CEIL_TENANT, "max_running": n});
        p.history
            .record(p.id, Kind::Invoke, "set-max-running", v.clone());
        let kind = match client
            .set_tenant(CEIL_TENANT, Change::Set(n), Change::Keep, Change::Keep)
            .await
        {
            Ok(Reply::Done) => Kind::Ok,
            Ok(_) => Kind::Fail,
            Err(e) if e.definitely_failed() => Kind::Fail,
            Err(_) => Kind::Info,
        };
        p.history.record(p.id, kind, "set-max-running", v);
        tokio::time::sleep(Duration::from_millis(rng.range(200, 500))).await;
    }
}

/// An admitter: reserve a run in [`CEIL_TENANT`], hold it 20–200 ms, release it.
pub async fn ceiling_admitter(p: Process) {
    let mut rng = p.rng();
    let client = p.client(crate::secure::Access::Tenant(CEIL_TENANT));
    let mut n = 0;
    while p.running() {
        n += 1;
        let run = format!("c{}-{n}", p.id);
        let invoked = p.history.record(
            p.id,
            Kind::Invoke,
            "reserve-run",
            json!({"tenant": CEIL_TENANT, "run": run}),
        );
        let mut v = json!({"tenant": CEIL_TENANT, "run": run, "invoke_ns": invoked});
        match client.reserve(CEIL_TENANT, &run, None, None).await {
            Ok(Reply::Admitted) => {
                p.history.record(p.id, Kind::Ok, "reserve-run", v);
                tokio::time::sleep(Duration::from_millis(rng.range(20, 200))).await;
                let r = json!({"tenant": CEIL_TENANT, "run": run});
                p.history
                    .record(p.id, Kind::Invoke, "release-run", r.clone());
                let kind = match client.release_run(CEIL_TENANT, &run).await {
                    Ok(_) => Kind::Ok,
                    Err(_) => Kind::Info,
                };
                p.history.record(p.id, kind, "release-run", r);
            }
            Ok(other) => {
                v["error"] = format!("{other:?}").into();
                p.history.record(p.id, Kind::Fail, "reserve-run", v);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                v["error"] = e.to_string().into();
                let kind = if e.definitely_failed() {
                    Kind::Fail
                } else {
                    Kind::Info
                };
                p.history.record(p.id, kind, "reserve-run", v);
                // An unknown reserve may hold a slot: release it (idempotent).
                let _ = client.release_run(CEIL_TENANT, &run).await;
            }
        }
    }
}
