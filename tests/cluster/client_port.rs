//! G8 on the client port: each kind of bad input gets an error frame (where one can still be
//! written) and a close for that connection only; the node keeps serving and loses nothing.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_core::codec;
use weir_proto::protocol::{
    Answer, CLIENT_FRAME_MAX, ClientFrame, Failure, PROTOCOL_VERSION, Query, Request, Response,
    ServerFrame,
};
use weir_proto::wire;

use crate::harness::{Cluster, phase};

fn frame(payload: &[u8]) -> Vec<u8> {
    [
        &(payload.len() as u32).to_le_bytes()[..],
        &crc32c::crc32c(payload).to_le_bytes(),
        payload,
    ]
    .concat()
}

fn hello() -> Vec<u8> {
    frame(&codec::encode(&ClientFrame::Hello {
        version: PROTOCOL_VERSION,
        token: None,
    }))
}

/// Sends `bytes` (then, if `close_write`, shuts the write side); returns the reason of the
/// error frame the node sent, if any, after checking that it then closed the connection.
async fn send_bad(addr: &str, bytes: &[u8], close_write: bool) -> Option<String> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    if close_write {
        s.shutdown().await.unwrap();
    }
    let mut reason = None;
    let read_all = async {
        loop {
            match wire::read_frame::<_, ServerFrame>(&mut s, CLIENT_FRAME_MAX).await {
                Ok(ServerFrame::Error { reason: r }) => reason = Some(r),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let mut rest = [0u8; 16];
        assert_eq!(
            s.read(&mut rest).await.unwrap_or(0),
            0,
            "the connection is closed"
        );
    };
    tokio::time::timeout(Duration::from_secs(15), read_all)
        .await
        .expect("the node closes the connection");
    reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_bad_input_closes_only_its_connection() {
    let (cluster, leader, client) = Cluster::three_with_limit("badclient", "kept").await;
    let addr = cluster.node(leader).client.clone();
    let mut unknown_kind = codec::encode(&ClientFrame::Request {
        id: 1,
        request: Request::Status,
    });
    assert_eq!(unknown_kind[2], 3, "Request::Status is variant 3");
    unknown_kind[2] = 99;
    let cases: Vec<(&str, Vec<u8>, bool, &str)> = vec![
        (
            "random bytes",
            b"\x13\x37garbage that is no frame at all".to_vec(),
            false,
            "above the bound",
        ),
        (
            "oversized length before the hello",
            [u32::MAX.to_le_bytes(), [0; 4]].concat(),
            false,
            "a first frame of 4294967295 bytes is above the bound of 4096 before the hello",
        ),
        (
            "oversized length after the hello",
            [hello(), u32::MAX.to_le_bytes().to_vec(), vec![0; 4]].concat(),
            false,
            "frame of 4294967295 bytes is above the bound of 4194304",
        ),
        (
            "bad checksum",
            [&5u32.to_le_bytes()[..], &[0xde, 0xad, 0xbe, 0xef], b"hello"].concat(),
            false,
            "frame checksum mismatch",
        ),
        (
            "wrong version",
            frame(&codec::encode(&ClientFrame::Hello {
                version: 99,
                token: None,
            })),
            false,
            "protocol version 99 is not supported (this node speaks 4 to 7)",
        ),
        (
            "request before hello",
            frame(&codec::encode(&ClientFrame::Request {
                id: 1,
                request: Request::Status,
            })),
            false,
            "request before hello",
        ),
        (
            "unknown request kind",
            [hello(), frame(&unknown_kind)].concat(),
            false,
            "undecodable frame",
        ),
        (
            "truncated frame",
            [
                hello(),
                100u32.to_le_bytes().to_vec(),
                vec![0; 4],
                vec![1; 10],
            ]
            .concat(),
            true,
            "i/o",
        ),
    ];
    for (what, bytes, close_write, expected) in cases {
        phase(what);
        let reason = send_bad(&addr, &bytes, close_write).await;
        let reason = reason.unwrap_or_default();
        assert!(
            reason.contains(expected),
            "{what}: the error frame says {reason:?}, expected {expected:?}"
        );
    }
    phase("a fresh connection is served, and nothing was lost");
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&hello()).await.unwrap();
    assert!(matches!(
        wire::read_frame::<_, ServerFrame>(&mut s, CLIENT_FRAME_MAX)
            .await
            .unwrap(),
        ServerFrame::Welcome { .. }
    ));
    let names = match client
        .read(weir_proto::protocol::Query::limits("t"))
        .await
        .unwrap()
    {
        weir_proto::protocol::Answer::Limits(page) => {
            page.limits.into_iter().map(|l| l.name).collect::<Vec<_>>()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(names, vec!["kept".to_string()]);
    let log = std::fs::read_to_string(&cluster.node(leader).log).unwrap();
    assert!(!log.contains("panicked"), "no node panicked");
}

/// Sends `request` on `s` with id `id` and reads frames until its response.
async fn ask(s: &mut TcpStream, id: u64, request: Request) -> Response {
    let frame_bytes = frame(&codec::encode(&ClientFrame::Request { id, request }));
    s.write_all(&frame_bytes).await.unwrap();
    for _ in 0..64 {
        match wire::read_frame::<_, ServerFrame>(s, CLIENT_FRAME_MAX).await {
            Ok(ServerFrame::Response { id: got, response }) if got == id => return response,
            Ok(_) => {}
            Err(e) => panic!("no response to request {id}: {e}"),
        }
    }
    panic!("no response to request {id} in 64 frames");
}

/// A client of the release before (protocol 4) is welcomed in its own version and served,
/// so it keeps its session while the nodes are upgraded under it; the one read whose answer
/// changed shape is refused on its connection, naming both versions; 3 is refused at hello.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_protocol_before_is_served_in_its_own_version() {
    let (cluster, leader, _client) = Cluster::three_with_limit("oldclient", "kept").await;
    let addr = cluster.node(leader).client.clone();
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let hello4 = frame(&codec::encode(&ClientFrame::Hello {
        version: 4,
        token: None,
    }));
    s.write_all(&hello4).await.unwrap();
    let welcome = wire::read_frame::<_, ServerFrame>(&mut s, CLIENT_FRAME_MAX)
        .await
        .unwrap();
    assert!(
        matches!(welcome, ServerFrame::Welcome { version: 4, .. }),
        "{welcome:?}"
    );
    let status = ask(
        &mut s,
        1,
        Request::Read(Query::Limit {
            tenant: "t".into(),
            name: "kept".into(),
        }),
    )
    .await;
    assert!(
        matches!(&status, Response::Read(Answer::Limit(Some(l))) if l.name == "kept"),
        "{status:?}"
    );
    let holders = ask(
        &mut s,
        2,
        Request::Read(Query::Holders {
            tenant: "t".into(),
            name: "kept".into(),
            after: 0,
            max: 10,
        }),
    )
    .await;
    let Response::Failed(Failure::BadRequest(why)) = holders else {
        panic!("a holders read on protocol 4 was answered: {holders:?}");
    };
    assert!(
        why.contains("needs client protocol 5") && why.contains("this connection speaks 4"),
        "{why}"
    );
    phase("the connection goes on after the refusal");
    let again = ask(&mut s, 3, Request::Status).await;
    assert!(matches!(again, Response::Status(_)), "{again:?}");
    let hello3 = frame(&codec::encode(&ClientFrame::Hello {
        version: 3,
        token: None,
    }));
    let reason = send_bad(&addr, &hello3, false).await.unwrap_or_default();
    assert!(
        reason.contains("protocol version 3 is not supported (this node speaks 4 to 7)"),
        "{reason}"
    );
}

/// Connects and says hello: the connection, or the reason of the error frame it got.
async fn greeted(addr: &str) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello()).await.unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        wire::read_frame::<_, ServerFrame>(&mut s, CLIENT_FRAME_MAX),
    )
    .await
    .expect("an answer to the hello");
    match answer {
        Ok(ServerFrame::Welcome { .. }) => Ok(s),
        Ok(ServerFrame::Error { reason }) => Err(reason),
        other => panic!("unexpected answer to a hello: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_begun_after_the_hello_ends_within_its_bound_and_a_principal_holds_few_connections()
{
    const MAX: usize = 3;
    let cluster = Cluster::start("partial", 1, &format!("client_connections_max = {MAX}"));
    cluster.leader(crate::ELECTION).await;
    let addr = cluster.node(1).client.clone();

    phase("a frame announcing 4,000 bytes and sending 10, after the hello, is closed");
    let partial = [
        hello(),
        4_000u32.to_le_bytes().to_vec(),
        0u32.to_le_bytes().to_vec(),
        vec![0; 10],
    ]
    .concat();
    let reason = send_bad(&addr, &partial, false)
        .await
        .expect("an error frame");
    assert!(
        reason.contains("a frame begun was not complete within 10s"),
        "{reason}"
    );

    phase("one principal's connections past client_connections_max are refused at the hello");
    // The node's own HTTP port may hold a connection of the anonymous principal too.
    let mut open = Vec::new();
    let refused = loop {
        match greeted(&addr).await {
            Ok(s) => open.push(s),
            Err(reason) => break reason,
        }
        assert!(open.len() <= MAX, "{} connections welcomed", open.len());
    };
    assert!(!open.is_empty());
    assert!(
        refused.contains(&format!("{MAX} connections open to this node"))
            && refused.contains("client_connections_max"),
        "{refused}"
    );
    phase("a connection closed frees its place");
    drop(open.pop());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while let Err(reason) = greeted(&addr).await {
        assert!(std::time::Instant::now() < deadline, "{reason}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
