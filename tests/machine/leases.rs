//! Token leases: scenarios of the rules (shares, fair shares, returns, retries, a session's
//! end, refusals, the snapshot), and a seeded simulation of holders spending locally beside
//! the cluster's own takes, checked against G1's bound in spend time: over every window, all
//! spending together is at most `burst + per_second × window`.

use crate::sim::{Sim, ask, limit};
use weir_core::machine::{
    Command, LeasePart, LeaseShare, LeaseTokens, Machine, Refusal, Reply, SessionId,
};

const MICRO: u64 = 1_000_000;

fn part(limit: &str, rate_per_s: u64, cap: u64, returned_micro: u64) -> LeasePart {
    LeasePart {
        limit: limit.into(),
        key: None,
        rate_micro_per_s: rate_per_s * MICRO,
        cap,
        returned_micro,
    }
}

fn lease(session: SessionId, seq: u64, parts: Vec<LeasePart>) -> Command {
    Command::LeaseTokens(LeaseTokens {
        session,
        tenant: "t".into(),
        seq,
        parts,
    })
}

fn shares(reply: Reply) -> Vec<LeaseShare> {
    match reply {
        Reply::Leased(shares) => shares,
        other => panic!("expected a lease, got {other:?}"),
    }
}

/// A sim with `t/r` at 100 a second, burst 20.
fn rated() -> Sim {
    let mut s = Sim::new();
    assert_eq!(s.reply(limit("t", "r").rate(100.0).burst(20)), Reply::Done);
    s
}

/// Whole tokens in the cluster's own bucket of `t/r`, refilled to now.
fn bucket(s: &Sim) -> u64 {
    s.m.bucket_now("t", "r", None).expect("t/r").tokens * MICRO
}

#[test]
fn a_lease_takes_its_tokens_from_the_bucket_and_its_rate_from_the_refill() {
    let mut s = rated();
    let a = s.open(10_000);
    let got = shares(s.reply(lease(a, 1, vec![part("r", 40, 8, 0)])));
    assert_eq!(got[0].rate_micro_per_s, 40 * MICRO);
    assert_eq!(got[0].cap, 8);
    assert_eq!(
        got[0].tokens_micro,
        8 * MICRO,
        "a full bucket gives the whole cap"
    );
    assert_eq!(bucket(&s), 12 * MICRO);
    // The cluster's bucket now holds at most 12 and refills at 60 a second.
    for _ in 0..12 {
        assert!(matches!(
            s.reply(ask(a, s.index + 100, "r").wait(false)),
            Reply::Granted { .. }
        ));
    }
    assert!(matches!(
        s.reply(ask(a, 999, "r").wait(false)),
        Reply::Refused(Refusal::Busy { .. })
    ));
    s.wait(1_000);
    assert_eq!(
        bucket(&s),
        12 * MICRO,
        "capped at burst less the lease's cap"
    );
    s.wait(0);
    let s2 = {
        let mut s2 = rated();
        let b = s2.open(10_000);
        s2.reply(lease(b, 1, vec![part("r", 40, 8, 0)]));
        for t in 0..12 {
            s2.reply(ask(b, 10 + t, "r").wait(false));
        }
        s2.wait(100);
        s2
    };
    assert_eq!(
        bucket(&s2),
        6 * MICRO,
        "100 ms at the 60 a second left to the cluster"
    );
}

#[test]
fn leases_together_take_at_most_three_quarters_and_learn_a_fair_share() {
    let mut s = rated();
    let [a, b] = s.open_each([10_000, 10_000]);
    let first = shares(s.reply(lease(a, 1, vec![part("r", 100, 20, 0)])))[0];
    assert_eq!((first.rate_micro_per_s, first.cap), (75 * MICRO, 15));
    assert_eq!(first.fair_rate_micro_per_s, 75 * MICRO);
    let second = shares(s.reply(lease(b, 1, vec![part("r", 50, 10, 0)])))[0];
    assert_eq!(
        (second.rate_micro_per_s, second.cap),
        (0, 0),
        "nothing is free"
    );
    assert_eq!(second.fair_rate_micro_per_s, 75 * MICRO / 2);
    assert_eq!(second.fair_cap, 7);
    // `a` learns its fair share and asks for it, giving back what it holds above the cap.
    let shrunk = shares(s.reply(lease(a, 2, vec![part("r", 37, 7, 8 * MICRO)])))[0];
    assert_eq!(
        (shrunk.rate_micro_per_s, shrunk.cap, shrunk.tokens_micro),
        (37 * MICRO, 7, 0)
    );
    let grown = shares(s.reply(lease(b, 2, vec![part("r", 50, 10, 0)])))[0];
    assert_eq!((grown.rate_micro_per_s, grown.cap), (38 * MICRO, 8));
}

#[test]
fn a_retry_changes_nothing_and_gives_nothing_back_twice() {
    let mut s = rated();
    let a = s.open(10_000);
    s.reply(lease(a, 1, vec![part("r", 10, 10, 0)]));
    assert_eq!(bucket(&s), 10 * MICRO);
    let back = lease(a, 2, vec![part("r", 10, 4, 6 * MICRO)]);
    s.reply(back.clone());
    assert_eq!(bucket(&s), 16 * MICRO);
    let again = shares(s.reply(back))[0];
    assert!(again.duplicate);
    assert_eq!((again.cap, again.tokens_micro), (4, 0));
    assert_eq!(bucket(&s), 16 * MICRO, "the retry returned nothing");
    // An older request overtaken by a later one is a retry too.
    let old = shares(s.reply(lease(a, 1, vec![part("r", 10, 10, 0)])))[0];
    assert!(old.duplicate);
    assert_eq!(bucket(&s), 16 * MICRO);
}

#[test]
fn a_returned_lease_refunds_what_was_given_back_and_a_lapsed_one_nothing() {
    let mut s = rated();
    let a = s.open(10_000);
    s.reply(lease(a, 1, vec![part("r", 20, 5, 0)]));
    assert_eq!(bucket(&s), 15 * MICRO);
    // `a` ends its lease and gives back 3 of its 5 (it spent 2).
    let ended = shares(s.reply(lease(a, 2, vec![part("r", 0, 0, 3 * MICRO)])))[0];
    assert_eq!((ended.rate_micro_per_s, ended.cap), (0, 0));
    assert_eq!(bucket(&s), 18 * MICRO);

    // `b` leases all it may (15 of the 20, 75 of the 100 a second); the cluster's own bucket
    // is drained; `b`'s session expires.
    let b = s.open(3_000);
    let got = shares(s.reply(lease(b, 1, vec![part("r", 75, 15, 0)])))[0];
    assert_eq!(
        (got.rate_micro_per_s, got.cap, got.tokens_micro),
        (75 * MICRO, 15, 15 * MICRO)
    );
    assert_eq!(bucket(&s), 3 * MICRO);
    assert!(matches!(
        s.reply(ask(a, 1, "r").units(3).wait(false)),
        Reply::Granted { .. }
    ));
    s.wait(3_000);
    assert_eq!(s.m.session_count(), 1, "b expired");
    // Three seconds at the 25 a second left to the cluster filled its own bucket of 5; the
    // 15 `b` held are spent, never refunded.
    assert_eq!(bucket(&s), 5 * MICRO);
    s.wait(100);
    assert_eq!(
        bucket(&s),
        15 * MICRO,
        "the whole rate refills the cluster from then on"
    );
}

#[test]
fn leases_are_refused_whole_on_what_cannot_lease() {
    let mut s = rated();
    s.define("t", "db", 2, 0.0);
    assert_eq!(
        s.reply(limit("t", "both").concurrent(2).rate(10.0)),
        Reply::Done
    );
    let a = s.open(10_000);
    for name in ["db", "both"] {
        let reply = s.reply(lease(a, 1, vec![part("r", 10, 2, 0), part(name, 1, 1, 0)]));
        let Reply::Refused(Refusal::Invalid(why)) = reply else {
            panic!("{name}: {reply:?}");
        };
        assert!(why.contains("is not a rate limit that leases"), "{why}");
    }
    assert_eq!(bucket(&s), 20 * MICRO, "a refused request leased nothing");
    let unknown = s.reply(lease(a, 1, vec![part("nope", 1, 1, 0)]));
    assert!(matches!(
        unknown,
        Reply::Refused(Refusal::UnknownLimit { .. })
    ));
    assert_eq!(
        s.reply(lease(a, 1, vec![part("r", 1, 1, 0), part("r", 1, 1, 0)])),
        Reply::Refused(Refusal::Invalid(
            "part 2 names limit r again: a lease request names each limit (and each key of a \
             keyed one) once"
                .into()
        ))
    );
    s.reply(Command::SetHalt {
        tenant: "t".into(),
        scope: weir_core::machine::HaltScope::Tenant,
        reason: "incident".into(),
    });
    assert!(matches!(
        s.reply(lease(a, 2, vec![part("r", 1, 1, 0)])),
        Reply::Refused(Refusal::Halted { .. })
    ));
}

#[test]
fn a_leased_key_lives_while_its_lease_does_and_goes_when_it_ends() {
    let mut s = Sim::new();
    s.reply(limit("t", "k").rate(10.0).burst(10).keyed());
    let a = s.open(10_000);
    let mut p = part("k", 5, 4, 0);
    p.key = Some("user-1".into());
    let got = shares(s.reply(lease(a, 1, vec![p.clone()])))[0];
    assert_eq!(got.tokens_micro, 4 * MICRO);
    s.wait(60_000);
    assert_eq!(
        s.m.keys("t", "k").unwrap().len(),
        1,
        "a leased key is not fresh"
    );
    p.rate_micro_per_s = 0;
    p.cap = 0;
    s.reply(lease(a, 2, vec![p]));
    s.wait(60_000);
    assert!(
        s.m.keys("t", "k").unwrap().is_empty(),
        "dropped once full and unleased"
    );
}

#[test]
fn leases_survive_a_snapshot_byte_for_byte() {
    let mut s = rated();
    let a = s.open(10_000);
    s.reply(lease(a, 1, vec![part("r", 30, 6, 0)]));
    let bytes = s.m.snapshot();
    let restored = Machine::restore(&bytes).expect("restores");
    assert_eq!(restored.snapshot(), bytes);
    assert_eq!(restored.digest(), s.m.digest());
    // The restored machine decides as the original: the cluster's bucket is still capped.
    let mut twin = Sim {
        m: restored,
        ..Sim::new()
    };
    twin.index = s.index;
    twin.clock_ms = s.clock_ms;
    twin.leadership = s.leadership;
    s.wait(10_000);
    twin.wait(10_000);
    assert_eq!(twin.m.digest(), s.m.digest());
    assert_eq!(bucket(&s), 14 * MICRO);
}

/// A deterministic generator (xorshift64*), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A holder as the client library keeps one: its local bucket, and its request in flight.
#[derive(Default)]
struct Holder {
    session: SessionId,
    seq: u64,
    rate_micro: u64,
    cap: u64,
    level_micro: u64,
    /// Sub-micro-token refill carried, in micro-tokens × ms / s.
    remainder: u64,
    /// The request in flight: its (rate, cap) asked, and the ms its reply arrives.
    in_flight: Option<(u64, u64)>,
    /// The belief deadline: the send time of the last acknowledged keep-alive plus the TTL,
    /// less a margin.
    deadline_ms: u64,
    /// Stopped sending keep-alives (its session will expire).
    dying: bool,
}

impl Holder {
    fn refill(&mut self, ms: u64) {
        let scaled = self.rate_micro as u128 * ms as u128 + self.remainder as u128;
        self.level_micro = (self.level_micro + (scaled / 1000) as u64).min(self.cap * MICRO);
        self.remainder = (scaled % 1000) as u64;
    }
}

/// Runs one seeded simulation and checks every window against the bound.
fn simulate(seed: u64, keyed: bool) {
    const BURST: u64 = 20;
    const RATE: u64 = 100;
    const TTL: u64 = 2_000;
    const RUN_MS: u64 = 12_000;
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut s = Sim::new();
    // Twelve thousand entries a seed: the invariants every 100 entries and at the end.
    s.check_every = 100;
    let mut def = limit("t", "r").rate(RATE as f64).burst(BURST);
    if keyed {
        def = def.keyed();
    }
    assert_eq!(s.reply(def), Reply::Done);
    let key = keyed.then(|| "k".to_string());
    let start = s.clock_ms;
    let taker = s.open(60_000);
    let mut holders: Vec<Holder> = (0..3)
        .map(|_| Holder {
            session: s.open(TTL),
            deadline_ms: s.clock_ms + TTL - 1,
            ..Holder::default()
        })
        .collect();
    // Every spend: (ms, micro-tokens).
    let mut spent: Vec<(u64, u64)> = Vec::new();
    let mut ticket = 0;
    // Replies arrive a few ms after their entry: (arrival ms, holder, share).
    let mut arriving: Vec<(u64, usize, LeaseShare)> = Vec::new();
    for _ in 0..RUN_MS {
        let now = s.clock_ms + 1;
        let mut commands = Vec::new();
        let mut asked_by = Vec::new();
        for (h, holder) in holders.iter_mut().enumerate() {
            holder.refill(1);
            // A dying holder spends to its deadline, as the rule lets it.
            if now > holder.deadline_ms {
                holder.level_micro = 0;
            } else {
                // Bursts and trickles: everything it has now and then (always at a dying
                // holder's deadline, after saving up), else a token at a time.
                let take = if holder.dying {
                    if now == holder.deadline_ms {
                        holder.level_micro
                    } else {
                        0
                    }
                } else if rng.chance(15) {
                    holder.level_micro
                } else if rng.chance(30) {
                    MICRO.min(holder.level_micro)
                } else {
                    0
                };
                if take > 0 {
                    holder.level_micro -= take;
                    spent.push((now, take));
                }
                if !holder.dying && rng.chance(2) {
                    holder.deadline_ms = now + TTL - 1;
                    commands.push(Command::KeepAlive {
                        session: holder.session,
                    });
                }
                if rng.below(5_000) == 0 {
                    holder.dying = true;
                }
            }
            if holder.in_flight.is_none() && !holder.dying && rng.chance(3) {
                let rate = rng.below(RATE + 1) * MICRO;
                let cap = rng.below(BURST + 1);
                // Decreases apply when sent: the rate at once, the level down to the cap.
                holder.rate_micro = holder.rate_micro.min(rate);
                holder.cap = holder.cap.min(cap);
                let kept = holder.level_micro.min(cap * MICRO);
                let returned = holder.level_micro - kept;
                holder.level_micro = kept;
                holder.seq += 1;
                holder.in_flight = Some((rate, cap));
                let mut p = part("r", 0, cap, returned);
                p.rate_micro_per_s = rate;
                p.key = key.clone();
                commands.push(lease(holder.session, holder.seq, vec![p]));
                asked_by.push(h);
            }
        }
        // A holder whose session has surely expired is replaced by a new one.
        for holder in holders.iter_mut() {
            if holder.dying && now > holder.deadline_ms + 2 * TTL && holder.in_flight.is_none() {
                *holder = Holder {
                    session: s.open(TTL),
                    deadline_ms: s.clock_ms + TTL - 1,
                    ..Holder::default()
                };
            }
        }
        let now = s.clock_ms + 1;
        let takes = rng.below(5);
        for _ in 0..takes {
            ticket += 1;
            let units = 1 + rng.below(5) as u32;
            let mut a = ask(taker, ticket, "r").units(units).wait(false);
            if let Some(k) = &key {
                a = a.key(k);
            }
            commands.push(a.into());
        }
        commands.push(Command::Tick);
        let applied = s.entry_after(1, commands);
        let mut leases = asked_by.into_iter();
        for (command, reply) in applied.replies.iter().enumerate() {
            match reply {
                Reply::Granted { units, .. } => spent.push((now, *units as u64 * MICRO)),
                Reply::Leased(got) => {
                    let h = leases.next().expect("one reply per lease request");
                    arriving.push((now + 1 + rng.below(5), h, got[0]));
                }
                Reply::Refused(Refusal::UnknownSession { .. }) => {
                    leases.next();
                }
                Reply::Refused(Refusal::Busy { .. }) | Reply::KeptAlive { .. } | Reply::Done => {}
                other => panic!("entry {} command {command}: {other:?}", s.index),
            }
        }
        arriving.retain(|&(at, h, share)| {
            if at > now + 1 {
                return true;
            }
            let holder = &mut holders[h];
            holder.in_flight = None;
            holder.rate_micro = share.rate_micro_per_s;
            holder.cap = share.cap;
            holder.level_micro += share.tokens_micro;
            assert!(
                holder.level_micro <= holder.cap * MICRO,
                "a holder's bucket overflows"
            );
            false
        });
    }
    s.check();
    check_windows(seed, &spent, BURST * MICRO, RATE * MICRO, start);
    let total: u64 = spent.iter().map(|s| s.1).sum();
    assert!(
        total > RATE * MICRO * RUN_MS / 1000 / 2,
        "seed {seed}: the run spent too little to judge ({total})"
    );
}

/// Checks every window `[a, b]` of whole ms: the micro-tokens spent in it are at most
/// `burst + rate × (b − a) / 1000`. Linear: with `P` the spend up to and including a ms,
/// a window's spend is `P(b) − P(a − 1)`, so the bound holds for all `a ≤ b` exactly when
/// `1000·P(b) − rate·b` stays within `1000·burst` of the least `1000·P(a − 1) − rate·a`
/// seen so far.
fn check_windows(seed: u64, spent: &[(u64, u64)], burst: u64, rate: u64, start: u64) {
    let first = spent.iter().map(|s| s.0).min().unwrap_or(start);
    let last = spent.iter().map(|s| s.0).max().unwrap_or(start);
    let mut per_ms = vec![0u64; (last - first + 1) as usize];
    for &(at, micro) in spent {
        per_ms[(at - first) as usize] += micro;
    }
    let mut before = 0i128; // P(a − 1)
    let mut least: Option<(i128, u64)> = None;
    for (t, &micro) in per_ms.iter().enumerate() {
        let t_i = t as i128;
        let g = 1000 * before - rate as i128 * t_i;
        if least.is_none_or(|(l, _)| g < l) {
            least = Some((g, t as u64));
        }
        before += micro as i128;
        let f = 1000 * before - rate as i128 * t_i;
        let (l, from) = least.expect("set above");
        assert!(
            f - l <= 1000 * burst as i128,
            "seed {seed}: the window of ms {}..={} spent {} micro-tokens over its bound",
            first + from - start,
            first + t as u64 - start,
            (f - l - 1000 * burst as i128) / 1000
        );
    }
}

#[test]
fn the_window_check_sees_a_burst_too_many() {
    // 20 at once is the burst; one more in the same ms is over, one 10 ms later is not.
    let burst = 20 * MICRO;
    let rate = 100 * MICRO;
    check_windows(0, &[(5, burst), (15, MICRO)], burst, rate, 0);
    let over = std::panic::catch_unwind(|| check_windows(0, &[(5, burst), (5, 1)], burst, rate, 0));
    assert!(over.is_err());
    let later = std::panic::catch_unwind(|| {
        check_windows(0, &[(5, burst), (9, MICRO / 2)], burst, rate, 0)
    });
    assert!(later.is_err(), "4 ms refill 0.4 tokens, not 0.5");
}

#[test]
fn holders_and_the_cluster_never_spend_past_the_bound_in_any_window() {
    for seed in 1..=6 {
        simulate(seed, seed % 2 == 0);
    }
}
