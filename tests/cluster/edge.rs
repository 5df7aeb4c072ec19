//! G8 at the edge: every bound a command can break is refused before it is proposed (the
//! applied index does not move), no burst of large requests can stall replication, and a
//! connection follows a bounded set of sessions.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use weir_core::bounds::{FOLLOWED_SESSIONS_MAX, NAME_BYTES_MAX, REASON_BYTES_MAX, UNITS_MAX};
use weir_core::codec;
use weir_core::machine::{Acquire, Change, Command, Event, HaltScope, Priority, Reply, Settle};
use weir_proto::protocol::{
    CLIENT_FRAME_MAX, ClientFrame, Failure, PROTOCOL_VERSION, Request, Response, ServerFrame,
};
use weir_proto::wire;

use crate::harness::{Cluster, phase};
use crate::{CONVERGE, ELECTION, define};

/// A raw pipelined connection: requests go out as fast as they are written; a task collects
/// responses and events.
struct Raw {
    wr: OwnedWriteHalf,
    frames: mpsc::UnboundedReceiver<ServerFrame>,
}

impl Raw {
    async fn connect(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).await.unwrap();
        let (mut rd, mut wr) = s.into_split();
        wire::write_frame(
            &mut wr,
            &ClientFrame::Hello {
                version: PROTOCOL_VERSION,
                token: None,
            },
        )
        .await
        .unwrap();
        let (tx, frames) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(f) = wire::read_frame::<_, ServerFrame>(&mut rd, CLIENT_FRAME_MAX).await {
                if tx.send(f).is_err() {
                    return;
                }
            }
        });
        let mut raw = Raw { wr, frames };
        assert!(matches!(raw.next().await, ServerFrame::Welcome { .. }));
        raw
    }

    async fn send(&mut self, id: u64, request: Request) {
        let payload = codec::encode(&ClientFrame::Request { id, request });
        let frame = [
            &(payload.len() as u32).to_le_bytes()[..],
            &crc32c::crc32c(&payload).to_le_bytes(),
            &payload,
        ]
        .concat();
        self.wr.write_all(&frame).await.unwrap();
    }

    async fn next(&mut self) -> ServerFrame {
        tokio::time::timeout(Duration::from_secs(30), self.frames.recv())
            .await
            .expect("a frame within 30 s")
            .expect("the connection stays open")
    }

    /// Sends `command` as request `id` and asserts it was written.
    async fn written(&mut self, id: u64, command: Command) {
        self.send(id, Request::Write(command)).await;
        let (responses, _) = self.responses(1).await;
        assert!(
            matches!(responses[&id], Response::Written { .. }),
            "{:?}",
            responses[&id]
        );
    }

    /// Waits for the responses to `ids`; events seen meanwhile are returned too.
    async fn responses(&mut self, n: usize) -> (BTreeMap<u64, Response>, Vec<Event>) {
        let mut out = BTreeMap::new();
        let mut events = vec![];
        while out.len() < n {
            match self.next().await {
                ServerFrame::Response { id, response } => {
                    out.insert(id, response);
                }
                ServerFrame::Event(e) => events.push(e),
                other => panic!("unexpected frame {other:?}"),
            }
        }
        (out, events)
    }
}

fn long() -> String {
    "x".repeat(NAME_BYTES_MAX + 1)
}

fn acquire(f: impl FnOnce(&mut Acquire)) -> Command {
    let mut a = Acquire {
        session: 1,
        ticket: 1,
        tenant: "t".into(),
        limit: "l".into(),
        units: 1,
        priority: Priority::default(),
        agent: None,
        wait: true,
    };
    f(&mut a);
    Command::Acquire(a)
}

/// One command breaking each bound the machine checks alone, with what the refusal names.
fn bad_commands() -> Vec<(Command, &'static str)> {
    let settle = Settle {
        tenant: "t".into(),
        run: "r".into(),
        epoch: 1,
        period: None,
        tokens: 0,
        minor_units: 0,
        release_slot: false,
    };
    let def = |concurrent, per_second, burst| Command::DefineLimit {
        tenant: "t".into(),
        name: "l".into(),
        concurrent,
        per_second,
        burst,
    };
    vec![
        (
            Command::DefineLimit {
                tenant: long(),
                name: "l".into(),
                concurrent: 1,
                per_second: 0.0,
                burst: None,
            },
            "tenant is 129 bytes",
        ),
        (
            Command::DefineLimit {
                tenant: "t".into(),
                name: String::new(),
                concurrent: 1,
                per_second: 0.0,
                burst: None,
            },
            "limit name is empty",
        ),
        (def(UNITS_MAX + 1, 0.0, None), "concurrent"),
        (def(1, f64::NAN, None), "per_second"),
        (def(1, -1.0, None), "per_second"),
        (def(1, 1.0, Some(0)), "burst"),
        (
            Command::RemoveLimit {
                tenant: "t".into(),
                name: long(),
            },
            "limit name is 129 bytes",
        ),
        (Command::OpenSession { ttl_ms: 1 }, "ttl_ms 1"),
        (Command::OpenSession { ttl_ms: u64::MAX }, "ttl_ms"),
        (acquire(|a| a.limit = long()), "limit name is 129 bytes"),
        (acquire(|a| a.agent = Some(long())), "agent is 129 bytes"),
        (
            acquire(|a| a.priority.fairness_key = long()),
            "fairness key is 129 bytes",
        ),
        (acquire(|a| a.units = 0), "units 0"),
        (acquire(|a| a.units = UNITS_MAX + 1), "units"),
        (
            acquire(|a| a.priority.fairness_weight = 0),
            "fairness weight 0",
        ),
        (
            Command::SetTenant {
                tenant: long(),
                max_running: Change::Keep,
                budget_tokens: Change::Keep,
                budget_minor: Change::Keep,
            },
            "tenant is 129 bytes",
        ),
        (
            Command::Reserve {
                tenant: "t".into(),
                run: long(),
                agent: None,
                period: None,
                hold_tokens: None,
                hold_minor: None,
            },
            "run is 129 bytes",
        ),
        (
            Command::Reserve {
                tenant: "t".into(),
                run: "r".into(),
                agent: None,
                period: Some(long()),
                hold_tokens: None,
                hold_minor: None,
            },
            "period is 129 bytes",
        ),
        (
            Command::ReleaseRun {
                tenant: "t".into(),
                run: long(),
            },
            "run is 129 bytes",
        ),
        (
            Command::Settle(Settle {
                period: Some(long()),
                ..settle.clone()
            }),
            "period is 129 bytes",
        ),
        (
            Command::Settle(Settle {
                run: String::new(),
                ..settle
            }),
            "run is empty",
        ),
        (
            Command::SetHalt {
                tenant: "t".into(),
                scope: HaltScope::Tenant,
                reason: "r".repeat(REASON_BYTES_MAX + 1),
            },
            "reason is 1025 bytes",
        ),
        (
            Command::SetHalt {
                tenant: "t".into(),
                scope: HaltScope::Agent(long()),
                reason: "r".into(),
            },
            "agent is 129 bytes",
        ),
        (
            Command::ClearHalt {
                tenant: String::new(),
                scope: HaltScope::Tenant,
            },
            "tenant is empty",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_argument_bound_is_refused_at_the_edge_and_never_reaches_the_log() {
    let cluster = Cluster::start("edgebounds", 1, "");
    let leader = cluster.leader(ELECTION).await;
    cluster.converged(CONVERGE).await;
    let applied = cluster.status(leader).await.unwrap().applied;
    let mut raw = Raw::connect(&cluster.node(leader).client).await;
    let cases = bad_commands();
    for (id, (command, _)) in cases.iter().enumerate() {
        raw.send(id as u64, Request::Write(command.clone())).await;
    }
    let (responses, _) = raw.responses(cases.len()).await;
    for (id, (command, names)) in cases.iter().enumerate() {
        match &responses[&(id as u64)] {
            Response::Failed(Failure::BadRequest(why)) => {
                assert!(
                    why.contains(names),
                    "{command:?}: {why:?} should name {names:?}"
                )
            }
            other => panic!("{command:?} was not refused at the edge: {other:?}"),
        }
    }
    phase("nothing was proposed: the applied index did not move");
    assert_eq!(cluster.status(leader).await.unwrap().applied, applied);
    phase("the connection still serves");
    raw.send(1_000, Request::Write(define("ok", 1))).await;
    let (responses, _) = raw.responses(1).await;
    assert!(matches!(
        responses[&1_000],
        Response::Written {
            reply: Reply::Done,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_large_requests_on_one_connection_does_not_stall_later_writes() {
    let (cluster, leader, client) = Cluster::three_with_limit("edgeburst", "before").await;
    let mut raw = Raw::connect(&cluster.node(leader).client).await;
    phase("a burst: oversized requests, then many of the largest valid ones");
    let oversized = 32u64;
    for id in 0..oversized {
        let reason = "o".repeat(3 << 20);
        let command = Command::SetHalt {
            tenant: "burst".into(),
            scope: HaltScope::Tenant,
            reason,
        };
        raw.send(id, Request::Write(command)).await;
    }
    let large = 8_000u64;
    for id in oversized..oversized + large {
        let command = Command::SetHalt {
            tenant: "burst".into(),
            scope: HaltScope::Agent("a".repeat(NAME_BYTES_MAX)),
            reason: format!("{id:0>width$}", width = REASON_BYTES_MAX),
        };
        raw.send(id, Request::Write(command)).await;
    }
    phase("ordinary writes from another client still succeed");
    let started = Instant::now();
    for i in 0..20 {
        let reply = tokio::time::timeout(
            Duration::from_secs(20),
            client.write(define(&format!("after-{i}"), 1)),
        )
        .await
        .expect("an ordinary write within 20 s of the burst")
        .expect("an ordinary write succeeds after the burst");
        assert_eq!(reply, Reply::Done);
    }
    eprintln!("20 writes after the burst took {:?}", started.elapsed());
    phase("the burst's answers: oversized refused at the edge, the rest applied");
    let (responses, _) = raw.responses((oversized + large) as usize).await;
    for id in 0..oversized {
        assert!(
            matches!(&responses[&id], Response::Failed(Failure::BadRequest(_))),
            "{:?}",
            responses[&id]
        );
    }
    // The valid ones are applied, or (if leadership moved during the burst, as it may on a
    // loaded machine) answered `NotLeader` for the client to retry elsewhere; nothing else.
    let mut applied = 0;
    for id in oversized..oversized + large {
        match &responses[&id] {
            Response::Written {
                reply: Reply::Done, ..
            } => applied += 1,
            Response::Failed(Failure::NotLeader { .. }) => {}
            other => panic!("{id}: {other:?}"),
        }
    }
    assert!(applied > 0, "none of the burst's valid writes was applied");
    cluster.converged(CONVERGE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_follows_a_bounded_set_of_sessions_and_drops_ended_ones() {
    let cluster = Cluster::start("edgefollow", 1, "");
    let leader = cluster.leader(ELECTION).await;
    let mut raw = Raw::connect(&cluster.node(leader).client).await;
    phase("name sessions up to the bound less one (unknown sessions are followed too)");
    let fill = FOLLOWED_SESSIONS_MAX as u64 - 1;
    for s in 0..fill {
        raw.send(
            s,
            Request::Write(Command::KeepAlive {
                session: 1 << 40 | s,
            }),
        )
        .await;
    }
    let (responses, _) = raw.responses(fill as usize).await;
    assert!(
        responses
            .values()
            .all(|r| matches!(r, Response::Written { .. })),
        "below the bound every write is proposed"
    );
    phase("a real session takes the last place, and expires");
    raw.send(fill, Request::Write(Command::OpenSession { ttl_ms: 500 }))
        .await;
    let (responses, _) = raw.responses(1).await;
    let Response::Written {
        reply: Reply::SessionOpened { session, .. },
        ..
    } = responses[&fill]
    else {
        panic!("{:?}", responses[&fill]);
    };
    phase("at the bound, a new session is refused with an error naming it");
    raw.send(fill + 1, Request::Write(Command::KeepAlive { session: 7 }))
        .await;
    let (responses, _) = raw.responses(1).await;
    match &responses[&(fill + 1)] {
        Response::Failed(Failure::BadRequest(why)) => {
            assert!(
                why.contains(&format!("follows {FOLLOWED_SESSIONS_MAX} sessions")),
                "{why}"
            )
        }
        other => panic!("not refused at the bound: {other:?}"),
    }
    phase("the expiry frees its place");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match raw.next().await {
            ServerFrame::Event(Event::SessionExpired { session: s }) if s == session => break,
            _ => assert!(Instant::now() < deadline, "no expiry event"),
        }
    }
    raw.written(fill + 2, Command::KeepAlive { session: 7 })
        .await;
    phase("a close frees its place too");
    raw.written(fill + 3, Command::CloseSession { session: 1 << 40 })
        .await;
    raw.written(fill + 4, Command::KeepAlive { session: 8 })
        .await;
}
