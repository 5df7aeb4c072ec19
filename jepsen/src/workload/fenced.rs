//! Fenced processes: acquire `fenced`, check the permit, validate its fence, act on the
//! downstream [`Resource`] with it, release; one of them can be paused by the nemesis
//! between its check and its action ([`ClientPause`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use weir_client::Client;

use super::acquire::{belief_end, next_permit, release_recorded};
use super::belief::Belief;
use super::process::Process;
use crate::history::{Kind, Recorder};
use crate::setup::{FENCED, TENANT};

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
///
/// Its sessions' TTL is `ttl` (the harness's [`crate::setup::TTL`] unless `--fenced-ttl-ms` says
/// otherwise: a longer one widens, in proportion, the window in which a fast log clock or a
/// zero margin would let two holders believe at once).
pub async fn fenced(
    p: Process,
    ttl: Duration,
    resource: Arc<Resource>,
    pause: Option<Arc<ClientPause>>,
) {
    let mut rng = p.rng();
    let client = p.client(crate::secure::Access::Tenant(TENANT));
    while let Some(session) = p.session(&client, ttl).await {
        while let Some((permit, from)) = next_permit(&p, &session, FENCED).await {
            let fence = permit.fence();
            let fields = json!({"limit": FENCED, "cap": 1, "fence": fence});
            let mut belief = Belief::new(&permit, &p.history, from);
            if belief.check().is_some() {
                belief.record(p.id, &session, fields);
                continue;
            }
            if let Some(ms) = pause.as_ref().and_then(|p| p.take()) {
                // Believed held until the deadline, which passes during the pause.
                let deadline_ns = p.history.ns_of(session.deadline());
                // The pause is a fact (recorded once, when it ends), not an op: the
                // process's own ops (use, validate) happen inside it.
                if let Some(p) = &pause {
                    p.taken.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(ms));
                // The action comes first: the pause fell between the check and the act.
                let acted = act(p.id, &resource, fence, None, &p.history);
                // Stopped whole, its application heard nothing: its belief ends at the
                // library's deadline, as G2 defines it.
                let (to, seen, deadline) = belief_end(&p.history, &session, from);
                p.history.record_at(p.id, Kind::Ok, "hold", json!({"limit": FENCED, "cap": 1, "fence": fence, "from_ns": from, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline, "lost": null, "application": false}), seen);
                let held = validate(p.id, &client, fence, None, &p.history).await;
                let lost = permit.lost_reason();
                p.history.record(p.id, Kind::Ok, "client-pause", json!({"fence": fence, "ms": ms, "deadline_ns": deadline_ns, "resumed_ns": acted, "lost": lost.map(|l| l.to_string()), "validated": held}));
                release_recorded(p.id, permit, &p.history).await;
                break;
            }
            validate(p.id, &client, fence, Some(&mut belief), &p.history).await;
            act(p.id, &resource, fence, Some(&mut belief), &p.history);
            belief.work(Duration::from_millis(rng.range(10, 100))).await;
            belief.record(p.id, &session, fields);
            release_recorded(p.id, permit, &p.history).await;
        }
    }
}

/// One action on the resource with `fence`, recorded as a `use` op; returns its time. An
/// ordinary holder (its `belief` given) checks its permit first — after the invoke is
/// recorded, so a use it takes lies inside its belief — and does not act on a permit that
/// may be lost (`taken: false`). The paused holder (`belief` `None`) acts without looking:
/// its check came before the pause.
fn act(
    process: u64,
    resource: &Resource,
    fence: u64,
    belief: Option<&mut Belief<'_>>,
    history: &Recorder,
) -> u64 {
    let paused = belief.is_none();
    let at = history.record(
        process,
        Kind::Invoke,
        "use",
        json!({"fence": fence, "paused": paused}),
    );
    if let Some(why) = belief.and_then(Belief::check) {
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
/// An ordinary holder (its `belief` given) races the read against `lost()`, as an
/// application does, and gives it up (`info`) when told the permit may be lost; the paused
/// holder (`None`) waits for the answer.
async fn validate(
    process: u64,
    client: &Client,
    fence: u64,
    belief: Option<&mut Belief<'_>>,
    history: &Recorder,
) -> Option<bool> {
    let paused = belief.is_none();
    let at = history.record(
        process,
        Kind::Invoke,
        "validate",
        json!({"limit": FENCED, "fence": fence, "paused": paused}),
    );
    let read = client.validate_fence(TENANT, FENCED, fence);
    let answer = match belief {
        Some(belief) => belief.race(read).await.unwrap_or_else(|why| {
            Err(weir_client::ClientError::OutcomeUnknown(format!(
                "given up: the permit may be lost ({why})"
            )))
        }),
        None => read.await,
    };
    match answer {
        Ok(held) => {
            history.record(
                process,
                Kind::Ok,
                "validate",
                json!({"limit": FENCED, "fence": fence, "paused": paused, "invoke_ns": at, "held": held}),
            );
            Some(held)
        }
        Err(e) => {
            history.record(
                process,
                Kind::Info,
                "validate",
                json!({"limit": FENCED, "fence": fence, "paused": paused, "error": e.to_string()}),
            );
            None
        }
    }
}

/// Starts a pausable [`fenced`] process on a thread and runtime of its own.
pub fn spawn_pausable(
    p: Process,
    ttl: Duration,
    resource: Arc<Resource>,
    pause: Arc<ClientPause>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("pausable-client".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the pausable client");
            runtime.block_on(fenced(p, ttl, resource, Some(pause)));
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
