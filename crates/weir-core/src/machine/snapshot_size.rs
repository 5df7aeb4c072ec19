//! The snapshot arithmetic of [`crate::bounds`], a test: every count bound × the largest
//! encoding of its item, summed, fits [`SNAPSHOT_BYTES_MAX`]. Items are encoded with the
//! largest numbers and the longest names the bounds allow; each container an item brings
//! adds [`LEN_MAX`] bytes for its length prefix.

use crate::bounds::*;
use crate::codec::{self, encoded_len};
use crate::machine::command::{Fence, HaltScope, LimitId, Owner, SessionId, TicketId};
use crate::machine::key_table::{KeyBucket, KeyTable};
use crate::machine::limit::{Holder, Limit, LimitSpec, ShadowRefusals};
use crate::machine::queue;
use crate::machine::reply::{BudgetKind, Refusal};
use crate::machine::saved::SavedLimits;
use crate::machine::session::{Finished, Session, Ticket};
use crate::machine::tenant::{Receipt, RunSlot, Spend, Tenant};

/// The largest varint length prefix (a u64): an empty container's 1-byte prefix can grow
/// by this much less one.
const LEN_MAX: usize = 9;

fn name() -> String {
    "n".repeat(NAME_BYTES_MAX)
}

fn reason() -> String {
    "r".repeat(REASON_BYTES_MAX)
}

/// The largest refusal a finished ticket can keep in `Finished::Refused` (any variant
/// but `Halted`, which `Finished::refused` keeps as `Finished::Halted`).
fn refusal_bytes_max() -> usize {
    let n = name();
    [
        Refusal::UnknownLimit {
            tenant: n.clone(),
            name: n.clone(),
        },
        Refusal::UnknownSession {
            session: SessionId::MAX,
        },
        Refusal::TooLarge {
            tenant: n.clone(),
            name: n.clone(),
            units: u32::MAX,
            max: u64::MAX,
        },
        Refusal::Busy {
            retry_at_ms: Some(u64::MAX),
        },
        Refusal::LimitRemoved {
            tenant: n.clone(),
            name: n.clone(),
        },
        Refusal::QueueFull {
            tenant: n.clone(),
            name: n.clone(),
        },
        Refusal::TicketReleased {
            session: SessionId::MAX,
            ticket: TicketId::MAX,
        },
        Refusal::TooManyRuns {
            tenant: n.clone(),
            running: u32::MAX,
        },
        Refusal::BudgetExhausted {
            tenant: n.clone(),
            period: n.clone(),
            kind: BudgetKind::MinorUnits,
            spent: u64::MAX,
            held: u64::MAX,
            hold: u64::MAX,
            budget: u64::MAX,
        },
        Refusal::Conflict {
            tenant: n.clone(),
            run: n.clone(),
            epoch: u64::MAX,
        },
        Refusal::Invalid(n.repeat(4)),
        Refusal::AtCapacity {
            what: n.repeat(2),
            limit: u64::MAX,
        },
    ]
    .iter()
    .map(encoded_len)
    .max()
    .expect("candidates")
}

/// A finished ticket: its map entry and its place in the finish order.
fn finished_bytes(how: &Finished) -> usize {
    encoded_len(&(TicketId::MAX, how)) + encoded_len(&(u64::MAX, TicketId::MAX))
}

/// The largest finished ticket that is not a refusal with a text ([`Finished::is_refusal`]):
/// a rate take, a release, or a `Busy` refusal.
fn finished_small_bytes_max() -> usize {
    let taken = finished_bytes(&Finished::Taken {
        fence: Fence::MAX,
        units: u32::MAX,
    });
    let busy = finished_bytes(&Finished::Refused(Box::new(Refusal::Busy {
        retry_at_ms: Some(u64::MAX),
    })));
    taken.max(busy).max(finished_bytes(&Finished::Released))
}

fn finished_bytes_max() -> usize {
    let refused = encoded_len(&TicketId::MAX)
        + 1
        + refusal_bytes_max()
        + encoded_len(&(u64::MAX, TicketId::MAX));
    let halted = finished_bytes(&Finished::Halted {
        scope: Box::new(HaltScope::Agent(name())),
        reason: reason().into_boxed_str(),
    });
    finished_small_bytes_max().max(refused).max(halted)
}

/// A held place: a holder and its share of its ticket's session entry (a part of a request
/// of several costs a (limit, units) pair there, within this).
fn held_bytes_max() -> usize {
    let live = Ticket::Held {
        limit: LimitId::MAX,
        fence: Fence::MAX,
        units: u32::MAX,
    };
    let holder = Holder {
        session: SessionId::MAX,
        ticket: TicketId::MAX,
        units: u32::MAX,
        agent: Some(name()),
        granted_at_ms: u64::MAX,
    };
    encoded_len(&(TicketId::MAX, live)) + encoded_len(&(Fence::MAX, holder))
}

/// A waiter: its queue entry and its share of its ticket's session entry. A request of
/// several parts counts one per part against the bound (`Ticket::places`), and its session
/// entry's list costs each part a (limit, key) pair, within this.
fn queued_bytes_max() -> usize {
    // A queued ticket's session entry is at most a held one's plus a key's.
    let key_bytes = 5 + 17 + 9;
    encoded_len(&(TicketId::MAX, LimitId::MAX)) + 1 + key_bytes + queue::waiter_bytes_max()
}

fn session_bytes_max() -> usize {
    let mut s = Session::new(u64::MAX, 0, Some(Owner([u8::MAX; 32])));
    s.expires_at_ms = u64::MAX;
    s.acked_below = TicketId::MAX;
    encoded_len(&(SessionId::MAX, s)) + 3 * LEN_MAX
}

/// `l` with the largest spec and numbers, and its encoding as an entry of the limits map
/// with room for its queue's next seq and five container lengths to grow to full varints.
fn maxed_limit_bytes(mut l: Limit) -> usize {
    l.spec = std::sync::Arc::new(LimitSpec {
        concurrent: u32::MAX,
        per_second: PER_SECOND_MAX,
        burst: u64::MAX,
        rate_micro_per_s: u64::MAX,
        keys_max: Some(u32::MAX),
        shadow: true,
    });
    l.held_units = u64::MAX;
    l.max_held_units = u64::MAX;
    l.tokens_micro = u64::MAX;
    l.refill_remainder = u64::MAX;
    l.refilled_at_ms = u64::MAX;
    encoded_len(&(LimitId::MAX, l)) + 6 * LEN_MAX
}

/// A definition: its limit (tenant and name, counts of its keys' refusals and overruns) and
/// its entry in its tenant's map.
fn limit_bytes_max() -> usize {
    let mut l = Limit::new(
        &name(),
        &name(),
        LimitSpec::new(0, 0.0, None).unwrap().into(),
        0,
    );
    l.of = Some(LimitId::MAX);
    l.shadow_refusals = ShadowRefusals {
        busy: u64::MAX,
        too_large: u64::MAX,
        at_capacity: u64::MAX,
    };
    l.overrun_tokens = u64::MAX;
    // A keyed definition's entry in the map of lean key tables: its id and a length.
    let lean_table = encoded_len(&LimitId::MAX) + LEN_MAX;
    maxed_limit_bytes(l) + encoded_len(&(name(), LimitId::MAX)) + lean_table
}

/// A lean key: its name and bucket in its definition's table (`machine::key_table`).
fn lean_key_bytes_max() -> usize {
    let key = "k".repeat(KEY_BYTES_MAX);
    let b = KeyBucket {
        tokens_micro: u64::MAX,
        refill_remainder: u16::MAX,
        refilled_at_ms: u64::MAX,
    };
    let one = KeyTable::from_sorted(vec![(key, b)]).expect("one key");
    encoded_len(&one) - encoded_len(&KeyTable::default()) + LEN_MAX
}

/// Most keys kept as limits of their own: a key is one only while a permit is held on it,
/// a ticket waits on it or an estimate of a live ticket is unsettled on it (each a live
/// ticket's place), or a token lease is on it. Every other live key is lean.
const KEYS_WITH_STATE_MAX: usize = TICKETS_LIVE_MAX + TOKEN_LEASES_MAX;

/// A key kept as a limit of its own (see [`KEYS_WITH_STATE_MAX`]): its limit (no tenant,
/// the key as its name; refusals and overruns are counted on its definition) and its entry
/// in its definition's map of keys.
fn key_bytes_max() -> usize {
    let key = "k".repeat(KEY_BYTES_MAX);
    let spec = LimitSpec::new(0, 0.0, None).unwrap().into();
    let l = Limit::new_key(LimitId::MAX, &key, spec, 0);
    maxed_limit_bytes(l) + encoded_len(&(key, LimitId::MAX))
}

fn tenant_bytes_max() -> usize {
    let mut t = Tenant::default();
    t.max_running = Some(u32::MAX);
    t.budget_tokens = Some(u64::MAX);
    t.budget_minor = Some(u64::MAX);
    t.receipts_evicted = u64::MAX;
    encoded_len(&(name(), t)) + 6 * LEN_MAX
}

fn receipt_bytes_max() -> usize {
    let r = Receipt {
        period: Some(name()),
        tokens: u64::MAX,
        minor_units: u64::MAX,
        release_slot: true,
        settled_at_log_ms: u64::MAX,
    };
    2 * encoded_len(&(name(), u64::MAX)) + encoded_len(&r)
}

fn run_bytes_max() -> usize {
    let slot = RunSlot {
        admitted_at_wall_ms: u64::MAX,
        admitted_at_log_ms: u64::MAX,
        agent: Some(name()),
        hold_period: Some(name()),
        hold_tokens: u64::MAX,
        hold_minor: u64::MAX,
    };
    encoded_len(&(name(), slot))
}

fn period_bytes_max() -> usize {
    let m = u64::MAX;
    let spend = Spend {
        tokens: m,
        minor_units: m,
        held_tokens: m,
        held_minor: m,
        overrun_tokens: m,
        overrun_minor: m,
    };
    encoded_len(&(name(), spend))
}

fn halt_bytes_max() -> usize {
    encoded_len(&(HaltScope::Agent(name()), reason()))
}

/// Each bound with its item's largest encoding, and the sum.
fn worst_state() -> (Vec<(&'static str, usize, usize)>, u64) {
    let rows = vec![
        ("sessions", SESSIONS_MAX, session_bytes_max()),
        // A live ticket may end as a small finished one (a release) without a request.
        (
            "live tickets",
            TICKETS_LIVE_MAX,
            held_bytes_max().max(finished_bytes(&Finished::Released)),
        ),
        // A queued ticket may end as a finished refusal without a request (a halt).
        (
            "queued tickets",
            TICKETS_QUEUED_MAX,
            queued_bytes_max().max(finished_bytes_max()),
        ),
        (
            "finished refusals",
            FINISHED_REFUSALS_MAX,
            finished_bytes_max(),
        ),
        // The rest of the finished tickets are not refusals: a rate take or a release.
        (
            "finished, other",
            FINISHED_TICKETS_MAX - FINISHED_REFUSALS_MAX,
            finished_small_bytes_max(),
        ),
        ("limits", LIMITS_MAX, limit_bytes_max()),
        // Every live key may be lean; those with a state of their own cost the difference.
        ("live keys", KEYS_LIVE_MAX, lean_key_bytes_max()),
        (
            "keys with state",
            KEYS_WITH_STATE_MAX,
            key_bytes_max().saturating_sub(lean_key_bytes_max()),
        ),
        ("tenants", TENANTS_MAX, tenant_bytes_max()),
        ("receipts", RECEIPTS_MAX, receipt_bytes_max()),
        ("runs", RUNS_MAX, run_bytes_max()),
        ("periods", PERIODS_MAX, period_bytes_max()),
        ("halts", HALTS_MAX, halt_bytes_max()),
    ];
    let fixed = codec::HEADER_BYTES + encoded_len(&SavedLimits::default()) + 64 * LEN_MAX;
    let sum = rows
        .iter()
        .map(|&(_, n, bytes)| n as u64 * bytes as u64)
        .sum::<u64>()
        + fixed as u64;
    (rows, sum)
}

#[test]
fn worst_state_fits_a_snapshot() {
    let (rows, sum) = worst_state();
    for (what, n, bytes) in &rows {
        println!(
            "{what:>16}: {n:>9} × {bytes:>5} B = {:>5} MiB",
            (n * bytes) >> 20
        );
    }
    println!(
        "total {} MiB of {} MiB",
        sum >> 20,
        SNAPSHOT_BYTES_MAX >> 20
    );
    assert!(
        sum <= SNAPSHOT_BYTES_MAX,
        "the worst state the bounds allow ({sum} B) does not fit SNAPSHOT_BYTES_MAX \
         ({SNAPSHOT_BYTES_MAX} B)"
    );
}

// The scale target (100,000 sessions, a million held permits, one full queue) stays
// allowed: checked when the crate compiles.
const _: () = assert!(SESSIONS_MAX >= 100_000 && TICKETS_LIVE_MAX >= 1_000_000);
const _: () = assert!(TICKETS_QUEUED_MAX >= LIMIT_WAITERS_MAX);
