//! Token leases (`LeaseTokens`), and their end with their session: the rules of the
//! machine's essay, "Token leases".
//!
//! A request sets each named lease to the share asked, as far as the limit has room: a
//! decrease (the holder applied it when it sent the request) always, an increase only up to
//! the limit's leasable share (`LEASE_SHARE`) less what the other holders lease. Nothing
//! the holder did not ask for is ever taken from it here: the cluster frees a share only
//! when the holder gave it up, or at the end of its session.
//!
//! Invariants: the request is judged whole before anything changes (every part's limit,
//! key, leasability, the bounds), so a refusal changes nothing; a lease's derived sums on
//! its limit move with it; every limit touched is served, since its own rate and bucket
//! changed.

use std::collections::BTreeSet;

use crate::bounds::{SESSION_LEASES_MAX, TOKEN_LEASES_MAX};
use crate::machine::command::{LeasePart, LeaseTokens, LimitId, SessionId};
use crate::machine::limit::{Limit, MICRO};
use crate::machine::reply::{Event, LeaseShare, Refusal, Reply};
use crate::machine::state::Machine;
use crate::machine::token_lease::{LEASE_SHARE, TokenLease};

/// A part resolved: the definition, and the limit or key state its lease is on (`None`: a
/// key with no state yet, made when the request is applied).
struct Target {
    def: LimitId,
    state: Option<LimitId>,
}

impl Machine {
    /// Applies a `LeaseTokens`: every part's lease set as far as its limit has room, or the
    /// whole request refused with nothing changed.
    pub(super) fn lease_tokens(
        &mut self,
        l: &LeaseTokens,
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        if !self.saved.sessions.contains_key(&l.session) {
            return Err(Refusal::UnknownSession { session: l.session });
        }
        let targets = self.resolve_lease(l)?;
        let last_seq = self.saved.token_leases.seqs.get(&l.session).copied();
        if last_seq.is_some_and(|last| l.seq <= last) {
            // A retry, or a request overtaken by a later one: the leases as they stand.
            let shares = targets
                .iter()
                .map(|t| {
                    let mut share = t
                        .state
                        .map(|id| self.share_of(l.session, id))
                        .unwrap_or_default();
                    share.duplicate = true;
                    share
                })
                .collect();
            return Ok(Reply::Leased(shares));
        }
        self.saved.token_leases.seqs.insert(l.session, l.seq);
        let mut shares = Vec::with_capacity(targets.len());
        let mut touched = BTreeSet::new();
        for (part, target) in l.parts.iter().zip(&targets) {
            let id = match target.state {
                Some(id) => id,
                None if part.rate_micro_per_s == 0 && part.cap == 0 => {
                    // Ending a lease on a key that has none: nothing to do.
                    shares.push(LeaseShare::default());
                    continue;
                }
                None => self.new_key_state(target.def, part.key.as_deref().expect("a key")),
            };
            shares.push(self.set_lease(l.session, id, part));
            touched.insert(id);
        }
        for id in touched {
            self.serve(id, events);
        }
        Ok(Reply::Leased(shares))
    }

    /// Judges a request whole: its parts name distinct limits (or keys), every part's limit
    /// exists and rates without holding (a new lease needs a rate-only limit that is not
    /// shadow), keys fit their limits, the tenant is not halted, and the new leases and keys
    /// fit their bounds. Changes nothing but refills.
    fn resolve_lease(&mut self, l: &LeaseTokens) -> Result<Vec<Target>, Refusal> {
        if let Some(t) = self.saved.tenants.get(&l.tenant) {
            t.refuse_if_halted(&l.tenant, None)?;
        }
        let now_ms = self.now_ms();
        let mut targets: Vec<Target> = Vec::with_capacity(l.parts.len());
        let mut new_leases = 0usize;
        let mut new_keys = 0usize;
        for (i, part) in l.parts.iter().enumerate() {
            let n = i + 1;
            if l.parts[..i]
                .iter()
                .any(|p| p.limit == part.limit && (p.key.is_none() || p.key == part.key))
            {
                return Err(Refusal::Invalid(format!(
                    "part {n} names limit {} again: a lease request names each limit (and \
                     each key of a keyed one) once",
                    part.limit
                )));
            }
            let (def, state) = self.part_target(&l.tenant, n, &part.limit, part.key.as_ref())?;
            let d = &self.saved.limits[&def];
            let held = state.is_some_and(|id| {
                self.saved
                    .token_leases
                    .leases
                    .contains_key(&(l.session, id))
            });
            let asks = part.rate_micro_per_s > 0 || part.cap > 0;
            if !held && asks {
                if !d.spec.rates() || d.spec.caps_concurrency() || d.spec.shadow {
                    return Err(Refusal::Invalid(format!(
                        "part {n}: limit {}/{} is not a rate limit that leases: only a limit \
                         with a rate, no concurrency cap and no shadow mode leases tokens",
                        l.tenant, part.limit
                    )));
                }
                new_leases += 1;
                if state.is_none() {
                    let live = self.live_keys_of(def) + new_keys;
                    if let Some(keys_max) = d.spec.keys_max
                        && live >= keys_max as usize
                    {
                        return Err(Refusal::AtCapacity {
                            what: format!("keys of limit {}/{}", l.tenant, part.limit),
                            limit: keys_max as u64,
                        });
                    }
                    let max = self.keys_live_max();
                    if self.totals.live_keys + new_keys as u64 >= max as u64 {
                        return Err(Refusal::AtCapacity {
                            what: "live keys".into(),
                            limit: max as u64,
                        });
                    }
                    new_keys += 1;
                }
            }
            if let Some(id) = state {
                self.saved
                    .limits
                    .get_mut(&id)
                    .expect("live limit")
                    .refill(now_ms);
            }
            targets.push(Target { def, state });
        }
        let leases = &self.saved.token_leases;
        let of_session = leases.count_of(l.session) + new_leases;
        if of_session > SESSION_LEASES_MAX {
            return Err(Refusal::AtCapacity {
                what: format!("token leases of session {}", l.session),
                limit: SESSION_LEASES_MAX as u64,
            });
        }
        Refusal::room(
            (leases.leases.len() + new_leases).saturating_sub(1) as u64,
            TOKEN_LEASES_MAX,
            format_args!("token leases"),
        )
        .or_else(|e| if new_leases == 0 { Ok(()) } else { Err(e) })?;
        Ok(targets)
    }

    /// A new key's state for definition `def` (the request was judged to have room for it).
    fn new_key_state(&mut self, def: LimitId, key: &str) -> LimitId {
        let d = self.saved.limits.get_mut(&def).expect("live limit");
        let spec = d.spec.clone();
        self.saved.last_limit += 1;
        let id = self.saved.last_limit;
        d.keys.insert(key.to_owned(), id);
        let limit = crate::machine::limit::Limit::new_key(def, key, spec, self.now_ms());
        self.saved.limits.insert(id, Box::new(limit));
        self.totals.live_keys += 1;
        id
    }

    /// Sets `session`'s lease on limit or key `id` (refilled to now) to what `part` asks,
    /// as far as the limit has room; answers the lease as it now stands.
    fn set_lease(&mut self, session: SessionId, id: LimitId, part: &LeasePart) -> LeaseShare {
        let now_ms = self.now_ms();
        let leases = &mut self.saved.token_leases.leases;
        let current = leases.get(&(session, id)).copied();
        let cur = current.unwrap_or_default();
        let limit = self.saved.limits.get_mut(&id).expect("live limit");
        let (leasable_rate, leasable_cap) = leasable(limit);
        let others_rate = limit.leased.rate_micro_per_s - cur.rate_micro_per_s;
        let others_cap = limit.leased.cap - cur.cap;
        // Never below what the holder has and did not give up: only its own request lowers
        // its share (it stopped using the difference when it sent it).
        let room_rate = leasable_rate
            .saturating_sub(others_rate)
            .max(cur.rate_micro_per_s);
        let room_cap = leasable_cap.saturating_sub(others_cap).max(cur.cap);
        let rate = part.rate_micro_per_s.min(room_rate);
        let cap = part.cap.min(room_cap);
        let returned = part.returned_micro.min(cur.cap * MICRO);

        limit.leased.rate_micro_per_s = others_rate + rate;
        limit.leased.cap = others_cap + cap;
        let ends = rate == 0 && cap == 0;
        limit.leased.holders =
            limit.leased.holders + u32::from(!ends) - u32::from(current.is_some());
        // What the holder gave back returns to the cluster's bucket, and a larger cap takes
        // its tokens from it: the holder's bucket starts with what the cluster's held, so
        // the buckets together hold no more than before (what would pass the cluster's new
        // cap is dropped, never kept).
        let pooled = limit.tokens_micro + returned;
        let moved = if cap > cur.cap {
            ((cap - cur.cap) * MICRO).min(pooled)
        } else {
            0
        };
        limit.tokens_micro = (pooled - moved).min(limit.own_cap_micro());
        if limit.tokens_micro == limit.own_cap_micro() {
            limit.refill_remainder = 0;
        }
        // The fair share counts an asker that got nothing as a holder too.
        let asked = part.rate_micro_per_s > 0 || part.cap > 0;
        let holders = (limit.leased.holders + u32::from(ends && asked)).max(1) as u64;
        let (fair_rate_micro_per_s, fair_cap) = fair_share(limit, holders);
        let share = LeaseShare {
            rate_micro_per_s: rate,
            cap,
            tokens_micro: moved,
            fair_rate_micro_per_s,
            fair_cap,
            duplicate: false,
        };
        if ends {
            leases.remove(&(session, id));
        } else {
            let since_ms = current.map_or(now_ms, |c| c.since_ms);
            leases.insert(
                (session, id),
                TokenLease {
                    rate_micro_per_s: rate,
                    cap,
                    since_ms,
                },
            );
        }
        share
    }

    /// `session`'s lease on `id` as it stands, for a retried request.
    fn share_of(&self, session: SessionId, id: LimitId) -> LeaseShare {
        let Some(lease) = self.saved.token_leases.leases.get(&(session, id)) else {
            return LeaseShare::default();
        };
        let limit = &self.saved.limits[&id];
        let (fair_rate_micro_per_s, fair_cap) =
            fair_share(limit, limit.leased.holders.max(1) as u64);
        LeaseShare {
            rate_micro_per_s: lease.rate_micro_per_s,
            cap: lease.cap,
            tokens_micro: 0,
            fair_rate_micro_per_s,
            fair_cap,
            duplicate: true,
        }
    }

    /// Ends the leases of a session that ended (closed or expired): their shares return to
    /// the cluster's refill and bucket from now on; the tokens the holder had are spent
    /// (a lapsed lease is never refunded). Returns the limits to serve.
    pub(super) fn end_token_leases(&mut self, session: SessionId) -> BTreeSet<LimitId> {
        let now_ms = self.now_ms();
        self.saved.token_leases.seqs.remove(&session);
        let ended: Vec<(LimitId, TokenLease)> = self
            .saved
            .token_leases
            .of_session(session)
            .map(|(id, lease)| (id, *lease))
            .collect();
        let mut touched = BTreeSet::new();
        for (id, lease) in ended {
            self.saved.token_leases.leases.remove(&(session, id));
            let limit = self
                .saved
                .limits
                .get_mut(&id)
                .expect("leases name live limits");
            // Refilled at the rate that held until now, first.
            limit.refill(now_ms);
            limit.leased.rate_micro_per_s -= lease.rate_micro_per_s;
            limit.leased.cap -= lease.cap;
            limit.leased.holders -= 1;
            // PLANTED(lease-lapse-refund): the lapsed lease's cap is refunded.
            if crate::planted::is(crate::planted::Plant::LeaseLapseRefund) {
                limit.tokens_micro =
                    (limit.tokens_micro + lease.cap * MICRO).min(limit.own_cap_micro());
            }
            touched.insert(id);
        }
        touched
    }
}

/// What leases may take of `limit` together ([`LEASE_SHARE`] of its rate and burst): rate
/// (micro-tokens a second) and cap (tokens).
fn leasable(limit: &Limit) -> (u64, u64) {
    let (num, den) = LEASE_SHARE;
    (
        mul_div(limit.spec.rate_micro_per_s, num, den),
        mul_div(limit.spec.burst, num, den),
    )
}

/// The fair share a reply advises: the leasable part of `limit` over `holders` (at least 1).
fn fair_share(limit: &Limit, holders: u64) -> (u64, u64) {
    let (rate, cap) = leasable(limit);
    (rate / holders, cap / holders)
}

/// `value × num / den`, rounded down, without overflow.
fn mul_div(value: u64, num: u64, den: u64) -> u64 {
    (value as u128 * num as u128 / den as u128) as u64
}
