//! Sessions belong to their opener across a failover (G10): the owner is in the machine,
//! so a new leader refuses another principal exactly as the old one did; and session ids
//! are the entry's random nonce, so knowing one says nothing about another.

use std::time::Duration;

use weir_client::{Client, ClientError};
use weir_core::machine::{Acquire, Command, Refusal, Reply, SessionId};
use weir_launcher::LocalCluster;
use weir_proto::protocol::{Failure, Request, Response};
use weir_proto::tls::ClientSecurity;
use weir_server::config::TokenEntry;

use crate::harness::{phase, start_secured, token_entries};

const ADMIN: &str = "owners-admin";
const ALICE: &str = "owners-alice";
const BOB: &str = "owners-bob";

fn tokens() -> Vec<TokenEntry> {
    token_entries(&[(ADMIN, "admin"), (ALICE, "tenant:t"), (BOB, "tenant:t")])
}

fn as_token(token: &str) -> ClientSecurity {
    ClientSecurity::new(None, Some(token.into())).unwrap()
}

/// What `client` is answered for `command`; bounded, and retried through leader changes
/// by the client itself.
async fn write(client: &Client, command: Command) -> Result<Response, ClientError> {
    tokio::time::timeout(
        Duration::from_secs(30),
        client.request(Request::Write(command)),
    )
    .await
    .expect("bounded")
}

async fn open(client: &Client) -> SessionId {
    match write(client, Command::OpenSession { ttl_ms: 60_000 }).await {
        Ok(Response::Written {
            reply: Reply::SessionOpened { session, .. },
            ..
        }) => session,
        other => panic!("open: {other:?}"),
    }
}

fn acquire(session: SessionId, ticket: u64) -> Command {
    Command::Acquire(Acquire {
        session,
        ticket,
        tenant: "t".into(),
        limit: "db".into(),
        units: 1,
        priority: Default::default(),
        agent: None,
        wait: false,
    })
}

fn written(r: &Result<Response, ClientError>) -> Option<&Reply> {
    match r {
        Ok(Response::Written { reply, .. }) => Some(reply),
        _ => None,
    }
}

/// Bob's keep-alive, release, close and acquire on `session` are all refused `Forbidden`.
async fn bob_is_refused(bob: &Client, session: SessionId) {
    for command in [
        Command::KeepAlive { session },
        Command::Release { session, ticket: 1 },
        Command::CloseSession { session },
        acquire(session, 9),
    ] {
        let r = write(bob, command.clone()).await;
        assert!(
            matches!(&r, Ok(Response::Failed(Failure::Forbidden(why))) if why.contains("another principal")),
            "bob was not refused {command:?}: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_refuses_another_principal_on_a_session_opened_before_the_failover() {
    let mut cluster =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-owners-failover").unwrap();
    cluster = cluster.security(as_token(ADMIN));
    let old = start_secured(&mut cluster, None, &tokens()).await;
    let servers = cluster.servers();
    let admin = Client::with_security(servers.clone(), as_token(ADMIN));
    let alice = Client::with_security(servers.clone(), as_token(ALICE));
    let bob = Client::with_security(servers.clone(), as_token(BOB));

    phase("alice opens two sessions through the leader and holds a permit in the first");
    let define = Command::DefineLimit {
        tenant: "t".into(),
        name: "db".into(),
        concurrent: 4,
        per_second: 0.0,
        burst: None,
    };
    // Limit definitions are the operator's (admin's).
    assert_eq!(written(&write(&admin, define).await), Some(&Reply::Done));
    let session = open(&alice).await;
    let other = open(&alice).await;
    assert!(matches!(
        written(&write(&alice, acquire(session, 1)).await),
        Some(Reply::Granted { .. })
    ));

    phase(
        "the ids are not sequential, and a guessed id (the counter's, or next to one) is unknown",
    );
    assert!(
        session.abs_diff(other) > 1_000_000,
        "session ids {session} and {other} are close: guessable"
    );
    for guess in [
        session.wrapping_add(1),
        other.wrapping_add(1),
        session.wrapping_sub(1),
        2,
        3,
    ] {
        let r = write(&alice, Command::KeepAlive { session: guess }).await;
        assert_eq!(
            written(&r),
            Some(&Reply::Refused(Refusal::UnknownSession { session: guess })),
            "guessed id {guess}: {r:?}"
        );
    }

    phase("the leader is refusing bob before the failover");
    bob_is_refused(&bob, session).await;

    phase("the leader is killed; the other two elect a new one");
    cluster.kill(old);
    let rest: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.id != old)
        .map(|n| n.client.clone())
        .collect();
    let new = weir_launcher::leader_among_with(&rest, Duration::from_secs(30), &as_token(ADMIN))
        .await
        .expect("a new leader");
    assert_ne!(new, old);

    phase("the new leader refuses bob's keep-alive, release, close and acquire on it");
    bob_is_refused(&bob, session).await;

    phase("alice's keep-alive, acquire and release still work, and the permit is still hers");
    assert!(matches!(
        written(&write(&alice, Command::KeepAlive { session }).await),
        Some(Reply::KeptAlive { .. })
    ));
    assert!(matches!(
        written(&write(&alice, acquire(session, 1)).await),
        Some(Reply::Granted { .. })
    ));
    assert!(matches!(
        written(&write(&alice, acquire(session, 2)).await),
        Some(Reply::Granted { .. })
    ));
    assert!(written(&write(&alice, Command::Release { session, ticket: 2 }).await).is_some());
    assert_eq!(
        written(&write(&alice, Command::CloseSession { session }).await),
        Some(&Reply::Done)
    );
}
