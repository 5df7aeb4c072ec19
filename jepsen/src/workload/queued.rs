//! Tickets queued before a fault and judged after its heal (G7): before each fault a
//! blocker takes the one unit of [`QUEUE`] and [`WAITERS`] waiters queue behind it, each in
//! a session of its own at a priority level of its own (arriving in a seeded order, so
//! first-come and priority disagree); once the cluster counts them all waiting the fault
//! is injected. After the heal the blocker releases, and each waiter records its grant, holds
//! a moment and releases. The liveness checker wants every waiter whose session survived
//! granted within G7's bound of the heal, and in priority order (higher level first).
//!
//! A waiter whose session lapsed during the fault (a pause past its TTL) had its ticket
//! withdrawn with the session: it is recorded and not judged.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;
use weir_client::{AcquireError, AcquireOptions, Client, Permit, Session};
use weir_core::machine::Priority;

use super::acquire::{belief_end, release_recorded};
use crate::history::{Kind, NEMESIS, Recorder};
use crate::rng::Rng;
use crate::setup::{QUEUE, TENANT, TTL};

/// Waiters per round: enough for an order to mean something, few enough that each is
/// served (one at a time, each holding a moment) well inside G7's 2 s.
pub const WAITERS: u64 = 3;

/// Process numbers of blockers and waiters start here, 10 per round.
const QUEUERS: u64 = 20_000;

/// How long the arming waits for the cluster to count every waiter.
const ARM_BOUND: Duration = Duration::from_secs(3);

/// How long, after the heal, the waiters may take before they are recorded as not granted.
const AFTER_HEAL_BOUND: Duration = Duration::from_secs(10);

/// One round in flight: the blocker's permit and session, and the waiters' tasks.
struct Round {
    round: u64,
    blocker: Option<(Session, Permit, u64)>,
    waiters: Vec<tokio::task::JoinHandle<()>>,
    release: tokio::sync::watch::Sender<bool>,
}

/// The queued-ticket scenario; the nemesis arms it before a fault and ends it after the
/// heal.
pub struct Queued {
    client: Client,
    history: Recorder,
    seed: u64,
    current: Mutex<Option<Round>>,
    rounds: Mutex<u64>,
}

impl Queued {
    pub fn new(servers: Vec<String>, history: Recorder, seed: u64) -> Queued {
        Queued {
            client: crate::secure::client(servers, crate::secure::Access::Tenant(TENANT)),
            history,
            seed,
            current: Mutex::new(None),
            rounds: Mutex::new(0),
        }
    }

    /// Takes the unit and queues the waiters; returns once the cluster counts them (or
    /// after `ARM_BOUND`).
    pub async fn arm(&self) {
        let round = {
            let mut r = self.rounds.lock().unwrap_or_else(|p| p.into_inner());
            *r += 1;
            *r
        };
        let base = QUEUERS + round * 10;
        let blocker = match Session::open(&self.client, TTL).await {
            Ok(session) => {
                let mut options = AcquireOptions::new(TENANT, QUEUE);
                options.timeout = Some(Duration::from_secs(3));
                let invoked = self.history.record(
                    base,
                    Kind::Invoke,
                    "acquire",
                    json!({"limit": QUEUE, "blocker": round}),
                );
                match session.acquire(options).await {
                    Ok(p) => {
                        let from = self.history.record(base, Kind::Ok, "acquire", json!({"limit": QUEUE, "fence": p.fence(), "invoke_ns": invoked, "blocker": round}));
                        Some((session, p, from))
                    }
                    Err(e) => {
                        self.history.record(
                            base,
                            Kind::Fail,
                            "acquire",
                            json!({"limit": QUEUE, "blocker": round, "error": e.to_string()}),
                        );
                        None
                    }
                }
            }
            Err(_) => None,
        };
        let (release, released) = tokio::sync::watch::channel(false);
        let mut rng = Rng::new(self.seed ^ round);
        let mut levels: Vec<i32> = (1..=WAITERS as i32).collect();
        for i in (1..levels.len()).rev() {
            levels.swap(i, rng.range(0, i as u64) as usize);
        }
        let mut waiters = vec![];
        for (i, level) in levels.into_iter().enumerate() {
            let (client, history, mut released) =
                (self.client.clone(), self.history.clone(), released.clone());
            let process = base + 1 + i as u64;
            waiters.push(tokio::spawn(async move {
                waiter(process, round, level, &client, &history, &mut released).await;
            }));
            // Arrive in this order: each queued before the next asks.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let deadline = Instant::now() + ARM_BOUND;
        let mut waiting = 0;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.client.limit_status(TENANT, QUEUE).await {
                waiting = s.waiting;
                if waiting >= WAITERS {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.history.record(
            NEMESIS,
            Kind::Info,
            "queue-armed",
            json!({"round": round, "waiting": waiting, "blocked": blocker.is_some()}),
        );
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(Round {
            round,
            blocker,
            waiters,
            release,
        });
    }

    /// After the heal recorded at `healed_ns`: the blocker releases, and the waiters are
    /// given (bounded) time to be granted.
    pub async fn after_heal(&self, healed_ns: u64) {
        let Some(round) = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let base = QUEUERS + round.round * 10;
        let mut released_ns = self.history.now_ns();
        if let Some((session, permit, from)) = round.blocker {
            let (to, seen, deadline) = belief_end(&self.history, &session, from);
            self.history.record_at(base, Kind::Ok, "hold", json!({"limit": QUEUE, "cap": 1, "fence": permit.fence(), "from_ns": from, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline, "lost": permit.lost_reason().map(|l| l.to_string())}), seen);
            release_recorded(base, permit, &self.history).await;
            // The limit has room once the release is acknowledged (the release itself may
            // wait out a leader change on the blocker's connection).
            released_ns = self.history.now_ns();
        }
        let _ = round.release.send(true);
        self.history.record(
            NEMESIS,
            Kind::Info,
            "queue-round",
            json!({"round": round.round, "healed_ns": healed_ns, "released_ns": released_ns}),
        );
        for w in round.waiters {
            let _ = tokio::time::timeout(AFTER_HEAL_BOUND, w).await;
        }
    }
}

/// One waiter: queue at `level`, and once granted (recorded with its round and level) hold
/// until the heal's release is signalled, then release.
async fn waiter(
    process: u64,
    round: u64,
    level: i32,
    client: &Client,
    history: &Recorder,
    released: &mut tokio::sync::watch::Receiver<bool>,
) {
    let Ok(session) = Session::open(client, TTL).await else {
        return;
    };
    let mut options = AcquireOptions::new(TENANT, QUEUE);
    options.priority = Priority {
        level,
        ..Priority::default()
    };
    options.timeout = Some(Duration::from_secs(30));
    let v = json!({"limit": QUEUE, "round": round, "level": level});
    let invoked = history.record(process, Kind::Invoke, "acquire", v.clone());
    let mut v = v;
    match session.acquire(options).await {
        Ok(permit) => {
            v["fence"] = permit.fence().into();
            v["invoke_ns"] = invoked.into();
            let from = history.record(process, Kind::Ok, "acquire", v);
            // Granted before the heal (the blocker's lease lapsed in the fault): hold until
            // the heal like the blocker would have, so the order stays the queue's.
            let _ = tokio::time::timeout(AFTER_HEAL_BOUND * 2, released.wait_for(|r| *r)).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            let (to, seen, deadline) = belief_end(history, &session, from);
            history.record_at(process, Kind::Ok, "hold", json!({"limit": QUEUE, "cap": 1, "fence": permit.fence(), "from_ns": from, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline, "lost": permit.lost_reason().map(|l| l.to_string())}), seen);
            release_recorded(process, permit, history).await;
        }
        Err(e) => {
            v["error"] = e.to_string().into();
            v["session_lost"] = matches!(e, AcquireError::SessionLost).into();
            let kind = match e {
                AcquireError::Client(_) => Kind::Info,
                _ => Kind::Fail,
            };
            history.record(process, kind, "acquire", v);
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), session.close()).await;
}
