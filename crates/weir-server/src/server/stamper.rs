//! What stamps a batch: this node, this proposer's incarnation and its clock — the only
//! time the machine ever sees (docs/design.md, "Log entry": time arrives in entries).
//!
//! The log clock (`clock_ms`) is the proposer's monotonic time since it started; the wall
//! stamp (`wall_ms`) is the system clock, for reports only. Two test hooks of the partition
//! harness's `clock` nemesis skew them, read once when the proposer starts, never per batch:
//! `WEIR_TEST_CLOCK_RATE` (0.5 to 2.0) scales the log clock as a leader whose clock runs
//! fast or slow would, and `WEIR_TEST_WALL_SKEW_MS` offsets the wall stamps. They are read
//! only in builds with the test-only `planted` feature (the harness's clock nemesis runs
//! against such a build): a production node's log clock answers to nothing in its
//! environment, and one that finds them set says at start that it ignores them.
//!
//! Both clocks are read through what a simulation can drive ([`crate::simulated`]): the log
//! clock is tokio's monotonic clock (paused in a simulation), the wall stamp and the
//! incarnation the system clock or the simulated one; a simulated node's clock may also run
//! at a rate of its own ([`crate::simulated::clock_rate`], 1 outside a simulation), and its
//! wall stamps be skewed ([`crate::simulated::wall_skew_ms`], 0 outside a simulation).

use tokio::time::Instant;

use crate::raft::NodeId;
use weir_core::machine::{Batch, Command, Leadership};

/// What stamps a batch: this node, this proposer's incarnation and its clock.
pub struct Stamper {
    node: NodeId,
    /// The proposer's start: `clock_ms` counts from here.
    started: Instant,
    /// The test hook's clock rate ([`TestClock`]); 1 outside tests.
    rate: f64,
    /// The test hook's wall-stamp offset, ms ([`TestClock`]); 0 outside tests.
    wall_skew_ms: i64,
    /// This proposer's start, Unix ns (see [`Leadership::incarnation`]).
    incarnation: u64,
}

impl Stamper {
    /// A stamper for node `node`, starting its clock now and reading the test hooks once.
    pub fn new(node: NodeId) -> Stamper {
        let clock = TestClock::from_env();
        Stamper {
            node,
            started: Instant::now(),
            // PLANTED(fast-clock), PLANTED(fast-clock-small)
            rate: if weir_core::planted::is(weir_core::planted::Plant::FastClock) {
                clock.rate * 1.3
            } else if weir_core::planted::is(weir_core::planted::Plant::FastClockSmall) {
                clock.rate * 1.04
            } else {
                clock.rate
            } * crate::simulated::clock_rate(node),
            wall_skew_ms: clock
                .wall_skew_ms
                .saturating_add(crate::simulated::wall_skew_ms(node)),
            incarnation: crate::simulated::unix_ns(),
        }
    }

    /// `commands` as one batch, stamped now for leadership `term`.
    pub fn stamp(&self, term: u64, commands: Vec<Command>) -> Batch {
        Batch {
            leadership: Leadership {
                term,
                node: self.node,
                incarnation: self.incarnation,
            },
            clock_ms: (self.started.elapsed().as_secs_f64() * 1_000.0 * self.rate) as u64,
            wall_ms: crate::simulated::unix_ms().saturating_add_signed(self.wall_skew_ms),
            commands,
        }
    }
}

/// The partition harness's clock skew for this node, from its environment.
#[derive(Clone, Copy, Debug, PartialEq)]
struct TestClock {
    /// `WEIR_TEST_CLOCK_RATE`: 1 unset or outside 0.5 to 2.0.
    rate: f64,
    /// `WEIR_TEST_WALL_SKEW_MS`: 0 unset or not a number.
    wall_skew_ms: i64,
}

impl TestClock {
    /// Reads both hooks, warning when the log clock is skewed. Without the `planted`
    /// feature: true clocks, and a warning if a hook is set.
    #[cfg(not(feature = "planted"))]
    fn from_env() -> TestClock {
        for hook in ["WEIR_TEST_CLOCK_RATE", "WEIR_TEST_WALL_SKEW_MS"] {
            if std::env::var_os(hook).is_some() {
                tracing::warn!(
                    "{hook} is set but ignored: only a build with the `planted` feature has test hooks"
                );
            }
        }
        TestClock::parse(None, None)
    }

    /// Reads both hooks, warning when the log clock is skewed.
    #[cfg(feature = "planted")]
    fn from_env() -> TestClock {
        let clock = TestClock::parse(
            std::env::var("WEIR_TEST_CLOCK_RATE").ok().as_deref(),
            std::env::var("WEIR_TEST_WALL_SKEW_MS").ok().as_deref(),
        );
        if clock.rate != 1.0 {
            tracing::warn!(
                "WEIR_TEST_CLOCK_RATE = {}: this node's log-clock stamps are skewed",
                clock.rate
            );
        }
        clock
    }

    fn parse(rate: Option<&str>, wall_skew_ms: Option<&str>) -> TestClock {
        TestClock {
            rate: rate
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|r| (0.5..=2.0).contains(r))
                .unwrap_or(1.0),
            wall_skew_ms: wall_skew_ms.and_then(|v| v.parse().ok()).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_clock_is_true_unless_set_within_its_range() {
        let true_clock = TestClock {
            rate: 1.0,
            wall_skew_ms: 0,
        };
        assert_eq!(TestClock::parse(None, None), true_clock);
        assert_eq!(TestClock::parse(Some("3.0"), Some("x")), true_clock);
        let skewed = TestClock::parse(Some("1.05"), Some("-3600000"));
        assert_eq!(
            skewed,
            TestClock {
                rate: 1.05,
                wall_skew_ms: -3_600_000
            }
        );
    }
}
