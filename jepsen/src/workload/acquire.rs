//! The recorded acquire, and where a belief ends: shared by the permit, fenced and halt
//! processes and the nemesis's waiters.

use std::time::Duration;

use serde_json::json;
use weir_client::{AcquireError, AcquireOptions, Permit, Session};

use super::process::Process;
use crate::history::{Kind, Recorder};
use crate::setup::TENANT;

/// What a recorded acquire came to.
pub enum Acquired {
    /// Granted; the belief began at this harness time.
    Held(Permit, u64),
    /// Not granted within the wait: try again in the same session.
    TimedOut,
    /// The session is lost, or the outcome unknown: open a new session.
    Ended,
}

/// Acquires one unit of `limit`, waiting at most 5 s, and records the `acquire` op: its
/// invoke, and its grant (with the fence and the invoke time) or what ended it.
pub async fn acquire_recorded(
    process: u64,
    session: &Session,
    limit: &str,
    history: &Recorder,
) -> Acquired {
    let mut options = AcquireOptions::new(TENANT, limit);
    options.timeout = Some(Duration::from_secs(5));
    let invoked = history.record(process, Kind::Invoke, "acquire", json!({"limit": limit}));
    let (kind, error, next) = match session.acquire(options).await {
        Ok(permit) => {
            let from = history.now_ns();
            history.record_at(
                process,
                Kind::Ok,
                "acquire",
                json!({"limit": limit, "fence": permit.fence(), "invoke_ns": invoked}),
                from,
            );
            return Acquired::Held(permit, from);
        }
        Err(AcquireError::TimedOut) => (Kind::Fail, "timed out".to_string(), Acquired::TimedOut),
        Err(AcquireError::SessionLost) => (Kind::Fail, "session lost".to_string(), Acquired::Ended),
        Err(e) => (Kind::Info, e.to_string(), Acquired::Ended),
    };
    history.record(
        process,
        kind,
        "acquire",
        json!({"limit": limit, "error": error}),
    );
    next
}

/// Acquires with `options` and records the `acquire` op: its invoke with `value`, then on a
/// grant `value` with the invoke time and the fence (ok). On an error, returns it with
/// `value` carrying the invoke time and the error's text, for the caller to record with
/// the kind the error calls for.
pub async fn acquire_as(
    process: u64,
    session: &Session,
    options: AcquireOptions,
    mut value: serde_json::Value,
    history: &Recorder,
) -> Result<Permit, (AcquireError, serde_json::Value)> {
    let invoked = history.record(process, Kind::Invoke, "acquire", value.clone());
    value["invoke_ns"] = invoked.into();
    match session.acquire(options).await {
        Ok(permit) => {
            value["fence"] = permit.fence().into();
            history.record(process, Kind::Ok, "acquire", value);
            Ok(permit)
        }
        Err(e) => {
            value["error"] = e.to_string().into();
            Err((e, value))
        }
    }
}

/// The next permit of `limit` in `session` ([`acquire_recorded`], again after each wait that
/// timed out) and when its belief began; `None` when the session ended (open a new one) or
/// the run stops.
pub async fn next_permit(p: &Process, session: &Session, limit: &str) -> Option<(Permit, u64)> {
    while p.running() {
        match acquire_recorded(p.id, session, limit, &p.history).await {
            Acquired::Held(permit, from) => return Some((permit, from)),
            Acquired::TimedOut => continue,
            Acquired::Ended => return None,
        }
    }
    None
}

/// Releases `permit` (waiting at most 3 s) and records the `release` op: its invoke, and
/// `ok` once acknowledged or `info` when the outcome is unknown (the lease then lapses).
/// Returns whether it was acknowledged.
pub async fn release_recorded(process: u64, permit: Permit, history: &Recorder) -> bool {
    let v = json!({"limit": permit.limit(), "fence": permit.fence()});
    history.record(process, Kind::Invoke, "release", v.clone());
    let kind = match tokio::time::timeout(Duration::from_secs(3), permit.release()).await {
        Ok(Ok(())) => Kind::Ok,
        _ => Kind::Info,
    };
    history.record(process, kind, "release", v);
    kind == Kind::Ok
}

/// Where a belief that began at `from` ends, as G2 defines it: now (the release is about to
/// be sent, or the loss was just seen), or earlier if the session's conservative deadline
/// passed first — a client busy elsewhere (waiting on a read, paused) may notice its
/// deadline late, but stops believing when it passes. The deadline is the session's latest:
/// a keep-alive acknowledged after an earlier deadline had passed moves it forward, and the
/// gap then counts as believed (conservative). Returns (end, now, deadline).
pub fn belief_end(history: &Recorder, session: &Session, from: u64) -> (u64, u64, u64) {
    let seen = history.now_ns();
    let deadline = history.ns_of(session.deadline());
    (end_of_belief(from, seen, deadline), seen, deadline)
}

/// The end of a belief begun at `from`, noticed at `seen`, under a deadline at `deadline`.
fn end_of_belief(from: u64, seen: u64, deadline: u64) -> u64 {
    seen.min(deadline).max(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_belief_noticed_late_ends_at_its_deadline_and_never_before_it_began() {
        // Run 205: a holder stuck on a read through a leader pause noticed at 43.8 s that
        // its deadline had passed; its belief ended at the deadline.
        assert_eq!(end_of_belief(39_931, 43_835, 41_700), 41_700);
        // Released before the deadline: the belief ends at the release.
        assert_eq!(end_of_belief(10, 50, 1_000), 50);
        // Granted after the deadline had already passed: an empty belief.
        assert_eq!(end_of_belief(500, 600, 400), 500);
    }
}
