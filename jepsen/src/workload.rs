//! The client workloads, each a set of processes recording into the history: permits on
//! limits of concurrency 1 and 3 (belief intervals), rate takes, reserve/settle with retries
//! and deliberate conflicts, halts set and cleared while other processes try to be admitted
//! in their scope, and fenced actions on a downstream [`Resource`] guarded by a limit of
//! concurrency 1 — one of whose clients the nemesis can pause ([`ClientPause`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use weir::client::{AcquireError, AcquireOptions, Client, Permit, Session};
use weir::machine::{HaltScope, Refusal, Reply, Settle};

use crate::history::{Kind, Recorder};
use crate::nemesis::Rng;

/// The harness's session TTL: short, so that a paused leader outlives it.
pub const TTL: Duration = Duration::from_secs(2);

/// The limits: (name, concurrent, per_second, burst).
pub const LIMITS: [(&str, u32, f64, Option<u64>); 4] = [
    ("mutex", 1, 0.0, None),
    ("three", 3, 0.0, None),
    ("rate", 0, 20.0, Some(5)),
    ("fenced", 1, 0.0, None),
];

/// The limit that guards the [`Resource`].
pub const FENCED: &str = "fenced";

pub const TENANT: &str = "jepsen";
pub const HALT_TENANT: &str = "halty";
pub const HALT_AGENT: &str = "a";

/// Defines the limits (retrying until the cluster answers).
pub async fn setup(client: &Client) -> Result<(), String> {
    for (name, concurrent, per_second, burst) in LIMITS {
        client
            .define_limit(TENANT, name, concurrent, per_second, burst)
            .await
            .map_err(|e| format!("define {name}: {e}"))?;
    }
    Ok(())
}

/// A permit process: acquire, hold, release, recording each belief interval as a `hold` op.
pub async fn permits(
    process: u64,
    servers: Vec<String>,
    limit: &'static str,
    cap: u64,
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let client = Client::new(servers);
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
            let hold = Duration::from_millis(rng.range(10, 150));
            let lost = tokio::select! {
                _ = tokio::time::sleep(hold) => permit.lost_reason(),
                why = permit.lost() => Some(why),
            };
            let (to, seen, deadline) = belief_end(&history, &session, from);
            history.record_at(process, Kind::Ok, "hold", json!({"limit": limit, "cap": cap, "fence": permit.fence(), "from_ns": from, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline, "lost": lost.map(|l| l.to_string())}), seen);
            let _ = tokio::time::timeout(Duration::from_secs(3), permit.release()).await;
        }
    }
}

/// What a recorded acquire came to.
enum Acquired {
    /// Granted; the belief began at this harness time.
    Held(Permit, u64),
    /// Not granted within the wait: try again in the same session.
    TimedOut,
    /// The session is lost, or the outcome unknown: open a new session.
    Ended,
}

/// Acquires one unit of `limit`, waiting at most 5 s, and records the `acquire` op: its
/// invoke, and its grant (with the fence and the invoke time) or what ended it.
async fn acquire_recorded(
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

/// Where a belief that began at `from` ends, as G2 defines it: now (the release is about to
/// be sent, or the loss was just seen), or earlier if the session's conservative deadline
/// passed first — a client busy elsewhere (waiting on a read, paused) may notice its
/// deadline late, but stops believing when it passes. The deadline is the session's latest:
/// a keep-alive acknowledged after an earlier deadline had passed moves it forward, and the
/// gap then counts as believed (conservative). Returns (end, now, deadline).
fn belief_end(history: &Recorder, session: &Session, from: u64) -> (u64, u64, u64) {
    let seen = history.now_ns();
    let deadline = history.ns_of(session.deadline());
    (end_of_belief(from, seen, deadline), seen, deadline)
}

/// The end of a belief begun at `from`, noticed at `seen`, under a deadline at `deadline`.
fn end_of_belief(from: u64, seen: u64, deadline: u64) -> u64 {
    seen.min(deadline).max(from)
}

/// A rate process: takes of the rate limit, each recorded with its invoke time.
pub async fn takes(process: u64, servers: Vec<String>, history: Recorder, stop: Arc<AtomicBool>) {
    let client = Client::new(servers);
    let (_, _, per_second, burst) = LIMITS[2];
    while !stop.load(Ordering::Relaxed) {
        let Ok(session) = Session::open(&client, TTL).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let mut options = AcquireOptions::new(TENANT, "rate");
            options.timeout = Some(Duration::from_secs(5));
            let invoked = history.record(process, Kind::Invoke, "take", json!({"limit": "rate"}));
            match session.acquire(options).await {
                Ok(permit) => {
                    let fence = permit.consume();
                    history.record(process, Kind::Ok, "take", json!({"limit": "rate", "fence": fence, "units": 1, "invoke_ns": invoked, "per_second": per_second, "burst": burst}));
                }
                Err(AcquireError::TimedOut) => {
                    history.record(process, Kind::Fail, "take", json!({"error": "timed out"}));
                }
                Err(e) => {
                    history.record(process, Kind::Info, "take", json!({"error": e.to_string()}));
                    break;
                }
            }
        }
    }
}

/// A ledger process: reserve a run, settle it (retrying the same payload until the outcome
/// is known), and now and then send a conflicting payload for a settled key.
pub async fn ledger(
    process: u64,
    servers: Vec<String>,
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let client = Client::new(servers);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let run = format!("p{process}-r{n}");
        let _ = client.reserve(TENANT, &run, None, Some("ledger")).await;
        let tokens = rng.range(1, 9);
        let settle = Settle {
            tenant: TENANT.into(),
            run: run.clone(),
            epoch: 1,
            period: Some("ledger".into()),
            tokens,
            minor_units: tokens * 10,
            release_slot: true,
        };
        let key = format!("{run}/1");
        history.record(
            process,
            Kind::Invoke,
            "settle",
            json!({"key": key, "tokens": tokens}),
        );
        let mut outcome = None;
        for _ in 0..3 {
            match client.settle(settle.clone()).await {
                Ok(Reply::Settled { duplicate }) => {
                    outcome = Some(duplicate);
                    break;
                }
                Ok(other) => {
                    history.record(
                        process,
                        Kind::Fail,
                        "settle",
                        json!({"key": key, "tokens": tokens, "error": format!("{other:?}")}),
                    );
                    break;
                }
                Err(_) => continue,
            }
        }
        match outcome {
            // A retry that found its own earlier attempt applied: charged once, by the
            // attempt whose answer was lost.
            Some(duplicate) => {
                history.record(process, Kind::Ok, "settle", json!({"key": key, "tokens": tokens, "duplicate": false, "retried_duplicate": duplicate}));
            }
            None => {
                history.record(
                    process,
                    Kind::Info,
                    "settle",
                    json!({"key": key, "tokens": tokens}),
                );
            }
        }
        if outcome.is_some() && rng.range(0, 4) == 0 {
            let mut conflicting = settle.clone();
            conflicting.tokens += 1;
            history.record(
                process,
                Kind::Invoke,
                "settle-conflict",
                json!({"key": key}),
            );
            match client.settle(conflicting).await {
                Ok(Reply::Refused(Refusal::Conflict)) => {
                    history.record(
                        process,
                        Kind::Fail,
                        "settle-conflict",
                        json!({"key": key, "error": "conflict"}),
                    );
                }
                Ok(Reply::Settled { .. }) => {
                    history.record(process, Kind::Ok, "settle-conflict", json!({"key": key}));
                }
                other => {
                    history.record(
                        process,
                        Kind::Info,
                        "settle-conflict",
                        json!({"key": key, "error": format!("{other:?}")}),
                    );
                }
            }
        }
    }
}

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

/// The downstream resource the `fenced` limit guards, owned by the harness: it accepts an
/// action whose fence is at least the largest it has accepted and refuses an older one — the
/// storage side of fencing, which is what makes a lease safe against a holder that pauses
/// between checking its permit and acting on it.
#[derive(Default)]
pub struct Resource {
    max: Mutex<u64>,
}

impl Resource {
    /// Ok when accepted; otherwise the larger fence already accepted.
    pub fn act(&self, fence: u64) -> Result<(), u64> {
        let mut max = self.max.lock().unwrap_or_else(|p| p.into_inner());
        if fence < *max {
            return Err(*max);
        }
        *max = fence;
        Ok(())
    }
}

/// The nemesis's handle on the pausable client: it asks for a pause of so many
/// milliseconds; the client takes it at its next fenced action, between checking that its
/// permit is not lost and acting on it.
#[derive(Default)]
pub struct ClientPause {
    requested_ms: AtomicU64,
    taken: AtomicU64,
}

impl ClientPause {
    pub fn request(&self, ms: u64) {
        self.requested_ms.store(ms, Ordering::SeqCst);
    }

    /// Withdraws a request not taken yet.
    pub fn withdraw(&self) {
        self.requested_ms.store(0, Ordering::SeqCst);
    }

    /// How many pauses the client has taken.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::SeqCst)
    }

    fn take(&self) -> Option<u64> {
        match self.requested_ms.swap(0, Ordering::SeqCst) {
            0 => None,
            ms => Some(ms),
        }
    }
}

/// A fenced process: acquire `fenced`, check the permit is not lost, validate its fence
/// (a linearizable read), act on the resource with it, hold a little, release. When `pause`
/// is given and the nemesis asked for one, the whole process stops between the check and
/// the action — every task of its runtime, keep-alives included, as a stop-the-world pause
/// would — and, once it runs again, acts with its fence at once, then validates it and asks
/// the library whether the permit is lost.
///
/// A pausable process must run on a runtime of its own with one thread
/// ([`spawn_pausable`]): the pause blocks that thread.
pub async fn fenced(
    process: u64,
    servers: Vec<String>,
    resource: Arc<Resource>,
    pause: Option<Arc<ClientPause>>,
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let client = Client::new(servers);
    while !stop.load(Ordering::Relaxed) {
        let Ok(session) = Session::open(&client, TTL).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let (permit, from) = match acquire_recorded(process, &session, FENCED, &history).await {
                Acquired::Held(permit, from) => (permit, from),
                Acquired::TimedOut => continue,
                Acquired::Ended => break,
            };
            let fence = permit.fence();
            let hold = |(to, seen, deadline): (u64, u64, u64), lost: Option<String>| {
                history.record_at(process, Kind::Ok, "hold", json!({"limit": FENCED, "cap": 1, "fence": fence, "from_ns": from, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline, "lost": lost}), seen);
            };
            if let Some(why) = permit.lost_reason() {
                hold(belief_end(&history, &session, from), Some(why.to_string()));
                continue;
            }
            if let Some(ms) = pause.as_ref().and_then(|p| p.take()) {
                // Believed held until the deadline, which passes during the pause.
                let deadline_ns = history.ns_of(session.deadline());
                history.record(
                    process,
                    Kind::Invoke,
                    "client-pause",
                    json!({"fence": fence, "ms": ms, "deadline_ns": deadline_ns}),
                );
                if let Some(p) = &pause {
                    p.taken.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(ms));
                // The action comes first: the pause fell between the check and the act.
                let acted = act(process, &resource, &permit, true, &history);
                hold(belief_end(&history, &session, from), None);
                let held = validate(process, &client, fence, true, &history).await;
                let lost = permit.lost_reason();
                history.record(process, Kind::Ok, "client-pause", json!({"fence": fence, "ms": ms, "deadline_ns": deadline_ns, "resumed_ns": acted, "lost": lost.map(|l| l.to_string()), "validated": held}));
                let _ = tokio::time::timeout(Duration::from_secs(3), permit.release()).await;
                break;
            }
            validate(process, &client, fence, false, &history).await;
            act(process, &resource, &permit, false, &history);
            let lost = tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(rng.range(10, 100))) => permit.lost_reason(),
                why = permit.lost() => Some(why),
            };
            hold(
                belief_end(&history, &session, from),
                lost.map(|l| l.to_string()),
            );
            let _ = tokio::time::timeout(Duration::from_secs(3), permit.release()).await;
        }
    }
}

/// One action on the resource with `permit`'s fence, recorded as a `use` op; returns its
/// time. An ordinary holder (`paused` false) checks its permit first — after the invoke is
/// recorded, so a use it takes lies inside its belief — and does not act on a permit that
/// may be lost (`taken: false`). The paused holder acts without looking: its check came
/// before the pause.
fn act(
    process: u64,
    resource: &Resource,
    permit: &Permit,
    paused: bool,
    history: &Recorder,
) -> u64 {
    let fence = permit.fence();
    let at = history.record(
        process,
        Kind::Invoke,
        "use",
        json!({"fence": fence, "paused": paused}),
    );
    if !paused && let Some(why) = permit.lost_reason() {
        history.record(process, Kind::Fail, "use", json!({"fence": fence, "paused": paused, "invoke_ns": at, "taken": false, "lost": why.to_string()}));
        return at;
    }
    match resource.act(fence) {
        Ok(()) => history.record(
            process,
            Kind::Ok,
            "use",
            json!({"fence": fence, "paused": paused, "invoke_ns": at, "taken": true}),
        ),
        Err(max) => history.record(
            process,
            Kind::Fail,
            "use",
            json!({"fence": fence, "paused": paused, "invoke_ns": at, "taken": true, "newer": max}),
        ),
    };
    at
}

/// ValidateFence on `fenced`, recorded as a `validate` op; the answer, when there was one.
async fn validate(
    process: u64,
    client: &Client,
    fence: u64,
    paused: bool,
    history: &Recorder,
) -> Option<bool> {
    let at = history.record(
        process,
        Kind::Invoke,
        "validate",
        json!({"fence": fence, "paused": paused}),
    );
    match client.validate_fence(TENANT, FENCED, fence).await {
        Ok(held) => {
            history.record(
                process,
                Kind::Ok,
                "validate",
                json!({"fence": fence, "paused": paused, "invoke_ns": at, "held": held}),
            );
            Some(held)
        }
        Err(e) => {
            history.record(
                process,
                Kind::Info,
                "validate",
                json!({"fence": fence, "paused": paused, "error": e.to_string()}),
            );
            None
        }
    }
}

/// Starts a pausable [`fenced`] process on a thread and runtime of its own.
pub fn spawn_pausable(
    process: u64,
    servers: Vec<String>,
    resource: Arc<Resource>,
    pause: Arc<ClientPause>,
    history: Recorder,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("pausable-client".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the pausable client");
            runtime.block_on(fenced(
                process,
                servers,
                resource,
                Some(pause),
                history,
                stop,
                seed,
            ));
        })
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

    #[test]
    fn the_resource_refuses_only_fences_older_than_the_newest_it_accepted() {
        let r = Resource::default();
        assert_eq!(r.act(5), Ok(()));
        assert_eq!(r.act(5), Ok(()), "the same holder again");
        assert_eq!(r.act(9), Ok(()));
        assert_eq!(r.act(7), Err(9));
    }

    #[test]
    fn a_pause_request_is_taken_once_and_can_be_withdrawn() {
        let p = ClientPause::default();
        assert_eq!(p.take(), None);
        p.request(3_000);
        assert_eq!(p.take(), Some(3_000));
        assert_eq!(p.take(), None);
        p.request(4_000);
        p.withdraw();
        assert_eq!(p.take(), None);
    }
}
