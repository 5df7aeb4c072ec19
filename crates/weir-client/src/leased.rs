//! Token leases held by a session ([`Session::lease`], [`Leased`]): a share of a rate limit
//! (or of one key of a keyed limit) spent locally, in microseconds, without a log entry per
//! take. The rules and why they keep G1 are the machine's essay, "Token leases"; this module
//! is the holder's half of them.
//!
//! # The local bucket
//!
//! A [`Leased`] keeps a bucket of its own: its size is the lease's cap, it starts with the
//! tokens the cluster moved to it, and it refills at the lease's rate on the boot clock from
//! the moment a reply is in hand (never from when the request was sent: the cluster lowered
//! its own refill only when it applied the entry). [`Leased::try_take`] decides from it
//! alone, and only while the session's belief deadline holds (the G2 rule: the send time of
//! the last acknowledged keep-alive plus the TTL, less the margin); past it, or once the
//! session ended or a halt refused a renewal, the bucket is emptied and every take falls
//! back to the cluster ([`Leased::take`]), or is refused locally ([`Leased::try_take`]).
//!
//! # Renewals: shares follow demand, decreases at once, increases on the reply
//!
//! A task renews the lease every keep-alive period (TTL/5), and sooner when a take found the
//! bucket short: it asks for a rate of one and a half times what was taken since the last
//! renewal (at least an eighth of what the options want, at most what they want), and a cap
//! of what the options want, both at most the fair share the last reply advised when it was
//! above it. A decrease applies here *when the request is sent* (the rate at once, the level
//! down to the new cap, the excess given back in the request); an increase only when the
//! reply arrives. A request whose outcome is unknown keeps the decreases and gains nothing;
//! a retry is harmless (`seq`). So the holder's share is never larger than the cluster
//! counts it, which is what the machine's argument needs.
//!
//! # Ending
//!
//! [`Leased::end`] gives the lease up, returning the bucket's tokens. Dropping a `Leased`
//! ends it the same way in the background; if that write fails, the lease ends with the
//! session, and what it held is counted as spent.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir_core::machine::{Command, LeasePart, LeaseShare, LeaseTokens, Refusal, Reply};
use weir_proto::task::AbortOnDrop;

use crate::boot_clock::BootInstant;
use crate::error::{AcquireError, ClientError};
use crate::session::{AcquireOptions, KEEPALIVES_PER_TTL, Session, believed_at};
use crate::session_state::SessionState;

/// Micro-tokens per token.
const MICRO: u64 = 1_000_000;

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
    /// The share now: rate (micro-tokens a second) and cap (tokens).
    pub rate_micro_per_s: u64,
    pub cap: u64,
}

impl Session {
    /// Leases a share of a rate limit (or key) for this session: takes on it are then
    /// decided locally while the lease has tokens (this module's doc). The first request is
    /// answered before this returns; a refusal (not a rate limit, a halt, an unknown limit)
    /// is an error.
    pub async fn lease(&self, options: LeaseOptions) -> Result<Leased, ClientError> {
        Leased::open(self.state().clone(), options).await
    }
}

/// The holder's side of one lease.
#[derive(Debug)]
struct Local {
    rate_micro: u64,
    cap: u64,
    level_micro: u64,
    /// Sub-micro-token refill carried, micro-tokens × ms / s.
    remainder: u64,
    refilled_at: BootInstant,
    /// Units taken locally since the last renewal was sent.
    taken: u64,
    /// The fair share the last reply advised.
    fair_rate_micro: u64,
    fair_cap: u64,
    /// Why the lease no longer decides locally (a halt, the session's end, its end).
    ended: Option<String>,
    figures: LeaseFigures,
}

impl Local {
    /// Brings the bucket up to `now`.
    fn refill(&mut self, now: BootInstant) {
        let ms = now.saturating_since(self.refilled_at).as_millis();
        self.refilled_at = now;
        let scaled = self.rate_micro as u128 * ms + self.remainder as u128;
        let cap = self.cap * MICRO;
        let added = (scaled / 1000) as u64;
        if self.level_micro + added >= cap {
            self.level_micro = cap;
            self.remainder = 0;
        } else {
            self.level_micro += added;
            self.remainder = (scaled % 1000) as u64;
        }
    }

    /// Lowers the share to (`rate`, `cap`) where it is above them, at once; returns the
    /// micro-tokens the lower cap leaves over, which the request gives back.
    fn lower_to(&mut self, rate: u64, cap: u64, now: BootInstant) -> u64 {
        self.refill(now);
        self.rate_micro = self.rate_micro.min(rate);
        self.cap = self.cap.min(cap);
        let kept = self.level_micro.min(self.cap * MICRO);
        let returned = self.level_micro - kept;
        self.level_micro = kept;
        returned
    }

    /// Takes the cluster's answer, arrived `now`: the share it stands at, and the tokens it
    /// moved here.
    fn adopt(&mut self, share: &LeaseShare, now: BootInstant) {
        // Refilled at the old rate up to now; the new one counts from now.
        self.refill(now);
        self.rate_micro = share.rate_micro_per_s;
        self.cap = share.cap;
        self.level_micro = (self.level_micro + share.tokens_micro).min(self.cap * MICRO);
        self.fair_rate_micro = share.fair_rate_micro_per_s;
        self.fair_cap = share.fair_cap;
        // PLANTED(lease-renew-overlap): the previous share goes on beside the new one.
        let previous = (self.figures.rate_micro_per_s, self.figures.cap);
        self.figures.rate_micro_per_s = self.rate_micro;
        self.figures.cap = self.cap;
        if weir_core::planted::is(weir_core::planted::Plant::LeaseRenewOverlap) {
            self.rate_micro += previous.0;
            self.cap += previous.1;
        }
    }

    fn stop(&mut self, why: String) {
        self.level_micro = 0;
        self.rate_micro = 0;
        self.ended.get_or_insert(why);
    }
}

/// A token lease on one limit (or key), held by a session: takes decided locally while it
/// has tokens and the session's belief holds.
pub struct Leased {
    state: Arc<SessionState>,
    options: LeaseOptions,
    local: Arc<Mutex<Local>>,
    /// Woken when a take found the bucket short: renew now rather than at the period.
    short: Arc<tokio::sync::Notify>,
    _renew: AbortOnDrop,
}

impl Leased {
    /// Leases per `options` for the session `state`: the first request is answered before
    /// this returns.
    pub(crate) async fn open(
        state: Arc<SessionState>,
        options: LeaseOptions,
    ) -> Result<Leased, ClientError> {
        let local = Arc::new(Mutex::new(Local {
            rate_micro: 0,
            cap: 0,
            level_micro: 0,
            remainder: 0,
            refilled_at: BootInstant::now(),
            taken: 0,
            fair_rate_micro: options.rate_micro(),
            fair_cap: options.cap,
            ended: None,
            figures: LeaseFigures::default(),
        }));
        let first = (options.rate_micro(), options.cap);
        request(&state, &options, &local, first).await?;
        if let Some(why) = local.lock().expect("lease lock").ended.clone() {
            return Err(ClientError::Protocol(why));
        }
        let short = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(renew(
            Arc::downgrade(&state),
            options.clone(),
            local.clone(),
            short.clone(),
        ));
        Ok(Leased {
            state,
            options,
            local,
            short,
            _renew: AbortOnDrop(task),
        })
    }

    /// Takes `units` from the local bucket, if it has them and the session's belief holds:
    /// no network, no wait. `false` means this lease cannot cover them now (ask the
    /// cluster, [`Leased::take`], or wait for the refill).
    pub fn try_take(&self, units: u32) -> bool {
        let now = BootInstant::now();
        let deadline = *self.state.deadline.borrow();
        let ended = self.state.is_ended();
        let mut l = self.local.lock().expect("lease lock");
        // PLANTED(lease-past-deadline): the belief deadline is not looked at.
        let past = !believed_at(deadline, now)
            && !weir_core::planted::is(weir_core::planted::Plant::LeasePastDeadline);
        if past || ended {
            // Past the belief deadline, or the session closed (its close ended the lease on
            // the cluster when it was sent): nothing more is spent here.
            l.level_micro = 0;
            l.figures.short += 1;
            return false;
        }
        if l.ended.is_some() {
            l.figures.short += 1;
            return false;
        }
        l.refill(now);
        let need = units as u64 * MICRO;
        if l.level_micro >= need {
            l.level_micro -= need;
            l.taken += units as u64;
            l.figures.local += 1;
            return true;
        }
        l.figures.short += 1;
        drop(l);
        self.short.notify_one();
        false
    }

    /// Takes `units`: from the local bucket when it has them, else from the cluster (one
    /// entry, as a take without a lease). `Ok(false)` when neither has room now.
    pub async fn take(&self, units: u32) -> Result<bool, ClientError> {
        if self.try_take(units) {
            return Ok(true);
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
            Err(AcquireError::Refused(Refusal::Busy { .. })) => Ok(false),
            Err(AcquireError::Client(e)) => Err(e),
            Err(e) => Err(ClientError::Protocol(format!("take refused: {e}"))),
        }
    }

    /// The lease's figures now.
    pub fn figures(&self) -> LeaseFigures {
        self.local.lock().expect("lease lock").figures
    }

    /// Gives the lease up: the local bucket stops at once and its tokens go back.
    pub async fn end(self) -> Result<(), ClientError> {
        request(&self.state, &self.options, &self.local, (0, 0)).await
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        let (state, options, local) =
            (self.state.clone(), self.options.clone(), self.local.clone());
        if local.lock().expect("lease lock").cap == 0 {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = request(&state, &options, &local, (0, 0)).await;
            });
        }
    }
}

/// Sends one lease request asking (`rate`, `cap`): lowers the share at once where asked
/// lower, and takes the answer in (a refusal stops the lease: a halt, a removed limit, the
/// session's end). An error leaves the decreases made and nothing gained.
async fn request(
    state: &SessionState,
    options: &LeaseOptions,
    local: &Mutex<Local>,
    (rate, cap): (u64, u64),
) -> Result<(), ClientError> {
    let seq = state.lease_seq.fetch_add(1, Ordering::Relaxed) + 1;
    let returned = {
        let mut l = local.lock().expect("lease lock");
        l.taken = 0;
        l.figures.requests += 1;
        l.lower_to(rate, cap, BootInstant::now())
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
    let mut l = local.lock().expect("lease lock");
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

/// Renews the lease while the session lives: every keep-alive period, or sooner when a
/// take found the bucket short, asking for what demand and the fair share say.
async fn renew(
    state: std::sync::Weak<SessionState>,
    options: LeaseOptions,
    local: Arc<Mutex<Local>>,
    short: Arc<tokio::sync::Notify>,
) {
    let mut last = BootInstant::now();
    loop {
        let Some(s) = state.upgrade() else { return };
        let period = s.ttl / KEEPALIVES_PER_TTL;
        drop(s);
        // A short bucket renews early, but not more than every period / 8.
        let woken = tokio::time::timeout(period, short.notified()).await.is_ok();
        if woken {
            tokio::time::sleep(period / 8).await;
        }
        let Some(s) = state.upgrade() else { return };
        let now = BootInstant::now();
        let ask = {
            let l = local.lock().expect("lease lock");
            if l.ended.is_some() {
                return;
            }
            let elapsed = now.saturating_since(last).max(Duration::from_millis(1));
            let demand = (l.taken as u128 * MICRO as u128 * 1000 / elapsed.as_millis()) as u64;
            let want = options.rate_micro();
            let mut rate = (demand + demand / 2).clamp(want / 8, want);
            let mut cap = options.cap;
            if l.rate_micro > l.fair_rate_micro {
                rate = rate.min(l.fair_rate_micro);
            }
            if l.cap > l.fair_cap {
                cap = cap.min(l.fair_cap);
            }
            if woken {
                rate = want;
            }
            (rate, cap)
        };
        last = now;
        if request(&s, &options, &local, ask).await.is_err() {
            tokio::time::sleep(period / 4).await;
        }
    }
}
