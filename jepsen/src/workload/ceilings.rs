//! Ceilings raced: a setter changes tenant [`CEIL_TENANT`]'s `max_running` (1 to 3) every
//! few hundred milliseconds while admitters reserve runs in it, hold them a little and
//! release them. The ceilings checker wants no run admitted while as many runs as the
//! highest ceiling possibly in effect were certainly running.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir_core::machine::{Change, Reply};

use crate::history::{Kind, Recorder};
use crate::rng::Rng;

/// The tenant whose `max_running` is raced.
pub const CEIL_TENANT: &str = "ceil";

/// The setter: `max_running` to a seeded value in 1..=3, every 200–500 ms.
pub async fn ceiling_setter(
    process: u64,
    servers: Vec<String>,
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    // A tenant's ceiling is the operator's control: the admin role sets it.
    let client = crate::secure::client(servers, crate::secure::Access::Admin);
    while !stop.load(Ordering::Relaxed) {
        let n = rng.range(1, 3) as u32;
        let v = json!({"tenant": CEIL_TENANT, "max_running": n});
        history.record(process, Kind::Invoke, "set-max-running", v.clone());
        let kind = match client
            .set_tenant(CEIL_TENANT, Change::Set(n), Change::Keep, Change::Keep)
            .await
        {
            Ok(Reply::Done) => Kind::Ok,
            Ok(_) => Kind::Fail,
            Err(e) if e.definitely_failed() => Kind::Fail,
            Err(_) => Kind::Info,
        };
        history.record(process, kind, "set-max-running", v);
        tokio::time::sleep(Duration::from_millis(rng.range(200, 500))).await;
    }
}

/// An admitter: reserve a run in [`CEIL_TENANT`], hold it 20–200 ms, release it.
pub async fn ceiling_admitter(
    process: u64,
    servers: Vec<String>,
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let client = crate::secure::client(servers, crate::secure::Access::Tenant(CEIL_TENANT));
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let run = format!("c{process}-{n}");
        let invoked = history.record(
            process,
            Kind::Invoke,
            "reserve-run",
            json!({"tenant": CEIL_TENANT, "run": run}),
        );
        let mut v = json!({"tenant": CEIL_TENANT, "run": run, "invoke_ns": invoked});
        match client.reserve(CEIL_TENANT, &run, None, None).await {
            Ok(Reply::Admitted) => {
                history.record(process, Kind::Ok, "reserve-run", v);
                tokio::time::sleep(Duration::from_millis(rng.range(20, 200))).await;
                let r = json!({"tenant": CEIL_TENANT, "run": run});
                history.record(process, Kind::Invoke, "release-run", r.clone());
                let kind = match client.release_run(CEIL_TENANT, &run).await {
                    Ok(_) => Kind::Ok,
                    Err(_) => Kind::Info,
                };
                history.record(process, kind, "release-run", r);
            }
            Ok(other) => {
                v["error"] = format!("{other:?}").into();
                history.record(process, Kind::Fail, "reserve-run", v);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                v["error"] = e.to_string().into();
                let kind = if e.definitely_failed() {
                    Kind::Fail
                } else {
                    Kind::Info
                };
                history.record(process, kind, "reserve-run", v);
                // An unknown reserve may hold a slot: release it (idempotent).
                let _ = client.release_run(CEIL_TENANT, &run).await;
            }
        }
    }
}
