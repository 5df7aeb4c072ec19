//! Loopback ports for nodes that are configured before they start.
//!
//! A node's ports go into its config file before the node runs, so they cannot be the
//! kernel's pick at bind time (port 0). Binding port 0, closing it and handing the number on
//! leaves a gap in which the kernel may give that very port to another connection as its
//! ephemeral source port (a CI run failed with `client port 127.0.0.1:34175: Address already
//! in use`). So [`free_port`] picks ports *outside* the ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`), where the kernel never assigns source ports
//! on its own, and checks each candidate by binding it.
//!
//! Invariants:
//! - every port returned is outside the ephemeral range and was bindable on 127.0.0.1 when
//!   returned;
//! - one process never returns the same port twice until it has gone through the whole
//!   space (a process-wide atomic counter), so parallel tests in one process do not collide;
//! - processes start at different offsets (from their pid), so concurrent test binaries,
//!   benches and harness runs walk different parts of the space.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};

/// Lowest port handed out: above the services a developer machine tends to run, leaving
/// 12,768 ports below Linux's default ephemeral start (32768).
pub const PORT_MIN: u16 = 20_000;

/// The space used when the ephemeral range leaves less than this many ports outside it
/// (an unusual `ip_local_port_range` such as 1024-65535).
const SPACE_MIN: u32 = 1_024;

/// Linux's default ephemeral range, assumed where `/proc` does not say.
const EPHEMERAL_DEFAULT: (u16, u16) = (32_768, 60_999);

/// Spacing of the starting offsets of processes whose pids are consecutive: a process may
/// take this many ports before it walks into where its pid-neighbour started. A prime, so
/// the offsets of many pids spread over the whole space.
const PID_STRIDE: u64 = 997;

/// Ports handed out so far by this process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The kernel's ephemeral port range, inclusive.
pub fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .filter(|(lo, hi)| lo <= hi)
        .unwrap_or(EPHEMERAL_DEFAULT)
}

/// The ports [`free_port`] chooses from, as inclusive ranges, given the ephemeral range:
/// below its start; above its end if too little lies below; Linux's default below-range if
/// neither side has room.
fn space((lo, hi): (u16, u16)) -> Vec<(u16, u16)> {
    let below = vec![(PORT_MIN, lo.saturating_sub(1))];
    if lo > PORT_MIN && size(&below) >= SPACE_MIN {
        return below;
    }
    let above = vec![(hi.saturating_add(1).max(PORT_MIN), u16::MAX)];
    if hi < u16::MAX && size(&above) >= SPACE_MIN {
        return above;
    }
    vec![(PORT_MIN, EPHEMERAL_DEFAULT.0 - 1)]
}

fn size(ranges: &[(u16, u16)]) -> u32 {
    ranges
        .iter()
        .map(|(a, b)| u32::from(*b) - u32::from(*a) + 1)
        .sum()
}

/// The `n`th port of `ranges`, wrapping around.
fn nth(ranges: &[(u16, u16)], n: u64) -> u16 {
    let mut n = (n % u64::from(size(ranges))) as u32;
    for (a, b) in ranges {
        let len = u32::from(*b) - u32::from(*a) + 1;
        if n < len {
            return (u32::from(*a) + n) as u16;
        }
        n -= len;
    }
    unreachable!("n was reduced modulo the size of the ranges")
}

/// A port on 127.0.0.1 outside the kernel's ephemeral range that is free now, for a node
/// to bind later. Errs only when every port of the space is taken.
pub fn free_port() -> Result<u16, String> {
    let ranges = space(ephemeral_range());
    let total = u64::from(size(&ranges));
    let offset = u64::from(std::process::id()) * PID_STRIDE;
    for _ in 0..total {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = nth(&ranges, offset + n);
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(format!("no free port among {total} in {ranges:?}"))
}

/// `127.0.0.1:PORT` with a port from [`free_port`].
pub fn loopback_addr() -> Result<String, String> {
    Ok(format!("127.0.0.1:{}", free_port()?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let (lo, hi) = ephemeral_range();
        let mut held = vec![];
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let port = free_port().unwrap();
            assert!(!(lo..=hi).contains(&port), "{port} is in {lo}..={hi}");
            assert!(port >= PORT_MIN, "{port} below {PORT_MIN}");
            assert!(seen.insert(port), "{port} handed out twice");
            // Bindable now, and kept bound so a repeat could not pass the check above.
            held.push(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap());
        }
    }

    #[test]
    fn parallel_threads_get_distinct_ports() {
        let threads: Vec<_> = (0..8)
            .map(|_| std::thread::spawn(|| (0..50).map(|_| free_port().unwrap()).collect()))
            .collect();
        let mut all = BTreeSet::new();
        for t in threads {
            let ports: Vec<u16> = t.join().unwrap();
            for p in ports {
                assert!(all.insert(p), "{p} handed out twice");
            }
        }
        assert_eq!(all.len(), 400);
    }

    #[test]
    fn the_space_avoids_the_ephemeral_range_and_falls_back_when_it_covers_everything() {
        assert_eq!(space((32_768, 60_999)), vec![(20_000, 32_767)]);
        assert_eq!(space((1_024, 65_535)), vec![(20_000, 32_767)]);
        assert_eq!(space((10_000, 40_000)), vec![(40_001, 65_535)]);
        let two = [(20_000, 20_009), (30_000, 30_009)];
        assert_eq!(nth(&two, 0), 20_000);
        assert_eq!(nth(&two, 10), 30_000);
        assert_eq!(nth(&two, 20), 20_000);
    }
}
