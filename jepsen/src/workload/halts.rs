//! The halter, which sets and clears halts in turn — on one agent of [`HALT_TENANT`] or on
//! the whole tenant, chosen by the seed — and the admitters, which meanwhile try to be
//! admitted in its scope: reserves of runs, and acquires of [`HALT_LIMIT`], as the halted
//! agent or as another one (which only a tenant halt stops).

use std::time::Duration;

use serde_json::json;
use weir_client::{AcquireError, AcquireOptions, Client, Session};
use weir_core::machine::{HaltScope, Reply};

use super::acquire::{acquire_as, release_recorded};
use super::process::Process;
use crate::history::{Kind, Recorder};
use crate::setup::{HALT_AGENT, HALT_LIMIT, HALT_TENANT, TTL};

/// The other agent the admitters act as: only tenant halts cover it.
pub const OTHER_AGENT: &str = "b";

/// The halter: sets and clears a halt in turn, each time on the agent or on the tenant.
pub async fn halter(p: Process) {
    let mut rng = p.rng();
    // Halts are the operator's control over a tenant: the admin role sets and clears them.
    let client = p.client(crate::secure::Access::Admin);
    while p.running() {
        let (scope, agent) = if rng.range(0, 2) == 0 {
            (HaltScope::Tenant, None)
        } else {
            (HaltScope::Agent(HALT_AGENT.into()), Some(HALT_AGENT))
        };
        let v = json!({"tenant": HALT_TENANT, "agent": agent});
        p.history.record(p.id, Kind::Invoke, "set-halt", v.clone());
        match client.set_halt(HALT_TENANT, scope.clone(), "jepsen").await {
            Ok(Reply::Done) => p.history.record(p.id, Kind::Ok, "set-halt", v.clone()),
            _ => p.history.record(p.id, Kind::Info, "set-halt", v.clone()),
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A clear may take effect from its invoke on: admissions after it are allowed.
        p.history
            .record(p.id, Kind::Invoke, "clear-halt", v.clone());
        let kind = match client.clear_halt(HALT_TENANT, scope.clone()).await {
            Ok(_) => Kind::Ok,
            Err(_) => Kind::Info,
        };
        p.history.record(p.id, kind, "clear-halt", v.clone());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// An admitter: in turn reserves (and releases) a run and acquires (and releases) one unit
/// of [`HALT_LIMIT`], as `agent`, recording each admission with its invoke time.
pub async fn admitter(p: Process, agent: &'static str) {
    let client = p.client(crate::secure::Access::Tenant(HALT_TENANT));
    let mut session = None;
    let mut n = 0u64;
    while p.running() {
        n += 1;
        if n.is_multiple_of(2) {
            if session.is_none() {
                session = Session::open(&client, TTL).await.ok();
            }
            if let Some(s) = &session
                && !acquire_in_scope(p.id, s, agent, &p.history).await
            {
                session = None;
            }
        } else {
            reserve_in_scope(p.id, &client, agent, n, &p.history).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn reserve_in_scope(process: u64, client: &Client, agent: &str, n: u64, history: &Recorder) {
    let run = format!("h{process}-{n}");
    let invoked = history.record(
        process,
        Kind::Invoke,
        "reserve",
        json!({"tenant": HALT_TENANT, "agent": agent}),
    );
    let value = json!({"tenant": HALT_TENANT, "agent": agent, "invoke_ns": invoked, "run": run});
    match client.reserve(HALT_TENANT, &run, Some(agent), None).await {
        Ok(Reply::Admitted) => {
            history.record(process, Kind::Ok, "reserve", value);
            let _ = client.release_run(HALT_TENANT, &run).await;
        }
        Ok(Reply::Refused(r)) => {
            let mut value = value;
            value["error"] = format!("{r:?}").into();
            history.record(process, Kind::Fail, "reserve", value);
        }
        _ => {
            history.record(process, Kind::Info, "reserve", value);
        }
    };
}

/// Acquires one unit of the halted tenant's limit without waiting; false when the session
/// should be opened again.
async fn acquire_in_scope(
    process: u64,
    session: &Session,
    agent: &str,
    history: &Recorder,
) -> bool {
    let mut options = AcquireOptions::new(HALT_TENANT, HALT_LIMIT);
    options.agent = Some(agent.into());
    options.wait = false;
    options.timeout = Some(Duration::from_secs(3));
    let value = json!({"tenant": HALT_TENANT, "agent": agent, "limit": HALT_LIMIT});
    let (e, value) = match acquire_as(process, session, options, value, history).await {
        Ok(permit) => {
            release_recorded(process, permit, history).await;
            return true;
        }
        Err(refused) => refused,
    };
    let (kind, keep_session) = match e {
        AcquireError::SessionLost => (Kind::Fail, false),
        AcquireError::TimedOut | AcquireError::Refused(_) => (Kind::Fail, true),
        _ => (Kind::Info, false),
    };
    history.record(process, kind, "acquire", value);
    keep_session
}
