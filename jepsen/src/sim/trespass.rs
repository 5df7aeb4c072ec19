//! The edge's checks probed under faults: writes that break an argument bound (G8) and
//! writes on another principal's session (G10), each of which the node must refuse before
//! anything of it is proposed.
//!
//! Owns the trespasser, a process of two principals with a door each: the owner opens a
//! session, the other principal keeps it alive and acquires in it, and either sends writes
//! that break a bound; the owner's own keep-alive and close are the controls. Another's
//! close or release is not probed: the machine answers a close or release of a session
//! already gone as done, so the answer could not tell a breach from a session that expired
//! first (a keep-alive or acquire of a gone session is refused `UnknownSession`, which can).
//! A round runs through the workload (faults included: a new leader that has not applied
//! the open must still refuse another's keep-alive of it) and one more after the heal, so
//! every run has rows to judge.
//!
//! The rows are the harness's `security` rows, judged by its checker
//! ([`crate::checker::security`]): a probe expected refused and answered by the machine
//! (`served`: it reached the log) is invalid; a refusal that does not name its cause is
//! unknown. A probe that got no decided answer (unavailable, unknown outcome) makes no row,
//! and neither does a write the machine refused for a session it no longer has: the edge
//! passes a session it does not know to the machine, which is the rule, not a breach.
//!
//! Invariants:
//! - Every wait is bounded in simulated time (the door's tries, the rounds' pauses).
//! - The one `security` op is recorded as an invoke at the start and its completion, with
//!   every row, when [`Trespasser::finish`] is called.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use weir_core::bounds::{NAME_BYTES_MAX, UNITS_MAX};
use weir_core::machine::{Acquire, Command, Priority, Refusal, Reply, SessionId};
use weir_proto::protocol::Failure;
use weir_server::security::{Principal, Role};

use super::client::Door;
use crate::history::{Kind, Recorder};
use crate::setup::TENANT;

/// The trespasser's process (its history op and its two doors' endpoints).
pub const TRESPASS_BASE: u64 = 600;
/// The probed session's TTL: longer than a round under a fault, so the session the probes
/// name is alive while they run. The run's settling may wait this long and more for the
/// nodes to agree (`run`'s `SETTLE_MAX`), while one whose close was lost keeps the leader
/// ticking.
pub const SESSION_TTL_MS: u64 = 20_000;
/// The pause between rounds, ms (drawn in this range).
const ROUND_PAUSE_MS: (u64, u64) = (200, 1_200);
/// What a refusal of another's session names (the edge's wording).
const NOT_YOURS: &str = "belongs to another principal";

/// A principal of the tenant role, as a token's hash would make it.
fn principal(id: &str) -> Principal {
    Principal {
        id: id.into(),
        role: Role::Tenant(TENANT.into()),
    }
}

/// An acquire in `session`, changed by `change`.
fn acquire(session: SessionId, change: impl FnOnce(&mut Acquire)) -> Command {
    let mut a = Acquire {
        session,
        ticket: 1,
        tenant: TENANT.into(),
        limit: "trespass".into(),
        units: 1,
        priority: Priority::default(),
        agent: None,
        wait: false,
    };
    change(&mut a);
    Command::Acquire(a)
}

/// Writes breaking an argument bound, each with what its refusal names.
fn bad_writes(session: SessionId) -> Vec<(&'static str, Command, String)> {
    let long = || "n".repeat(NAME_BYTES_MAX + 1);
    vec![
        (
            "an acquire of units over the bound",
            acquire(session, |a| a.units = UNITS_MAX + 1),
            "units".into(),
        ),
        (
            "an acquire of 0 units",
            acquire(session, |a| a.units = 0),
            "units 0".into(),
        ),
        (
            "an acquire of fairness weight 0",
            acquire(session, |a| a.priority.fairness_weight = 0),
            "fairness weight 0".into(),
        ),
        (
            "an acquire naming a limit one byte over the bound",
            acquire(session, |a| a.limit = long()),
            format!("limit name is {} bytes", NAME_BYTES_MAX + 1),
        ),
        (
            "an open of ttl_ms 1",
            Command::OpenSession { ttl_ms: 1 },
            "ttl_ms 1".into(),
        ),
    ]
}

/// The trespasser: a door for each of its two principals, and the rows its probes made
/// (clones share them).
#[derive(Clone)]
pub struct Trespasser {
    process: u64,
    owner: Door,
    other: Door,
    history: Recorder,
    rows: Arc<Mutex<Vec<Value>>>,
}

impl Trespasser {
    /// The trespasser of `process`, its owner acting through `owner` and the other
    /// principal through `other`; records the `security` op's invoke.
    pub fn new(process: u64, owner: Door, other: Door, history: Recorder) -> Trespasser {
        history.record(process, Kind::Invoke, "security", json!({}));
        Trespasser {
            process,
            owner: owner.acting_for(principal("owner")),
            other: other.acting_for(principal("other")),
            history,
            rows: Arc::default(),
        }
    }

    /// Records the `security` op's completion with every row.
    pub fn finish(&self) {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.history.record(
            self.process,
            Kind::Ok,
            "security",
            json!({ "probes": rows }),
        );
    }

    fn row(
        &self,
        door: &Door,
        probe: &str,
        expect: &str,
        served: bool,
        reason_ok: bool,
        saw: String,
    ) {
        self.rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(json!({
                "node": door.node(),
                "probe": probe,
                "expect": expect,
                "served": served,
                "reason_ok": reason_ok,
                "saw": saw,
            }));
    }

    /// Sends `command` through `door`, expected refused naming `names`, and rows the answer
    /// if it was decided.
    async fn refused(&self, door: &Door, probe: &str, command: Command, names: &str) {
        match door.write(command).await {
            Ok((_, Reply::Refused(Refusal::UnknownSession { .. }))) => {}
            Ok((index, reply)) => self.row(
                door,
                probe,
                "refused",
                true,
                false,
                format!("applied at {index}: {reply:?}"),
            ),
            Err(f @ (Failure::BadRequest(_) | Failure::Forbidden(_))) => {
                let why = f.to_string();
                self.row(door, probe, "refused", false, why.contains(names), why)
            }
            Err(_) => {}
        }
    }

    /// Sends `command` through the owner's door, expected served, and rows a decided answer.
    async fn served(&self, probe: &str, command: Command) -> Option<Reply> {
        match self.owner.write(command).await {
            Ok((_, reply)) => {
                self.row(
                    &self.owner,
                    probe,
                    "served",
                    true,
                    true,
                    format!("{reply:?}"),
                );
                Some(reply)
            }
            Err(f @ (Failure::BadRequest(_) | Failure::Forbidden(_))) => {
                self.row(&self.owner, probe, "served", false, true, f.to_string());
                None
            }
            Err(_) => None,
        }
    }

    /// One round: the owner's open, the other's trespasses, one bad write, the owner's
    /// keep-alive and close. False when no session was opened.
    pub async fn round(&self, pick: u64) -> bool {
        let open = Command::OpenSession {
            ttl_ms: SESSION_TTL_MS,
        };
        let Ok((_, Reply::SessionOpened { session, .. })) = self.owner.write(open).await else {
            return false;
        };
        let keep_alive = Command::KeepAlive { session };
        let close = Command::CloseSession { session };
        let other = &self.other;
        self.refused(other, "another's keep-alive", keep_alive.clone(), NOT_YOURS)
            .await;
        self.refused(
            other,
            "an acquire in another's session",
            acquire(session, |_| {}),
            NOT_YOURS,
        )
        .await;
        let bad = bad_writes(session);
        let (probe, command, names) = &bad[pick as usize % bad.len()];
        let door = if (pick >> 32).is_multiple_of(2) {
            &self.owner
        } else {
            other
        };
        self.refused(door, probe, command.clone(), names).await;
        self.served("the owner's keep-alive", keep_alive).await;
        self.served("the owner's close", close).await;
        true
    }
}

/// Rounds until `stop`, a drawn pause after each.
pub async fn trespass(trespasser: Trespasser, seed: u64, stop: Arc<std::sync::atomic::AtomicBool>) {
    let mut rng = crate::rng::Rng::new(seed);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        trespasser.round(rng.next_u64()).await;
        let pause = rng.range(ROUND_PAUSE_MS.0, ROUND_PAUSE_MS.1);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}
