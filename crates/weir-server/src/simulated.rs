//! The switch that runs this thread's nodes deterministically, for the simulator
//! ([`crate::sim`]).
//!
//! A node normally does blocking file work on tokio's blocking pool and writes its log from
//! a thread of its own, and reads the system clock for its incarnation and wall stamps. In a
//! simulation every node of a cluster runs on one current-thread runtime with tokio's clock
//! paused, and a run must replay exactly from its seed, so nothing may depend on how real
//! threads interleave or on what real clocks say. While this thread is switched on
//! ([`enter`]):
//! - [`blocking`] runs its work inline, on the calling task, instead of on the pool;
//! - the log writer ([`crate::raft::log_writer`]) is a task of the runtime, not a thread;
//! - [`unix_ns`] is a simulated system clock: a fixed epoch plus tokio's (paused) time since
//!   [`enter`];
//! - [`random`] draws from the simulation's seed instead of the system's entropy;
//! - a node's proposer clock runs at the rate the simulation gave that node
//!   ([`set_clock_rate`], [`clock_rate`]), as a machine whose oscillator is off would, and
//!   its wall stamps are off by the skew the simulation gave it ([`set_wall_skew`],
//!   [`wall_skew_ms`]), as a machine whose system clock is set wrong would;
//! - the snapshot files' durable steps (a file's fsync, a rename, a directory's fsync) are
//!   told to the simulation's hook ([`set_file_hook`], [`file_event`]), which keeps what a
//!   power loss would leave of them (`sim::SnapshotImages`).
//!
//! Everything else a node does with time already goes through tokio's clock
//! (`tokio::time::Instant`, sleeps, timeouts), which the paused runtime drives.
//!
//! Invariants:
//! - The switch is per thread and off unless a simulation turned it on: a node outside a
//!   simulation never sees it (a real node never calls [`enter`]).
//! - [`enter`]'s guard turns it off again when dropped, so a test thread that ran a
//!   simulation leaves no trace for the next test on that thread.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The simulated system clock's reading at [`enter`]: 2026-01-01T00:00:00Z, in ns.
pub const EPOCH_NS: u64 = 1_767_225_600_000_000_000;

thread_local! {
    /// When this thread's simulation began (tokio's clock), or `None` outside one.
    static STARTED: Cell<Option<tokio::time::Instant>> = const { Cell::new(None) };
    /// The simulation's random state (splitmix64), seeded by [`enter`].
    static RANDOM: Cell<u64> = const { Cell::new(0) };
    /// Each simulated node's clock rate, by node id.
    static RATES: RefCell<BTreeMap<u64, f64>> = const { RefCell::new(BTreeMap::new()) };
    /// Each simulated node's wall-clock skew (ms), by node id.
    static WALL_SKEWS: RefCell<BTreeMap<u64, i64>> = const { RefCell::new(BTreeMap::new()) };
    /// Where this thread's simulation hears of durable file steps ([`file_event`]).
    static FILE_HOOK: RefCell<Option<FileHook>> = const { RefCell::new(None) };
}

/// A step that decides what of a file survives a power loss.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileEvent {
    /// The file's data, as it is now, was fsynced.
    Synced(PathBuf),
    /// The file was renamed (the names are durable at the directory's next fsync).
    Renamed { from: PathBuf, to: PathBuf },
    /// The directory was fsynced: its names, as they are now, are durable.
    DirSynced(PathBuf),
}

/// What a simulation does with each [`FileEvent`].
pub type FileHook = Box<dyn Fn(FileEvent)>;

/// Gives this thread's simulation the hook that hears every [`FileEvent`] until [`enter`]'s
/// guard drops. Outside a simulation this does nothing.
pub fn set_file_hook(hook: FileHook) {
    if on() {
        FILE_HOOK.with(|h| *h.borrow_mut() = Some(hook));
    }
}

/// Whether this thread's simulation keeps what its files' syncs make durable (it gave a
/// hook, [`set_file_hook`]): then the model decides what a power loss leaves, and a real
/// fsync would only cost the run time.
pub fn models_files() -> bool {
    on() && FILE_HOOK.with(|h| h.borrow().is_some())
}

/// Tells this thread's simulation of a durable file step; nothing outside one, or when no
/// hook was given.
pub fn file_event(event: FileEvent) {
    if on() {
        FILE_HOOK.with(|h| {
            if let Some(hook) = h.borrow().as_ref() {
                hook(event);
            }
        });
    }
}

/// Turns simulation on for this thread until the guard drops, its random draws seeded by
/// `seed`. Call it inside the simulation's runtime (it reads tokio's clock).
pub fn enter(seed: u64) -> Guard {
    STARTED.with(|s| s.set(Some(tokio::time::Instant::now())));
    RANDOM.with(|r| r.set(seed));
    Guard(())
}

/// 64 random bits: from the system's entropy (`None` if it fails), or in a simulation the
/// next draw from its seed.
pub fn random() -> Option<u64> {
    if on() {
        return Some(RANDOM.with(|r| {
            // splitmix64: a full-period sequence, each output mixed from the state.
            let state = r.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
            r.set(state);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }));
    }
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// Turns simulation off for this thread when dropped.
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        STARTED.with(|s| s.set(None));
        RATES.with(|r| r.borrow_mut().clear());
        WALL_SKEWS.with(|w| w.borrow_mut().clear());
        FILE_HOOK.with(|h| *h.borrow_mut() = None);
    }
}

/// Makes node `node`'s proposer clock run at `rate` (1.0 is true time) from its next start.
/// Outside a simulation this does nothing.
pub fn set_clock_rate(node: u64, rate: f64) {
    if on() {
        RATES.with(|r| r.borrow_mut().insert(node, rate));
    }
}

/// Node `node`'s clock rate: what [`set_clock_rate`] gave it, else 1.
pub fn clock_rate(node: u64) -> f64 {
    RATES.with(|r| r.borrow().get(&node).copied().unwrap_or(1.0))
}

/// Makes node `node`'s wall stamps `skew_ms` off the simulated system clock from its next
/// start. Outside a simulation this does nothing.
pub fn set_wall_skew(node: u64, skew_ms: i64) {
    if on() {
        WALL_SKEWS.with(|w| w.borrow_mut().insert(node, skew_ms));
    }
}

/// Node `node`'s wall-clock skew, ms: what [`set_wall_skew`] gave it, else 0.
pub fn wall_skew_ms(node: u64) -> i64 {
    WALL_SKEWS.with(|w| w.borrow().get(&node).copied().unwrap_or(0))
}

/// Whether this thread runs a simulation.
pub fn on() -> bool {
    STARTED.with(|s| s.get().is_some())
}

/// The system clock in ns since the Unix epoch: the real one, or in a simulation
/// [`EPOCH_NS`] plus the simulated time since [`enter`].
pub fn unix_ns() -> u64 {
    match STARTED.with(|s| s.get()) {
        Some(started) => EPOCH_NS.saturating_add(started.elapsed().as_nanos() as u64),
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}

/// [`unix_ns`] in ms.
pub fn unix_ms() -> u64 {
    unix_ns() / 1_000_000
}

/// Runs blocking work (file reads and writes) off the runtime's workers: on tokio's blocking
/// pool, or inline in a simulation (where the simulated disk is memory and the order of
/// events must not depend on a thread).
pub async fn blocking<R: Send + 'static>(
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, tokio::task::JoinError> {
    if on() {
        Ok(work())
    } else {
        tokio::task::spawn_blocking(work).await
    }
}

/// How long a simulated fsync takes: the log writer waits this long between writing a group
/// and making it durable, the window in which a simulated crash finds it unsynced. One tick
/// of tokio's clock, which counts whole milliseconds.
pub const SIMULATED_SYNC: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_clock_is_simulated_only_inside_the_guard() {
        assert!(!on());
        let real = unix_ns();
        assert!(real > EPOCH_NS, "the real clock reads after 2026-01-01");
        {
            let _guard = enter(7);
            let draws = (random(), random());
            drop(_guard);
            let _guard = enter(7);
            assert_eq!((random(), random()), draws, "the same seed draws the same");
            assert_ne!(draws.0, draws.1);
            assert!(on());
            assert_eq!(unix_ns(), EPOCH_NS);
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            assert_eq!(unix_ms(), EPOCH_NS / 1_000_000 + 1_500);
            let here = std::thread::current().id();
            let ran_on = blocking(move || std::thread::current().id()).await.unwrap();
            assert_eq!(ran_on, here, "inline in a simulation");
            set_clock_rate(1, 1.5);
            assert_eq!((clock_rate(1), clock_rate(2)), (1.5, 1.0));
        }
        assert!(!on());
        set_clock_rate(1, 1.5);
        assert_eq!(clock_rate(1), 1.0, "rates are set only in a simulation");
        let here = std::thread::current().id();
        let ran_on = blocking(move || std::thread::current().id()).await.unwrap();
        assert_ne!(ran_on, here, "on the blocking pool outside one");
    }
}
