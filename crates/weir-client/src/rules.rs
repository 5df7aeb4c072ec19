//! Two of the session's belief rules as plain functions of time, with no I/O, so that code
//! which keeps a session's belief without this library's connections (the simulator's
//! clients, on simulated time) follows the very same rules:
//!
//! - [`keep_alive_credit`]: an acknowledged keep-alive extends the belief from the moment it
//!   was *sent*, never from when its acknowledgement arrived (the cluster may have renewed
//!   the session at any instant between, so only the send time is sure not to be later);
//! - [`told_at`]: the application is told that a permit may be lost at the belief deadline
//!   itself, not after it.
//!
//! The belief deadline itself is `session.rs`'s `deadline_after` (send time + TTL − margin).

use std::time::Duration;

use super::boot_clock::BootInstant;

/// The send time an acknowledged keep-alive is credited with, from which the belief
/// deadline is counted: `sent`, when it was sent, whatever time its acknowledgement
/// `arrived`. `every` is the session's keep-alive interval.
pub fn keep_alive_credit(sent: BootInstant, arrived: BootInstant, every: Duration) -> BootInstant {
    // PLANTED(keepalive-arrival), PLANTED(keepalive-previous)
    if weir_core::planted::is(weir_core::planted::Plant::KeepaliveArrival) {
        arrived
    } else if weir_core::planted::is(weir_core::planted::Plant::KeepalivePrevious) {
        sent - every * 2
    } else {
        sent
    }
}

/// When the application is told that a permit may be lost (`Permit::lost`,
/// `Permit::lost_reason`, the loss marked on held permits), given the belief `deadline`:
/// at the deadline itself.
pub fn told_at(deadline: BootInstant) -> BootInstant {
    // PLANTED(told-late): the application is told 3 s after the deadline.
    if weir_core::planted::is(weir_core::planted::Plant::ToldLate) {
        return deadline + Duration::from_secs(3);
    }
    deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_millis(ms))
    }

    #[test]
    fn a_keep_alive_counts_from_its_send_and_the_application_is_told_at_the_deadline() {
        assert_eq!(
            keep_alive_credit(at(10_000), at(10_900), Duration::from_millis(600)),
            at(10_000)
        );
        assert_eq!(told_at(at(12_700)), at(12_700));
    }
}
