//! Security end to end (G10, docs/security.md): real TLS handshakes between real processes, tokens
//! and their roles, and reloading tokens with SIGHUP.

use std::path::Path;
use std::time::Duration;

use weir_client::{Client, ClientError};
use weir_core::machine::{Command, HaltScope, Reply};
use weir_launcher::LocalCluster;
use weir_proto::protocol::{Failure, Query, Request, Response};
use weir_proto::tls::ClientSecurity;
use weir_server::config::{Config, TokenEntry};
use weir_server::security::certs::{DevCa, Validity};

use crate::harness::{phase, start_secured, tls_files, token_entries, write_certs};

const ADMIN: &str = "admin-secret";
const TENANT_A: &str = "tenant-a-secret";
const TENANT_B: &str = "tenant-b-secret";
const READER: &str = "read-secret";

fn tokens() -> Vec<TokenEntry> {
    token_entries(&[
        (ADMIN, "admin"),
        (TENANT_A, "tenant:a"),
        (TENANT_B, "tenant:b"),
        (READER, "read"),
    ])
}

fn security(ca: Option<&Path>, token: Option<&str>) -> ClientSecurity {
    ClientSecurity::new(ca, token.map(String::from)).unwrap()
}

fn define(tenant: &str) -> Command {
    Command::DefineLimit {
        tenant: tenant.into(),
        name: "x".into(),
        concurrent: 2,
        per_second: 0.0,
        burst: None,
    }
}

/// What `client` is answered for `request`: the response, or the client error's text.
async fn ask(client: &Client, request: Request) -> Result<Response, ClientError> {
    tokio::time::timeout(Duration::from_secs(20), client.request(request))
        .await
        .expect("bounded")
}

fn forbidden(r: &Result<Response, ClientError>) -> bool {
    matches!(r, Ok(Response::Failed(Failure::Forbidden(_))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_peers_elect_and_clients_with_a_wrong_ca_or_an_expired_certificate_are_refused() {
    let mut cluster =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-sec-tls").unwrap();
    let certs = cluster.dir().join("certs");
    let other = cluster.dir().join("other");
    let ca = DevCa::new("cluster CA").unwrap();
    write_certs(
        &certs,
        &ca,
        &[
            ("node1", Validity::Current),
            ("node2", Validity::Current),
            ("node3", Validity::Current),
            ("stale", Validity::Expired),
        ],
    );
    let other_ca = DevCa::new("another CA").unwrap();
    write_certs(&other, &other_ca, &[("node4", Validity::Current)]);
    let admin = security(Some(&certs.join("ca.pem")), Some(ADMIN));
    cluster = cluster.security(admin.clone());

    phase("three nodes with certificates from one CA elect a leader over mutual TLS");
    let leader = start_secured(&mut cluster, Some(&certs), &tokens()).await;
    let client = Client::with_security(cluster.servers(), admin.clone());
    assert!(matches!(
        ask(&client, Request::Write(define("a"))).await,
        Ok(Response::Written { .. })
    ));

    phase("a client verifying against another CA is refused in the handshake");
    let wrong = Client::with_security(
        cluster.servers(),
        security(Some(&other.join("ca.pem")), Some(ADMIN)),
    );
    match ask(&wrong, Request::Status).await {
        Err(ClientError::Protocol(why)) => assert!(why.contains("certificate"), "{why}"),
        other => panic!("a wrong CA was not refused: {other:?}"),
    }
    phase("a plaintext client on a TLS port gets no welcome, and a hint to pass --ca");
    let plain = Client::ask_node_with(
        &cluster.node(leader).client,
        &Request::Status,
        &security(None, Some(ADMIN)),
    )
    .await;
    assert!(
        matches!(&plain, Err(ClientError::Unreachable(w)) if w.contains("pass --ca")),
        "{plain:?}"
    );
    phase("no token, or an unknown one, is refused with a clear error");
    let none = Client::ask_node_with(
        &cluster.node(leader).client,
        &Request::Status,
        &security(Some(&certs.join("ca.pem")), None),
    )
    .await;
    assert!(
        matches!(&none, Err(ClientError::Refused(w)) if w.contains("requires a token")),
        "{none:?}"
    );
    let unknown = Client::ask_node_with(
        &cluster.node(leader).client,
        &Request::Status,
        &security(Some(&certs.join("ca.pem")), Some("guess")),
    )
    .await;
    assert!(
        matches!(&unknown, Err(ClientError::Refused(w)) if w.contains("not recognized")),
        "{unknown:?}"
    );

    phase("a node whose certificate another CA issued cannot join");
    let mut peers = cluster.voters();
    let me = weir_server::config::Peer {
        id: 4,
        client: weir_launcher::loopback_addr().unwrap(),
        peer: weir_launcher::loopback_addr().unwrap(),
    };
    peers.push(me.clone());
    cluster
        .add(Config {
            id: 4,
            data_dir: cluster.data_dir(4),
            client_addr: me.client.clone(),
            peer_addr: me.peer.clone(),
            peers,
            tls: Some(tls_files(&other, "node4")),
            tokens: tokens(),
            ..Config::default()
        })
        .unwrap();
    cluster.start(4).unwrap();
    // The leader tries it as a learner; its handshakes fail, it never catches up, so it is
    // removed again and never made a voter.
    let added = tokio::time::timeout(
        Duration::from_secs(30),
        client.request(Request::AddNode {
            id: 4,
            peer: me.peer.clone(),
            client: me.client.clone(),
        }),
    )
    .await
    .expect("bounded");
    assert!(
        matches!(&added, Ok(Response::Failed(Failure::BadRequest(why))) if why.contains("did not catch up")),
        "the outsider was not refused: {added:?}"
    );
    let st = cluster.status(leader).await.expect("the leader's status");
    assert!(
        st.members.iter().all(|m| m.id != 4),
        "the outsider is still a member: {st:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let outsider = security(Some(&other.join("ca.pem")), Some(ADMIN));
    match Client::ask_node_with(&me.client, &Request::Status, &outsider).await {
        Ok(Response::Status(st)) => {
            assert_eq!(st.applied, 0, "the outsider applied nothing: {st:?}");
            assert_eq!(st.leader, None, "the outsider knows no leader: {st:?}");
        }
        other => panic!("node 4 did not answer its own CA's client: {other:?}"),
    }
    let refused = (1..=3).any(|id| {
        cluster
            .log_tail(id, 400)
            .iter()
            .any(|l| l.contains("TLS handshake") && l.contains("UnknownIssuer"))
    });
    assert!(refused, "no node logged the outsider's refused certificate");

    phase("an expired certificate is refused");
    let mut single =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-sec-expired").unwrap();
    let mut config = single.loopback_configs(1).unwrap().remove(0);
    config.tls = Some(tls_files(&certs, "stale"));
    single.add_and_start(vec![config]).unwrap();
    let stale = Client::with_security(
        single.servers(),
        security(Some(&certs.join("ca.pem")), None),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match ask(&stale, Request::Status).await {
            Err(ClientError::Protocol(why)) => {
                assert!(why.contains("expired"), "{why}");
                break;
            }
            other if std::time::Instant::now() > deadline => panic!("expired accepted: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_tokens_stay_in_their_tenant_read_only_reads_and_a_revoked_token_stops_after_sighup()
{
    let mut cluster =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-sec-tokens").unwrap();
    cluster = cluster.security(security(None, Some(ADMIN)));
    let mut config = cluster.loopback_configs(1).unwrap().remove(0);
    config.tokens = tokens();
    cluster.add_and_start(vec![config.clone()]).unwrap();
    cluster
        .leader(Duration::from_secs(20))
        .await
        .expect("a leader");
    let servers = cluster.servers();
    let admin = Client::with_security(servers.clone(), security(None, Some(ADMIN)));
    let a = Client::with_security(servers.clone(), security(None, Some(TENANT_A)));
    let b = Client::with_security(servers.clone(), security(None, Some(TENANT_B)));
    let reader = Client::with_security(servers.clone(), security(None, Some(READER)));

    phase("admin defines in both tenants");
    for t in ["a", "b"] {
        assert!(matches!(
            ask(&admin, Request::Write(define(t))).await,
            Ok(Response::Written { .. })
        ));
    }

    phase("the controls over tenant a are admin's: tenant:a can neither lift nor raise them");
    let halt = Command::SetHalt {
        tenant: "a".into(),
        scope: HaltScope::Tenant,
        reason: "incident".into(),
    };
    assert!(matches!(
        ask(&admin, Request::Write(halt)).await,
        Ok(Response::Written { .. })
    ));
    let clear = Command::ClearHalt {
        tenant: "a".into(),
        scope: HaltScope::Tenant,
    };
    let raise = Command::SetTenant {
        tenant: "a".into(),
        max_running: weir_core::machine::Change::Set(100),
        budget_tokens: weir_core::machine::Change::Set(1_000_000),
        budget_minor: weir_core::machine::Change::Keep,
    };
    for command in [clear.clone(), raise, define("a")] {
        let r = ask(&a, Request::Write(command.clone())).await;
        assert!(
            matches!(&r, Ok(Response::Failed(Failure::Forbidden(w))) if w.contains("admin role")),
            "tenant:a was not refused {command:?} in its own tenant: {r:?}"
        );
    }
    match ask(&a, Request::Read(Query::Halts { tenant: "a".into() })).await {
        Ok(Response::Read(weir_proto::protocol::Answer::Halts(h))) => {
            assert_eq!(h.len(), 1, "the admin's halt stands: {h:?}")
        }
        other => panic!("tenant:a reads its halts: {other:?}"),
    }
    assert!(matches!(
        ask(&admin, Request::Write(clear)).await,
        Ok(Response::Written { .. })
    ));

    phase("tenant:a cannot define, acquire, reserve, read or halt in tenant b");
    // Long enough to outlive the revocation below without keep-alives.
    let session = match ask(&a, Request::Write(Command::OpenSession { ttl_ms: 120_000 })).await {
        Ok(Response::Written {
            reply: Reply::SessionOpened { session, .. },
            ..
        }) => session,
        other => panic!("open: {other:?}"),
    };
    let acquire = |tenant: &str, ticket| {
        Command::Acquire(weir_core::machine::Acquire {
            session,
            ticket,
            tenant: tenant.into(),
            limit: "x".into(),
            units: 1,
            priority: Default::default(),
            agent: None,
            wait: false,
        })
    };
    let into_b = [
        Request::Write(define("b")),
        Request::Write(acquire("b", 1)),
        Request::Write(Command::Reserve {
            tenant: "b".into(),
            run: "r".into(),
            agent: None,
            period: None,
            hold_tokens: None,
            hold_minor: None,
        }),
        Request::Read(Query::limits("b")),
        Request::ReadLocal(Query::Tenant { tenant: "b".into() }),
        Request::Write(Command::SetHalt {
            tenant: "b".into(),
            scope: HaltScope::Tenant,
            reason: "no".into(),
        }),
        Request::Status,
        Request::SnapshotCost,
        Request::RemoveNode { id: 1 },
        Request::BackupBegin,
        Request::BackupChunk {
            index: 1,
            offset: 0,
        },
    ];
    for request in into_b {
        let r = ask(&a, request.clone()).await;
        assert!(forbidden(&r), "tenant:a was not refused {request:?}: {r:?}");
    }
    assert!(matches!(
        ask(&a, Request::Write(acquire("a", 2))).await,
        Ok(Response::Written {
            reply: Reply::Granted { .. },
            ..
        })
    ));

    phase(
        "the CLI: a read token's status is served; a forbidden status and a refused token are refusals (exit 3), said cleanly",
    );
    let weir = |token: &str| {
        let mut cli = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
        cli.args(["status", "--servers", &servers.join(",")]);
        if !token.is_empty() {
            cli.args(["--token", token]);
        }
        let out = cli.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = weir(READER);
    assert_eq!(
        code,
        Some(0),
        "a read-only dashboard sees the node table: {err}"
    );
    let (code, err) = weir(TENANT_A);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains(
            "forbidden: status requests need the admin role or the read role, not tenant:a"
        ),
        "{err}"
    );
    assert!(!err.contains("unexpected answer"), "{err}");
    let (code, err) = weir("");
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("refused by the node") && err.contains("requires a token"),
        "{err}"
    );

    phase("read reads anywhere, the node's status too, and writes nowhere");
    assert!(matches!(
        ask(&reader, Request::Status).await,
        Ok(Response::Status(_))
    ));
    assert!(matches!(
        ask(&reader, Request::Read(Query::limits("b"))).await,
        Ok(Response::Read(_))
    ));
    for request in [
        Request::Write(define("a")),
        Request::Write(Command::OpenSession { ttl_ms: 10_000 }),
        Request::SnapshotCost,
    ] {
        let r = ask(&reader, request.clone()).await;
        assert!(forbidden(&r), "read was not refused {request:?}: {r:?}");
    }

    phase("tenant:b cannot keep alive, release or close tenant:a's session");
    for command in [
        Command::KeepAlive { session },
        Command::Release { session, ticket: 2 },
        Command::CloseSession { session },
        acquire("b", 3),
    ] {
        let r = ask(&b, Request::Write(command.clone())).await;
        assert!(forbidden(&r), "tenant:b was not refused {command:?}: {r:?}");
    }
    assert!(matches!(
        ask(&a, Request::Write(Command::KeepAlive { session })).await,
        Ok(Response::Written {
            reply: Reply::KeptAlive { .. },
            ..
        })
    ));

    phase("a revoked token stops working after SIGHUP, its open connection closed");
    let mut revoked = config.clone();
    revoked.tokens.retain(|t| t.role != "tenant:a");
    let path = cluster.node(1).config_path.clone();
    std::fs::write(&path, toml::to_string(&revoked).unwrap()).unwrap();
    cluster.signal(1, "-HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match ask(&a, Request::Read(Query::limits("a"))).await {
            Err(ClientError::Refused(why)) => {
                assert!(why.contains("not recognized"), "{why}");
                break;
            }
            other if std::time::Instant::now() > deadline => {
                panic!("still served after SIGHUP: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(
        cluster
            .log_tail(1, 200)
            .iter()
            .any(|l| l.contains("was revoked")),
        "the open connection was not closed for its revoked token"
    );
    assert!(matches!(
        ask(&b, Request::Read(Query::limits("b"))).await,
        Ok(Response::Read(_))
    ));

    phase("the revoked principal's session holds its permit until an admin closes it");
    let two_units = |session, ticket| {
        Command::Acquire(weir_core::machine::Acquire {
            session,
            ticket,
            tenant: "a".into(),
            limit: "x".into(),
            units: 2,
            priority: Default::default(),
            agent: None,
            wait: false,
        })
    };
    let mine = match ask(
        &admin,
        Request::Write(Command::OpenSession { ttl_ms: 10_000 }),
    )
    .await
    {
        Ok(Response::Written {
            reply: Reply::SessionOpened { session, .. },
            ..
        }) => session,
        other => panic!("open: {other:?}"),
    };
    assert!(
        matches!(
            ask(&admin, Request::Write(two_units(mine, 1))).await,
            Ok(Response::Written {
                reply: Reply::Refused(weir_core::machine::Refusal::Busy { .. }),
                ..
            })
        ),
        "tenant:a's permit is still held"
    );
    let closed = ask(&admin, Request::Write(Command::CloseSession { session })).await;
    assert!(
        matches!(closed, Ok(Response::Written { .. })),
        "an admin closes another principal's session: {closed:?}"
    );
    assert!(matches!(
        ask(&admin, Request::Write(two_units(mine, 2))).await,
        Ok(Response::Written {
            reply: Reply::Granted { .. },
            ..
        })
    ));
    let r = ask(&b, Request::Write(Command::CloseSession { session: mine })).await;
    assert!(forbidden(&r), "tenant:b closed the admin's session: {r:?}");

    phase("a reload that removes every token is refused: authentication stays on");
    let mut none = config.clone();
    none.tokens.clear();
    std::fs::write(&path, toml::to_string(&none).unwrap()).unwrap();
    cluster.signal(1, "-HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cluster
        .log_tail(1, 200)
        .iter()
        .any(|l| l.contains("reload_may_turn_auth_off"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the refused reload was not logged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tokenless = Client::with_security(servers.clone(), security(None, None));
    let r = ask(&tokenless, Request::Read(Query::limits("b"))).await;
    assert!(
        matches!(&r, Err(ClientError::Refused(w)) if w.contains("requires a token")),
        "a tokenless client was served after the reload: {r:?}"
    );
    assert!(matches!(
        ask(&b, Request::Read(Query::limits("b"))).await,
        Ok(Response::Read(_))
    ));

    phase("a first frame above the pre-hello bound is refused before its payload is read");
    let mut raw = tokio::net::TcpStream::connect(&servers[0]).await.unwrap();
    let mut header = 4_194_000u32.to_le_bytes().to_vec();
    header.extend_from_slice(&[0; 4]);
    header.extend_from_slice(&[7; 1_000]);
    use tokio::io::AsyncWriteExt;
    raw.write_all(&header).await.unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        weir_proto::wire::read_frame::<_, weir_proto::protocol::ServerFrame>(
            &mut raw,
            weir_proto::protocol::CLIENT_FRAME_MAX,
        ),
    )
    .await
    .expect("answered at once");
    assert!(
        matches!(
            &answer,
            Ok(weir_proto::protocol::ServerFrame::Error { reason })
                if reason.contains("4194000 bytes is above the bound of 4096 before the hello")
        ),
        "{answer:?}"
    );
}
