//! Planted bugs: negative controls for the partition harness (`jepsen/planted.sh`).
//!
//! Owns the one switch, [`is`], that each planted bug's branch asks. Without the `planted`
//! cargo feature (every default build) [`is`] is a `const fn` that answers `false`, so every
//! plant is dead code the compiler removes. With the feature, the environment variable
//! `WEIR_PLANT=<name>` (read once per process, in `weir serve` and in the client library
//! alike) switches on exactly one [`Plant`]; an unknown name panics at first use, so a
//! misspelled control never passes silently as "caught nothing".
//!
//! Invariants:
//! - At most one plant is on in a process.
//! - Each plant is one small branch marked `// PLANTED(<name>)` at the exact spot of the bug,
//!   so `grep -rn PLANTED src` lists them all.

/// One known bug the harness must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// The log clock is not frozen at a leader change: it adds the new leader's stamp.
    NoFreeze,
    /// The wall-clock gap between two leaders' batches is credited to the log clock.
    WallGap,
    /// The client's belief margin is 0: it believes until send time + TTL exactly.
    MarginZero,
    /// The client's keep-alive deadline counts from the reply's arrival, not the send.
    KeepaliveArrival,
    /// The proposer's clock runs 30% fast.
    FastClock,
    /// A grant reuses the last fence when no holder of its limit holds it.
    ReusedFence,
    /// A retried settlement with the same payload is charged again.
    SettleTwice,
    /// An acquire does not check the halts of its scope.
    HaltSkipped,
    /// A session's expiry releases its permits without serving the queues.
    ExpiryNoGrant,
    /// The Raft log's writes are never fsynced (its files' `sync` does nothing).
    UnsyncedLog,
    /// The Raft log's directory is never fsynced: a new segment's name and a removed one's
    /// absence never become durable (the files' own data still does).
    UnsyncedDir,
    /// A take of several parts refused `Busy` charges its first part's tokens anyway.
    RefusedChargesFirst,
    /// The client library tells the application that a permit may be lost 3 s after its
    /// belief deadline (`lost()`, `lost_reason()` and the loss it pushes to held permits).
    ToldLate,
    /// The proposer's clock 4% fast: the small twin of `fast-clock`.
    FastClockSmall,
    /// An apply reads the node's own wall clock instead of the entry's stamp (G4: the
    /// state then depends on something outside the log).
    LocalWall,
    /// An acknowledged keep-alive is credited to the send time of the one two before it
    /// (two keep-alive intervals earlier), so the belief deadline falls short (G9).
    KeepalivePrevious,
    /// A halt leaves the waiters in its scope queued (to be granted) instead of refusing
    /// them.
    HaltKeepsQueue,
    /// A keep-alive skips the session-owner check at the edge (G10): any principal can keep
    /// another's session alive.
    OwnerSkipped,
    /// An acquire's argument bounds are checked only in the machine, not at the edge (G8):
    /// a request breaking one is proposed, written to the log and refused there.
    EdgeUnchecked,
    /// The log clock credits 300 ms at each leader change: the small twin of `no-freeze`.
    NoFreezeSmall,
    /// The Python client tells the application that a permit may be lost 3 s late: after
    /// its belief deadline, or after it learned of the loss (its session expired, a halt).
    /// Its branches are in the Python client (`clients/python/src/weir/
    /// _planted.py`), which honours it only in an interpreter started with
    /// `-X weir_planted`; the harness passes that flag when it is a planted build.
    PythonToldLate,
    /// `weir acquire -- COMMAND` sends its command SIGTERM 3 s after the permit may be lost.
    CliToldLate,
    /// The snapshot file is replaced without fsyncs (neither the file nor its directory):
    /// a power loss can take a saved snapshot back to an older one, or to none.
    UnsyncedSnapshot,
    /// The HTTP front door's forwarder holds a forwarded request until its own request
    /// timeout (the internal client's `REQUEST_DEADLINE`) once the leader it went to failed,
    /// instead of answering as soon as the next leader did.
    ForwardHeld,
    /// The Go client tells the application that a permit may be lost 3 s after its belief
    /// deadline. Its branch is in the Go client (`clients/go/planted.go`), compiled only
    /// with the build tag `weir_planted`; the harness builds its Go holder with that tag
    /// when it is a planted build.
    GoToldLate,
    /// The TypeScript client tells the application that a permit may be lost 3 s late:
    /// after its belief deadline, or after it learned of the loss. Its branches are in the
    /// TypeScript client (`clients/typescript/src/planted.ts`), read only in a Node started
    /// with `--conditions=weir-planted`; the harness passes that flag when it is a planted
    /// build.
    TsToldLate,
    /// A lapsed token lease (its session expired or closed) refunds its cap to the
    /// cluster's bucket, as if the holder had spent none of it (the machine's essay, "Token
    /// leases", rule 3: a lapsed lease counts as spent).
    LeaseLapseRefund,
    /// A token-lease holder spends from its local bucket past its session's belief
    /// deadline, until it learns that the session ended.
    LeasePastDeadline,
    /// A token-lease renewal overlaps the lease it renews without counting it: the holder
    /// spends at the new share plus the previous one, and holds both caps.
    LeaseRenewOverlap,
    /// A node's Envoy service, deciding a request from its token leases, takes one token
    /// from each part's local bucket whatever the request's hits.
    RlsLeaseOneHit,
}

impl Plant {
    /// Every plant, in the order of `jepsen/planted.sh`.
    pub const ALL: [Plant; 30] = [
        Plant::NoFreeze,
        Plant::WallGap,
        Plant::MarginZero,
        Plant::KeepaliveArrival,
        Plant::FastClock,
        Plant::ReusedFence,
        Plant::SettleTwice,
        Plant::HaltSkipped,
        Plant::ExpiryNoGrant,
        Plant::UnsyncedLog,
        Plant::UnsyncedDir,
        Plant::RefusedChargesFirst,
        Plant::ToldLate,
        Plant::FastClockSmall,
        Plant::LocalWall,
        Plant::KeepalivePrevious,
        Plant::HaltKeepsQueue,
        Plant::OwnerSkipped,
        Plant::EdgeUnchecked,
        Plant::NoFreezeSmall,
        Plant::PythonToldLate,
        Plant::CliToldLate,
        Plant::UnsyncedSnapshot,
        Plant::ForwardHeld,
        Plant::GoToldLate,
        Plant::TsToldLate,
        Plant::LeaseLapseRefund,
        Plant::LeasePastDeadline,
        Plant::LeaseRenewOverlap,
        Plant::RlsLeaseOneHit,
    ];

    /// The name `WEIR_PLANT` takes.
    pub fn name(self) -> &'static str {
        match self {
            Plant::NoFreeze => "no-freeze",
            Plant::WallGap => "wall-gap",
            Plant::MarginZero => "margin-zero",
            Plant::KeepaliveArrival => "keepalive-arrival",
            Plant::FastClock => "fast-clock",
            Plant::ReusedFence => "reused-fence",
            Plant::SettleTwice => "settle-twice",
            Plant::HaltSkipped => "halt-skipped",
            Plant::ExpiryNoGrant => "expiry-no-grant",
            Plant::UnsyncedLog => "unsynced-log",
            Plant::UnsyncedDir => "unsynced-dir",
            Plant::RefusedChargesFirst => "refused-charges-first",
            Plant::ToldLate => "told-late",
            Plant::FastClockSmall => "fast-clock-small",
            Plant::LocalWall => "local-wall",
            Plant::KeepalivePrevious => "keepalive-previous",
            Plant::HaltKeepsQueue => "halt-keeps-queue",
            Plant::OwnerSkipped => "owner-skipped",
            Plant::EdgeUnchecked => "edge-unchecked",
            Plant::NoFreezeSmall => "no-freeze-small",
            Plant::PythonToldLate => "python-told-late",
            Plant::CliToldLate => "cli-told-late",
            Plant::UnsyncedSnapshot => "unsynced-snapshot",
            Plant::ForwardHeld => "forward-held",
            Plant::GoToldLate => "go-told-late",
            Plant::TsToldLate => "ts-told-late",
            Plant::LeaseLapseRefund => "lease-lapse-refund",
            Plant::LeasePastDeadline => "lease-past-deadline",
            Plant::LeaseRenewOverlap => "lease-renew-overlap",
            Plant::RlsLeaseOneHit => "rls-lease-one-hit",
        }
    }
}

/// Whether this build has the `planted` feature (so `WEIR_PLANT` is read at all).
pub const ENABLED: bool = cfg!(feature = "planted");

/// Whether `plant` is on in this process. Always `false` without the `planted` feature.
#[cfg(not(feature = "planted"))]
#[inline(always)]
pub const fn is(_plant: Plant) -> bool {
    false
}

/// Whether `plant` is on in this process: `WEIR_PLANT` names it.
#[cfg(feature = "planted")]
pub fn is(plant: Plant) -> bool {
    active() == Some(plant)
}

/// The plant `WEIR_PLANT` names, read once.
#[cfg(feature = "planted")]
fn active() -> Option<Plant> {
    static ACTIVE: std::sync::OnceLock<Option<Plant>> = std::sync::OnceLock::new();
    *ACTIVE.get_or_init(|| {
        let name = std::env::var("WEIR_PLANT").ok()?;
        let plant = Plant::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .unwrap_or_else(|| panic!("WEIR_PLANT={name}: no such plant"));
        tracing::warn!("WEIR_PLANT={name}: a planted bug is on");
        Some(plant)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = Plant::ALL.iter().map(|p| p.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Plant::ALL.len());
    }

    #[cfg(not(feature = "planted"))]
    #[test]
    fn default_builds_plant_nothing() {
        assert!(Plant::ALL.iter().all(|&p| !is(p)));
    }
}
