//! State-machine benchmarks (criterion): apply throughput of an acquire/release mix over
//! 1,000 limits and 10,000 sessions, snapshot encode/decode at 100,000 held permits, and
//! restore of 100,000 waiters queued on one limit (a restore checks every queued ticket,
//! which must cost `n log n`, not `n²`, and take under a second).
//!
//! Also: a `Tick` over an idle machine of 10,000 sessions with finished
//! tickets, 1,000 tenants with receipts and 1,000 rated queues waiting for tokens, where
//! nothing is due (the deadline index visits nothing; a walk visits everything), and
//! building, restoring and checking a queue of 100,000 waiters on one limit (positions by
//! rank, not by counting the keys before).
//!
//! And a snapshot of ten million lean live keys (`WEIR_BENCH_LEAN_KEYS` sets how many):
//! the freeze a snapshot takes under the state lock, the encode done apart from it, and
//! what an entry applied while a frozen state is still being encoded pays (its first change
//! to each chunk of keys copies that chunk).
//!
//! Run: `cargo bench --bench machine`. Figures are recorded in docs/benchmarks.md.

use std::time::{Duration, Instant};

use criterion::SamplingMode;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_core::machine::{
    Acquire, AcquireParts, Batch, Command, Definition, Leadership, Machine, Part, Priority, Settle,
};

const LIMITS: u64 = 1_000;
const SESSIONS: u64 = 10_000;
const BATCH: usize = 256;

/// A tiny deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Feed {
    m: Machine,
    index: u64,
    clock_ms: u64,
}

impl Feed {
    fn apply(&mut self, commands: Vec<Command>) -> Duration {
        self.apply_after(1, commands)
    }

    /// Applies `commands` after `advance_ms` of the leader's clock; returns the apply time.
    fn apply_after(&mut self, advance_ms: u64, commands: Vec<Command>) -> Duration {
        self.index += 1;
        self.clock_ms += advance_ms;
        let batch = Batch {
            leadership: Leadership {
                term: 1,
                node: 1,
                incarnation: 0,
            },
            clock_ms: self.clock_ms,
            wall_ms: self.clock_ms,
            commands,
        };
        let start = Instant::now();
        let applied = self.m.apply(self.index, &batch);
        let took = start.elapsed();
        std::hint::black_box(applied);
        took
    }
}

/// A machine with `LIMITS` limits of `concurrent` and `SESSIONS` long-lived sessions.
fn setup(concurrent: u32) -> Feed {
    let mut f = Feed {
        m: Machine::new(),
        index: 0,
        clock_ms: 0,
    };
    let defines = (0..LIMITS)
        .map(|l| Command::DefineLimit {
            tenant: "bench".into(),
            name: format!("limit-{l}"),
            concurrent,
            per_second: 0.0,
            burst: None,
        })
        .collect();
    f.apply(defines);
    for chunk in (0..SESSIONS).collect::<Vec<_>>().chunks(1_000) {
        f.apply(
            chunk
                .iter()
                .map(|_| Command::OpenSession { ttl_ms: 600_000 })
                .collect(),
        );
    }
    f
}

fn acquire(session: u64, ticket: u64, limit: u64) -> Command {
    Command::Acquire(Acquire {
        session,
        ticket,
        tenant: "bench".into(),
        limit: format!("limit-{limit}"),
        units: 1,
        priority: Priority::default(),
        agent: None,
        wait: true,
    })
}

fn apply_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("acquire_release_mix_1k_limits_10k_sessions", |b| {
        let mut f = setup(8);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut next_ticket = 0u64;
        // Tickets acquired and not yet released: (session, ticket).
        let mut outstanding: std::collections::VecDeque<(u64, u64)> = Default::default();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut commands = Vec::with_capacity(BATCH);
                for _ in 0..BATCH / 2 {
                    let session = 1 + rng.below(SESSIONS);
                    next_ticket += 1;
                    commands.push(acquire(session, next_ticket, rng.below(LIMITS)));
                    outstanding.push_back((session, next_ticket));
                }
                while commands.len() < BATCH {
                    let (session, ticket) = outstanding.pop_front().expect("acquired first");
                    commands.push(Command::Release { session, ticket });
                }
                total += f.apply(commands);
            }
            total
        });
    });
    group.finish();
}

fn snapshot_100k_permits(c: &mut Criterion) {
    let mut f = setup(1_000);
    let mut ticket = 0;
    for s in 1..=SESSIONS {
        let commands = (0..10)
            .map(|i| {
                ticket += 1;
                acquire(s, ticket, (s * 10 + i) % LIMITS)
            })
            .collect();
        f.apply(commands);
    }
    let held: u64 = f.m.limits("bench").iter().map(|l| l.in_use).sum();
    assert_eq!(held, 100_000, "the scale point holds 100,000 permits");
    let bytes = f.m.snapshot();
    eprintln!("snapshot of 100,000 permits: {} bytes", bytes.len());
    let mut group = c.benchmark_group("snapshot_100k_permits");
    group.sample_size(10);
    group.bench_function("encode", |b| b.iter(|| f.m.snapshot()));
    group.bench_function("decode", |b| {
        b.iter(|| Machine::restore(&bytes).expect("valid"))
    });
    group.finish();
}

/// 100,000 tickets (the `LIMIT_WAITERS_MAX` bound) queued behind one holder of `limit-0`,
/// spread over 100 fairness keys, from 10 tickets of each session.
fn restore_100k_waiters(c: &mut Criterion) {
    let f = with_100k_waiters();
    let bytes = f.m.snapshot();
    eprintln!("snapshot of 100,000 waiters: {} bytes", bytes.len());
    let mut group = c.benchmark_group("snapshot_100k_waiters");
    group.sample_size(10);
    group.bench_function("restore", |b| {
        b.iter(|| Machine::restore(&bytes).expect("valid"))
    });
    group.finish();
}

/// A `Tick` where nothing is due, on a machine with 10,000 sessions that each keep a
/// finished ticket, 1,000 tenants that each keep a receipt, and 1,000 rated limits whose
/// queue head waits ~1,000 s for a token. The clock does not move between ticks, so nothing
/// ever comes due: what a tick costs is what it visits.
fn tick_with_nothing_due(c: &mut Criterion) {
    let mut f = setup(8);
    let rated = (0..LIMITS)
        .map(|l| Command::DefineLimit {
            tenant: "bench".into(),
            name: format!("rated-{l}"),
            concurrent: 0,
            per_second: 0.001,
            burst: Some(1),
        })
        .chain(std::iter::once(Command::DefineLimit {
            tenant: "bench".into(),
            name: "takes".into(),
            concurrent: 0,
            per_second: 1_000.0,
            burst: Some(1_000_000),
        }))
        .collect();
    f.apply(rated);
    let rate = |session: u64, ticket: u64, name: String| {
        let Command::Acquire(mut a) = acquire(session, ticket, 0) else {
            unreachable!("acquire builds an acquire")
        };
        a.limit = name;
        Command::Acquire(a)
    };
    // A finished ticket in every session (a rate take).
    for chunk in (1..=SESSIONS).collect::<Vec<_>>().chunks(1_000) {
        f.apply(chunk.iter().map(|&s| rate(s, 1, "takes".into())).collect());
    }
    // Each rated limit: its token taken, then a waiter that needs the next one.
    let waiting = (0..LIMITS)
        .flat_map(|l| {
            let s = 1 + l;
            [
                rate(s, 2, format!("rated-{l}")),
                rate(s, 3, format!("rated-{l}")),
            ]
        })
        .collect();
    f.apply(waiting);
    let receipts = (0..1_000)
        .map(|t| {
            Command::Settle(Settle {
                tenant: format!("tenant-{t}"),
                run: "r".into(),
                epoch: 1,
                period: None,
                tokens: 1,
                minor_units: 0,
                release_slot: false,
            })
        })
        .collect();
    f.apply(receipts);
    let mut group = c.benchmark_group("tick");
    group.bench_function("nothing_due_10k_sessions_1k_tenants_1k_rated_queues", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| f.apply_after(0, vec![Command::Tick]))
                .sum()
        })
    });
    group.finish();
    f.m.check().expect("the bench machine is sound");
}

/// A machine of `setup(1)` with [`queue_waiters`]'s 100,000 waiters, counted.
fn with_100k_waiters() -> Feed {
    let mut f = setup(1);
    queue_waiters(&mut f);
    let status = f.m.limit_status("bench", "limit-0").expect("defined");
    assert_eq!(status.waiting, 100_000, "the bench queues 100,000 waiters");
    f
}

/// 100,000 acquires queued on `limit-0` behind its one holder, over 100 fairness keys, in
/// entries of 1,000: the acquires of a fresh machine each time.
fn queue_waiters(f: &mut Feed) -> Duration {
    let mut took = f.apply(vec![acquire(1, 0, 0)]);
    let mut ticket = 0;
    for chunk in (1..=SESSIONS).collect::<Vec<_>>().chunks(100) {
        let commands = chunk
            .iter()
            .flat_map(|&s| (0..10).map(move |i| (s, i)))
            .map(|(s, i)| {
                ticket += 1;
                let Command::Acquire(mut a) = acquire(s, 1 + i, 0) else {
                    unreachable!("acquire builds an acquire")
                };
                a.priority.fairness_key = format!("key-{}", ticket % 100);
                Command::Acquire(a)
            })
            .collect();
        took += f.apply(commands);
    }
    took
}

/// Building a queue of 100,000 waiters (each acquire answers its position), and checking
/// the machine that holds it.
fn queue_100k_waiters(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue_100k_waiters");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("build", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let mut f = setup(1);
                    queue_waiters(&mut f)
                })
                .sum()
        })
    });
    let f = with_100k_waiters();
    group.bench_function("check", |b| b.iter(|| f.m.check().expect("sound")));
    group.finish();
}

/// A take of one token from key `k` of the keyed bucket `keys` (never waits).
fn take_key(session: u64, ticket: u64, k: u64) -> Command {
    Command::AcquireParts(AcquireParts {
        session,
        ticket,
        tenant: "bench".into(),
        parts: vec![Part {
            limit: "keys".into(),
            key: Some(format!("key-{k:08}")),
            units: 1,
        }],
        priority: Priority::default(),
        agent: None,
        wait: false,
        estimate: false,
    })
}

/// `n` lean live keys of one keyed bucket (one token in 1,000 s, from a burst of one),
/// each taken from once, in increasing order. Returns the machine, its session and the
/// next ticket.
fn with_lean_keys(n: u64) -> (Feed, u64, u64) {
    let mut f = setup(1);
    f.apply(vec![Command::Define(Definition {
        tenant: "bench".into(),
        name: "keys".into(),
        concurrent: 0,
        per_second: 0.001,
        burst: Some(1),
        keyed: true,
        keys_max: Some(u32::try_from(n).expect("a key count")),
        shadow: false,
    })]);
    let session = 1;
    let mut ticket = 0;
    for first in (0..n).step_by(4_096) {
        let mut commands: Vec<Command> = (first..(first + 4_096).min(n))
            .map(|k| {
                ticket += 1;
                take_key(session, ticket, k)
            })
            .collect();
        // The session's finished tickets are forgotten as a client's mark passes them.
        commands.push(Command::KeepAliveAcked {
            session,
            acked_below: ticket + 1,
        });
        f.apply_after(0, commands);
    }
    (f, session, ticket + 1)
}

fn snapshot_lean_keys(c: &mut Criterion) {
    let n: u64 = std::env::var("WEIR_BENCH_LEAN_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let started = Instant::now();
    let (mut f, session, mut ticket) = with_lean_keys(n);
    let live =
        f.m.limit_status("bench", "keys")
            .expect("defined")
            .live_keys;
    assert_eq!(live, n, "every key taken from is live");
    eprintln!("{n} lean keys built in {:?}", started.elapsed());
    let frozen = f.m.freeze();
    let bytes = frozen.encode();
    assert_eq!(
        bytes,
        f.m.snapshot(),
        "the frozen state encodes as the machine"
    );
    eprintln!("snapshot of {n} lean keys: {} bytes", bytes.len());
    drop(frozen);
    let mut group = c.benchmark_group("snapshot_lean_keys");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("freeze (under the state lock)", |b| {
        b.iter_with_large_drop(|| f.m.freeze())
    });
    let frozen = f.m.freeze();
    group.bench_function("encode (apart)", |b| b.iter(|| frozen.encode()));
    drop(frozen);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    group.bench_function("apply 256 takes of scattered keys while frozen", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let frozen = f.m.freeze();
                let mut commands: Vec<Command> = (0..BATCH)
                    .map(|_| {
                        ticket += 1;
                        take_key(session, ticket, rng.below(n))
                    })
                    .collect();
                commands.push(Command::KeepAliveAcked {
                    session,
                    acked_below: ticket + 1,
                });
                total += f.apply_after(0, commands);
                drop(frozen);
            }
            total
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    apply_throughput,
    snapshot_lean_keys,
    snapshot_100k_permits,
    restore_100k_waiters,
    tick_with_nothing_due,
    queue_100k_waiters
);
criterion_main!(benches);
