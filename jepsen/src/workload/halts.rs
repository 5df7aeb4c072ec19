//! The halter, which sets and clears a halt in turn, and the admitters, which try to be
//! admitted in its scope meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use weir::client::Client;
use weir::machine::{HaltScope, Reply};

use super::{HALT_AGENT, HALT_TENANT};
use crate::history::{Kind, Recorder};

/// The halter: sets and clears the halt of (HALT_TENANT, HALT_AGENT) in turn.
pub async fn halter(process: u64, servers: Vec<String>, history: Recorder, stop: Arc<AtomicBool>) {
    let client = Client::new(servers);
    let scope = HaltScope::Agent(HALT_AGENT.into());
    let v = json!({"tenant": HALT_TENANT, "agent": HALT_AGENT});
    while !stop.load(Ordering::Relaxed) {
        history.record(process, Kind::Invoke, "set-halt", v.clone());
        match client.set_halt(HALT_TENANT, scope.clone(), "jepsen").await {
            Ok(Reply::Done) => history.record(process, Kind::Ok, "set-halt", v.clone()),
            _ => history.record(process, Kind::Info, "set-halt", v.clone()),
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A clear may take effect from its invoke on: admissions after it are allowed.
        history.record(process, Kind::Invoke, "clear-halt", v.clone());
        let _ = client.clear_halt(HALT_TENANT, scope.clone()).await;
        history.record(process, Kind::Ok, "clear-halt", v.clone());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// An admitter: reserves (and releases) runs in the halted scope, recording admissions.
pub async fn admitter(
    process: u64,
    servers: Vec<String>,
    history: Recorder,
    stop: Arc<AtomicBool>,
) {
    let client = Client::new(servers);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let run = format!("h{process}-{n}");
        let invoked = history.record(
            process,
            Kind::Invoke,
            "reserve",
            json!({"tenant": HALT_TENANT, "agent": HALT_AGENT}),
        );
        let value =
            json!({"tenant": HALT_TENANT, "agent": HALT_AGENT, "invoke_ns": invoked, "run": run});
        match client
            .reserve(HALT_TENANT, &run, Some(HALT_AGENT), None)
            .await
        {
            Ok(Reply::Admitted) => {
                history.record(process, Kind::Ok, "reserve", value);
                let _ = client.release_run(HALT_TENANT, &run).await;
            }
            Ok(Reply::Refused(_)) => {
                history.record(process, Kind::Fail, "reserve", value);
            }
            _ => {
                history.record(process, Kind::Info, "reserve", value);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
