//! Token leases held by a session ([`Session::lease`], [`Leased`]): a share of a rate limit
//! (or of one key of a keyed limit) spent locally, in microseconds, without a log entry per
//! take. The rules and why they keep G1 are the machine's essay, "Token leases"; this module
//! is the holder's half of them.
//!
//! # The local bucket
//!
//! A [`Leased`] keeps a bucket of its own ([`crate::LocalBucket`], its rules kept apart from
//! this module's I/O): its size is the lease's cap, it starts with the tokens the cluster
//! moved to it, and it refills at the lease's rate on the boot clock from the moment a reply
//! is in hand (never from when the request was sent: the cluster lowered its own refill only
//! when it applied the entry). [`Leased::try_take`] decides from it
//! alone, and only while the session's belief deadline holds (the G2 rule: the send time of
//! the last acknowledged keep-alive plus the TTL, less the margin); past it, or once the
//! session ended or a halt refused a renewal, the bucket is emptied and every take falls
//! back to the cluster ([`Leased::take`]), or is refused locally ([`Leased::try_take`]).
//! [`Leased::try_take_all`] takes from several leases at once, all or none (a request of
//! several parts, as the cluster decides one); [`Leased::give_back`] puts unused tokens back
//! in the local bucket, up to its size; [`Leased::bucket`] reads it.
//!
//! # The fallback, and its quiet window
//!
//! A take the local bucket cannot cover asks the cluster (one entry, a take that does not
//! wait). One lease sends one such take at a time: concurrent fallbacks queue behind it and
//! see its answer first. When the cluster refuses one for lack of room (`Busy`), the lease
//! refuses every further fallback locally, without a request, for a quiet window: `Busy`
//! names when the cluster's bucket has room again on the log clock, which a holder does not
//! read, and on a contended limit that is within a millisecond and wanted by every holder,
//! so the window is a fixed part of the renewal period ([`QUIET_PER_PERIOD`]: 125 ms at a
//! 10 s TTL), and a quarter of the period when no time was named (room only when a holder
//! gives some back). The local bucket goes on deciding meanwhile. Refusing more than the
//! cluster would is always safe (G1 is about what is spent); what the window costs is a
//! holder's part of the cluster's own bucket, which stays for the other callers.
//!
//! # Renewals: shares follow demand, decreases at once, increases on the reply
//!
//! A task looks at the lease every keep-alive period (TTL/5), and, when a take found the
//! bucket short, at most every quarter period. It measures the demand since it last looked
//! and sends a request only when the ask changes: to grow, after a shortfall, to what the
//! options want (capped at the fair share the last reply advised when the lease stands
//! above it), at most once a period for the same ask; to shrink, at the period, when one and
//! a half times the demand (at least an eighth of what the options want) is under three
//! quarters of the rate held, or the lease stands above its fair share. A decrease applies
//! here *when the request is sent* (the rate at once, the level down to the new cap, the
//! excess given back in the request); an increase only when the reply arrives. A request
//! whose outcome is unknown keeps the decreases and gains nothing; a retry is harmless
//! (`seq`). A session's lease requests (of all its leases) go one at a time, from taking
//! their `seq` to their answer, so none arrives after a later one and is ignored as a
//! retry. So the holder's share is never larger than the cluster counts it, which is what
//! the machine's argument needs.
//!
//! # One lease per limit or key, and takes that use it
//!
//! The cluster keeps one lease per (session, limit or key): a second [`Leased`] on the same
//! one would set the same lease while both spent from buckets of their own, so
//! [`Session::lease`] refuses it while the first lives. The session knows its leases, so an
//! existing take can opt in: [`Session::take_leased`] takes the units of a plain take (one
//! limit or key, no parts, no estimate) from the session's lease on it when there is one,
//! exactly as [`Leased::take`] does (local, else the quiet fallback; it never waits), and
//! otherwise is the take it was (an acquire whose grant is consumed, waiting as the options
//! say). `Ok(false)` is a refusal for lack of room.
//!
//! # Ending
//!
//! [`Leased::end`] gives the lease up, returning the bucket's tokens. Dropping a `Leased`
//! ends it the same way in the background; if that write fails, the lease ends with the
//! session, and what it held is counted as spent.

use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use weir_core::machine::{Command, LeasePart, LeaseShare, LeaseTokens, Refusal, Reply};
use weir_proto::task::AbortOnDrop;

use crate::boot_clock::BootInstant;
use crate::error::{AcquireError, ClientError};
use crate::lease_bucket::{LocalBucket, MICRO, Spend};
use crate::session::{AcquireOptions, KEEPALIVES_PER_TTL, Session, believed_at};
use crate::session_state::{LeaseKey, SessionState};

/// The quiet window after the cluster refused a fallback take with a retry time: the
/// renewal period over this (module doc).
pub const QUIET_PER_PERIOD: u32 = 16;

/// What a lease is for, and the most it wants.
#[derive(Clone, Debug)]
pub struct LeaseOptions {
    pub tenant: String,
    pub limit: String,
    /// The key of a keyed limit.
    pub key: Option<String>,
    /// The most refill this holder wants, tokens a second.
    pub rate_per_s: f64,
    /// The most tokens this holder wants to hold at once (its local bucket's size).
    pub cap: u64,
}

impl LeaseOptions {
    /// A lease of (tenant, limit), wanting at most `rate_per_s` a second and `cap` at once.
    pub fn new(tenant: &str, limit: &str, rate_per_s: f64, cap: u64) -> LeaseOptions {
        LeaseOptions {
            tenant: tenant.to_owned(),
            limit: limit.to_owned(),
            key: None,
            rate_per_s,
            cap,
        }
    }

    /// On key `key` of a keyed limit.
    pub fn key(mut self, key: &str) -> LeaseOptions {
        self.key = Some(key.to_owned());
        self
    }

    fn rate_micro(&self) -> u64 {
        (self.rate_per_s.max(0.0) * MICRO as f64) as u64
    }

    fn lease_key(&self) -> LeaseKey {
        (self.tenant.clone(), self.limit.clone(), self.key.clone())
    }
}

/// Figures of a lease, for the bench and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseFigures {
    /// Takes decided from the local bucket.
    pub local: u64,
    /// Takes the local bucket could not cover.
    pub short: u64,
    /// Lease requests sent (the first, renewals and the end).
    pub requests: u64,
    /// Takes sent to the cluster because the local bucket was short (each one entry,
    /// granted or refused).
    pub asked: u64,
    /// Of those, refused by the cluster for lack of room.
    pub refused: u64,
    /// Takes refused locally, without a request, in a quiet window after such a refusal.
    pub quiet: u64,
    /// The share now: rate (micro-tokens a second) and cap (tokens).
    pub rate_micro_per_s: u64,
    pub cap: u64,
}

impl Session {
    /// Leases a share of a rate limit (or key) for this session: takes on it are then
    /// decided locally while the lease has tokens (this module's doc). The first request is
    /// answered before this returns; a refusal (not a rate limit, a halt, an unknown limit)
    /// is an error, and so is a second lease of the same limit or key in one session.
    pub async fn lease(&self, options: LeaseOptions) -> Result<Leased, ClientError> {
        Leased::open(self.state().clone(), options).await
    }

    /// A take of `options.units` (module doc, "takes that use it"): from this session's
    /// lease of the limit or key when it holds one and the take is plain (no parts, no
    /// estimate), decided as [`Leased::take`] decides it, without waiting; otherwise an
    /// acquire whose grant is consumed, waiting as `options.wait` says. `Ok(false)`: no
    /// room (`Busy`).
    pub async fn take_leased(&self, options: AcquireOptions) -> Result<bool, AcquireError> {
        if options.parts.is_empty()
            && !options.estimate
            && let Some(shared) = self.state().lease_of(&(
                options.tenant.clone(),
                options.limit.clone(),
                options.key.clone(),
            ))
            && let Ok(shared) = shared.downcast::<Shared>()
        {
            return shared
                .take(options.units)
                .await
                .map_err(AcquireError::Client);
        }
        match self.acquire(options).await {
            Ok(permit) => {
                permit.consume();
                Ok(true)
            }
            Err(AcquireError::Refused(Refusal::Busy { .. })) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A lease's local bucket as it stands: whole tokens, its size, and ms until it is full
/// again at the lease's rate (`u64::MAX` at no rate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseBucket {
    pub tokens: u64,
    pub cap: u64,
    pub full_in_ms: u64,
}

/// The holder's side of one lease.
#[derive(Debug)]
struct Local {
    /// The bucket takes are decided from.
    bucket: LocalBucket,
    /// Units taken locally since the renewal task last looked.
    taken: u64,
    /// A take found the bucket short since the renewal task last looked.
    short_seen: bool,
    /// The fair share the last reply advised.
    fair_rate_micro: u64,
    fair_cap: u64,
    /// The last (rate, cap) asked.
    last_ask: (u64, u64),
    /// Fallback takes are refused locally until then (module doc, "quiet window").
    quiet_until: Option<BootInstant>,
    /// Why the lease no longer decides locally (a halt, the session's end, its end).
    ended: Option<String>,
    figures: LeaseFigures,
}

impl Local {
    /// Takes the cluster's answer, arrived `now`: the share it stands at, and the tokens it
    /// moved here.
    fn adopt(&mut self, share: &LeaseShare, now: BootInstant) {
        self.bucket.adopt(share, now);
        self.fair_rate_micro = share.fair_rate_micro_per_s;
        self.fair_cap = share.fair_cap;
        self.figures.rate_micro_per_s = share.rate_micro_per_s;
        self.figures.cap = share.cap;
    }

    fn stop(&mut self, why: String) {
        self.bucket.stop();
        self.ended.get_or_insert(why);
    }

    /// Whether a fallback is refused locally now (counted when it is).
    fn quiet(&mut self, now: BootInstant) -> bool {
        let quiet = self.quiet_until.is_some_and(|until| now < until);
        if quiet {
            self.figures.quiet += 1;
        }
        quiet
    }

    /// What the renewal task asks, having looked `now`, `elapsed` after it last did, with
    /// `wants` = (rate, cap) the options want; `None`: the ask did not change. `early`: it
    /// looked before the period, because a take was short.
    fn next_ask(
        &mut self,
        wants: (u64, u64),
        elapsed: Duration,
        early: bool,
    ) -> Option<(u64, u64)> {
        let ms = elapsed.as_millis().max(1);
        let demand = (self.taken as u128 * MICRO as u128 * 1000 / ms) as u64;
        let short = std::mem::take(&mut self.short_seen);
        self.taken = 0;
        let (want_rate, want_cap) = wants;
        let (rate, cap) = self.bucket.share();
        // Above its fair share, a holder asks for no more than it.
        let ceiling_rate = match rate > self.fair_rate_micro {
            true => want_rate.min(self.fair_rate_micro),
            false => want_rate,
        };
        let ceiling_cap = match cap > self.fair_cap {
            true => want_cap.min(self.fair_cap),
            false => want_cap,
        };
        let grow = (ceiling_rate, ceiling_cap);
        if short && (rate < ceiling_rate || cap < ceiling_cap) {
            // The same ask as last time (answered with less) waits for the period.
            return (!early || grow != self.last_ask).then_some(grow);
        }
        if early {
            return None;
        }
        let target = (demand + demand / 2).clamp(want_rate / 8, ceiling_rate.max(want_rate / 8));
        let shrink_rate = target < rate - rate / 4 || rate > ceiling_rate;
        if shrink_rate || cap > ceiling_cap {
            return Some((target.min(rate).min(ceiling_rate), cap.min(ceiling_cap)));
        }
        None
    }
}

/// What a lease's handle, its renewal task and its session's takes share.
struct Shared {
    state: Arc<SessionState>,
    options: LeaseOptions,
    local: Mutex<Local>,
    /// Woken when a take found the bucket short: look before the period.
    short: tokio::sync::Notify,
    /// Held while a fallback take is with the cluster: one at a time per lease.
    fallback: tokio::sync::Mutex<()>,
}

/// A token lease on one limit (or key), held by a session: takes decided locally while it
/// has tokens and the session's belief holds.
pub struct Leased {
    shared: Arc<Shared>,
    _renew: AbortOnDrop,
}

impl Leased {
    /// Leases per `options` for the session `state`: the first request is answered before
    /// this returns.
    pub(crate) async fn open(
        state: Arc<SessionState>,
        options: LeaseOptions,
    ) -> Result<Leased, ClientError> {
        let shared = Arc::new(Shared {
            state: state.clone(),
            local: Mutex::new(Local {
                bucket: LocalBucket::new(BootInstant::now()),
                taken: 0,
                short_seen: false,
                fair_rate_micro: options.rate_micro(),
                fair_cap: options.cap,
                last_ask: (0, 0),
                quiet_until: None,
                ended: None,
                figures: LeaseFigures::default(),
            }),
            options,
            short: tokio::sync::Notify::new(),
            fallback: tokio::sync::Mutex::new(()),
        });
        let key = shared.options.lease_key();
        let registered: Arc<dyn Any + Send + Sync> = shared.clone();
        if !state.add_lease(key.clone(), Arc::downgrade(&registered)) {
            return Err(ClientError::Protocol(format!(
                "this session already leases {}/{}{}",
                key.0,
                key.1,
                key.2.map(|k| format!(" key {k}")).unwrap_or_default()
            )));
        }
        let first = (shared.options.rate_micro(), shared.options.cap);
        let opened = shared.request(first).await;
        let refused = shared.local.lock().expect("lease lock").ended.clone();
        if let Err(e) =
            opened.and_then(|()| refused.map_or(Ok(()), |why| Err(ClientError::Protocol(why))))
        {
            state.remove_lease(&key);
            return Err(e);
        }
        let task = tokio::spawn(renew(Arc::downgrade(&shared)));
        Ok(Leased {
            shared,
            _renew: AbortOnDrop(task),
        })
    }

    /// Takes `units` from the local bucket, if it has them and the session's belief holds:
    /// no network, no wait. `false` means this lease cannot cover them now (ask the
    /// cluster, [`Leased::take`], or wait for the refill).
    pub fn try_take(&self, units: u32) -> bool {
        self.shared.try_take(units)
    }

    /// Takes `units`: from the local bucket when it has them, else from the cluster (one
    /// entry, as a take without a lease), unless the cluster refused one lately for lack of
    /// room (the quiet window, module doc). `Ok(false)` when there is no room now.
    pub async fn take(&self, units: u32) -> Result<bool, ClientError> {
        self.shared.take(units).await
    }

    /// The lease's figures now.
    pub fn figures(&self) -> LeaseFigures {
        self.shared.local.lock().expect("lease lock").figures
    }

    /// Gives the lease up: the local bucket stops at once and its tokens go back.
    pub async fn end(self) -> Result<(), ClientError> {
        let ended = self.shared.request((0, 0)).await;
        self.shared
            .state
            .remove_lease(&self.shared.options.lease_key());
        ended
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        let shared = self.shared.clone();
        shared.state.remove_lease(&shared.options.lease_key());
        if shared.local.lock().expect("lease lock").bucket.cap == 0 {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = shared.request((0, 0)).await;
            });
        }
    }
}

impl Leased {
    /// Takes `units` from every lease's local bucket, or from none (the machine's
    /// multi-part rule, held locally): each lease must have its units and its session's
    /// belief must hold. `false` means at least one cannot cover its part now (ask the
    /// cluster for the whole request). A lease named twice takes both from one bucket.
    pub fn try_take_all(takes: &[(&Leased, u32)]) -> bool {
        let now = BootInstant::now();
        // Locked in one order (by address), so two callers never wait on each other.
        let mut order: Vec<(usize, &Leased, u64)> = Vec::with_capacity(takes.len());
        for (lease, units) in takes {
            let at = Arc::as_ptr(&lease.shared) as usize;
            match order.iter_mut().find(|(a, _, _)| *a == at) {
                Some((_, _, need)) => *need += *units as u64 * MICRO,
                None => order.push((at, lease, *units as u64 * MICRO)),
            }
        }
        order.sort_by_key(|(at, _, _)| *at);
        let mut guards = Vec::with_capacity(order.len());
        let mut covered = true;
        for (_, lease, need) in &order {
            let deadline = *lease.shared.state.deadline.borrow();
            let believed = believed_at(deadline, now) && !lease.shared.state.is_ended();
            let mut l = lease.shared.local.lock().expect("lease lock");
            if !believed {
                // Past the belief deadline or the session's end: nothing more is spent here.
                l.bucket.level_micro = 0;
            }
            if believed && l.ended.is_none() {
                l.bucket.refill(now);
            }
            let has = believed && l.ended.is_none() && l.bucket.level_micro >= *need;
            if !has {
                l.figures.short += 1;
                if believed && l.ended.is_none() {
                    l.short_seen = true;
                    lease.shared.short.notify_one();
                }
            }
            covered &= has;
            guards.push(l);
        }
        if !covered {
            return false;
        }
        for ((_, _, need), l) in order.iter().zip(guards.iter_mut()) {
            l.bucket.level_micro -= need;
            l.taken += need / MICRO;
            l.figures.local += 1;
        }
        true
    }

    /// Puts `units` back in the local bucket (tokens a caller took and did not use), up to
    /// its cap; what passes the cap is dropped, as the cluster's bucket drops it. `false`
    /// when this lease no longer decides locally (give them back to the cluster instead).
    pub fn give_back(&self, units: u32) -> bool {
        let now = BootInstant::now();
        let deadline = *self.shared.state.deadline.borrow();
        if !believed_at(deadline, now) || self.shared.state.is_ended() {
            return false;
        }
        let mut l = self.shared.local.lock().expect("lease lock");
        if l.ended.is_some() {
            return false;
        }
        l.bucket.give_back(units, now);
        true
    }

    /// The local bucket now (refilled to now): what an answer decided here reports.
    pub fn bucket(&self) -> LeaseBucket {
        let now = BootInstant::now();
        let mut l = self.shared.local.lock().expect("lease lock");
        if l.ended.is_none() {
            l.bucket.refill(now);
        }
        let l = &l.bucket;
        let missing = (l.cap * MICRO).saturating_sub(l.level_micro);
        let full_in_ms = if missing == 0 {
            0
        } else if l.rate_micro == 0 {
            u64::MAX
        } else {
            u64::try_from((missing as u128 * 1000).div_ceil(l.rate_micro as u128))
                .unwrap_or(u64::MAX)
        };
        LeaseBucket {
            tokens: l.level_micro / MICRO,
            cap: l.cap,
            full_in_ms,
        }
    }

    /// Whether this lease can no longer decide locally, for good: it ended (refused, given
    /// up) or its session did. (A belief deadline passed during a stall is not an end: the
    /// next acknowledged keep-alive moves it.)
    pub fn is_over(&self) -> bool {
        self.shared.state.is_ended()
            || self
                .shared
                .local
                .lock()
                .expect("lease lock")
                .ended
                .is_some()
    }
}

impl Shared {
    /// [`Leased::try_take`].
    fn try_take(&self, units: u32) -> bool {
        let now = BootInstant::now();
        let deadline = *self.state.deadline.borrow();
        let ended = self.state.is_ended();
        let mut l = self.local.lock().expect("lease lock");
        if ended {
            // The session closed (its close ended the lease on the cluster when it was
            // sent): nothing more is spent here.
            l.bucket.level_micro = 0;
            l.figures.short += 1;
            return false;
        }
        if l.ended.is_some() {
            l.figures.short += 1;
            return false;
        }
        match l.bucket.spend(units, now, deadline) {
            Spend::Spent => {
                l.taken += units as u64;
                l.figures.local += 1;
                true
            }
            Spend::PastDeadline => {
                l.figures.short += 1;
                false
            }
            Spend::Short => {
                l.figures.short += 1;
                l.short_seen = true;
                drop(l);
                self.short.notify_one();
                false
            }
        }
    }

    /// [`Leased::take`].
    async fn take(&self, units: u32) -> Result<bool, ClientError> {
        if self.try_take(units) {
            return Ok(true);
        }
        if self
            .local
            .lock()
            .expect("lease lock")
            .quiet(BootInstant::now())
        {
            return Ok(false);
        }
        // One fallback at a time: those queued behind it see its answer (a quiet window).
        let _one = self.fallback.lock().await;
        {
            let mut l = self.local.lock().expect("lease lock");
            if l.quiet(BootInstant::now()) {
                return Ok(false);
            }
            l.figures.asked += 1;
        }
        let session = Session::from_state(self.state.clone());
        let mut options = AcquireOptions::new(&self.options.tenant, &self.options.limit);
        options.key = self.options.key.clone();
        options.units = units;
        options.wait = false;
        match session.acquire(options).await {
            Ok(permit) => {
                permit.consume();
                Ok(true)
            }
            Err(AcquireError::Refused(Refusal::Busy { retry_at_ms })) => {
                let period = self.state.ttl / KEEPALIVES_PER_TTL;
                let quiet = match retry_at_ms {
                    Some(_) => period / QUIET_PER_PERIOD,
                    None => period / 4,
                };
                let mut l = self.local.lock().expect("lease lock");
                l.figures.refused += 1;
                l.quiet_until = Some(BootInstant::now() + quiet);
                Ok(false)
            }
            Err(AcquireError::Client(e)) => Err(e),
            Err(e) => Err(ClientError::Protocol(format!("take refused: {e}"))),
        }
    }

    /// Sends one lease request asking (`rate`, `cap`): lowers the share at once where asked
    /// lower, and takes the answer in (a refusal stops the lease: a halt, a removed limit,
    /// the session's end). An error leaves the decreases made and nothing gained.
    async fn request(&self, (rate, cap): (u64, u64)) -> Result<(), ClientError> {
        let (state, options) = (&self.state, &self.options);
        let _one_at_a_time = state.lease_requests.lock().await;
        let seq = state.lease_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let returned = {
            let mut l = self.local.lock().expect("lease lock");
            l.figures.requests += 1;
            l.last_ask = (rate, cap);
            l.bucket.lower_to(rate, cap, BootInstant::now())
        };
        let command = Command::LeaseTokens(LeaseTokens {
            session: state.id,
            tenant: options.tenant.clone(),
            seq,
            parts: vec![LeasePart {
                limit: options.limit.clone(),
                key: options.key.clone(),
                rate_micro_per_s: rate,
                cap,
                returned_micro: returned,
            }],
        });
        let reply = state.client.write(command).await?;
        let now = BootInstant::now();
        let mut l = self.local.lock().expect("lease lock");
        match reply {
            Reply::Leased(shares) if shares.len() == 1 => {
                l.adopt(&shares[0], now);
                Ok(())
            }
            Reply::Refused(r) => {
                l.stop(format!(
                    "lease of {}/{} refused: {r}",
                    options.tenant, options.limit
                ));
                Ok(())
            }
            other => Err(ClientError::Protocol(format!(
                "lease request answered {other:?}"
            ))),
        }
    }
}

/// Renews the lease while its handle lives (module doc, "Renewals"): looks every period,
/// or a quarter period after the last look when a take found the bucket short, and sends a
/// request only when the ask changed.
async fn renew(shared: Weak<Shared>) {
    let mut looked = BootInstant::now();
    loop {
        let Some(s) = shared.upgrade() else { return };
        let period = s.state.ttl / KEEPALIVES_PER_TTL;
        let since = BootInstant::now().saturating_since(looked);
        let woken = tokio::time::timeout(period.saturating_sub(since), s.short.notified())
            .await
            .is_ok();
        if woken {
            let since = BootInstant::now().saturating_since(looked);
            tokio::time::sleep((period / 4).saturating_sub(since)).await;
        }
        let now = BootInstant::now();
        let elapsed = now.saturating_since(looked);
        let early = elapsed < period;
        let wants = (s.options.rate_micro(), s.options.cap);
        let ask = {
            let mut l = s.local.lock().expect("lease lock");
            if l.ended.is_some() {
                return;
            }
            l.next_ask(wants, elapsed, early)
        };
        looked = now;
        if let Some(ask) = ask
            && s.request(ask).await.is_err()
        {
            tokio::time::sleep(period / 4).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_us(us: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_micros(us))
    }

    fn bucket(rate_per_s: u64, cap: u64) -> Local {
        let mut bucket = LocalBucket::new(at_us(0));
        bucket.rate_micro = rate_per_s * MICRO;
        bucket.cap = cap;
        Local {
            bucket,
            taken: 0,
            short_seen: false,
            fair_rate_micro: 0,
            fair_cap: 0,
            last_ask: (0, 0),
            quiet_until: None,
            ended: None,
            figures: LeaseFigures::default(),
        }
    }

    /// The ask follows demand: a short bucket asks for what the options want once, and the
    /// same ask again only at the period; a lease used far below its rate shrinks at the
    /// period; a steady one sends nothing.
    #[test]
    fn the_renewal_asks_only_when_the_ask_changes() {
        let wants = (1_000 * MICRO, 100);
        let second = Duration::from_secs(1);
        let mut l = bucket(100, 10);
        (l.fair_rate_micro, l.fair_cap) = wants;
        l.short_seen = true;
        assert_eq!(l.next_ask(wants, second, true), Some(wants));
        l.last_ask = wants;
        l.short_seen = true;
        assert_eq!(l.next_ask(wants, second, true), None, "the same ask, early");
        l.short_seen = true;
        assert_eq!(
            l.next_ask(wants, second, false),
            Some(wants),
            "at the period"
        );
        // Granted 400 a second; 100 taken in a second: asks 150 (at least an eighth, 125).
        let mut l = bucket(400, 100);
        (l.fair_rate_micro, l.fair_cap) = wants;
        l.taken = 100;
        assert_eq!(l.next_ask(wants, second, false), Some((150 * MICRO, 100)));
        // 300 taken in a second at 400: 450 is not under three quarters of 400; nothing.
        l.taken = 300;
        assert_eq!(l.next_ask(wants, second, false), None);
        assert_eq!(l.next_ask(wants, second, true), None);
    }
}
