//! [`History`]: what this node saw of the last [`HISTORY_SAMPLES`] seconds, for the
//! console's charts and its human times — per limit and per tenant, units in use, tickets
//! waiting, grants and refusals; when each halt standing now was set; when each waiting
//! ticket was queued. Every node keeps its own from its own applied log, so a follower
//! answers as well as the leader.
//!
//! A task follows the node's activity feed (`weir_server::raft::activity`: what each
//! applied entry did) and, once a second, takes a sample: for each tracked limit its
//! `in_use` and `waiting` read from the applied state, and the grants and refusals the
//! feed showed since the last sample. A tenant's sample sums its tracked limits' figures
//! and counts its own grants and refusals.
//!
//! Invariants:
//! - Bounded: at most [`LIMITS_TRACKED_MAX`] limits and [`TENANTS_TRACKED_MAX`] tenants,
//!   each with a ring of at most [`HISTORY_SAMPLES`] samples; at most
//!   [`QUEUED_SEEN_MAX`] queue times and [`HALTS_SEEN_MAX`] halt times. Past a bound the
//!   least recently active limit or tenant (the oldest queue time) is dropped.
//! - Observation, never state: nothing here is read back into the machine, and it is kept
//!   in memory only (a restarted node's history begins at its restart).
//! - Times of samples are ages on this node's monotonic clock (no wall clock is compared
//!   across machines); times of halts and queued tickets are on the log clock, stamped
//!   with the node's log clock when the feed delivered them (a few ms after the entry
//!   applied), and answered beside the log clock of the answer so a reader converts them.
//!
//! Caveats: a limit is tracked from the first activity naming it (or the first request for
//! its history) after the node started, so a tenant's `in_use` counts the units of its
//! tracked limits only (and not those of a keyed definition past
//! [`KEYED_SAMPLE_KEYS_MAX`] live keys, whose own samples say `null`); a feed that falls more than its backlog behind misses the grants
//! and refusals of the entries it skipped (`missed` counts them).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;

use weir_core::machine::{Machine, SessionId, TicketId};
use weir_server::raft::activity::Activity;
use weir_server::raft::state_store::AppliedState;

/// Time between samples. One second is the resolution an operator reads a chart of the
/// last minutes at, and what "a second" in "grants a second" means.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Samples kept per limit and per tenant: 15 minutes at one a second, the window an
/// incident's "what changed and when" looks back over.
pub const HISTORY_SAMPLES: usize = 900;

/// Limits followed at once. With the tenants, 320 rings of 900 samples of 24 bytes are
/// 6.9 MB at most; a sample reads each limit's figures under the applied state's lock,
/// which 256 lookups keep short.
pub const LIMITS_TRACKED_MAX: usize = 256;

/// Tenants followed at once (their samples are sums over their tracked limits).
pub const TENANTS_TRACKED_MAX: usize = 64;

/// Waiting tickets whose queue time is remembered: far more than a console shows (a page
/// of waiters is at most 1,000), few enough to cost under a megabyte.
pub const QUEUED_SEEN_MAX: usize = 16_384;

/// Live keys a keyed definition may have and still have its `in_use` and `waiting`
/// sampled: its figures are sums over its keys, so reading them costs a visit per key under
/// the applied state's lock. Past this the sample says `null` for them (its grants and
/// refusals, counted from the feed, cost nothing per key and are always kept). 100 keys of
/// 256 limits keep a sample's lock to tens of thousands of visits at most.
pub const KEYED_SAMPLE_KEYS_MAX: u32 = 100;

/// Halts whose set time is remembered: the machine's own bound on halts.
pub const HALTS_SEEN_MAX: usize = weir_core::bounds::HALTS_MAX;

/// One sample of one series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Units held at the sample, saturating at `u32::MAX` (`None`: a keyed definition of
    /// more than [`KEYED_SAMPLE_KEYS_MAX`] live keys, not summed).
    pub in_use: Option<u32>,
    /// Tickets waiting at the sample (`None` as for `in_use`).
    pub waiting: Option<u32>,
    /// Grants since the sample before.
    pub grants: u32,
    /// Refusals since the sample before.
    pub refusals: u32,
}

// The size the bound on memory in [`LIMITS_TRACKED_MAX`] is reckoned with.
const _: () = assert!(std::mem::size_of::<Sample>() == 24);

/// A ring of samples, newest last, and the counts gathering for the next one.
#[derive(Default)]
struct Series {
    samples: VecDeque<Sample>,
    grants: u32,
    refusals: u32,
    /// When the feed last named it (or it was asked for): what eviction goes by.
    active: Option<Instant>,
}

impl Series {
    fn push(&mut self, in_use: Option<u64>, waiting: Option<u64>) {
        if self.samples.len() == HISTORY_SAMPLES {
            self.samples.pop_front();
        }
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        self.samples.push_back(Sample {
            in_use: in_use.map(narrow),
            waiting: waiting.map(narrow),
            grants: std::mem::take(&mut self.grants),
            refusals: std::mem::take(&mut self.refusals),
        });
        assert!(
            self.samples.len() <= HISTORY_SAMPLES,
            "history ring over its bound"
        );
    }
}

/// What a reader gets of one series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SeriesView {
    /// Ms between samples.
    pub interval_ms: u64,
    /// Ms since the newest sample was taken (`null` before the first).
    pub newest_age_ms: Option<u64>,
    /// Oldest first; sample `i` of `n` was taken about `newest_age_ms + (n-1-i) *
    /// interval_ms` ms ago.
    pub samples: Vec<Sample>,
}

/// (tenant, limit).
type LimitKey = (String, String);

#[derive(Default)]
struct Inner {
    limits: HashMap<LimitKey, Series>,
    tenants: HashMap<String, Series>,
    /// Log time each waiting ticket was queued at, and the order they came in.
    queued: HashMap<(SessionId, TicketId), u64>,
    queued_order: VecDeque<(SessionId, TicketId)>,
    /// Log time each standing halt was set at, by (tenant, scope as the feed names it).
    halts: HashMap<(String, String), u64>,
    newest: Option<Instant>,
    /// Applied entries the feed skipped because this task fell behind.
    missed: u64,
}

/// The history of the module doc, shared by the task that keeps it and the handlers.
#[derive(Default)]
pub struct History {
    inner: Mutex<Inner>,
}

impl History {
    /// A history of `state`, kept by a task that ends when the feed closes.
    pub fn follow(state: Arc<AppliedState>) -> Arc<History> {
        let history = Arc::new(History::default());
        let keeper = history.clone();
        tokio::spawn(async move {
            let mut feed = state.watch();
            let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    got = feed.recv() => match got {
                        Ok(did) => {
                            let stamp = needs_stamp(&did).then(|| state.lock().machine.now_ms());
                            keeper.saw(&did, stamp.unwrap_or(0));
                        }
                        Err(RecvError::Lagged(n)) => keeper.lock().missed += n,
                        Err(RecvError::Closed) => return,
                    },
                    _ = tick.tick() => {
                        let applied = state.lock();
                        keeper.sample(&applied.machine, Instant::now());
                    }
                }
            }
        });
        history
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        weir_server::lock::lock(&self.inner)
    }

    /// Counts what one applied entry did; `now_ms` is the log clock to stamp queue and
    /// halt times with.
    pub fn saw(&self, did: &[Activity], now_ms: u64) {
        let mut inner = self.lock();
        let now = Instant::now();
        for a in did {
            match a {
                Activity::Granted {
                    tenant: Some(t),
                    limit: Some(l),
                    session,
                    ticket,
                    ..
                } => {
                    inner.count(t, l, now, true);
                    inner.queued.remove(&(*session, *ticket));
                }
                Activity::Refused {
                    tenant: Some(t),
                    limit: Some(l),
                    session,
                    ticket,
                    ..
                } => {
                    inner.count(t, l, now, false);
                    inner.queued.remove(&(*session, *ticket));
                }
                Activity::Granted {
                    session, ticket, ..
                }
                | Activity::Refused {
                    session, ticket, ..
                }
                | Activity::Released {
                    session, ticket, ..
                } => {
                    inner.queued.remove(&(*session, *ticket));
                }
                Activity::Queued {
                    tenant,
                    limit,
                    session,
                    ticket,
                    ..
                } => {
                    inner.track(tenant, limit, now);
                    inner.queue(*session, *ticket, now_ms);
                }
                Activity::Expired { session } => {
                    inner.queued.retain(|(s, _), _| s != session);
                }
                Activity::HaltSet { tenant, scope, .. } => {
                    let key = (tenant.clone(), scope.clone());
                    if inner.halts.len() < HALTS_SEEN_MAX || inner.halts.contains_key(&key) {
                        inner.halts.insert(key, now_ms);
                    }
                }
                Activity::HaltCleared { tenant, scope } => {
                    inner.halts.remove(&(tenant.clone(), scope.clone()));
                }
                Activity::Defined { tenant, limit } => inner.track(tenant, limit, now),
                Activity::Removed { tenant, limit } => {
                    inner.limits.remove(&(tenant.clone(), limit.clone()));
                }
            }
        }
    }

    /// Takes one sample of every tracked limit and tenant from `machine`, at `now`.
    pub fn sample(&self, machine: &Machine, now: Instant) {
        let mut inner = self.lock();
        let mut sums: HashMap<String, (u64, u64)> = HashMap::new();
        inner.limits.retain(|(t, l), series| {
            let figures = match machine.keys_page(t, l, None, KEYED_SAMPLE_KEYS_MAX) {
                // Keyed, with more keys than a sample visits: not summed.
                Some(page) if page.next.is_some() => None,
                _ => match machine.limit_status(t, l) {
                    Some(status) => Some((status.in_use, status.waiting)),
                    None => return false,
                },
            };
            series.push(figures.map(|f| f.0), figures.map(|f| f.1));
            let sum = sums.entry(t.clone()).or_default();
            let (in_use, waiting) = figures.unwrap_or_default();
            sum.0 += in_use;
            sum.1 += waiting;
            true
        });
        for (t, series) in inner.tenants.iter_mut() {
            let (in_use, waiting) = sums.get(t).copied().unwrap_or_default();
            series.push(Some(in_use), Some(waiting));
        }
        inner.newest = Some(now);
    }

    /// Starts following `tenant`/`limit` (a reader asked for it), and its tenant.
    pub fn track(&self, tenant: &str, limit: Option<&str>) {
        let mut inner = self.lock();
        let now = Instant::now();
        match limit {
            Some(l) => inner.track(tenant, l, now),
            None => inner.track_tenant(tenant, now),
        }
    }

    /// The samples of a limit (`Some(name)`) or of a tenant (`None`); empty if untracked.
    pub fn series(&self, tenant: &str, limit: Option<&str>) -> SeriesView {
        let inner = self.lock();
        let series = match limit {
            Some(l) => inner.limits.get(&(tenant.to_owned(), l.to_owned())),
            None => inner.tenants.get(tenant),
        };
        SeriesView {
            interval_ms: SAMPLE_INTERVAL.as_millis() as u64,
            newest_age_ms: inner.newest.map(|n| n.elapsed().as_millis() as u64),
            samples: series.map_or_else(Vec::new, |s| s.samples.iter().copied().collect()),
        }
    }

    /// The log time the halt of `tenant` in `scope` was set at, if this node saw it set.
    pub fn halt_since(&self, tenant: &str, scope: &str) -> Option<u64> {
        let inner = self.lock();
        inner
            .halts
            .get(&(tenant.to_owned(), scope.to_owned()))
            .copied()
    }

    /// The log time `ticket` of `session` was queued at, if this node saw it queued.
    pub fn queued_at(&self, session: SessionId, ticket: TicketId) -> Option<u64> {
        self.lock().queued.get(&(session, ticket)).copied()
    }

    /// Applied entries whose activities the keeper missed, falling behind.
    pub fn missed(&self) -> u64 {
        self.lock().missed
    }
}

/// Whether an entry's activities need the log clock (a queue or a halt time).
fn needs_stamp(did: &[Activity]) -> bool {
    did.iter()
        .any(|a| matches!(a, Activity::Queued { .. } | Activity::HaltSet { .. }))
}

impl Inner {
    fn count(&mut self, tenant: &str, limit: &str, now: Instant, granted: bool) {
        self.track(tenant, limit, now);
        for series in [
            self.limits.get_mut(&(tenant.to_owned(), limit.to_owned())),
            self.tenants.get_mut(tenant),
        ]
        .into_iter()
        .flatten()
        {
            if granted {
                series.grants = series.grants.saturating_add(1);
            } else {
                series.refusals = series.refusals.saturating_add(1);
            }
        }
    }

    fn track(&mut self, tenant: &str, limit: &str, now: Instant) {
        self.track_tenant(tenant, now);
        let key = (tenant.to_owned(), limit.to_owned());
        if let Some(series) = self.limits.get_mut(&key) {
            series.active = Some(now);
            return;
        }
        if self.limits.len() >= LIMITS_TRACKED_MAX {
            evict_oldest(&mut self.limits);
        }
        let series = Series {
            active: Some(now),
            ..Series::default()
        };
        self.limits.insert(key, series);
        assert!(
            self.limits.len() <= LIMITS_TRACKED_MAX,
            "tracked limits over their bound"
        );
    }

    fn track_tenant(&mut self, tenant: &str, now: Instant) {
        if let Some(series) = self.tenants.get_mut(tenant) {
            series.active = Some(now);
            return;
        }
        if self.tenants.len() >= TENANTS_TRACKED_MAX {
            evict_oldest(&mut self.tenants);
        }
        let series = Series {
            active: Some(now),
            ..Series::default()
        };
        self.tenants.insert(tenant.to_owned(), series);
    }

    fn queue(&mut self, session: SessionId, ticket: TicketId, now_ms: u64) {
        // The order may hold tickets already served (removed from `queued` only): they
        // go first, as the oldest.
        while self.queued_order.len() >= QUEUED_SEEN_MAX {
            if let Some(old) = self.queued_order.pop_front() {
                self.queued.remove(&old);
            }
        }
        self.queued.insert((session, ticket), now_ms);
        self.queued_order.push_back((session, ticket));
        assert!(
            self.queued.len() <= QUEUED_SEEN_MAX,
            "queue times over their bound"
        );
    }
}

/// Drops the series the feed named least recently.
fn evict_oldest<K: Clone + Eq + std::hash::Hash>(map: &mut HashMap<K, Series>) {
    let oldest = map
        .iter()
        .min_by_key(|(_, s)| s.active)
        .map(|(k, _)| k.clone());
    if let Some(k) = oldest {
        map.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(t: &str, l: &str, ticket: TicketId) -> Activity {
        Activity::Granted {
            tenant: Some(t.into()),
            limit: Some(l.into()),
            session: 1,
            ticket,
            fence: ticket,
            units: 1,
            queued: false,
        }
    }

    #[test]
    fn grants_and_refusals_count_into_the_next_sample_of_the_limit_and_its_tenant() {
        let h = History::default();
        let refused = Activity::Refused {
            tenant: Some("a".into()),
            limit: Some("db".into()),
            session: 1,
            ticket: 9,
            error: "Busy",
            message: "busy".into(),
        };
        h.saw(&[granted("a", "db", 1), granted("a", "db", 2), refused], 0);
        // No limit "db" in an empty machine: the limit is dropped, the tenant kept.
        let m = Machine::new();
        h.sample(&m, Instant::now());
        assert!(h.series("a", Some("db")).samples.is_empty());
        let tenant = h.series("a", None).samples;
        assert_eq!(
            tenant,
            vec![Sample {
                in_use: Some(0),
                waiting: Some(0),
                grants: 2,
                refusals: 1
            }]
        );
        h.sample(&m, Instant::now());
        let quiet = Sample {
            in_use: Some(0),
            waiting: Some(0),
            ..Sample::default()
        };
        assert_eq!(h.series("a", None).samples[1], quiet);
    }

    #[test]
    fn rings_tracked_series_and_queue_times_stay_within_their_bounds() {
        let h = History::default();
        let m = Machine::new();
        for i in 0..HISTORY_SAMPLES + 5 {
            h.track("a", None);
            h.sample(&m, Instant::now());
            assert!(h.series("a", None).samples.len() <= HISTORY_SAMPLES, "{i}");
        }
        assert_eq!(h.series("a", None).samples.len(), HISTORY_SAMPLES);
        for i in 0..TENANTS_TRACKED_MAX + 3 {
            h.track(&format!("t{i}"), None);
        }
        assert_eq!(h.lock().tenants.len(), TENANTS_TRACKED_MAX);
        for i in 0..LIMITS_TRACKED_MAX + 3 {
            h.track("a", Some(&format!("l{i}")));
        }
        assert_eq!(h.lock().limits.len(), LIMITS_TRACKED_MAX);
        for ticket in 0..QUEUED_SEEN_MAX as u64 + 10 {
            let queued = Activity::Queued {
                tenant: "a".into(),
                limit: "l0".into(),
                session: 2,
                ticket,
                position: 0,
            };
            h.saw(&[queued], 100 + ticket);
        }
        assert_eq!(h.lock().queued.len(), QUEUED_SEEN_MAX);
        assert_eq!(h.queued_at(2, 9), None, "the oldest queue times went first");
        assert_eq!(
            h.queued_at(2, QUEUED_SEEN_MAX as u64),
            Some(100 + QUEUED_SEEN_MAX as u64)
        );
    }

    #[test]
    fn a_halt_is_stamped_when_set_and_forgotten_when_cleared_and_a_grant_ends_a_queue_time() {
        let h = History::default();
        let set = Activity::HaltSet {
            tenant: "a".into(),
            scope: "tenant".into(),
            reason: "r".into(),
        };
        h.saw(&[set], 500);
        assert_eq!(h.halt_since("a", "tenant"), Some(500));
        let cleared = Activity::HaltCleared {
            tenant: "a".into(),
            scope: "tenant".into(),
        };
        h.saw(&[cleared], 600);
        assert_eq!(h.halt_since("a", "tenant"), None);
        let queued = Activity::Queued {
            tenant: "a".into(),
            limit: "db".into(),
            session: 1,
            ticket: 4,
            position: 0,
        };
        h.saw(&[queued], 700);
        assert_eq!(h.queued_at(1, 4), Some(700));
        h.saw(&[granted("a", "db", 4)], 800);
        assert_eq!(h.queued_at(1, 4), None);
    }
}
