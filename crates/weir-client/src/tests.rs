//! The client's failure handling against [`FakeNode`]s: silence, deposed leaders, resyncs,
//! unknown outcomes, halts lost with a push, and the races of the session's ticket maps.
//! Each test is the scenario of one bug; they run on loopback only, with bounded waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::fake_node::{FakeNode, Handler};
use super::session_state::SessionState;
use super::{AcquireError, AcquireOptions, BootInstant, Client, ClientError, Lost, Session};
use weir_core::machine::{Command, HaltScope, Refusal, Reply};
use weir_proto::protocol::{Answer, Failure, Query, Request, Response, ServerFrame};

fn written(reply: Reply) -> Option<Response> {
    Some(Response::Written { index: 1, reply })
}

/// A node that opens session 7, acknowledges keep-alives and releases, answers an acquire
/// with `acquire(how many acquires it has seen so far, 1-based)`, and reads of halts with
/// `halts`.
fn node(
    acquire: impl Fn(u64) -> Option<Response> + Send + Sync + 'static,
    halts: Vec<(HaltScope, String)>,
) -> Handler {
    let asked = AtomicU64::new(0);
    Arc::new(move |r: &Request| match r {
        Request::Write(Command::OpenSession { ttl_ms }) => written(Reply::SessionOpened {
            session: 7,
            ttl_ms: *ttl_ms,
        }),
        Request::Write(Command::KeepAlive { .. } | Command::KeepAliveAcked { .. }) => {
            written(Reply::KeptAlive { ttl_ms: 3_000 })
        }
        Request::Write(Command::Release { .. }) => written(Reply::Released {
            held: true,
            withdrawn: false,
        }),
        Request::Write(Command::Acquire(_)) => acquire(asked.fetch_add(1, Ordering::SeqCst) + 1),
        Request::Read(Query::Halts { .. }) => Some(Response::Read(Answer::Halts(halts.clone()))),
        _ => Some(Response::Failed(Failure::BadRequest("not scripted".into()))),
    })
}

fn granted() -> Option<Response> {
    written(Reply::Granted {
        fence: 11,
        units: 1,
    })
}

fn queued() -> Option<Response> {
    written(Reply::Queued { position: 0 })
}

fn is_acquire(r: &Request) -> bool {
    matches!(r, Request::Write(Command::Acquire(_)))
}

fn is_release_of(ticket: u64) -> impl Fn(&Request) -> bool {
    move |r| matches!(r, Request::Write(Command::Release { ticket: t, .. }) if *t == ticket)
}

fn acquires(n: &FakeNode) -> usize {
    n.seen().iter().filter(|r| is_acquire(r)).count()
}

const TTL: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(5);

/// A session on node `n` (its only server), and a permit of `t/l` under it.
async fn holding_a_permit(n: &FakeNode) -> (Session, super::Permit) {
    permit_of(&Client::new(vec![n.addr.clone()])).await
}

/// A session of `client`, and a permit of `t/l` under it.
async fn permit_of(client: &Client) -> (Session, super::Permit) {
    let session = Session::open(client, TTL).await.unwrap();
    let permit = session
        .acquire(AcquireOptions::new("t", "l"))
        .await
        .unwrap();
    (session, permit)
}

/// A session's state (session 7, on no reachable node) with one ticket registered as
/// waiting, and the receiver of its outcome: for the races of the ticket maps.
fn one_waiting_ticket() -> (
    SessionState,
    u64,
    tokio::sync::oneshot::Receiver<super::session_state::GrantOutcome>,
) {
    let client = Client::new(vec!["127.0.0.1:1".into()]);
    let state = SessionState::new(client, 7, TTL, BootInstant::now() + TTL);
    let (acquire, outcome) = state
        .register(None, |ticket| {
            weir_core::machine::AcquireParts::from(&weir_core::machine::Acquire {
                session: 7,
                ticket,
                tenant: "t".into(),
                limit: "l".into(),
                units: 1,
                priority: Default::default(),
                agent: None,
                wait: true,
            })
        })
        .unwrap();
    (state, acquire.ticket, outcome)
}

#[tokio::test]
async fn a_resync_makes_a_waiting_ticket_ask_again_and_learn_its_grant() {
    // The node queues the acquire, then grants it with a push that its forwarder drops
    // (it lagged): it says so with Resync, and only the re-ask learns the grant.
    let n = FakeNode::start(
        1,
        node(|k| if k == 1 { queued() } else { granted() }, vec![]),
    )
    .await;
    let client = Client::new(vec![n.addr.clone()]);
    let session = Session::open(&client, TTL).await.unwrap();
    let acquiring = tokio::spawn(async move {
        let permit = session.acquire(AcquireOptions::new("t", "l")).await;
        (permit.map(|p| p.fence()), session)
    });
    assert!(n.wait_for(WAIT, is_acquire).await, "the acquire was sent");
    n.push(ServerFrame::Resync { missed_entries: 3 });
    let (fence, _session) = tokio::time::timeout(WAIT, acquiring)
        .await
        .expect("the waiter learns its grant after a resync")
        .unwrap();
    assert_eq!(fence.unwrap(), 11);
    assert_eq!(
        acquires(&n),
        2,
        "asked once, and once again after the resync"
    );
}

#[tokio::test]
async fn a_resync_re_asks_a_waiting_ticket_but_never_one_that_does_not_wait() {
    // The node leaves the first acquire unanswered (its answer still to come when the
    // Resync arrives). A ticket that waits is asked again; one that never waits is decided
    // by its own write alone: asked again, a refusal at once (which the cluster does not
    // remember) could be followed by a grant the caller never hears of.
    for wait in [true, false] {
        let n = FakeNode::start(1, node(|k| if k == 1 { None } else { granted() }, vec![])).await;
        let client = Client::new(vec![n.addr.clone()]);
        let session = Session::open(&client, TTL).await.unwrap();
        let mut options = AcquireOptions::new("t", "l");
        options.wait = wait;
        let acquiring = tokio::spawn(async move { session.acquire(options).await.map(|_| ()) });
        assert!(n.wait_for(WAIT, is_acquire).await, "the acquire was sent");
        n.push(ServerFrame::Resync { missed_entries: 3 });
        // The re-ask follows the Resync at once; its second acquire would be in by now.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let expected = if wait { 2 } else { 1 };
        assert_eq!(acquires(&n), expected, "wait {wait}: acquires sent");
        acquiring.abort();
    }
}

#[tokio::test]
async fn a_cancelled_acquire_releases_its_ticket() {
    let n = FakeNode::start(1, node(|_| queued(), vec![])).await;
    let client = Client::new(vec![n.addr.clone()]);
    let session = Session::open(&client, TTL).await.unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        session.acquire(AcquireOptions::new("t", "l")),
    )
    .await;
    assert!(cancelled.is_err(), "still queued when dropped");
    assert!(
        n.wait_for(WAIT, is_release_of(1)).await,
        "the queued ticket no one waits for is released"
    );
}

#[tokio::test]
async fn an_acquire_whose_outcome_is_unknown_is_released() {
    // Every try of the acquire ends "outcome unknown": it may have been granted.
    let unknown = || {
        Some(Response::Failed(Failure::OutcomeUnknown(
            "commit timed out".into(),
        )))
    };
    let n = FakeNode::start(1, node(move |_| unknown(), vec![])).await;
    let client = Client::new(vec![n.addr.clone()]);
    let session = Session::open(&client, Duration::from_secs(30))
        .await
        .unwrap();
    let e = session
        .acquire(AcquireOptions::new("t", "l"))
        .await
        .err()
        .expect("no permit");
    assert!(
        matches!(e, AcquireError::Client(ClientError::OutcomeUnknown(_))),
        "{e:?}"
    );
    assert!(
        n.wait_for(WAIT, is_release_of(1)).await,
        "a ticket that may be held is released"
    );
}

#[tokio::test]
async fn a_release_whose_caller_gives_up_is_still_retried_until_applied() {
    // The first release ends "outcome unknown" (a kill of the whole cluster mid-commit);
    // the caller waits 20 ms for it and gives up, as a timeout around `release` does.
    // Before the fix the release went no further and the permit stayed held under the live
    // session (a recorded 300 s harness run: `fenced` granted nobody for 130 s).
    let releases = Arc::new(AtomicU64::new(0));
    let counted = releases.clone();
    let base = node(|_| granted(), vec![]);
    let handler: Handler = Arc::new(move |r: &Request| match r {
        Request::Write(Command::Release { .. }) => {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                Some(Response::Failed(Failure::OutcomeUnknown(
                    "leadership lost".into(),
                )))
            } else {
                base(r)
            }
        }
        _ => base(r),
    });
    let n = FakeNode::start(1, handler).await;
    let (_session, permit) = holding_a_permit(&n).await;
    let ticket = permit.ticket();
    let gave_up = tokio::time::timeout(Duration::from_millis(20), permit.release()).await;
    assert!(gave_up.is_err(), "the caller stopped waiting first");
    let retried = async {
        for _ in 0..250 {
            let seen = n.seen().iter().filter(|r| is_release_of(ticket)(r)).count();
            if seen >= 2 {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        0
    };
    assert!(
        retried.await >= 2,
        "the release was tried again after the caller gave up: {:?}",
        n.seen()
    );
    assert!(releases.load(Ordering::SeqCst) >= 2);
}

#[tokio::test]
async fn a_halt_lost_with_a_push_is_learned_for_a_held_permit_on_resync() {
    let halts = vec![(HaltScope::Tenant, "budget".to_string())];
    let n = FakeNode::start(1, node(|_| granted(), halts)).await;
    let (_session, permit) = holding_a_permit(&n).await;
    assert_eq!(permit.lost_reason(), None);
    // The Halted push for this permit was dropped by the node's lagging forwarder.
    n.push(ServerFrame::Resync { missed_entries: 1 });
    let why = tokio::time::timeout(WAIT, permit.lost())
        .await
        .expect("the halt is learned");
    assert_eq!(
        why,
        Lost::Halted {
            scope: HaltScope::Tenant,
            reason: "budget".into()
        }
    );
}

/// A node that refuses the client's hellos (its token revoked) costs the permit at the
/// deadline, and the reason says the keep-alives were refused and why, not only that the
/// deadline passed.
#[tokio::test]
async fn a_permit_lost_to_refused_keep_alives_says_so() {
    let n = FakeNode::start(1, node(|_| granted(), vec![])).await;
    let client = Client::new(vec![n.addr.clone()]);
    let (_session, permit) = permit_of(&client).await;
    n.revoke("the token is not recognized by this node");
    let why = tokio::time::timeout(TTL + WAIT, permit.lost())
        .await
        .expect("the permit is lost by its deadline");
    let Lost::Refused(reason) = &why else {
        panic!("lost to {why:?}, not to the refusal");
    };
    assert!(reason.contains("not recognized"), "{reason}");
    assert!(why.to_string().contains("refused"), "{why}");
    assert_eq!(permit.lost_reason(), Some(why));
    // A request is refused by the node, typed as such.
    let e = client
        .write(Command::KeepAlive { session: 7 })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused(w) if w.contains("not recognized")),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_silent_node_is_given_up_and_the_session_moves_to_the_next() {
    let a = FakeNode::start(1, node(|_| granted(), vec![])).await;
    let b = FakeNode::start(2, node(|_| granted(), vec![])).await;
    let client = Client::new(vec![a.addr.clone(), b.addr.clone()]);
    let (_session, permit) = permit_of(&client).await;
    a.fall_silent();
    let moved = b
        .wait_for(WAIT, |r| {
            matches!(
                r,
                Request::Write(Command::KeepAlive { .. } | Command::KeepAliveAcked { .. })
            )
        })
        .await;
    assert!(moved, "a keep-alive reached the live node");
    // The permit survives (how fast the move was is the bench's to measure, not a test's):
    // its deadline was renewed through the live node before it passed.
    tokio::time::sleep(TTL).await;
    assert_eq!(permit.lost_reason(), None);
}

#[tokio::test]
async fn a_busy_node_that_sends_heartbeats_is_not_given_up() {
    // The acquire is answered after 2.5 s, longer than the silence bound; heartbeats go on.
    let slow = AtomicU64::new(0);
    let handler = node(
        move |_| {
            slow.fetch_add(1, Ordering::SeqCst);
            None
        },
        vec![],
    );
    let a = FakeNode::start(1, handler).await;
    let b = FakeNode::start(2, node(|_| granted(), vec![])).await;
    let client = Client::new(vec![a.addr.clone(), b.addr.clone()]);
    let session = Session::open(&client, TTL).await.unwrap();
    let _ = tokio::time::timeout(
        Duration::from_millis(2_500),
        session.acquire(AcquireOptions::new("t", "l")),
    )
    .await;
    assert!(
        b.seen().is_empty(),
        "nothing went to the other node: {:?}",
        b.seen()
    );
}

#[tokio::test]
async fn a_deposed_leader_names_the_new_one_and_the_client_moves_there() {
    let a = FakeNode::start(1, node(|_| granted(), vec![])).await;
    let b = FakeNode::start(2, node(|_| granted(), vec![])).await;
    // Only `a` is configured: the client can reach `b` only through the heartbeat.
    let client = Client::new(vec![a.addr.clone()]);
    let session = Session::open(&client, TTL).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.name_leader(Some((2, b.addr.clone())));
    let moved = b
        .wait_for(WAIT, |r| {
            matches!(
                r,
                Request::Write(Command::KeepAlive { .. } | Command::KeepAliveAcked { .. })
            )
        })
        .await;
    assert!(moved, "the session followed the named leader");
    drop(session);
}

#[tokio::test]
async fn a_halt_pushed_before_the_acquirer_takes_its_grant_is_kept() {
    let (state, ticket, mut outcome) = one_waiting_ticket();
    let halted = Lost::Halted {
        scope: HaltScope::Tenant,
        reason: "stop".into(),
    };
    // The halt's push overtakes the grant's answer.
    state.lose(ticket, halted.clone());
    state.answered(ticket, Reply::Granted { fence: 3, units: 1 });
    let grant = outcome.try_recv().unwrap().unwrap();
    assert_eq!(grant.fence, 3);
    assert_eq!(*grant.lost.borrow(), Some(halted));
    assert_eq!(state.whereabouts(ticket), (false, true));
}

#[tokio::test]
async fn an_expiry_that_overtakes_an_acquire_answer_fails_it_without_a_panic() {
    // The ticket leaves `waiting` (the session expired) before its acquire's answer is
    // handled: the answer must find nothing and the acquirer must see the session lost.
    let (state, ticket, mut outcome) = one_waiting_ticket();
    state.end(Lost::Expired);
    // Each kind of answer finds the ticket gone, and none may panic.
    state.answered(ticket, Reply::Queued { position: 2 });
    state.answered(ticket, Reply::Granted { fence: 3, units: 1 });
    state.answered(
        ticket,
        Reply::Refused(Refusal::UnknownSession { session: 1 }),
    );
    assert!(matches!(
        outcome.try_recv().unwrap(),
        Err(AcquireError::SessionLost)
    ));
    assert_eq!(state.whereabouts(ticket), (false, false));
}

#[test]
fn the_deadline_counts_suspended_time() {
    // A keep-alive sent at boot time 10 s and acknowledged: believed until 12.7 s.
    let sent = BootInstant::from_since_boot(Duration::from_secs(10));
    let deadline = super::deadline_after(sent, TTL);
    assert_eq!(deadline, sent + Duration::from_millis(2_700));
    // 1 s of monotonic time later, but the machine was suspended for 5 s in between: the
    // boot clock reads 16 s and the belief is over, though a monotonic deadline would not be.
    let after_suspend = sent + Duration::from_secs(6);
    assert!(!super::believed_at(deadline, after_suspend));
    assert!(super::believed_at(deadline, sent + Duration::from_secs(1)));
}

#[tokio::test]
async fn a_reask_that_waits_does_not_hold_up_the_keep_alives() {
    // The node grants, then never answers a read of the halts (as a new leader that cannot
    // yet confirm its leadership would not, for seconds under load). A Resync starts a
    // re-ask, which reads the halts of the held permit's tenant and waits; the keep-alives
    // must go on meanwhile, or the permit is lost to the session's own re-ask.
    let handler = node(|_| granted(), vec![]);
    let never_read: Handler = Arc::new(move |r: &Request| match r {
        Request::Read(Query::Halts { .. }) => None,
        other => handler(other),
    });
    let n = FakeNode::start(1, never_read).await;
    let (_session, permit) = holding_a_permit(&n).await;
    n.push(ServerFrame::Resync { missed_entries: 1 });
    assert!(
        n.wait_for(WAIT, |r| matches!(r, Request::Read(Query::Halts { .. })))
            .await,
        "the re-ask reads the halts"
    );
    let keep_alives = |n: &FakeNode| {
        n.seen()
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Request::Write(Command::KeepAlive { .. } | Command::KeepAliveAcked { .. })
                )
            })
            .count()
    };
    let before = keep_alives(&n);
    // Longer than the belief lasts after one keep-alive (TTL less its margin).
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    assert!(
        keep_alives(&n) >= before + 2,
        "keep-alives went on: {} then {}",
        before,
        keep_alives(&n)
    );
    assert_eq!(
        permit.lost_reason(),
        None,
        "the permit outlived the stuck re-ask"
    );
}

#[tokio::test]
async fn a_hedged_keep_alive_follows_a_redirect_to_the_leader_and_the_client_moves_there() {
    // `a` served the session and fell silent; `b` is a follower that names `c`; `c` leads.
    let a = FakeNode::start(1, node(|_| granted(), vec![])).await;
    let c = FakeNode::start(3, node(|_| granted(), vec![])).await;
    let c_addr = c.addr.clone();
    let follower: Handler = Arc::new(move |_: &Request| {
        Some(Response::Failed(Failure::NotLeader {
            leader: Some((3, c_addr.clone())),
        }))
    });
    let b = FakeNode::start(2, follower).await;
    let client = Client::new(vec![a.addr.clone(), b.addr.clone(), c.addr.clone()]);
    // A long TTL: the session's own keep-alives stay away from the hedge under test.
    let session = Session::open(&client, Duration::from_secs(60))
        .await
        .unwrap();
    a.fall_silent();
    let keep_alive = Request::Write(Command::KeepAlive {
        session: session.id(),
    });
    let answer = tokio::time::timeout(WAIT, client.hedge(&keep_alive))
        .await
        .expect("the hedge ends")
        .unwrap();
    assert!(
        matches!(
            answer,
            Response::Written {
                reply: Reply::KeptAlive { .. },
                ..
            }
        ),
        "{answer:?}"
    );
    assert!(
        b.seen().contains(&keep_alive),
        "the hedge asked the follower first"
    );
    assert!(
        c.seen().contains(&keep_alive),
        "and followed it to the leader"
    );
    // The client moved to the leader: the next request goes to `c` at once, not to `a`.
    let before_a = a.seen().len();
    let status = tokio::time::timeout(
        WAIT,
        client.request(Request::Write(Command::KeepAlive {
            session: session.id(),
        })),
    )
    .await
    .expect("answered")
    .unwrap();
    assert!(matches!(status, Response::Written { .. }), "{status:?}");
    assert_eq!(
        a.seen().len(),
        before_a,
        "nothing more went to the silent node: {:?}",
        a.seen()
    );
    // The hedge's and the next request's (the session's re-ask on its new connection may
    // add a third).
    let at_leader = c.seen().iter().filter(|r| **r == keep_alive).count();
    assert!(
        at_leader >= 2,
        "the keep-alives after the hedge reached the leader: {at_leader}"
    );
}

#[tokio::test]
async fn a_keep_alive_held_by_a_node_that_still_heartbeats_is_hedged_and_the_permit_kept() {
    // `a` opened the session and granted the permit, then holds every keep-alive without
    // an answer while its heartbeats go on (a follower whose forwarded writes wait on a dead
    // leader, a leader cut from its peers): the connection is never silent. `b` leads.
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answers = node(|_| granted(), vec![]);
    let held = hold.clone();
    let a = FakeNode::start(
        1,
        Arc::new(move |r: &Request| match r {
            Request::Write(Command::KeepAlive { .. } | Command::KeepAliveAcked { .. })
                if held.load(Ordering::SeqCst) =>
            {
                None
            }
            _ => answers(r),
        }),
    )
    .await;
    let b = FakeNode::start(2, node(|_| granted(), vec![])).await;
    let client = Client::new(vec![a.addr.clone(), b.addr.clone()]);
    let session = Session::open(&client, Duration::from_secs(3))
        .await
        .unwrap();
    let permit = session
        .acquire(AcquireOptions::new("t", "l"))
        .await
        .expect("granted by a");
    hold.store(true, Ordering::SeqCst);
    // Two TTLs: without the hedge the belief ends within one.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        permit.lost_reason(),
        None,
        "the permit outlived the held keep-alives"
    );
    assert!(session.writes_hedged() >= 1, "a keep-alive was hedged");
    let is_keep_alive = |r: &Request| matches!(r, Request::Write(Command::KeepAliveAcked { .. }));
    let at_b = b.seen().iter().filter(|r| is_keep_alive(r)).count();
    assert!(at_b >= 5, "the keep-alives moved to b: {at_b} there");
    // Once moved, nothing more waits on `a`: the hedge fired once or twice, not every time.
    assert!(
        session.writes_hedged() <= 2,
        "the client stayed on b: {} hedges",
        session.writes_hedged()
    );
}

#[tokio::test]
async fn a_request_held_by_the_old_leader_is_re_sent_when_told_the_leader_moved() {
    // `a` heartbeats and holds every keep-alive (a leader cut from its peers); `b` leads. A
    // node forwarding its callers' requests learns of `b` from its own Raft and says so.
    let answers = node(|_| granted(), vec![]);
    let a = FakeNode::start(
        1,
        Arc::new(move |r: &Request| match r {
            Request::Write(Command::KeepAlive { .. }) => None,
            _ => answers(r),
        }),
    )
    .await;
    let b = FakeNode::start(2, node(|_| granted(), vec![])).await;
    let client = Client::new(vec![a.addr.clone(), b.addr.clone()])
        .with_retry_deadline(Duration::from_millis(500));
    let keep_alive = Request::Write(Command::KeepAlive { session: 7 });
    let held = tokio::spawn({
        let client = client.clone();
        let keep_alive = keep_alive.clone();
        async move { client.request(keep_alive).await }
    });
    assert!(
        a.wait_for(WAIT, |r| *r == keep_alive).await,
        "the keep-alive reached a"
    );
    // Held longer than the retry deadline: a request already sent is not cut short by it.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!held.is_finished(), "still waiting on a");
    client.leader_moved(&b.addr).await;
    let answer = tokio::time::timeout(WAIT, held)
        .await
        .expect("answered once re-sent")
        .unwrap()
        .expect("the re-sent keep-alive is acknowledged");
    assert!(matches!(answer, Response::Written { .. }), "{answer:?}");
    assert!(b.seen().contains(&keep_alive), "re-sent to b");
    // Told again where it already is: nothing is given up.
    client.leader_moved(&b.addr).await;
    let before = b.seen().len();
    client.request(keep_alive.clone()).await.unwrap();
    assert_eq!(
        b.seen().len(),
        before + 1,
        "the next request went to b at once"
    );
}

#[tokio::test]
async fn a_client_with_a_short_retry_deadline_gives_up_on_no_leader_within_it() {
    // Every node is a follower that knows no leader (an election that does not end).
    let follower: Handler =
        Arc::new(|_: &Request| Some(Response::Failed(Failure::NotLeader { leader: None })));
    let a = FakeNode::start(1, follower.clone()).await;
    let b = FakeNode::start(2, follower).await;
    let client = Client::new(vec![a.addr.clone(), b.addr.clone()])
        .with_retry_deadline(Duration::from_millis(300));
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        client.request(Request::Write(Command::KeepAlive { session: 7 })),
    )
    .await
    .expect("given up well before the library's 10 s");
    assert!(
        matches!(
            answer,
            Err(ClientError::Failed(Failure::NotLeader { leader: None }))
        ),
        "{answer:?}"
    );
}

#[tokio::test]
async fn a_client_with_a_local_address_connects_from_it_and_works_as_any_other() {
    // 127.0.0.0/8 is all local on Linux: any address in it can be bound and reach a
    // listener on 127.0.0.1. The harness tells one client's links from the others' so.
    let n = FakeNode::start(1, node(|_| granted(), vec![])).await;
    let bound = "127.0.0.50".parse().unwrap();
    let client = Client::new(vec![n.addr.clone()]).with_local_addr(bound);
    let (_session, permit) = permit_of(&client).await;
    assert_eq!(permit.fence(), 11);
    let plain = Client::new(vec![n.addr.clone()]);
    let _other = Session::open(&plain, TTL).await.unwrap();
    let sources: Vec<std::net::IpAddr> = n.sources().iter().map(|a| a.ip()).collect();
    assert_eq!(
        sources,
        [bound, "127.0.0.1".parse().unwrap()],
        "the bound client's one connection came from its address, the other's from the default"
    );
}

#[tokio::test]
async fn a_local_address_of_another_family_than_the_servers_is_refused_before_any_connect() {
    let n = FakeNode::start(1, node(|_| granted(), vec![])).await;
    let err = super::conn::dial(&n.addr, Some("::1".parse().unwrap()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrNotAvailable, "{err}");
    assert!(err.to_string().contains("reachable from ::1"), "{err}");
    assert!(n.sources().is_empty(), "nothing connected");
}

/// The acknowledged marks of the keep-alives node `n` received after its first `from`
/// requests, waiting (at most [`WAIT`]) until there is one.
async fn marks_after(n: &FakeNode, from: usize) -> Vec<u64> {
    let marks = |n: &FakeNode| -> Vec<u64> {
        (n.seen().iter().skip(from))
            .filter_map(|r| match r {
                Request::Write(Command::KeepAliveAcked { acked_below, .. }) => Some(*acked_below),
                _ => None,
            })
            .collect()
    };
    let until = tokio::time::Instant::now() + WAIT;
    while marks(n).is_empty() && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    marks(n)
}

#[tokio::test]
async fn keep_alives_carry_the_lowest_ticket_still_waiting_as_the_acknowledged_mark() {
    // Acquires 1 and 3 are granted; acquire 2 is never answered, so ticket 2 waits.
    let n = FakeNode::start(1, node(|k| if k == 2 { None } else { granted() }, vec![])).await;
    let client = Client::new(vec![n.addr.clone()]);
    let session = Arc::new(Session::open(&client, TTL).await.unwrap());
    let _first = session
        .acquire(AcquireOptions::new("t", "l"))
        .await
        .unwrap();
    // Ticket 1 is held, not waiting: the mark passes it, to the next ticket.
    let from = n.seen().len();
    assert_eq!(marks_after(&n, from).await.first(), Some(&2));

    let waiting = {
        let session = session.clone();
        tokio::spawn(async move {
            session
                .acquire(AcquireOptions::new("t", "l"))
                .await
                .map(|_| ())
        })
    };
    assert!(
        n.wait_for(
            WAIT,
            |r| matches!(r, Request::Write(Command::Acquire(a)) if a.ticket == 2)
        )
        .await
    );
    let _third = session
        .acquire(AcquireOptions::new("t", "l"))
        .await
        .unwrap();
    // Ticket 2 may still be re-asked: the mark stays at it though ticket 3 was answered.
    let from = n.seen().len();
    assert_eq!(marks_after(&n, from).await.first(), Some(&2));
    waiting.abort();
}
