//! A token lease's local bucket as a plain value of time, with no I/O: what a holder may
//! spend without asking the cluster. [`crate::Leased`] keeps one per lease; code that holds
//! a lease without this library's connections (the simulator's holder, on simulated time)
//! keeps one too, so both spend by the very same rules.
//!
//! The rules (the machine's essay "Token leases" says why they keep G1):
//! - The bucket's size is the lease's cap. It refills at the lease's rate, counted in whole
//!   milliseconds of the holder's clock; the part of a millisecond not yet counted carries to
//!   the next look, so a holder that looks more often than once a millisecond still refills.
//! - An increase of the share counts from the moment its reply is in hand
//!   ([`LocalBucket::adopt`]), never from when the request was sent: the cluster lowered its
//!   own refill only when it applied the entry. A decrease applies when the request is sent
//!   ([`LocalBucket::lower_to`]), the excess over the new cap given back in it.
//! - Nothing is spent at or past the session's belief deadline ([`LocalBucket::spend`]);
//!   the bucket is emptied there, since the cluster may end the lease at any later instant.
//!
//! Invariants: the level never exceeds the cap (in micro-tokens); the refill clock
//! `refilled_at` only moves forward.

use std::time::Duration;

use weir_core::machine::LeaseShare;

use crate::boot_clock::BootInstant;
use crate::session::believed_at;

/// Micro-tokens per token.
pub(crate) const MICRO: u64 = 1_000_000;

/// The holder's bucket of one lease.
#[derive(Clone, Debug)]
pub struct LocalBucket {
    pub(crate) rate_micro: u64,
    pub(crate) cap: u64,
    pub(crate) level_micro: u64,
    /// Sub-micro-token refill carried, micro-tokens × ms / s.
    remainder: u64,
    refilled_at: BootInstant,
    /// The share the cluster last granted (rate, cap), before any decrease made here since.
    granted: (u64, u64),
}

/// What [`LocalBucket::spend`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spend {
    /// Taken from the bucket.
    Spent,
    /// The bucket holds fewer tokens than asked (ask the cluster, or wait for the refill).
    Short,
    /// At or past the belief deadline: nothing is spent here, and the bucket was emptied.
    PastDeadline,
}

impl LocalBucket {
    /// An empty bucket of no share, its refill clock at `now`.
    pub fn new(now: BootInstant) -> LocalBucket {
        LocalBucket {
            rate_micro: 0,
            cap: 0,
            level_micro: 0,
            remainder: 0,
            refilled_at: now,
            granted: (0, 0),
        }
    }

    /// The share now: refill in micro-tokens a second, and the size in tokens.
    pub fn share(&self) -> (u64, u64) {
        (self.rate_micro, self.cap)
    }

    /// The micro-tokens in the bucket, as of its last refill.
    pub fn level_micro(&self) -> u64 {
        self.level_micro
    }

    /// Brings the bucket up to `now`, in whole ms (module doc).
    pub fn refill(&mut self, now: BootInstant) {
        let ms = now.saturating_since(self.refilled_at).as_millis();
        self.refilled_at = self.refilled_at + Duration::from_millis(ms as u64);
        let scaled = self.rate_micro as u128 * ms + self.remainder as u128;
        let cap = self.cap * MICRO;
        let added = u64::try_from(scaled / 1000).unwrap_or(u64::MAX);
        if self.level_micro.saturating_add(added) >= cap {
            self.level_micro = cap;
            self.remainder = 0;
        } else {
            self.level_micro += added;
            self.remainder = (scaled % 1000) as u64;
        }
    }

    /// Lowers the share to (`rate`, `cap`) where it is above them, at once (a request that
    /// asks them is being sent); returns the micro-tokens the lower cap leaves over, which
    /// the request gives back.
    pub fn lower_to(&mut self, rate: u64, cap: u64, now: BootInstant) -> u64 {
        self.refill(now);
        self.rate_micro = self.rate_micro.min(rate);
        self.cap = self.cap.min(cap);
        let kept = self.level_micro.min(self.cap * MICRO);
        let returned = self.level_micro - kept;
        self.level_micro = kept;
        returned
    }

    /// Takes the cluster's answer, arrived `now`: the share it stands at replaces the one
    /// held, and the tokens it moved here are added up to the new cap.
    pub fn adopt(&mut self, share: &LeaseShare, now: BootInstant) {
        // Refilled at the old rate up to now; the new one counts from now (the part of a ms
        // not counted is dropped: refilling it at a higher new rate would count time before
        // the reply).
        // A take that looked after `now` (the reply's arrival, read before its lock) has
        // refilled past it already: the refill clock never goes back, or that span would
        // refill twice.
        self.refill(now);
        self.refilled_at = self.refilled_at.max(now);
        // PLANTED(lease-renew-overlap): the previous share goes on beside the new one.
        let previous = self.granted;
        self.granted = (share.rate_micro_per_s, share.cap);
        self.rate_micro = share.rate_micro_per_s;
        self.cap = share.cap;
        self.level_micro = (self.level_micro + share.tokens_micro).min(self.cap * MICRO);
        if weir_core::planted::is(weir_core::planted::Plant::LeaseRenewOverlap) {
            self.rate_micro += previous.0;
            self.cap += previous.1;
        }
    }

    /// Spends `units` at `now` if the bucket holds them and the belief `deadline` (the
    /// session's: last acknowledged keep-alive's send time + TTL − margin) has not passed.
    pub fn spend(&mut self, units: u32, now: BootInstant, deadline: BootInstant) -> Spend {
        // PLANTED(lease-past-deadline): the belief deadline is not looked at.
        let past = !believed_at(deadline, now)
            && !weir_core::planted::is(weir_core::planted::Plant::LeasePastDeadline);
        if past {
            self.level_micro = 0;
            return Spend::PastDeadline;
        }
        self.refill(now);
        let need = units as u64 * MICRO;
        if self.level_micro < need {
            return Spend::Short;
        }
        self.level_micro -= need;
        Spend::Spent
    }

    /// Puts `units` back, up to the cap (what passes it is dropped, as the cluster's bucket
    /// drops it).
    pub fn give_back(&mut self, units: u32, now: BootInstant) {
        self.refill(now);
        self.level_micro = (self.level_micro + units as u64 * MICRO).min(self.cap * MICRO);
    }

    /// Empties the bucket and stops its refill: the lease no longer decides here.
    pub fn stop(&mut self) {
        self.level_micro = 0;
        self.rate_micro = 0;
    }

    /// When the next whole token is in the bucket at the present rate, if it ever is
    /// (`None`: no rate, or a size under one token).
    pub fn next_token_at(&self) -> Option<BootInstant> {
        if self.level_micro >= MICRO {
            return Some(self.refilled_at);
        }
        if self.rate_micro == 0 || self.cap == 0 {
            return None;
        }
        let missing = (MICRO - self.level_micro) as u128 * 1000;
        let ms = missing
            .saturating_sub(self.remainder as u128)
            .div_ceil(self.rate_micro as u128);
        Some(self.refilled_at + Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_us(us: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_micros(us))
    }

    fn share(rate_per_s: u64, cap: u64, tokens: u64) -> LeaseShare {
        LeaseShare {
            rate_micro_per_s: rate_per_s * MICRO,
            cap,
            tokens_micro: tokens * MICRO,
            fair_rate_micro_per_s: rate_per_s * MICRO,
            fair_cap: cap,
            duplicate: false,
        }
    }

    fn bucket(rate_per_s: u64, cap: u64) -> LocalBucket {
        let mut b = LocalBucket::new(at_us(0));
        b.adopt(&share(rate_per_s, cap, 0), at_us(0));
        b
    }

    /// A holder that looks every 100 µs refills as one that looks once: 1,000 a second for
    /// 50 ms is 50 tokens either way, never more.
    #[test]
    fn a_bucket_looked_at_more_often_than_once_a_ms_still_refills_exactly() {
        let mut often = bucket(1_000, 1_000);
        for step in 1..=500 {
            often.refill(at_us(step * 100));
        }
        let mut once = bucket(1_000, 1_000);
        once.refill(at_us(50_000));
        assert_eq!(once.level_micro, 50 * MICRO);
        assert_eq!(often.level_micro, 50 * MICRO);
        // 50.05 ms: still 50 until the 51st ms is whole.
        often.refill(at_us(50_050));
        assert_eq!(often.level_micro, 50 * MICRO);
        often.refill(at_us(51_000));
        assert_eq!(often.level_micro, 51 * MICRO);
    }

    /// A renewal's share replaces the one held: the same share renewed refills at its rate,
    /// not at twice it, and holds no more than its cap.
    #[test]
    fn a_renewed_share_replaces_the_one_held() {
        let mut b = LocalBucket::new(at_us(0));
        b.adopt(&share(10, 3, 3), at_us(0));
        assert_eq!((b.share(), b.level_micro()), ((10 * MICRO, 3), 3 * MICRO));
        b.adopt(&share(10, 3, 0), at_us(100_000));
        assert_eq!(b.share(), (10 * MICRO, 3));
        let deadline = at_us(10_000_000);
        let mut spent = 0;
        let mut now = 100_000;
        // One second after the renewal, spending whenever a token is in: the 3 held and 10
        // refilled.
        while now <= 1_100_000 {
            while b.spend(1, at_us(now), deadline) == Spend::Spent {
                spent += 1;
            }
            now += 1_000;
        }
        assert_eq!(spent, 13);
    }

    /// Nothing is spent at or past the belief deadline, and the bucket is emptied there;
    /// before it, a full bucket spends and an empty one is short.
    #[test]
    fn nothing_is_spent_at_or_past_the_belief_deadline() {
        let mut b = LocalBucket::new(at_us(0));
        b.adopt(&share(1_000, 5, 5), at_us(0));
        let deadline = at_us(2_000);
        assert_eq!(b.spend(2, at_us(1_000), deadline), Spend::Spent);
        assert_eq!(b.spend(1, at_us(2_000), deadline), Spend::PastDeadline);
        assert_eq!(b.level_micro(), 0);
        assert_eq!(b.spend(1, at_us(5_000), deadline), Spend::PastDeadline);
        // A later deadline (an acknowledged keep-alive: the lease lived on): the refill since
        // the last spend is the holder's, 4 ms at 1,000 a second.
        assert_eq!(b.spend(5, at_us(5_000), at_us(9_000)), Spend::Short);
        assert_eq!(b.spend(4, at_us(5_000), at_us(9_000)), Spend::Spent);
        assert_eq!(b.spend(1, at_us(5_000), at_us(9_000)), Spend::Short);
    }

    /// A reply read before a take that looked later is adopted without moving the refill
    /// clock back: the span between them refills once.
    #[test]
    fn a_reply_adopted_after_a_later_take_does_not_refill_twice() {
        let mut b = LocalBucket::new(at_us(0));
        b.adopt(&share(1_000, 100, 0), at_us(0));
        assert_eq!(b.spend(10, at_us(10_000), at_us(1_000_000)), Spend::Spent);
        // The renewal's answer arrived at 5 ms; its lock was taken after that take's.
        b.adopt(&share(1_000, 100, 0), at_us(5_000));
        b.refill(at_us(20_000));
        assert_eq!(b.level_micro(), 10 * MICRO, "10 ms since the take, not 15");
    }

    #[test]
    fn a_decrease_applies_at_once_and_gives_back_the_excess() {
        let mut b = LocalBucket::new(at_us(0));
        b.adopt(&share(100, 10, 10), at_us(0));
        assert_eq!(b.lower_to(50 * MICRO, 4, at_us(0)), 6 * MICRO);
        assert_eq!((b.share(), b.level_micro()), ((50 * MICRO, 4), 4 * MICRO));
        b.give_back(3, at_us(0));
        assert_eq!(b.level_micro(), 4 * MICRO, "never past the cap");
    }

    #[test]
    fn the_next_token_is_due_when_its_last_micro_token_refills() {
        let mut b = LocalBucket::new(at_us(0));
        b.adopt(&share(4, 3, 0), at_us(0));
        // 4 a second: a token each 250 ms.
        assert_eq!(b.next_token_at(), Some(at_us(250_000)));
        b.refill(at_us(100_000));
        assert_eq!(b.next_token_at(), Some(at_us(250_000)));
        b.refill(at_us(250_000));
        assert_eq!(b.next_token_at(), Some(at_us(250_000)));
        b.stop();
        assert_eq!(b.next_token_at(), None);
    }
}
