//! [`BootInstant`]: a point on the clock the belief deadline is kept on, which counts the
//! time the machine spends suspended.
//!
//! `Instant` is CLOCK_MONOTONIC on Linux, which stops while the machine is suspended; the
//! cluster's clocks (and so the leases) go on meanwhile. A deadline on `Instant` would let
//! a client that resumes from a suspend believe it holds permits whose lease ran out in
//! real time. CLOCK_BOOTTIME is CLOCK_MONOTONIC plus the time suspended, so a deadline on it
//! passes during the suspend, and the first look after resuming finds it passed.
//!
//! Timers (tokio's sleeps) still run on the monotonic clock: they only decide when to
//! *look*; every decision compares against [`BootInstant::now`]. A sleep that was due
//! during a suspend wakes late, so whoever waits on the deadline also looks again at least
//! every [`LOOK_EVERY`] (see `Permit::lost`).
//!
//! Elsewhere than Linux-like kernels there is no CLOCK_BOOTTIME; there the clock is
//! `Instant` (the caveat stays, as documented in the client module doc).

use std::time::Duration;

/// Longest a wait on the belief deadline sleeps before it looks at the clock again, so a
/// deadline that passed during a suspend is noticed within this long of resuming.
pub const LOOK_EVERY: Duration = Duration::from_millis(250);

/// A point on CLOCK_BOOTTIME (since boot), or on the monotonic clock where there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(Duration);

impl BootInstant {
    /// Now.
    pub fn now() -> BootInstant {
        BootInstant(since_boot())
    }

    /// From a time since boot (for tests of the deadline arithmetic).
    pub fn from_since_boot(d: Duration) -> BootInstant {
        BootInstant(d)
    }

    /// How long after `earlier` this is (zero if it is not after).
    pub fn saturating_since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// How long from `now` until this point (zero if passed).
    pub fn remaining(self, now: BootInstant) -> Duration {
        self.saturating_since(now)
    }
}

impl std::ops::Add<Duration> for BootInstant {
    type Output = BootInstant;
    fn add(self, d: Duration) -> BootInstant {
        BootInstant(self.0 + d)
    }
}

impl std::ops::Sub<Duration> for BootInstant {
    type Output = BootInstant;
    fn sub(self, d: Duration) -> BootInstant {
        BootInstant(self.0.saturating_sub(d))
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn since_boot() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn since_boot() -> Duration {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_advances_with_real_time() {
        let a = BootInstant::now();
        let m = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let b = BootInstant::now();
        assert!(b.saturating_since(a) >= Duration::from_millis(20));
        // Without a suspend in between, the boot clock and the monotonic clock agree.
        let drift = b.saturating_since(a).abs_diff(m.elapsed());
        assert!(drift < Duration::from_millis(10), "drift {drift:?}");
    }

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let a = BootInstant::from_since_boot(Duration::from_secs(1));
        assert_eq!(
            a - Duration::from_secs(5),
            BootInstant::from_since_boot(Duration::ZERO)
        );
        assert_eq!(a.remaining(a + Duration::from_secs(1)), Duration::ZERO);
        assert_eq!(
            (a + Duration::from_secs(2)).remaining(a),
            Duration::from_secs(2)
        );
    }
}
