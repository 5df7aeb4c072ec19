//! The memory of a live key: the heap bytes a machine holds for each key of a keyed limit
//! that differs from a fresh one, counted by this test binary's allocator on the thread
//! that builds the keys (tests run on threads of their own, so others do not count).
//!
//! The count is what the machine asks of the allocator, without the allocator's own
//! overhead: the process's RSS a key is measured by `weir bench --workload keyed-scale`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use weir_core::machine::{
    AcquireParts, Batch, Command, Definition, Leadership, Machine, Part, Priority, Reply,
};

/// The system allocator, counting on each thread the bytes it holds (allocated less freed).
struct Counting;

thread_local! {
    static HELD: Cell<i64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    // During a thread's teardown the counter may be gone; nothing then measures.
    let _ = HELD.try_with(|held| held.set(held.get() + delta));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as i64));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> i64 {
    HELD.with(Cell::get)
}

/// Applies `commands` as entry `index` at log time `clock_ms`; returns the replies.
fn apply(m: &mut Machine, index: u64, clock_ms: u64, commands: Vec<Command>) -> Vec<Reply> {
    let batch = Batch {
        leadership: Leadership {
            term: 1,
            node: 1,
            incarnation: 0,
        },
        clock_ms,
        wall_ms: clock_ms,
        commands,
    };
    m.apply(index, &batch).replies
}

fn take(session: u64, k: u64) -> Command {
    Command::AcquireParts(AcquireParts {
        session,
        ticket: k + 1,
        tenant: "t".into(),
        parts: vec![Part {
            limit: "api".into(),
            key: Some(format!("key-{k:07}")),
            units: 1,
        }],
        priority: Priority::default(),
        agent: None,
        wait: false,
        estimate: false,
    })
}

/// Heap bytes a live key of a keyed token bucket costs, over `keys` keys: the machine's
/// growth from the definition to the keys, its session closed.
fn bytes_per_live_key(keys: u64) -> i64 {
    let mut m = Machine::new();
    let definition = Definition {
        tenant: "t".into(),
        name: "api".into(),
        concurrent: 0,
        per_second: 0.001,
        burst: Some(1),
        keyed: true,
        keys_max: Some(u32::try_from(keys).expect("a key count")),
        shadow: false,
    };
    let clock = 1_000_000;
    let replies = apply(&mut m, 1, clock, vec![Command::Define(definition)]);
    assert_eq!(replies, vec![Reply::Done]);
    let session = match &apply(
        &mut m,
        2,
        clock,
        vec![Command::OpenSession { ttl_ms: 60_000 }],
    )[..]
    {
        [Reply::SessionOpened { session, .. }] => *session,
        other => panic!("open session: {other:?}"),
    };
    let before = held();
    let mut index = 2;
    for first in (0..keys).step_by(100) {
        index += 1;
        let takes = (first..(first + 100).min(keys))
            .map(|k| take(session, k))
            .collect();
        for reply in apply(&mut m, index, clock, takes) {
            assert!(matches!(reply, Reply::Granted { .. }), "{reply:?}");
        }
    }
    let close = vec![Command::CloseSession { session }];
    apply(&mut m, index + 1, clock, close);
    let grown = held() - before;
    let live = m.limit_status("t", "api").expect("defined").live_keys;
    assert_eq!(live, keys, "every key taken from is live");
    m.check().expect("the machine holds its invariants");
    grown / keys as i64
}

/// A lean key of an 11-byte name holds 39 bytes: its name, 22 bytes of bucket and name
/// end in its chunk's columns, and its share of the columns' spare room and of its chunk
/// (keys made in increasing order fill chunks whole). A key kept as a limit of its own
/// held 420.
#[test]
fn a_live_key_of_a_token_bucket_costs_at_most_its_compact_state() {
    let per_key = bytes_per_live_key(20_000);
    eprintln!("a live key holds {per_key} heap bytes");
    assert!(per_key <= 44, "{per_key} bytes a live key");
}
