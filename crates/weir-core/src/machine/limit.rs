//! One limit: its spec, the permits held on it, its token bucket, and its wait queue.
//!
//! Concurrency is counted in units: a permit holds `units` of `concurrent` until released.
//! The rate is a token bucket refilled on the log clock; a grant takes `units` tokens. A
//! limit with `concurrent = 0` only rates: a grant takes tokens and holds nothing.
//!
//! Balances are integers: micro-tokens with an exact remainder, so no grant ever depends on
//! floating-point rounding and a snapshot restores the bucket to the bit. `per_second` is
//! kept as the f64 the operator gave (bincode stores its bits) and converted once, at
//! definition, to micro-tokens per second, rounded *down* with exact integer arithmetic
//! ([`micro_per_s_floor`]): the bucket never refills faster than `per_second`, so G1's rate
//! bound (`burst + per_second × window`) holds exactly. Rounding to nearest would not: 1.5e-6
//! a second would refill a third too fast, 2/3 a second a little too fast.
//!
//! Invariants:
//! - `held_units` is the sum of `holders`' units.
//! - A grant is made only when `held_units + units <= concurrent` (G1 at grant time; a
//!   lowered `concurrent` may leave `held_units` above it until holders release).
//! - `tokens_micro <= burst * 1e6`, and `refill_remainder < 1000`.
//! - A limit redefined to `concurrent = 0` keeps the holders it had (they release as
//!   usual); only its new grants hold nothing.
//!
//! Keyed limits: a keyed definition is a `Limit` that holds nothing itself; a key decided on
//! is a `Limit` of its own (`of` names the definition, the definition's `keys` names it
//! back), created by the first request that charges it and dropped as soon as it is fresh
//! again ([`Limit::is_fresh`]: nothing held or waiting, the bucket at its burst). A fresh
//! key answers exactly as a new one would, so dropping it changes no decision; the snapshot
//! holds only keys that are not fresh. A key left with nothing but a bucket below its burst
//! is kept lean instead, in its definition's key table (`machine::key_table`), until a
//! command names it again (the machine's essay, "Keyed limits").
//! - A keyed definition holds nothing, queues nothing, and its bucket stays full.
//! - Only a keyed definition has `keys`.
//!
//! Token leases (the machine's essay, "Token leases"): the shares leased out of a limit or
//! key are summed in `leased`, derived from the machine's leases and never encoded. The
//! bucket the cluster decides from is what is left: it refills at `per_second` less the
//! leased rate ([`Limit::own_rate_micro_per_s`]) and holds at most `burst` less the leased
//! caps ([`Limit::own_cap_micro`]); `tokens_micro <= own_cap_micro()` always. A limit or key
//! with a lease is neither fresh nor gone.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::command::{Fence, LimitId, SessionId, TicketId};
use super::queue::LazyQueue;

/// Micro-tokens per token.
pub const MICRO: u64 = 1_000_000;

/// A limit's definition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitSpec {
    /// Most units held at once; 0 = no cap.
    pub concurrent: u32,
    /// Refill rate as given, tokens per second; 0 = no rate. Never NaN, never negative, and
    /// -0.0 is stored as 0.0.
    pub per_second: f64,
    /// Bucket size in tokens, at least 1.
    pub burst: u64,
    /// `per_second` in micro-tokens per second, rounded down (exactly: see
    /// [`micro_per_s_floor`]).
    pub rate_micro_per_s: u64,
    /// `Some(keys_max)`: a keyed limit, one bucket or semaphore per key, at most `keys_max`
    /// keys live at once. `None`: one bucket or semaphore.
    pub keys_max: Option<u32>,
    /// Shadow mode: a part on this limit is evaluated and charged when it has room, and
    /// never refused nor queued when it has none: it passes uncharged and the would-be
    /// refusal is counted (`Limit::shadow_refusals`).
    pub shadow: bool,
}

impl LimitSpec {
    /// The spec for a definition, or why it is invalid.
    pub fn new(concurrent: u32, per_second: f64, burst: Option<u64>) -> Result<LimitSpec, String> {
        use crate::bounds::{BURST_MAX, PER_SECOND_MAX, UNITS_MAX};
        if concurrent > UNITS_MAX {
            return Err(format!(
                "concurrent {concurrent} is above the bound of {UNITS_MAX}"
            ));
        }
        if !per_second.is_finite() || !(0.0..=PER_SECOND_MAX).contains(&per_second) {
            return Err(format!(
                "per_second {per_second} is not a rate in 0..={PER_SECOND_MAX}"
            ));
        }
        let per_second = if per_second == 0.0 { 0.0 } else { per_second };
        let burst = burst.unwrap_or_else(|| (per_second.ceil() as u64).max(1));
        if burst == 0 || burst > BURST_MAX {
            return Err(format!("burst {burst} is not in 1..={BURST_MAX}"));
        }
        let rate_micro_per_s = micro_per_s_floor(per_second);
        if per_second > 0.0 && rate_micro_per_s == 0 {
            return Err(format!(
                "per_second {per_second} is below one micro-token a second"
            ));
        }
        Ok(LimitSpec {
            concurrent,
            per_second,
            burst,
            rate_micro_per_s,
            keys_max: None,
            shadow: false,
        })
    }

    /// Whether grants are capped by concurrency.
    pub fn caps_concurrency(&self) -> bool {
        self.concurrent > 0
    }

    /// Whether grants take tokens.
    pub fn rates(&self) -> bool {
        self.rate_micro_per_s > 0
    }

    /// The most units one grant can ever take, or `None` for no bound.
    pub fn max_units(&self) -> Option<u64> {
        match (self.caps_concurrency(), self.rates()) {
            (false, false) => None,
            (true, false) => Some(self.concurrent as u64),
            (false, true) => Some(self.burst),
            (true, true) => Some((self.concurrent as u64).min(self.burst)),
        }
    }
}

/// `floor(per_second × 10⁶)`, computed exactly from the f64's bits: a float product could
/// round up across an integer (0.3 × 10⁶ is 300000.0 in f64, while the f64 nearest 0.3 is
/// below 0.3), and a rate rounded up would break G1's rate bound. `per_second` must be finite
/// and in `0..=PER_SECOND_MAX`.
pub fn micro_per_s_floor(per_second: f64) -> u64 {
    assert!(
        per_second.is_finite() && per_second >= 0.0,
        "rates are finite and not negative: {per_second}"
    );
    if per_second == 0.0 {
        return 0;
    }
    let bits = per_second.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    // value = mantissa × 2^shift, exactly.
    let (mantissa, shift) = if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), exponent - 1075)
    };
    let scaled = mantissa as u128 * MICRO as u128;
    let micro = if shift >= 0 {
        scaled << shift
    } else if shift <= -128 {
        0
    } else {
        scaled >> (-shift)
    };
    u64::try_from(micro).expect("rates are bounded by PER_SECOND_MAX")
}

/// The log time a bucket of `cap_micro` refilling `rate_micro_per_s` is full again, from
/// `tokens_micro` and `refill_remainder` at its last refill `refilled_at_ms` (`u64::MAX`
/// when it never refills to its cap). A limit's ([`Limit::full_at_ms`]) and a lean key's
/// (`saved::lean_due_ms`) alike.
pub(crate) fn full_at_ms(
    cap_micro: u64,
    rate_micro_per_s: u64,
    tokens_micro: u64,
    refill_remainder: u64,
    refilled_at_ms: u64,
) -> u64 {
    let cap = cap_micro as u128 * 1000;
    let have = tokens_micro as u128 * 1000 + refill_remainder as u128;
    let rate = rate_micro_per_s as u128;
    if rate == 0 {
        return if have >= cap {
            refilled_at_ms
        } else {
            u64::MAX
        };
    }
    let wait_ms = cap.saturating_sub(have).div_ceil(rate);
    refilled_at_ms.saturating_add(u64::try_from(wait_ms).unwrap_or(u64::MAX))
}

/// A held permit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub session: SessionId,
    pub ticket: TicketId,
    pub units: u32,
    pub agent: Option<String>,
    /// Log time of the grant, ms (what "held for" is measured from). A holder restored from
    /// a version 5 snapshot, which did not keep it, has the snapshot's log clock.
    pub granted_at_ms: u64,
}

/// What a shadow limit would have refused a part for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShadowKind {
    /// No room now (what `Busy` or a wait would be).
    Busy,
    /// More units than it can ever grant (`TooLarge`).
    TooLarge,
    /// No room for a new key (`AtCapacity`).
    AtCapacity,
}

/// A shadow limit's would-be refusals, by kind, since it was defined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowRefusals {
    pub busy: u64,
    pub too_large: u64,
    pub at_capacity: u64,
}

impl ShadowRefusals {
    /// Counts one of `kind`.
    pub fn count(&mut self, kind: ShadowKind) {
        let n = match kind {
            ShadowKind::Busy => &mut self.busy,
            ShadowKind::TooLarge => &mut self.too_large,
            ShadowKind::AtCapacity => &mut self.at_capacity,
        };
        *n += 1;
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: ShadowRefusals) {
        self.busy += other.busy;
        self.too_large += other.too_large;
        self.at_capacity += other.at_capacity;
    }

    pub fn total(&self) -> u64 {
        self.busy + self.too_large + self.at_capacity
    }
}

/// A spec shared behind an [`Arc`], encoded and decoded as the spec itself: the snapshot
/// bytes do not depend on the sharing (`Machine::from_saved` shares a decoded definition's
/// spec with its keys again).
mod shared_spec {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::LimitSpec;

    pub fn serialize<S: Serializer>(spec: &Arc<LimitSpec>, s: S) -> Result<S::Ok, S::Error> {
        spec.as_ref().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<LimitSpec>, D::Error> {
        LimitSpec::deserialize(d).map(Arc::new)
    }
}

/// The token leases on one limit or key, summed (derived from the machine's leases).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Leased {
    /// The refill shares leased out, micro-tokens a second.
    pub rate_micro_per_s: u64,
    /// The holders' bucket sizes, tokens.
    pub cap: u64,
    /// How many leases.
    pub holders: u32,
}

/// What a limit can do for a request of some units now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// Grant it.
    Yes,
    /// Not until holders release.
    NeedsRelease,
    /// Not until the bucket refills, at this log time.
    NeedsTokensAt(u64),
}

/// One limit's whole state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    pub tenant: String,
    pub name: String,
    /// Shared by a keyed definition and its keys (encoded as the spec itself).
    #[serde(with = "shared_spec")]
    pub spec: Arc<LimitSpec>,
    /// Permits held, by fence.
    pub holders: BTreeMap<Fence, Holder>,
    /// Sum of `holders`' units.
    pub held_units: u64,
    /// Highest `held_units` ever reached.
    pub max_held_units: u64,
    /// Bucket balance, micro-tokens.
    pub tokens_micro: u64,
    /// Sub-micro-token refill carried to the next refill, in (micro-tokens × ms / s) units:
    /// always below 1000.
    pub refill_remainder: u64,
    /// Log time of the last refill.
    pub refilled_at_ms: u64,
    pub queue: LazyQueue,
    /// Removed by the operator; kept only until its last holder releases.
    pub removing: bool,
    /// `Some(definition)` for the state of one key of a keyed limit: then `name` is the key,
    /// `tenant` is empty (the definition's are used), and the state exists only while it
    /// differs from a fresh one ([`Limit::is_fresh`]).
    pub of: Option<LimitId>,
    /// A keyed definition's live keys, by key. Its own holders and queue stay empty and its
    /// bucket full: every request names a key.
    pub keys: BTreeMap<String, LimitId>,
    /// Requests a shadow limit would have refused (no room, too large, or no room for a new
    /// key), counted on the definition since it was defined.
    pub shadow_refusals: ShadowRefusals,
    /// Estimates taken and not yet settled, by the fence of their take: a key with one is
    /// not fresh (its settlement may return tokens).
    pub estimating: BTreeMap<Fence, u32>,
    /// Tokens settled above their estimates, summed on the definition since it was defined.
    pub overrun_tokens: u64,
    /// The token leases on this limit or key, summed. Derived, never encoded: a restore
    /// rebuilds it from the machine's leases.
    #[serde(skip)]
    pub leased: Leased,
}

impl Limit {
    /// A new limit with a full bucket, at log time `now_ms`.
    pub fn new(tenant: &str, name: &str, spec: Arc<LimitSpec>, now_ms: u64) -> Limit {
        Limit {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
            tokens_micro: spec.burst * MICRO,
            spec,
            holders: BTreeMap::new(),
            held_units: 0,
            max_held_units: 0,
            refill_remainder: 0,
            refilled_at_ms: now_ms,
            queue: LazyQueue::default(),
            removing: false,
            of: None,
            keys: BTreeMap::new(),
            shadow_refusals: ShadowRefusals::default(),
            estimating: BTreeMap::new(),
            overrun_tokens: 0,
            leased: Leased::default(),
        }
    }

    /// A fresh key `key` of keyed definition `of` (of spec `spec`), at log time `now_ms`.
    pub fn new_key(of: LimitId, key: &str, spec: Arc<LimitSpec>, now_ms: u64) -> Limit {
        Limit {
            of: Some(of),
            ..Limit::new("", key, spec, now_ms)
        }
    }

    /// Whether this is a key's state: the one kind of limit that exists only while it
    /// differs from a fresh one.
    pub fn is_key(&self) -> bool {
        self.of.is_some()
    }

    /// Whether the state is that of a fresh limit (after [`Limit::refill`] to now): nothing
    /// held, nothing waiting, the bucket full. Granting from it gives the same answers as
    /// from a new one, so a key in this state is dropped.
    pub fn is_fresh(&self) -> bool {
        self.leased.holders == 0
            && self.holders.is_empty()
            && self.queue.is_empty()
            && self.estimating.is_empty()
            && self.bucket_full()
    }

    /// Settles the estimate taken under `fence` (after [`Limit::refill`] to now) at `cost`
    /// tokens: below it the difference returns (never above the burst), above it the
    /// difference is taken as far as the bucket holds. Returns the tokens charged above
    /// the estimate.
    pub fn settle_estimate(&mut self, fence: Fence, cost: u64) -> u64 {
        let estimate = self
            .estimating
            .remove(&fence)
            .expect("a settled estimate is recorded") as u64;
        if cost <= estimate {
            self.give_back(estimate - cost);
            return 0;
        }
        let extra = cost - estimate;
        self.tokens_micro -= (extra * MICRO).min(self.tokens_micro);
        extra
    }

    /// Puts `tokens` back in the bucket (after [`Limit::refill`] to now), never above the
    /// burst: a full bucket carries no refill remainder.
    pub fn give_back(&mut self, tokens: u64) {
        let cap = self.own_cap_micro();
        let back = tokens.min(self.spec.burst) * MICRO;
        self.tokens_micro = (self.tokens_micro + back).min(cap);
        if self.tokens_micro == cap {
            self.refill_remainder = 0;
        }
    }

    fn bucket_full(&self) -> bool {
        !self.spec.rates() || self.tokens_micro == self.own_cap_micro()
    }

    /// The refill rate of the cluster's own bucket: `per_second` less the leased shares,
    /// micro-tokens a second.
    pub fn own_rate_micro_per_s(&self) -> u64 {
        self.spec
            .rate_micro_per_s
            .saturating_sub(self.leased.rate_micro_per_s)
    }

    /// The size of the cluster's own bucket: `burst` less the leased caps, micro-tokens.
    pub fn own_cap_micro(&self) -> u64 {
        self.spec.burst.saturating_sub(self.leased.cap) * MICRO
    }

    /// The log time at which the bucket is full again, counted from the last refill (the
    /// answer does not change with refills in between: the integer refill is exact).
    pub(crate) fn full_at_ms(&self) -> u64 {
        full_at_ms(
            self.own_cap_micro(),
            self.own_rate_micro_per_s(),
            self.tokens_micro,
            self.refill_remainder,
            self.refilled_at_ms,
        )
    }

    /// Replaces the spec, keeping holders and queue; the bucket is clamped to the new burst.
    pub fn redefine(&mut self, spec: Arc<LimitSpec>, now_ms: u64) {
        self.refill(now_ms);
        self.spec = spec;
        self.removing = false;
        self.tokens_micro = self.tokens_micro.min(self.own_cap_micro());
        if self.tokens_micro == self.own_cap_micro() {
            self.refill_remainder = 0;
        }
    }

    /// Brings the bucket up to `now_ms`. Exact: the remainder keeps every fraction.
    pub fn refill(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.refilled_at_ms);
        self.refilled_at_ms = self.refilled_at_ms.max(now_ms);
        let cap = self.own_cap_micro();
        let rate = self.own_rate_micro_per_s();
        if rate == 0 || self.tokens_micro >= cap {
            self.refill_remainder = 0;
            return;
        }
        let scaled = elapsed as u128 * rate as u128 + self.refill_remainder as u128;
        let added = scaled / 1000;
        let room = (cap - self.tokens_micro) as u128;
        if added >= room {
            self.tokens_micro = cap;
            self.refill_remainder = 0;
        } else {
            self.tokens_micro += added as u64;
            self.refill_remainder = (scaled % 1000) as u64;
        }
    }

    /// Whether `units` can be granted now (after [`Limit::refill`] to now).
    pub fn room_for(&self, units: u32, now_ms: u64) -> Room {
        // Saturating: this also runs on a restored state before `check` has seen it
        // (`machine::deadlines`), where the counts are whatever the bytes said.
        if self.spec.caps_concurrency()
            && self.held_units.saturating_add(units as u64) > self.spec.concurrent as u64
        {
            return Room::NeedsRelease;
        }
        if self.spec.rates() {
            let need = units as u64 * MICRO;
            if self.tokens_micro < need {
                // ms until (need - tokens) micro-tokens have accrued, counting the remainder.
                let missing = (need - self.tokens_micro) as u128 * 1000;
                let have = self.refill_remainder as u128;
                let rate = self.own_rate_micro_per_s() as u128;
                if rate == 0 {
                    // Every token of the refill is leased out: only a lease's end or
                    // return makes room, and that serves the limit.
                    return Room::NeedsTokensAt(u64::MAX);
                }
                let wait_ms = (missing - have.min(missing)).div_ceil(rate);
                return Room::NeedsTokensAt(now_ms.saturating_add(wait_ms as u64));
            }
        }
        Room::Yes
    }

    /// When time alone changes this limit, computed from the state of the last refill:
    /// - with waiters, when the refill lets the first *blocking* waiter through (the first
    ///   that has no room here; those before it are waiters of several parts that have room
    ///   here and wait for another part, see `machine::state::permits`): `None` when none
    ///   blocks, the limit does not rate, or the blocker waits for a release (which serves
    ///   the limit itself); else the log time the bucket holds its tokens;
    /// - without waiters, for a key's state with nothing held: when its bucket is full
    ///   again, the time it becomes fresh and is dropped.
    ///
    /// The machine files the limit under it (`machine::deadlines`). The bucket's integer
    /// refill does not depend on how often it is refilled, so the answer stays the same
    /// whether or not the limit is refilled again before then.
    pub fn tokens_due_ms(&self) -> Option<u64> {
        if !self.spec.rates() {
            return None;
        }
        if self.queue.is_empty() {
            return (self.is_key()
                && self.holders.is_empty()
                && self.leased.holders == 0
                && !self.bucket_full())
            .then(|| self.full_at_ms());
        }
        match self.first_blocker(self.refilled_at_ms)? {
            Room::NeedsTokensAt(at_ms) => Some(at_ms),
            _ => None,
        }
    }

    /// The room of the first waiter that has none (in service order), or `None` when every
    /// waiter has room.
    pub fn first_blocker(&self, now_ms: u64) -> Option<Room> {
        self.queue
            .iter()
            .map(|(_, w)| self.room_for(w.units, now_ms))
            .find(|room| *room != Room::Yes)
    }

    /// Takes `units` for `holder` under `fence`: tokens always (when rated), concurrency only
    /// when capped. Returns whether a permit is now held. The caller checked
    /// [`Limit::room_for`].
    pub fn grant(&mut self, fence: Fence, holder: Holder) -> bool {
        let units = holder.units as u64;
        if self.spec.rates() {
            let need = units * MICRO;
            assert!(
                self.tokens_micro >= need,
                "G1: granted {units} units with too few tokens"
            );
            self.tokens_micro -= need;
        }
        if !self.spec.caps_concurrency() {
            return false;
        }
        self.held_units += units;
        assert!(
            self.held_units <= self.spec.concurrent as u64,
            "G1: held {} > cap {} after a grant",
            self.held_units,
            self.spec.concurrent
        );
        self.max_held_units = self.max_held_units.max(self.held_units);
        if let Some((&last, _)) = self.holders.last_key_value() {
            assert!(fence > last, "fences increase: {fence} after {last}");
        }
        self.holders.insert(fence, holder);
        true
    }

    /// Frees the permit under `fence`; returns its holder.
    pub fn release(&mut self, fence: Fence) -> Option<Holder> {
        let holder = self.holders.remove(&fence)?;
        self.held_units -= holder.units as u64;
        Some(holder)
    }

    /// Whether the limit can be dropped: removed and nothing held, waiting or keyed under
    /// it; or a key's state that is fresh.
    pub fn is_gone(&self) -> bool {
        let empty = self.holders.is_empty()
            && self.queue.is_empty()
            && self.keys.is_empty()
            && self.leased.holders == 0;
        (self.removing && empty) || (self.is_key() && self.is_fresh())
    }

    /// Checks the invariants of the module doc.
    pub fn check(&self) -> Result<(), String> {
        let sum: u64 = self.holders.values().map(|h| h.units as u64).sum();
        if sum != self.held_units {
            return Err(format!(
                "limit {}: held_units {} but holders sum {sum}",
                self.name, self.held_units
            ));
        }
        if self.max_held_units < self.held_units {
            return Err(format!(
                "limit {}: max_held_units below held_units",
                self.name
            ));
        }
        if self.tokens_micro > self.own_cap_micro() || self.refill_remainder >= 1000 {
            return Err(format!("limit {}: bucket out of range", self.name));
        }
        let keyed_definition = self.spec.keys_max.is_some() && !self.is_key();
        if !keyed_definition && !self.keys.is_empty() {
            return Err(format!(
                "limit {}: keys or counts on a limit without keys",
                self.name
            ));
        }
        if keyed_definition
            && (!self.holders.is_empty()
                || !self.queue.is_empty()
                || !self.estimating.is_empty()
                || !self.bucket_full())
        {
            return Err(format!("keyed limit {}: state outside its keys", self.name));
        }

        self.queue
            .check()
            .map_err(|e| format!("limit {}: {e}", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills_exactly_with_no_lost_fractions() {
        // One token every 3 seconds, refilled in 1 ms steps: fractions must add up.
        let spec = LimitSpec::new(0, 1.0 / 3.0, Some(5)).unwrap();
        let mut l = Limit::new("t", "r", spec.into(), 0);
        l.tokens_micro = 0;
        for ms in 1..=3_000 {
            l.refill(ms);
        }
        // 333_333 micro-tokens a second, exactly, for 3 s.
        assert_eq!(l.tokens_micro, 999_999);
        assert_eq!(l.room_for(1, 3_000), Room::NeedsTokensAt(3_001));
        l.refill(3_001);
        assert_eq!(l.room_for(1, 3_001), Room::Yes);
    }

    #[test]
    fn rates_round_down_exactly() {
        assert_eq!(micro_per_s_floor(0.0), 0);
        assert_eq!(micro_per_s_floor(5.0), 5_000_000);
        assert_eq!(micro_per_s_floor(2.0 / 3.0), 666_666);
        assert_eq!(micro_per_s_floor(1.5e-6), 1);
        // The f64 nearest 0.1 is above 0.1, the one nearest 0.3 below it.
        assert_eq!(micro_per_s_floor(0.1), 100_000);
        assert_eq!(micro_per_s_floor(0.3), 299_999);
        assert_eq!(micro_per_s_floor(1e9), 1_000_000_000_000_000);
        assert_eq!(
            micro_per_s_floor(1e-6),
            0,
            "the f64 nearest 1e-6 is below it"
        );
        assert_eq!(micro_per_s_floor(f64::MIN_POSITIVE), 0);
    }

    #[test]
    fn spec_rules_and_defaults() {
        assert_eq!(LimitSpec::new(3, 0.0, None).unwrap().burst, 1);
        assert_eq!(LimitSpec::new(0, 2.5, None).unwrap().burst, 3);
        assert_eq!(
            LimitSpec::new(0, -0.0, None).unwrap().per_second.to_bits(),
            0
        );
        assert!(
            LimitSpec::new(0, f64::NAN, None)
                .unwrap_err()
                .contains("not a rate")
        );
        assert!(
            LimitSpec::new(0, 1.0, Some(0))
                .unwrap_err()
                .contains("burst 0")
        );
        assert_eq!(
            LimitSpec::new(4, 10.0, Some(2)).unwrap().max_units(),
            Some(2)
        );
    }
}
