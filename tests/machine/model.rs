//! Property test: random command sequences against a small reference model, checking G1
//! and G5 after every entry.
//!
//! The model is written from the spec, not from the machine: FIFO queues (every ticket has
//! the default priority) with a blocking head, unit counting, leases of `TTL_MS` log ms
//! from the last keep-alive, ended earliest expiry first. For the concurrency limits it
//! predicts every reply and every grant; for the rate limit, whose refill arithmetic it does
//! not repeat, it checks the G1 window bound on what the machine granted, in integer
//! arithmetic against the rate as an exact fraction; the rate is drawn from [`RATES`], most
//! of them not exact in binary, and some entries let a few token-times pass at once so a
//! bucket refilling even slightly too fast is caught. Every fence ever
//! handed out must be new and larger than all before it, and a re-asked ticket must get its
//! own fence back (G5). Sessions raise their acknowledged marks at random
//! (`KeepAliveAcked`): a ticket below its session's mark that is not live is refused
//! without effect, and every ticket at or above it keeps its answer (a retried ticket the
//! client has not acknowledged never forgets it).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use weir_core::machine::{Command, Event, Refusal, Reply, SessionId, TicketId};

use crate::sim::{Sim, ask, limit};

/// The limits: (name, concurrent, per_second, burst). Index 2 is the rate limit, whose rate
/// each case draws from [`RATES`] (the 5.0 here is not used).
const LIMITS: [(&str, u32, f64, u64); 3] = [
    ("one", 1, 0.0, 1),
    ("three", 3, 0.0, 1),
    ("rate", 0, 5.0, 3),
];
const RATE: usize = 2;
/// Rates of the rate limit, tokens per second as exact fractions (numerator, denominator):
/// 5, 2/3, 0.1 and 1.5e-6. Only the first is exact in binary.
const RATES: [(u64, u64); 4] = [(5, 1), (2, 3), (1, 10), (3, 2_000_000)];
const SESSIONS: usize = 4;
const TTL_MS: u64 = 1_000;

#[derive(Clone, Debug)]
enum Op {
    /// Ticket `n` of limit `limit`: its id is `3n + limit` and it asks `1 + n % 3` units,
    /// so a ticket id always means the same request.
    Acquire {
        s: usize,
        n: u64,
        limit: usize,
        wait: bool,
    },
    Release {
        s: usize,
        n: u64,
        limit: usize,
    },
    KeepAlive {
        s: usize,
    },
    /// A keep-alive raising the session's acknowledged mark to `below` (ticket ids run to
    /// 17, so some marks pass them all).
    Ack {
        s: usize,
        below: TicketId,
    },
    Close {
        s: usize,
    },
    Reopen {
        s: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0..SESSIONS;
    prop_oneof![
        6 => (s.clone(), 0..6u64, 0..3usize, prop::bool::weighted(0.8))
            .prop_map(|(s, n, limit, wait)| Op::Acquire { s, n, limit, wait }),
        4 => (s.clone(), 0..6u64, 0..3usize).prop_map(|(s, n, limit)| Op::Release { s, n, limit }),
        3 => s.clone().prop_map(|s| Op::KeepAlive { s }),
        1 => (s.clone(), 0..20u64).prop_map(|(s, below)| Op::Ack { s, below }),
        1 => s.clone().prop_map(|s| Op::Close { s }),
        1 => s.prop_map(|s| Op::Reopen { s }),
    ]
}

/// One entry: log time that passes before it, and its ops. `token_ms` is the time the rate
/// limit takes to refill one token: now and then up to two of those pass at once.
fn entry(token_ms: u64) -> impl Strategy<Value = (u64, Vec<Op>)> {
    (
        prop_oneof![
            12 => Just(0u64),
            8 => 0..400u64,
            4 => 400..1_500u64,
            1 => 0..=2 * token_ms,
        ],
        prop::collection::vec(op(), 0..5),
    )
}

/// A log: entries of (log ms that pass before it, its ops).
type Log = Vec<(u64, Vec<Op>)>;

/// A rate from [`RATES`] and a log of entries for it.
fn case() -> impl Strategy<Value = ((u64, u64), Log)> {
    prop::sample::select(RATES.to_vec()).prop_flat_map(|(num, den)| {
        let token_ms = 1_000 * den / num;
        (
            Just((num, den)),
            prop::collection::vec(entry(token_ms), 1..60),
        )
    })
}

fn ticket_id(n: u64, limit: usize) -> TicketId {
    3 * n + limit as u64
}

fn units_of(ticket: TicketId) -> u32 {
    1 + ((ticket / 3) % 3) as u32
}

#[derive(Default)]
struct ModelLimit {
    cap: u32,
    /// (session, ticket) -> (units, fence).
    held: BTreeMap<(SessionId, TicketId), (u32, u64)>,
    /// FIFO: (session, ticket, units).
    queue: Vec<(SessionId, TicketId, u32)>,
}

impl ModelLimit {
    fn used(&self) -> u32 {
        self.held.values().map(|(u, _)| u).sum()
    }
}

#[derive(Default)]
struct Model {
    /// Session slot -> (id, expires_at_ms); abandoned sessions keep slots above SESSIONS.
    sessions: BTreeMap<usize, (SessionId, u64)>,
    limits: Vec<ModelLimit>,
    /// Tickets released: a duplicate acquire is refused.
    released: BTreeSet<(SessionId, TicketId)>,
    /// Tickets refused at once, with the refusal: a duplicate acquire answers it again.
    refused: BTreeMap<(SessionId, TicketId), Reply>,
    /// Rate tickets granted, with their fence.
    taken: BTreeMap<(SessionId, TicketId), u64>,
    /// Rate tickets the machine queued and the model has not seen leave.
    rate_queued: BTreeSet<(SessionId, TicketId)>,
    /// Every rate ticket the machine ever queued.
    rate_ever_queued: BTreeSet<(SessionId, TicketId)>,
    /// Rate grants: (log_ms, units).
    rate_grants: Vec<(u64, u32)>,
    /// Every fence handed out, and to whom.
    fences: BTreeMap<u64, (SessionId, TicketId)>,
    /// Each session's acknowledged mark (absent: 0).
    marks: BTreeMap<SessionId, TicketId>,
}

impl Model {
    fn alive(&self, sid: SessionId) -> bool {
        self.sessions.values().any(|(id, _)| *id == sid)
    }

    /// Whether `key`'s ticket is below its session's acknowledged mark.
    fn acknowledged(&self, key: (SessionId, TicketId)) -> bool {
        key.1 < self.marks.get(&key.0).copied().unwrap_or(0)
    }

    /// Grants from the head of concurrency limit `l` while it fits.
    fn serve(&mut self, l: usize, expected: &mut Vec<(SessionId, TicketId)>) {
        let lim = &mut self.limits[l];
        while let Some(&(s, t, u)) = lim.queue.first() {
            if lim.used() + u > lim.cap {
                break;
            }
            lim.queue.remove(0);
            lim.held.insert((s, t), (u, 0));
            expected.push((s, t));
        }
    }

    /// Removes a session's permits and tickets; returns the limits to serve.
    fn drop_session(&mut self, sid: SessionId) -> BTreeSet<usize> {
        let mut touched = BTreeSet::new();
        for (l, lim) in self.limits.iter_mut().enumerate() {
            let before = (lim.held.len(), lim.queue.len());
            lim.held.retain(|(s, _), _| *s != sid);
            lim.queue.retain(|(s, _, _)| *s != sid);
            if before != (lim.held.len(), lim.queue.len()) {
                touched.insert(l);
            }
        }
        self.rate_queued.retain(|(s, _)| *s != sid);
        touched
    }

    /// Ends the sessions whose leases ran out by `log_ms`, earliest expiry first, all before
    /// any limit they were on is served.
    fn expire(&mut self, log_ms: u64, expected: &mut Vec<(SessionId, TicketId)>) {
        let mut due: Vec<(u64, SessionId, usize)> = self
            .sessions
            .iter()
            .filter(|(_, (_, at))| *at <= log_ms)
            .map(|(slot, (id, at))| (*at, *id, *slot))
            .collect();
        due.sort();
        let mut touched = BTreeSet::new();
        for (_, id, slot) in due {
            self.sessions.remove(&slot);
            touched.append(&mut self.drop_session(id));
        }
        for l in touched {
            self.serve(l, expected);
        }
    }

    /// A live session releases ticket `key`: freed or withdrawn wherever it is, and each
    /// concurrency limit it left is served.
    fn release(&mut self, key: (SessionId, TicketId), expected: &mut Vec<(SessionId, TicketId)>) {
        self.released.insert(key);
        self.taken.remove(&key);
        self.rate_queued.remove(&key);
        for l in 0..RATE {
            let lim = &mut self.limits[l];
            let held = lim.held.remove(&key).is_some();
            let queued = lim.queue.len();
            lim.queue.retain(|(s, t, _)| (*s, *t) != key);
            if held || queued != lim.queue.len() {
                self.serve(l, expected);
            }
        }
    }

    fn end_session(&mut self, sid: SessionId, expected: &mut Vec<(SessionId, TicketId)>) {
        for l in self.drop_session(sid) {
            self.serve(l, expected);
        }
    }

    /// Checks the fences granted in one entry: a known fence belongs to the same ticket as
    /// before (G5); new ones are distinct and above every fence of earlier entries. (Within
    /// an entry, grants made before the commands run and grants the commands cause
    /// interleave, so only the set is checked.)
    fn fences(&mut self, seen: &[(u64, (SessionId, TicketId))]) -> Result<(), TestCaseError> {
        let last = self.fences.keys().next_back().copied().unwrap_or(0);
        for &(fence, key) in seen {
            match self.fences.get(&fence) {
                Some(owner) => prop_assert_eq!(*owner, key, "fence {} granted twice", fence),
                None => {
                    prop_assert!(fence > last, "new fence {fence} not above {last}");
                    self.fences.insert(fence, key);
                }
            }
        }
        Ok(())
    }

    /// The model's answer to an acquire on a concurrency limit, updating itself; `reply` is
    /// consulted only for the fence of a new grant.
    fn acquire(
        &mut self,
        l: usize,
        key: (SessionId, TicketId),
        wait: bool,
        reply: &Reply,
        (tenant, name): (&str, &str),
    ) -> Reply {
        let units = units_of(key.1);
        let mark = self.marks.get(&key.0).copied().unwrap_or(0);
        let lim = &mut self.limits[l];
        if let Some((u, f)) = lim.held.get_mut(&key) {
            // Granted earlier in this entry by a release or expiry: its fence arrives with
            // the entry's events, and the two are checked to agree.
            if *f == 0
                && let Reply::Granted { fence, .. } = reply
            {
                *f = *fence;
            }
            return Reply::Granted {
                fence: *f,
                units: *u,
            };
        }
        if let Some(pos) = lim.queue.iter().position(|(s, t, _)| (*s, *t) == key) {
            return Reply::Queued {
                position: pos as u32,
            };
        }
        if key.1 < mark {
            return below_mark(key, mark);
        }
        if self.released.contains(&key) {
            return Reply::Refused(Refusal::TicketReleased {
                session: key.0,
                ticket: key.1,
            });
        }
        if let Some(refusal) = self.refused.get(&key) {
            return refusal.clone();
        }
        if units > lim.cap {
            let too_large = Reply::Refused(Refusal::TooLarge {
                tenant: tenant.to_owned(),
                name: name.to_owned(),
                units,
                max: lim.cap as u64,
            });
            self.refused.insert(key, too_large.clone());
            return too_large;
        }
        if lim.queue.is_empty() && lim.used() + units <= lim.cap {
            let fence = match reply {
                Reply::Granted { fence, .. } => *fence,
                _ => 0,
            };
            lim.held.insert(key, (units, fence));
            return Reply::Granted { fence, units };
        }
        if !wait {
            let busy = Reply::Refused(Refusal::Busy { retry_at_ms: None });
            self.refused.insert(key, busy.clone());
            return busy;
        }
        lim.queue.push((key.0, key.1, units));
        Reply::Queued {
            position: lim.queue.len() as u32 - 1,
        }
    }
}

/// The refusal of an acquire naming a ticket below its session's mark that is not live.
fn below_mark((session, ticket): (SessionId, TicketId), mark: TicketId) -> Reply {
    Reply::Refused(Refusal::Invalid(format!(
        "ticket {ticket} of session {session} is below the session's acknowledged mark {mark}: \
         a new request takes a new ticket"
    )))
}

/// What the checks of one entry gather: the grants of queued tickets the model expects it
/// to make, and every fence it handed out.
#[derive(Default)]
struct Seen {
    expected_grants: Vec<(SessionId, TicketId)>,
    fences: Vec<(u64, (SessionId, TicketId))>,
}

fn run(rate: (u64, u64), entries: Vec<(u64, Vec<Op>)>) -> Result<(), TestCaseError> {
    let (mut sim, mut model) = setup(rate);
    let mut next_abandoned = SESSIONS;
    for (advance, ops) in entries {
        let log_ms = sim.m.now_ms() + advance;
        let mut seen = Seen::default();
        model.expire(log_ms, &mut seen.expected_grants);
        let commands = commands_of(&model, &ops);
        let applied = sim.entry_after(advance, commands.clone());
        prop_assert_eq!(applied.log_ms, log_ms);
        for ((op, command), reply) in ops.iter().zip(&commands).zip(&applied.replies) {
            let slots = &mut next_abandoned;
            check_reply(&mut model, (op, command, reply), log_ms, &mut seen, slots)?;
        }
        let mut got = check_events(&mut model, &applied.events, log_ms, &mut seen)?;
        model.fences(&seen.fences)?;
        got.sort();
        seen.expected_grants.sort();
        prop_assert_eq!(got, seen.expected_grants, "grants of queued tickets");
        check_limits(&sim, &model, rate)?;
    }
    Ok(())
}

/// The machine with the [`LIMITS`] (the rate limit at `rate_num / rate_den` a second) and
/// [`SESSIONS`] open sessions, and the model of it.
fn setup((rate_num, rate_den): (u64, u64)) -> (Sim, Model) {
    let mut sim = Sim::new();
    let mut model = Model::default();
    for (l, (name, concurrent, per_second, burst)) in LIMITS.into_iter().enumerate() {
        let per_second = if l == RATE {
            rate_num as f64 / rate_den as f64
        } else {
            per_second
        };
        sim.reply(
            limit("t", name)
                .concurrent(concurrent)
                .rate(per_second)
                .burst(burst),
        );
        model.limits.push(ModelLimit {
            cap: concurrent,
            ..ModelLimit::default()
        });
    }
    for slot in 0..SESSIONS {
        let id = sim.open(TTL_MS);
        model.sessions.insert(slot, (id, sim.m.now_ms() + TTL_MS));
    }
    (sim, model)
}

/// The commands of an entry's ops, each naming the session its slot has now (or an id no
/// session has, for an empty slot).
fn commands_of(model: &Model, ops: &[Op]) -> Vec<Command> {
    let sid = |s: usize| {
        model
            .sessions
            .get(&s)
            .map_or(10_000 + s as u64, |(id, _)| *id)
    };
    ops.iter()
        .map(|op| match *op {
            Op::Acquire { s, n, limit, wait } => {
                let t = ticket_id(n, limit);
                ask(sid(s), t, LIMITS[limit].0)
                    .units(units_of(t))
                    .wait(wait)
                    .into()
            }
            Op::Release { s, n, limit } => Command::Release {
                session: sid(s),
                ticket: ticket_id(n, limit),
            },
            Op::KeepAlive { s } => Command::KeepAlive { session: sid(s) },
            Op::Ack { s, below } => Command::KeepAliveAcked {
                session: sid(s),
                acked_below: below,
            },
            Op::Close { s } => Command::CloseSession { session: sid(s) },
            // A live slot is not reopened; the entry only lets time pass for it.
            Op::Reopen { s } if model.sessions.contains_key(&s) => Command::Tick,
            Op::Reopen { .. } => Command::OpenSession { ttl_ms: TTL_MS },
        })
        .collect()
}

/// Checks one command's reply against the model, and moves the model by it.
fn check_reply(
    model: &mut Model,
    (op, command, reply): (&Op, &Command, &Reply),
    log_ms: u64,
    seen: &mut Seen,
    next_abandoned: &mut usize,
) -> Result<(), TestCaseError> {
    match (op, command) {
        (Op::Acquire { limit, wait, .. }, Command::Acquire(a)) => {
            let key = (a.session, a.ticket);
            if !model.alive(a.session) {
                prop_assert_eq!(
                    reply,
                    &Reply::Refused(Refusal::UnknownSession { session: a.session })
                );
            } else if *limit == RATE {
                check_rate_acquire(model, key, *wait, reply, log_ms, seen)?;
            } else {
                let expect = model.acquire(*limit, key, *wait, reply, (&a.tenant, &a.limit));
                prop_assert_eq!(reply, &expect, "acquire {:?}", a);
                if let Reply::Granted { fence, .. } = reply {
                    seen.fences.push((*fence, key));
                }
            }
        }
        (Op::Release { .. }, Command::Release { session, ticket }) => {
            if model.alive(*session) {
                model.release((*session, *ticket), &mut seen.expected_grants);
            }
        }
        (
            Op::KeepAlive { .. } | Op::Ack { .. },
            Command::KeepAlive { session } | Command::KeepAliveAcked { session, .. },
        ) => {
            // Commands name the session their slot had when the entry was built.
            match model.sessions.values_mut().find(|(id, _)| id == session) {
                Some((_, at)) => {
                    *at = log_ms + TTL_MS;
                    prop_assert_eq!(reply, &Reply::KeptAlive { ttl_ms: TTL_MS });
                    if let Command::KeepAliveAcked { acked_below, .. } = command {
                        let mark = model.marks.entry(*session).or_default();
                        *mark = (*mark).max(*acked_below);
                    }
                }
                None => prop_assert_eq!(
                    reply,
                    &Reply::Refused(Refusal::UnknownSession { session: *session })
                ),
            }
        }
        (Op::Close { .. }, Command::CloseSession { session }) => {
            let slot = model
                .sessions
                .iter()
                .find(|(_, (id, _))| id == session)
                .map(|(s, _)| *s);
            if let Some(slot) = slot {
                model.sessions.remove(&slot);
                model.end_session(*session, &mut seen.expected_grants);
            }
        }
        (Op::Reopen { s }, Command::OpenSession { .. }) => {
            let Reply::SessionOpened { session, .. } = reply else {
                return Err(TestCaseError::fail(format!("open: {reply:?}")));
            };
            // The slot was empty when the entry was built; a session opened into it
            // earlier in this entry keeps a slot of its own until it expires.
            if let Some(old) = model.sessions.insert(*s, (*session, log_ms + TTL_MS)) {
                model.sessions.insert(*next_abandoned, old);
                *next_abandoned += 1;
            }
        }
        (Op::Reopen { .. }, Command::Tick) => {}
        other => unreachable!("{other:?}"),
    }
    Ok(())
}

/// Checks the reply to an acquire of the rate limit by a live session: the model does not
/// repeat the refill, so it checks what an answer may be and records the grants.
fn check_rate_acquire(
    model: &mut Model,
    key: (SessionId, TicketId),
    wait: bool,
    reply: &Reply,
    log_ms: u64,
    seen: &mut Seen,
) -> Result<(), TestCaseError> {
    if !model.rate_queued.contains(&key) && model.acknowledged(key) {
        prop_assert_eq!(reply, &below_mark(key, model.marks[&key.0]));
    } else if model.released.contains(&key) {
        prop_assert_eq!(
            reply,
            &Reply::Refused(Refusal::TicketReleased {
                session: key.0,
                ticket: key.1
            })
        );
    } else if let Some(f) = model.taken.get(&key) {
        let units = units_of(key.1);
        prop_assert_eq!(reply, &Reply::Granted { fence: *f, units });
    } else if let Some(refusal) = model.refused.get(&key) {
        prop_assert_eq!(reply, refusal, "a refused ticket asked again");
    } else if model.rate_queued.contains(&key) {
        // Still waiting, or granted by this entry's refill before the commands ran (the
        // event, read after the replies, carries the same fence).
        match reply {
            Reply::Queued { .. } => {}
            Reply::Granted { fence, .. } => seen.fences.push((*fence, key)),
            other => prop_assert!(false, "queued rate ticket: {:?}", other),
        }
    } else {
        match reply {
            Reply::Granted { fence, units } => {
                seen.fences.push((*fence, key));
                model.taken.insert(key, *fence);
                model.rate_grants.push((log_ms, *units));
            }
            Reply::Queued { .. } => {
                prop_assert!(wait);
                model.rate_queued.insert(key);
                model.rate_ever_queued.insert(key);
            }
            Reply::Refused(Refusal::Busy { .. }) => {
                prop_assert!(!wait);
                model.refused.insert(key, reply.clone());
            }
            other => prop_assert!(false, "rate acquire answered {:?}", other),
        }
    }
    Ok(())
}

/// Reads the grants the machine made for queued tickets in this entry, moving the model by
/// them; returns the grants of the concurrency limits' tickets.
fn check_events(
    model: &mut Model,
    events: &[Event],
    log_ms: u64,
    seen: &mut Seen,
) -> Result<Vec<(SessionId, TicketId)>, TestCaseError> {
    let mut got = vec![];
    for e in events {
        let Event::Granted {
            session,
            ticket,
            fence,
            units,
        } = e
        else {
            continue;
        };
        let key = (*session, *ticket);
        seen.fences.push((*fence, key));
        // Ticket ids name their limit. A grant made before the commands ran may be of a
        // ticket one of them released: it counts against the bucket all the same.
        if key.1 % 3 == RATE as u64 {
            model.rate_queued.remove(&key);
            prop_assert!(
                model.rate_ever_queued.contains(&key),
                "rate grant {key:?} of a ticket that never waited"
            );
            model.rate_grants.push((log_ms, *units));
            if !model.released.contains(&key) {
                model.taken.insert(key, *fence);
            }
        } else {
            got.push(key);
            for lim in &mut model.limits {
                if let Some(h) = lim.held.get_mut(&key) {
                    h.1 = *fence;
                }
            }
        }
    }
    Ok(got)
}

/// G1, and agreement with the model, after an entry.
fn check_limits(sim: &Sim, model: &Model, rate: (u64, u64)) -> Result<(), TestCaseError> {
    for (l, (name, concurrent, _, burst)) in LIMITS.iter().enumerate() {
        let st = sim.m.limit_status("t", name).unwrap();
        if l == RATE {
            prop_assert_eq!(st.waiting, model.rate_queued.len() as u64);
            check_rate_window(&model.rate_grants, *burst, rate)?;
            continue;
        }
        let lim = &model.limits[l];
        prop_assert!(
            st.in_use <= *concurrent as u64,
            "G1: {} held on {name}",
            st.in_use
        );
        prop_assert_eq!(st.in_use, lim.used() as u64, "in use on {}", name);
        prop_assert_eq!(st.waiting, lim.queue.len() as u64, "waiting on {}", name);
        for (_, f) in lim.held.values() {
            prop_assert!(
                sim.m.validate_fence("t", name, *f),
                "fence {f} held on {name}"
            );
        }
    }
    Ok(())
}

/// G1 for the rate limit: the tokens granted over any window of the log (grants as (log
/// ms, units)) never exceed `burst + rate × window`; in integers, `sum × 1000 × den <=
/// burst × 1000 × den + num × window_ms`.
fn check_rate_window(
    grants: &[(u64, u32)],
    burst: u64,
    (rate_num, rate_den): (u64, u64),
) -> Result<(), TestCaseError> {
    let scale = 1_000 * rate_den as u128;
    for (i, first) in grants.iter().enumerate() {
        let mut sum = 0u128;
        for later in &grants[i..] {
            sum += later.1 as u128;
            let window_ms = (later.0 - first.0) as u128;
            prop_assert!(
                sum * scale <= burst as u128 * scale + rate_num as u128 * window_ms,
                "G1 rate at {rate_num}/{rate_den} a second: {sum} tokens in {window_ms} ms"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn random_logs_keep_capacity_and_idempotency((rate, entries) in case()) {
        run(rate, entries)?;
    }
}

// ---- budget holds (G6) -------------------------------------------------------------------

/// The budget of the holds model's period, in tokens.
const HOLD_BUDGET: u64 = 100;

#[derive(Clone, Debug)]
enum HoldOp {
    /// Reserve run `run` holding `hold` tokens (`None`: no hold).
    Reserve { run: u8, hold: Option<u64> },
    /// Settle a new epoch of run `run`, charging `tokens`; `release` frees the slot too.
    Settle { run: u8, tokens: u64, release: bool },
    /// Release run `run`'s slot unsettled.
    Release { run: u8 },
}

fn hold_op() -> impl Strategy<Value = HoldOp> {
    prop_oneof![
        4 => (0..6u8, prop::option::weighted(0.8, 0..60u64))
            .prop_map(|(run, hold)| HoldOp::Reserve { run, hold }),
        3 => (0..6u8, 0..50u64, prop::bool::weighted(0.5))
            .prop_map(|(run, tokens, release)| HoldOp::Settle { run, tokens, release }),
        1 => (0..6u8).prop_map(|run| HoldOp::Release { run }),
    ]
}

/// The model of one tenant's period with a token budget: what each running run has left of
/// its hold, and what is settled, held and overrun, all in integers.
#[derive(Default)]
struct HoldModel {
    /// Running runs, with what is left of their hold (`None`: admitted without one).
    running: BTreeMap<u8, Option<u64>>,
    spent: u64,
    held: u64,
    overrun: u64,
    /// What settlements charged within their run's hold.
    from_holds: u64,
}

impl HoldModel {
    /// A reserve of `run` holding `hold`: `Some(Admitted)`, or `None` for a refusal by the
    /// budget. A running run is admitted again; a new one only while its hold fits beside
    /// what is settled and held (without a hold: while the spend is below the budget).
    fn reserve(&mut self, run: u8, hold: Option<u64>) -> Option<Reply> {
        if !self.running.contains_key(&run) {
            let fits = match hold {
                Some(h) => self.spent + self.held + h <= HOLD_BUDGET,
                None => self.spent < HOLD_BUDGET,
            };
            if !fits {
                return None;
            }
            self.running.insert(run, hold);
            self.held += hold.unwrap_or(0);
        }
        Some(Reply::Admitted)
    }

    /// A settlement charging `tokens` to `run`: within what is left of its hold first, the
    /// rest an overrun; `release` frees the slot too.
    fn settle(&mut self, run: u8, tokens: u64, release: bool) -> Reply {
        let mut over = 0;
        if let Some(Some(left)) = self.running.get_mut(&run) {
            let taken = tokens.min(*left);
            *left -= taken;
            self.held -= taken;
            self.from_holds += taken;
            over = tokens - taken;
        }
        self.spent += tokens;
        self.overrun += over;
        if release {
            self.release(run);
        }
        match over {
            0 => Reply::Settled { duplicate: false },
            _ => Reply::Overrun {
                tokens: over,
                minor_units: 0,
            },
        }
    }

    /// Frees `run`'s slot and what is left of its hold.
    fn release(&mut self, run: u8) -> Reply {
        if let Some(left) = self.running.remove(&run) {
            self.held -= left.unwrap_or(0);
        }
        Reply::Done
    }
}

/// The command of `op` on tenant `h`'s period `p`; a settlement takes the next `epoch`.
fn hold_command(op: &HoldOp, epoch: &mut u64) -> Command {
    let run_name = |run: u8| format!("run-{run}");
    match *op {
        HoldOp::Reserve { run, hold } => Command::Reserve {
            tenant: "h".into(),
            run: run_name(run),
            agent: None,
            period: Some("p".into()),
            hold_tokens: hold,
            hold_minor: None,
        },
        HoldOp::Settle {
            run,
            tokens,
            release,
        } => {
            *epoch += 1;
            Command::Settle(weir_core::machine::Settle {
                tenant: "h".into(),
                run: run_name(run),
                epoch: *epoch,
                period: Some("p".into()),
                tokens,
                minor_units: 0,
                release_slot: release,
            })
        }
        HoldOp::Release { run } => Command::ReleaseRun {
            tenant: "h".into(),
            run: run_name(run),
        },
    }
}

fn run_holds(ops: Vec<Vec<HoldOp>>) -> Result<(), TestCaseError> {
    let mut sim = Sim::new();
    sim.reply(Command::SetTenant {
        tenant: "h".into(),
        max_running: weir_core::machine::Change::Keep,
        budget_tokens: weir_core::machine::Change::Set(HOLD_BUDGET),
        budget_minor: weir_core::machine::Change::Keep,
    });
    let mut model = HoldModel::default();
    let mut epoch = 0u64;
    for entry in ops {
        // Many reserves in one entry are the concurrent case: each sees the holds before it.
        let commands = entry
            .iter()
            .map(|op| hold_command(op, &mut epoch))
            .collect();
        let expected: Vec<Option<Reply>> = entry
            .iter()
            .map(|op| match *op {
                HoldOp::Reserve { run, hold } => model.reserve(run, hold),
                HoldOp::Settle {
                    run,
                    tokens,
                    release,
                } => Some(model.settle(run, tokens, release)),
                HoldOp::Release { run } => Some(model.release(run)),
            })
            .collect();
        let applied = sim.entry(commands);
        for ((op, reply), want) in entry.iter().zip(&applied.replies).zip(expected) {
            match want {
                Some(want) => prop_assert_eq!(reply, &want, "{:?}", op),
                None => prop_assert!(
                    matches!(reply, Reply::Refused(Refusal::BudgetExhausted { .. })),
                    "{:?} answered {:?}",
                    op,
                    reply
                ),
            }
        }
        let spend = sim.m.spent("h", "p");
        prop_assert_eq!(
            (spend.tokens, spend.held_tokens, spend.overrun_tokens),
            (model.spent, model.held, model.overrun)
        );
        // G6: the standing holds and what was charged within holds never pass the budget,
        // however many reserves were admitted together.
        prop_assert!(
            spend.held_tokens + model.from_holds <= HOLD_BUDGET,
            "holds {} and charges within holds {} passed the budget",
            spend.held_tokens,
            model.from_holds
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn concurrent_reserves_with_holds_never_overspend(
        ops in prop::collection::vec(prop::collection::vec(hold_op(), 1..6), 1..40)
    ) {
        run_holds(ops)?;
    }
}

// ---- keys and parts (G1, all or nothing, no lost wake-up) ----------------------------------

/// The limits of the parts model, all concurrency limits: (name, concurrent, keyed).
const PART_LIMITS: [(&str, u32, bool); 3] = [("k2", 2, true), ("u3", 3, false), ("k1", 1, true)];
/// The requests: ticket `n` always asks `REQUESTS[n % REQUESTS.len()]`, parts of (limit
/// index, key, units), so a ticket id always means the same request.
const REQUESTS: [&[(usize, Option<&str>, u32)]; 8] = [
    &[(0, Some("x"), 1)],
    &[(0, Some("y"), 2)],
    &[(1, None, 2)],
    &[(2, Some("x"), 1)],
    &[(0, Some("x"), 1), (1, None, 1)],
    &[(1, None, 2), (2, Some("x"), 1)],
    &[(0, Some("y"), 1), (1, None, 1), (2, Some("y"), 1)],
    &[(2, Some("y"), 1), (0, Some("x"), 2)],
];
const PART_SESSIONS: usize = 3;

#[derive(Clone, Debug)]
enum PartOp {
    Acquire { s: usize, n: u64, wait: bool },
    Release { s: usize, n: u64 },
    Close { s: usize },
    KeepAlive { s: usize },
}

fn part_op() -> impl Strategy<Value = PartOp> {
    let s = 0..PART_SESSIONS;
    prop_oneof![
        6 => (s.clone(), 0..16u64, prop::bool::weighted(0.8))
            .prop_map(|(s, n, wait)| PartOp::Acquire { s, n, wait }),
        4 => (s.clone(), 0..16u64).prop_map(|(s, n)| PartOp::Release { s, n }),
        1 => s.clone().prop_map(|s| PartOp::Close { s }),
        2 => s.prop_map(|s| PartOp::KeepAlive { s }),
    ]
}

/// (limit index, key) of one part's limit state.
type Place = (usize, Option<&'static str>);

/// The model: which tickets hold (with their fence) and which wait, and each place's FIFO
/// queue (every ticket has the default priority, so each queue serves in arrival order).
#[derive(Default)]
struct PartModel {
    held: BTreeMap<(SessionId, TicketId), u64>,
    waiting: BTreeSet<(SessionId, TicketId)>,
    queues: BTreeMap<Place, Vec<(SessionId, TicketId)>>,
    fences: BTreeSet<u64>,
    /// The largest fence of the entries before this one: every new fence is above it.
    fences_before: u64,
    released_fences: BTreeSet<u64>,
    /// Tickets refused (and not released since), with the refusal: asked again, the same.
    refused: BTreeMap<(SessionId, TicketId), Reply>,
}

fn request_of(ticket: TicketId) -> &'static [(usize, Option<&'static str>, u32)] {
    REQUESTS[ticket as usize % REQUESTS.len()]
}

impl PartModel {
    fn in_use(&self, place: Place) -> u32 {
        self.held
            .keys()
            .flat_map(|&(_, t)| request_of(t))
            .filter(|(l, k, _)| (*l, *k) == place)
            .map(|(_, _, u)| u)
            .sum()
    }

    fn leave_queues(&mut self, key: (SessionId, TicketId)) {
        self.waiting.remove(&key);
        for q in self.queues.values_mut() {
            q.retain(|k| *k != key);
        }
    }

    fn grant(&mut self, key: (SessionId, TicketId), fence: u64) -> Result<(), TestCaseError> {
        self.leave_queues(key);
        // Within an entry grants by events and by replies interleave: only the set counts.
        prop_assert!(
            fence > self.fences_before && self.fences.insert(fence),
            "fence {fence} not new and above every earlier entry's"
        );
        self.held.insert(key, fence);
        Ok(())
    }

    fn end(&mut self, key: (SessionId, TicketId)) {
        self.leave_queues(key);
        if let Some(f) = self.held.remove(&key) {
            self.released_fences.insert(f);
        }
    }

    fn end_session(&mut self, sid: SessionId) {
        self.refused.retain(|(s, _), _| *s != sid);
        let keys: Vec<_> = self
            .held
            .keys()
            .chain(self.waiting.iter())
            .filter(|(s, _)| *s == sid)
            .copied()
            .collect();
        for key in keys {
            self.end(key);
        }
    }
}

fn run_parts(entries: Vec<(u64, Vec<PartOp>)>) -> Result<(), TestCaseError> {
    let mut sim = Sim::new();
    for (name, concurrent, keyed) in PART_LIMITS {
        let l = limit("t", name).concurrent(concurrent);
        sim.reply(if keyed { l.keyed() } else { l });
    }
    let mut sessions: Vec<SessionId> = (0..PART_SESSIONS).map(|_| sim.open(TTL_MS)).collect();
    let mut model = PartModel::default();
    for (advance, ops) in entries {
        let commands: Vec<Command> = ops
            .iter()
            .map(|op| match *op {
                PartOp::Acquire { s, n, wait } => {
                    let parts = request_of(n);
                    let (l, key, units) = parts[0];
                    let mut a = ask(sessions[s], n, PART_LIMITS[l].0)
                        .units(units)
                        .wait(wait);
                    if let Some(k) = key {
                        a = a.key(k);
                    }
                    for &(l, key, units) in &parts[1..] {
                        a = a.and(PART_LIMITS[l].0, key, units);
                    }
                    a.into()
                }
                PartOp::Release { s, n } => Command::Release {
                    session: sessions[s],
                    ticket: n,
                },
                PartOp::Close { s } => Command::CloseSession {
                    session: sessions[s],
                },
                PartOp::KeepAlive { s } => Command::KeepAlive {
                    session: sessions[s],
                },
            })
            .collect();
        let applied = sim.entry_after(advance, commands.clone());
        // Sessions that expired at the start of the entry end first.
        for e in &applied.events {
            if let Event::SessionExpired { session } = e {
                model.end_session(*session);
            }
        }
        for (command, reply) in commands.iter().zip(&applied.replies) {
            match command {
                Command::Acquire(_) | Command::AcquireParts(_) => {
                    let (session, ticket) = match command {
                        Command::Acquire(a) => (a.session, a.ticket),
                        Command::AcquireParts(a) => (a.session, a.ticket),
                        _ => unreachable!(),
                    };
                    let key = (session, ticket);
                    match reply {
                        Reply::Granted { fence, .. } => {
                            prop_assert!(
                                !model.refused.contains_key(&key),
                                "{key:?} granted after its refusal"
                            );
                            if let Some(f) = model.held.get(&key) {
                                prop_assert_eq!(f, fence, "G5: a held ticket keeps its fence");
                            } else {
                                // New, or granted earlier in this entry (its event agrees).
                                let waited = model.waiting.contains(&key);
                                model.grant(key, *fence)?;
                                if waited {
                                    model.fences.remove(fence);
                                    model.held.remove(&key);
                                    model.waiting.insert(key);
                                }
                            }
                        }
                        Reply::Queued { .. } => {
                            if model.waiting.insert(key) {
                                for &(l, k, _) in request_of(ticket) {
                                    model.queues.entry((l, k)).or_default().push(key);
                                }
                            }
                        }
                        Reply::Refused(refusal) => {
                            let wait = matches!(command, Command::Acquire(a) if a.wait)
                                || matches!(command, Command::AcquireParts(a) if a.wait);
                            let busy = matches!(refusal, Refusal::Busy { .. });
                            if let Some(first) = model.refused.get(&key) {
                                prop_assert_eq!(first, reply, "{:?} asked again", key);
                            } else {
                                prop_assert!(!(wait && busy), "a waiting request answered Busy");
                                model.refused.insert(key, reply.clone());
                            }
                        }
                        other => prop_assert!(false, "acquire answered {:?}", other),
                    }
                }
                Command::Release { session, ticket } => {
                    model.refused.remove(&(*session, *ticket));
                    model.end((*session, *ticket));
                }
                Command::CloseSession { session } => model.end_session(*session),
                _ => {}
            }
        }
        for e in &applied.events {
            match e {
                Event::Granted {
                    session,
                    ticket,
                    fence,
                    ..
                } if model.waiting.contains(&(*session, *ticket)) => {
                    model.grant((*session, *ticket), *fence)?;
                }
                Event::Refused {
                    session, ticket, ..
                } => model.end((*session, *ticket)),
                _ => {}
            }
        }
        // Reopen the sessions that ended, so the log keeps its clients.
        for sid in sessions.iter_mut() {
            if sim.m.session_owner(*sid).is_none() {
                *sid = sim.open(TTL_MS);
            }
        }
        check_parts(&sim, &model)?;
        model.fences_before = model.fences.last().copied().unwrap_or(0);
    }
    Ok(())
}

/// The checks after every entry: per place, G1 and the machine's counts against the
/// model's; every held ticket holds on all its parts; no waiting ticket could be granted
/// (some part has no room for it, or a waiter ahead of it there has none); a key lives
/// exactly while something holds or waits on it.
fn check_parts(sim: &Sim, model: &PartModel) -> Result<(), TestCaseError> {
    for (l, (name, cap, keyed)) in PART_LIMITS.iter().enumerate() {
        let places: Vec<Place> = if *keyed {
            vec![(l, Some("x")), (l, Some("y"))]
        } else {
            vec![(l, None)]
        };
        let mut live_keys = vec![];
        for place in places {
            let status = match place.1 {
                Some(k) => sim.m.key_status("t", name, k).unwrap(),
                None => sim.m.limit_status("t", name).unwrap(),
            };
            let in_use = model.in_use(place);
            let waiting = model.queues.get(&place).map_or(0, Vec::len);
            prop_assert!(status.in_use <= *cap as u64, "G1 on {:?}", place);
            prop_assert_eq!(status.in_use, in_use as u64, "in use on {:?}", place);
            prop_assert_eq!(status.waiting, waiting as u64, "waiting on {:?}", place);
            if let Some(k) = place.1
                && (in_use > 0 || waiting > 0)
            {
                live_keys.push(k.to_owned());
            }
        }
        if *keyed {
            prop_assert_eq!(
                sim.m.keys("t", name).unwrap(),
                live_keys,
                "live keys of {}",
                name
            );
        }
    }
    for (&(_, ticket), &fence) in &model.held {
        for &(l, _, _) in request_of(ticket) {
            prop_assert!(
                sim.m.validate_fence("t", PART_LIMITS[l].0, fence),
                "all or nothing: fence {fence} not held on {}",
                PART_LIMITS[l].0
            );
        }
    }
    for &fence in &model.released_fences {
        for (name, _, _) in PART_LIMITS {
            prop_assert!(
                !sim.m.validate_fence("t", name, fence),
                "released {fence} held"
            );
        }
    }
    // No lost wake-up (G7): a waiting ticket has a part without room for it or behind a
    // waiter there without room.
    for &(session, ticket) in &model.waiting {
        let blocked = request_of(ticket).iter().any(|&(l, k, units)| {
            let cap = PART_LIMITS[l].1;
            let in_use = model.in_use((l, k));
            let queue = &model.queues[&(l, k)];
            in_use + units > cap
                || queue
                    .iter()
                    .take_while(|w| **w != (session, ticket))
                    .any(|w| {
                        let u = request_of(w.1)
                            .iter()
                            .find(|p| (p.0, p.1) == (l, k))
                            .unwrap()
                            .2;
                        in_use + u > cap
                    })
        });
        prop_assert!(
            blocked,
            "ticket {}/{} waits with room on every part",
            session,
            ticket
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn random_logs_of_keys_and_parts_keep_capacity_atomicity_and_wake_ups(
        entries in prop::collection::vec(
            (prop_oneof![6 => Just(0u64), 2 => 0..600u64, 1 => 600..1_500u64],
             prop::collection::vec(part_op(), 0..5)),
            1..50,
        )
    ) {
        run_parts(entries)?;
    }
}

// ---- ApplyLimits against a map of definitions ------------------------------------------------
//
// The reference: a tenant's limits are a map name → (concurrent, per_second). An apply of
// a file (a map of the same) creates the names new to it, changes those whose spec differs,
// leaves the equal ones, and with prune removes the rest; one invalid definition (a burst of
// 0) refuses it all and the map stays. The machine's reply, its dry run and its limits
// after each apply must equal the model's.

/// A file: up to five of six names, each with a small spec; `bad` names one invalid.
#[derive(Clone, Debug)]
struct ApplyOp {
    file: BTreeMap<char, (u32, u32)>,
    prune: bool,
    bad: Option<char>,
}

fn apply_op() -> impl Strategy<Value = ApplyOp> {
    let spec = (0u32..3, 0u32..3);
    (
        prop::collection::btree_map(prop::char::range('a', 'f'), spec, 0..5),
        any::<bool>(),
        prop::option::weighted(0.15, prop::char::range('a', 'f')),
    )
        .prop_map(|(file, prune, bad)| ApplyOp { file, prune, bad })
}

fn apply_command(op: &ApplyOp) -> Command {
    let mut definitions: Vec<_> = op
        .file
        .iter()
        .map(|(name, (c, r))| {
            let d = limit("t", &name.to_string()).concurrent(*c).rate(*r as f64);
            d.definition()
        })
        .collect();
    if let Some(bad) = op.bad.filter(|b| !op.file.contains_key(b)) {
        definitions.push(limit("t", &bad.to_string()).rate(1.0).burst(0).definition());
    }
    Command::ApplyLimits {
        tenant: "t".into(),
        definitions,
        prune: op.prune,
    }
}

/// The model's change for `op`, or `None` when it is refused; applies it to `model`.
fn model_apply(model: &mut BTreeMap<char, (u32, u32)>, op: &ApplyOp) -> Option<[Vec<String>; 4]> {
    if op.bad.is_some_and(|b| !op.file.contains_key(&b)) {
        return None;
    }
    let mut change: [Vec<String>; 4] = Default::default();
    for (name, spec) in &op.file {
        let kind = match model.insert(*name, *spec) {
            None => 0,
            Some(old) if old != *spec => 1,
            Some(_) => 3,
        };
        change[kind].push(name.to_string());
    }
    if op.prune {
        let gone: Vec<char> = model
            .keys()
            .filter(|n| !op.file.contains_key(n))
            .copied()
            .collect();
        for name in gone {
            model.remove(&name);
            change[2].push(name.to_string());
        }
    }
    Some(change)
}

fn run_applies(ops: Vec<ApplyOp>) -> Result<(), TestCaseError> {
    let mut sim = Sim::new();
    let mut model = BTreeMap::new();
    for op in &ops {
        let command = apply_command(op);
        let Command::ApplyLimits { definitions, .. } = &command else {
            unreachable!()
        };
        let dry = sim.m.apply_dry_run("t", definitions, op.prune);
        let reply = sim.reply(command.clone());
        match (model_apply(&mut model, op), &reply) {
            (Some([created, changed, removed, unchanged]), Reply::LimitsApplied(c)) => {
                prop_assert_eq!(&c.created, &created, "{:?}", op);
                prop_assert_eq!(&c.changed, &changed, "{:?}", op);
                prop_assert_eq!(&c.removed, &removed, "{:?}", op);
                prop_assert_eq!(&c.unchanged, &unchanged, "{:?}", op);
                prop_assert_eq!(dry, Ok(c.clone()), "the dry run answers the apply");
            }
            (None, Reply::Refused(Refusal::Invalid(why))) => {
                prop_assert!(why.contains("burst 0"), "{}", why);
                prop_assert!(dry.is_err(), "the dry run refuses too");
            }
            (expected, got) => prop_assert!(false, "model {:?}, machine {:?}", expected, got),
        }
        let limits: BTreeMap<char, (u32, u32)> = sim
            .m
            .limits("t")
            .into_iter()
            .filter(|l| !l.removing)
            .map(|l| {
                let name = l.name.chars().next().unwrap();
                (name, (l.concurrent, l.per_second as u32))
            })
            .collect();
        prop_assert_eq!(&limits, &model, "after {:?}", op);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn applies_of_random_files_match_a_map_of_definitions(
        ops in prop::collection::vec(apply_op(), 1..12)
    ) {
        run_applies(ops)?;
    }
}

// ---- Tokens taken and returned against whole-token buckets ----------------------------------
//
// The reference: each bucket is a whole number of tokens, refilled by whole seconds (the
// rates are whole tokens a second and entries come whole seconds apart, so the machine's
// exact refill has no fraction to carry). A take of `units` is granted when the bucket
// holds them, else refused `Busy` (it does not wait); a return adds its units, stopping at
// the burst. A key lives exactly while its bucket is below its burst.

/// (limit, key, burst, tokens a second) of each bucket: two keys of a keyed limit and an
/// unkeyed one.
const BUCKETS: [(&str, Option<&str>, u64, u64); 3] = [
    ("keyed", Some("x"), 4, 1),
    ("keyed", Some("y"), 4, 1),
    ("plain", None, 3, 2),
];

#[derive(Clone, Debug)]
enum TokenOp {
    Take { b: usize, units: u32 },
    Return { b: usize, units: u32 },
}

fn token_op() -> impl Strategy<Value = TokenOp> {
    prop_oneof![
        3 => (0..BUCKETS.len(), 1..=4u32).prop_map(|(b, units)| TokenOp::Take { b, units }),
        2 => (0..BUCKETS.len(), 1..=6u32).prop_map(|(b, units)| TokenOp::Return { b, units }),
    ]
}

fn run_returns(entries: Vec<(u64, Vec<TokenOp>)>) -> Result<(), TestCaseError> {
    let mut sim = Sim::new();
    sim.reply(limit("t", "keyed").rate(1.0).burst(4).keyed());
    sim.reply(limit("t", "plain").rate(2.0).burst(3));
    let session = sim.open(600_000);
    let mut tokens: Vec<u64> = BUCKETS.iter().map(|b| b.2).collect();
    let mut ticket = 0;
    for (seconds, ops) in entries {
        for (t, b) in tokens.iter_mut().zip(BUCKETS) {
            *t = (*t + seconds * b.3).min(b.2);
        }
        let commands: Vec<Command> = ops
            .iter()
            .map(|op| match *op {
                TokenOp::Take { b, units } => {
                    ticket += 1;
                    let (name, key, _, _) = BUCKETS[b];
                    let a = ask(session, ticket, name).units(units).wait(false);
                    match key {
                        Some(k) => a.key(k).into(),
                        None => a.into(),
                    }
                }
                TokenOp::Return { b, units } => Command::ReturnTokens {
                    tenant: "t".into(),
                    parts: vec![weir_core::machine::Part {
                        limit: BUCKETS[b].0.into(),
                        key: BUCKETS[b].1.map(Into::into),
                        units,
                    }],
                },
            })
            .collect();
        let applied = sim.entry_after(seconds * 1_000, commands);
        for (op, reply) in ops.iter().zip(&applied.replies) {
            match *op {
                TokenOp::Take { b, units } => {
                    let fits = tokens[b] >= units as u64;
                    if fits {
                        tokens[b] -= units as u64;
                    }
                    prop_assert_eq!(
                        matches!(reply, Reply::Granted { .. }),
                        fits,
                        "take of {} from {:?} holding {}: {:?}",
                        units,
                        BUCKETS[b],
                        tokens[b],
                        reply
                    );
                }
                TokenOp::Return { b, units } => {
                    prop_assert_eq!(reply, &Reply::Done);
                    tokens[b] = (tokens[b] + units as u64).min(BUCKETS[b].2);
                }
            }
        }
        let mut live = vec![];
        for (b, (name, key, burst, _)) in BUCKETS.iter().enumerate() {
            let now = sim.m.bucket_now("t", name, *key).unwrap();
            prop_assert_eq!(now.tokens, tokens[b], "tokens of {:?}", BUCKETS[b]);
            if let Some(k) = key
                && tokens[b] < *burst
            {
                live.push(k.to_string());
            }
        }
        prop_assert_eq!(sim.m.keys("t", "keyed").unwrap(), live, "live keys");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn returned_tokens_refill_exactly_never_past_the_burst_and_full_keys_are_dropped(
        entries in prop::collection::vec(
            (prop_oneof![3 => Just(0u64), 2 => 1..3u64], prop::collection::vec(token_op(), 0..5)),
            1..40,
        )
    ) {
        run_returns(entries)?;
    }
}
