//! The client library against a real cluster: contention, failover, halts.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_client::{AcquireError, AcquireOptions, Lost, Permit, Session};
use weir_core::machine::{Command, HaltScope, Priority, Refusal, Reply};

use crate::harness::{Cluster, phase};
use crate::{CONVERGE, ELECTION, define};

const TTL: Duration = Duration::from_secs(3);

/// A belief interval: from receiving the grant to sending the release (or the deadline).
#[derive(Clone, Copy, Debug)]
struct Belief {
    from: Instant,
    to: Instant,
    fence: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_clients_contend_for_three_and_never_more_than_three_believe_they_hold() {
    let cluster = Cluster::start("contend", 3, "");
    cluster.leader(ELECTION).await;
    let admin = cluster.client();
    admin.write(define("three", 3)).await.unwrap();
    phase("ten clients, each its own connection and session, two rounds each");
    let beliefs: Arc<Mutex<Vec<Belief>>> = Arc::default();
    let mut tasks = vec![];
    for c in 0..10 {
        let servers = cluster.servers();
        let beliefs = beliefs.clone();
        tasks.push(tokio::spawn(async move {
            let client = weir_client::Client::new(servers);
            let session = Session::open(&client, TTL).await.unwrap();
            for _ in 0..2 {
                let mut options = AcquireOptions::new("t", "three");
                options.priority = Priority {
                    level: c % 2,
                    fairness_key: format!("k{c}"),
                    fairness_weight: 1,
                };
                let permit = session.acquire(options).await.unwrap();
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(40)).await;
                assert!(
                    permit.lost_reason().is_none(),
                    "a healthy permit is not lost"
                );
                let to = Instant::now().min(session.deadline());
                beliefs.lock().unwrap().push(Belief {
                    from,
                    to,
                    fence: permit.fence(),
                });
                permit.release().await.unwrap();
            }
            session.close().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let beliefs = beliefs.lock().unwrap().clone();
    phase("check: all served, at most three at any instant, fences unique and increasing");
    assert_eq!(beliefs.len(), 20, "all ten served twice");
    for b in &beliefs {
        let overlapping = beliefs
            .iter()
            .filter(|o| o.from <= b.from && b.from < o.to)
            .count();
        assert!(
            overlapping <= 3,
            "{overlapping} clients believed they held at once"
        );
    }
    let mut fences: Vec<u64> = beliefs.iter().map(|b| b.fence).collect();
    fences.sort();
    fences.dedup();
    assert_eq!(fences.len(), 20, "fences are unique");
    // A grant received after another was released was made after it: its fence is larger.
    for a in &beliefs {
        for b in &beliefs {
            if a.to < b.from {
                assert!(
                    a.fence < b.fence,
                    "fence {} granted after {} was released",
                    b.fence,
                    a.fence
                );
            }
        }
    }
    let limit = admin.limit_status("t", "three").await.unwrap().unwrap();
    assert_eq!((limit.in_use, limit.max_in_use), (0, 3));
}

/// Once `cluster` has a leader: limit `one` of tenant `t` (concurrency 1) defined and its
/// unit held. Answers the client, the holder's session and its permit.
async fn one_held(cluster: &Cluster) -> (weir_client::Client, Session, Permit) {
    cluster.leader(ELECTION).await;
    let client = cluster.client();
    client.write(define("one", 1)).await.unwrap();
    let holder = Session::open(&client, TTL).await.unwrap();
    let permit = holder
        .acquire(AcquireOptions::new("t", "one"))
        .await
        .unwrap();
    (client, holder, permit)
}

/// A ticket of the caller's choosing asked for again while held: the same grant under the
/// same fence, charged once, and one holding of two permits. Releasing either releases the
/// ticket and tells the other, so neither is believed held on a ticket the cluster freed;
/// a halt tells both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_ticket_asked_again_is_one_holding_of_two_permits() {
    let cluster = Cluster::start("reask", 3, "");
    cluster.leader(ELECTION).await;
    let client = cluster.client();
    client.write(define("one", 1)).await.unwrap();
    client.write(define("other", 1)).await.unwrap();
    let session = Session::open(&client, TTL).await.unwrap();
    let in_use = async |name: &str| {
        let status = client.limit_status("t", name).await.unwrap();
        status.unwrap().in_use
    };
    let chosen = |ticket, wait| AcquireOptions {
        ticket: Some(ticket),
        wait,
        ..AcquireOptions::new("t", "one")
    };

    phase("asked again: the same fence, charged once");
    let first = session.acquire(chosen(7001, true)).await.unwrap();
    let again = session.acquire(chosen(7001, false)).await.unwrap();
    assert_eq!((first.ticket(), again.ticket()), (7001, 7001));
    assert_eq!(again.fence(), first.fence());
    assert_eq!(in_use("one").await, 1);
    let own = session
        .acquire(AcquireOptions::new("t", "other"))
        .await
        .unwrap();
    assert_eq!(
        own.ticket(),
        7002,
        "the session numbers on above the chosen one"
    );
    own.release().await.unwrap();

    phase("one released: the other is told");
    again.release().await.unwrap();
    assert_eq!(in_use("one").await, 0);
    assert_eq!(first.lost_reason(), Some(Lost::Released));
    let lost = tokio::time::timeout(Duration::from_secs(5), first.lost()).await;
    assert_eq!(lost.unwrap(), Lost::Released);
    drop(first);

    phase("a halt tells both");
    let first = session.acquire(chosen(8001, true)).await.unwrap();
    let again = session.acquire(chosen(8001, false)).await.unwrap();
    client
        .set_halt("t", HaltScope::Tenant, "asked again")
        .await
        .unwrap();
    for permit in [&first, &again] {
        let lost = tokio::time::timeout(Duration::from_secs(5), permit.lost()).await;
        assert_eq!(
            lost.unwrap(),
            Lost::Halted {
                scope: HaltScope::Tenant,
                reason: "asked again".into()
            }
        );
    }
    client.clear_halt("t", HaltScope::Tenant).await.unwrap();
    first.release().await.unwrap();
    assert_eq!(
        again.lost_reason().map(|l| l.to_string()).as_deref(),
        Some("halted (tenant): asked again")
    );
    assert_eq!(in_use("one").await, 0);
    session.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_by_priority() {
    let cluster = Cluster::start("priority", 3, "");
    let (client, _holder, held) = one_held(&cluster).await;
    phase("queue levels 0, 5, 1 in that order; release; they are served 5, 1, 0");
    let order: Arc<Mutex<Vec<i32>>> = Arc::default();
    let mut tasks = vec![];
    for level in [0, 5, 1] {
        let task_client = client.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let s = Session::open(&task_client, TTL).await.unwrap();
            let mut o = AcquireOptions::new("t", "one");
            o.priority.level = level;
            let p = s.acquire(o).await.unwrap();
            order.lock().unwrap().push(level);
            tokio::time::sleep(Duration::from_millis(30)).await;
            p.release().await.unwrap();
        }));
        // Let each queue before the next.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let limit = client.limit_status("t", "one").await.unwrap();
            let waiting = limit.map_or(0, |l| l.waiting);
            if waiting as usize == tasks.len() || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    held.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![5, 1, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_session_knows_how_many_tickets_were_ahead_when_it_was_queued() {
    let cluster = Cluster::start("position", 1, "");
    let (client, holder, held) = one_held(&cluster).await;
    assert_eq!(
        holder.queued_position(),
        None,
        "nothing of the holder waits"
    );
    phase("two waiters queue one after the other: 0 and then 1 ahead");
    let mut waiters = vec![];
    for ahead in 0..2u32 {
        let session = Arc::new(Session::open(&client, TTL).await.unwrap());
        let task = tokio::spawn({
            let session = session.clone();
            async move {
                let p = session
                    .acquire(AcquireOptions::new("t", "one"))
                    .await
                    .unwrap();
                p.release().await.unwrap();
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while session.queued_position().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(session.queued_position(), Some(ahead));
        waiters.push((session, task));
    }
    phase("released: both are granted, and nothing of theirs waits any more");
    held.release().await.unwrap();
    for (session, task) in waiters {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("granted within 10 s")
            .unwrap();
        assert_eq!(session.queued_position(), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_keeps_its_permit_across_a_leader_kill_and_the_waiter_is_granted_only_after_release()
 {
    let mut cluster = Cluster::start("failover", 3, "");
    let (client, _holder, permit) = one_held(&cluster).await;
    let first = cluster.leader(ELECTION).await;
    let fence = permit.fence();
    let waiter_client = weir_client::Client::new(cluster.servers());
    let waiter = tokio::spawn(async move {
        let s = Session::open(&waiter_client, TTL).await.unwrap();
        let p = s.acquire(AcquireOptions::new("t", "one")).await.unwrap();
        (Instant::now(), p.fence(), s)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    phase("kill -9 the leader");
    cluster.kill(first);
    cluster.leader(ELECTION).await;
    phase("hold through the failover for two TTLs: still held, same fence");
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        permit.lost_reason(),
        None,
        "keep-alives went through the new leader"
    );
    assert!(client.validate_fence("t", "one", fence).await.unwrap());
    assert!(
        !waiter.is_finished(),
        "the waiter is not granted while the permit is held"
    );
    phase("release: the waiter is granted after it, with a larger fence");
    let released_at = Instant::now();
    permit.release().await.unwrap();
    let (granted_at, waiter_fence, _s) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(granted_at >= released_at);
    assert!(waiter_fence > fence);
    cluster.converged(CONVERGE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halt_refuses_waiters_tells_holders_refuses_reserves_and_clearing_restores() {
    let cluster = Cluster::start("halt", 3, "");
    let (client, _holder, permit) = one_held(&cluster).await;
    let s2 = Session::open(&client, TTL).await.unwrap();
    let waiter = tokio::spawn(async move {
        s2.acquire(AcquireOptions::new("t", "one"))
            .await
            .map(|p| p.fence())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    phase("halt the tenant during contention");
    let reply = client
        .write(Command::SetHalt {
            tenant: "t".into(),
            scope: HaltScope::Tenant,
            reason: "incident 42".into(),
        })
        .await
        .unwrap();
    assert_eq!(reply, Reply::Done);
    let halted = Refusal::Halted {
        tenant: "t".into(),
        scope: HaltScope::Tenant,
        reason: "incident 42".into(),
    };
    let refused = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(refused, Err(AcquireError::Refused(halted.clone())));
    let lost = tokio::time::timeout(Duration::from_secs(5), permit.lost())
        .await
        .unwrap();
    assert_eq!(
        lost,
        Lost::Halted {
            scope: HaltScope::Tenant,
            reason: "incident 42".into()
        }
    );
    let reserve = Command::Reserve {
        tenant: "t".into(),
        run: "r1".into(),
        agent: None,
        period: None,
        hold_tokens: None,
        hold_minor: None,
    };
    assert_eq!(
        client.write(reserve.clone()).await.unwrap(),
        Reply::Refused(halted.clone())
    );
    let s3 = Session::open(&client, TTL).await.unwrap();
    assert_eq!(
        s3.acquire(AcquireOptions::new("t", "one")).await.err(),
        Some(AcquireError::Refused(halted))
    );
    phase("clear it: admission is restored");
    client
        .write(Command::ClearHalt {
            tenant: "t".into(),
            scope: HaltScope::Tenant,
        })
        .await
        .unwrap();
    assert_eq!(
        client.reserve("t", "r1", None, None).await.unwrap(),
        Reply::Admitted
    );
    assert_eq!(client.running("t").await.unwrap().len(), 1);
    assert!(client.halts("t").await.unwrap().is_empty());
    permit.release().await.unwrap();
    let p = s3.acquire(AcquireOptions::new("t", "one")).await.unwrap();
    assert!(p.lost_reason().is_none());
}

/// A token lease on a hot rate limit: takes are decided locally (no entry each), the
/// cluster's own bucket keeps only what is not leased, every take together stays within the
/// limit's bound, and ending the lease gives its tokens back; a closed session's lease
/// decides nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_limit_takes_locally_within_the_bound_and_gives_back_at_its_end() {
    let cluster = Cluster::start("lease", 3, "");
    cluster.leader(ELECTION).await;
    let client = cluster.client();
    let define = Command::DefineLimit {
        tenant: "t".into(),
        name: "hot".into(),
        concurrent: 0,
        per_second: 200.0,
        burst: Some(100),
    };
    assert_eq!(client.write(define).await.unwrap(), Reply::Done);
    let session = Session::open(&client, TTL).await.unwrap();
    let began = Instant::now();
    let lease = session
        .lease(weir_client::LeaseOptions::new("t", "hot", 150.0, 60))
        .await
        .unwrap();
    let first = lease.figures();
    assert_eq!((first.cap, first.rate_micro_per_s), (60, 150_000_000));
    let status = client.limit_status("t", "hot").await.unwrap().unwrap();
    assert!(
        status.tokens <= 40,
        "the cluster keeps what is not leased: {status:?}"
    );

    // Local takes, a few a millisecond, for about a second: bounded in count and time.
    let mut local = 0u64;
    for _ in 0..1_000 {
        for _ in 0..4 {
            if lease.try_take(1) {
                local += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        if began.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    // Then the cluster's own bucket, by takes that go to it.
    let mut cluster_takes = 0u64;
    for _ in 0..200 {
        let mut take = AcquireOptions::new("t", "hot");
        take.wait = false;
        match session.acquire(take).await {
            Ok(p) => {
                p.consume();
                cluster_takes += 1;
            }
            Err(AcquireError::Refused(Refusal::Busy { .. })) => break,
            Err(e) => panic!("a take failed: {e}"),
        }
    }
    let elapsed = began.elapsed().as_secs_f64();
    let figures = lease.figures();
    assert_eq!(figures.local, local);
    assert!(
        local >= 60,
        "the lease's first tokens were taken locally: {figures:?}"
    );
    let spent = local + cluster_takes;
    let bound = 100.0 + 200.0 * elapsed;
    assert!(
        (spent as f64) <= bound,
        "{spent} taken in {elapsed:.2} s, above burst + rate × time = {bound:.0}"
    );
    // Far fewer entries than takes: the lease's own requests are a handful.
    assert!(figures.requests < 30, "{figures:?}");

    // Ending gives the share back: the cluster's own bucket refills at the whole rate and
    // holds the whole burst again (with the lease it would hold 40 at most, refilled at 50 a
    // second).
    lease.end().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut after_end = 0u64;
    for _ in 0..200 {
        let mut take = AcquireOptions::new("t", "hot");
        take.wait = false;
        match session.acquire(take).await {
            Ok(p) => {
                p.consume();
                after_end += 1;
            }
            Err(AcquireError::Refused(Refusal::Busy { .. })) => break,
            Err(e) => panic!("a take failed: {e}"),
        }
    }
    assert!(
        after_end > 60,
        "the lease's share came back: {after_end} taken"
    );

    // A lease of a closed session decides nothing.
    let lease = session
        .lease(weir_client::LeaseOptions::new("t", "hot", 50.0, 20))
        .await
        .unwrap();
    session.close().await.unwrap();
    assert!(!lease.try_take(1), "a closed session's lease spent");
}

/// A lease's fallback is quiet while the cluster said it has no room: after a take the
/// cluster refused `Busy`, further takes on the lease are refused locally, without a
/// request, and so are the session's opt-in takes of that limit; a second lease of the same
/// limit in one session is refused; once the lease ends, opt-in takes go to the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_fallback_keeps_a_leases_takes_quiet_and_opt_in_takes_use_the_lease() {
    let cluster = Cluster::start("lease-quiet", 1, "");
    cluster.leader(ELECTION).await;
    let client = cluster.client();
    let define = Command::DefineLimit {
        tenant: "t".into(),
        name: "slow".into(),
        concurrent: 0,
        per_second: 4.0,
        burst: Some(8),
    };
    assert_eq!(client.write(define).await.unwrap(), Reply::Done);
    // A long TTL: the quiet window (the renewal period over 16, 375 ms) outlasts the takes
    // below by far, and no renewal looks at the lease meanwhile.
    let session = Session::open(&client, Duration::from_secs(30))
        .await
        .unwrap();
    let lease = session
        .lease(weir_client::LeaseOptions::new("t", "slow", 3.0, 6))
        .await
        .unwrap();
    let again = session
        .lease(weir_client::LeaseOptions::new("t", "slow", 1.0, 1))
        .await
        .err()
        .expect("a second lease of one limit in one session");
    assert!(
        again.to_string().contains("already leases t/slow"),
        "{again}"
    );

    phase("the local bucket, then the cluster's, until the cluster refuses");
    let mut taken = 0u64;
    for _ in 0..40 {
        if !lease.take(1).await.unwrap() {
            break;
        }
        taken += 1;
    }
    let refused = lease.figures();
    assert_eq!((refused.refused, refused.quiet), (1, 0), "{refused:?}");
    assert!((6..12).contains(&taken), "{taken} taken: {refused:?}");

    phase("quiet: refused locally, no request");
    for _ in 0..50 {
        assert!(!lease.take(1).await.unwrap());
    }
    for _ in 0..10 {
        let take = AcquireOptions::new("t", "slow");
        assert!(!session.take_leased(take).await.unwrap());
    }
    let quiet = lease.figures();
    assert_eq!(
        (quiet.asked, quiet.refused, quiet.quiet),
        (refused.asked, 1, 60),
        "{quiet:?}"
    );

    phase("the window over: concurrent fallbacks go one at a time, the rest quiet");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let takes = (0..20).map(|_| lease.take(1));
    for taken in futures_util::future::join_all(takes).await {
        taken.unwrap();
    }
    let after = lease.figures();
    // The local bucket refilled a token or so meanwhile, the cluster's own (1 a second) less
    // than one or about one: at most two takes asked (one granted, one refused), and the
    // others waited their turn and saw the refusal.
    assert!(
        after.asked - quiet.asked <= 2 && after.quiet - quiet.quiet >= 17,
        "{after:?}"
    );

    phase("ended: opt-in takes go to the cluster");
    lease.end().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut take = AcquireOptions::new("t", "slow");
    take.wait = false;
    assert!(session.take_leased(take).await.unwrap(), "a token refilled");
    let status = client.limit_status("t", "slow").await.unwrap().unwrap();
    assert!(status.tokens < 8, "{status:?}");
}
