//! `client-pause`: the pausable holder of the `fenced` limit stopped between checking its
//! permit and acting on it, past its lease deadline; it acts with its fence when the pause
//! ends (the workload's [`crate::workload::ClientPause`] carries out the request).

use std::time::{Duration, Instant};

use serde_json::json;

use super::fault::{Fault, Targets};

/// Requests a client pause and waits (bounded) until the client took it.
pub(super) async fn inject(targets: &Targets, fault: &Fault) -> Result<serde_json::Value, String> {
    Ok(match *fault {
        Fault::PauseClient { ms } => {
            // The client pauses at its next fenced action: wait (bounded) until it has.
            let pause = &targets.client_pause;
            let before = pause.taken();
            pause.request(ms);
            let deadline = Instant::now() + Duration::from_secs(10);
            while pause.taken() == before {
                if Instant::now() > deadline {
                    pause.withdraw();
                    return Err("the pausable client reached no fenced action".into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            json!({"fault": "pause-client", "ms": ms})
        }
        _ => unreachable!("not a client-pause fault: {fault:?}"),
    })
}
