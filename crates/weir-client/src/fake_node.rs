//! A scripted stand-in for a node, for the client's unit tests: it speaks the client
//! protocol on a loopback port, answers each request with what the test's handler says (or
//! not at all), sends heartbeats when asked, can push any frame, and can fall silent the way
//! a stopped process does (its socket stays open; nothing more is sent).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use weir_proto::protocol::{
    CLIENT_FRAME_MAX, ClientFrame, HEARTBEAT_PERIOD, Request, Response, ServerFrame,
};
use weir_proto::task::AbortOnDrop;
use weir_proto::wire;

/// What the fake answers a request: `None` is no answer at all.
pub(super) type Handler = Arc<dyn Fn(&Request) -> Option<Response> + Send + Sync>;

/// What the test and the fake's connections share.
struct Shared {
    id: u64,
    handler: Handler,
    /// Once set, nothing more is sent on any connection (a SIGSTOP'd node).
    silent: AtomicBool,
    /// The leader its heartbeats name.
    leader: Mutex<Option<(u64, String)>>,
    /// Every request received, in order.
    seen: Mutex<Vec<Request>>,
    /// Where [`FakeNode::push`] sends: the latest connection's outbox.
    latest: Mutex<Option<mpsc::UnboundedSender<ServerFrame>>>,
    /// The source address of every connection accepted, in order.
    sources: Mutex<Vec<std::net::SocketAddr>>,
    /// Once set, every hello is refused with this reason (a revoked token).
    refuse: Mutex<Option<String>>,
}

/// A fake node on a loopback port; stops when dropped.
pub(super) struct FakeNode {
    pub(super) addr: String,
    shared: Arc<Shared>,
    _accept: AbortOnDrop,
}

impl FakeNode {
    /// A fake node `id`, naming itself as leader in its heartbeats, answering with `handler`.
    pub(super) async fn start(id: u64, handler: Handler) -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let shared = Arc::new(Shared {
            id,
            handler,
            silent: AtomicBool::new(false),
            leader: Mutex::new(Some((id, addr.clone()))),
            seen: Mutex::default(),
            latest: Mutex::default(),
            sources: Mutex::default(),
            refuse: Mutex::default(),
        });
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((stream, from)) = listener.accept().await {
                s.sources.lock().unwrap().push(from);
                conns.push(AbortOnDrop(tokio::spawn(serve(stream, s.clone()))));
            }
        });
        FakeNode {
            addr,
            shared,
            _accept: AbortOnDrop(accept),
        }
    }

    /// Sends `frame` on the latest connection.
    pub(super) fn push(&self, frame: ServerFrame) {
        let latest = self.shared.latest.lock().unwrap();
        latest.as_ref().expect("a connection").send(frame).unwrap();
    }

    /// From now on refuses every hello with `reason`, and closes the latest connection
    /// with it, as a node does when a reload revokes the connection's token.
    pub(super) fn revoke(&self, reason: &str) {
        *self.shared.refuse.lock().unwrap() = Some(reason.to_owned());
        self.push(ServerFrame::Error {
            reason: reason.to_owned(),
        });
    }

    /// From now on, sends nothing at all.
    pub(super) fn fall_silent(&self) {
        self.shared.silent.store(true, Ordering::SeqCst);
    }

    /// Names `leader` in the heartbeats from now on.
    pub(super) fn name_leader(&self, leader: Option<(u64, String)>) {
        *self.shared.leader.lock().unwrap() = leader;
    }

    /// The source address of every connection accepted so far.
    pub(super) fn sources(&self) -> Vec<std::net::SocketAddr> {
        self.shared.sources.lock().unwrap().clone()
    }

    /// Every request received so far.
    pub(super) fn seen(&self) -> Vec<Request> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) until a received request satisfies `what`.
    pub(super) async fn wait_for(&self, limit: Duration, what: impl Fn(&Request) -> bool) -> bool {
        let until = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < until {
            if self.seen().iter().any(&what) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

/// One connection: welcome, then requests answered by the handler, heartbeats once asked,
/// pushes from the test; nothing is written once the node is silent.
async fn serve(stream: tokio::net::TcpStream, s: Arc<Shared>) {
    let (mut rd, mut wr) = stream.into_split();
    let (out, mut outbox) = mpsc::unbounded_channel::<ServerFrame>();
    *s.latest.lock().unwrap() = Some(out.clone());
    let writer_shared = s.clone();
    let _writer = AbortOnDrop(tokio::spawn(async move {
        while let Some(frame) = outbox.recv().await {
            if writer_shared.silent.load(Ordering::SeqCst) {
                continue;
            }
            if wire::write_frame(&mut wr, &frame).await.is_err() {
                return;
            }
            let _ = wr.flush().await;
        }
    }));
    let mut beats = None;
    loop {
        let frame = match wire::read_frame::<_, ClientFrame>(&mut rd, CLIENT_FRAME_MAX).await {
            Ok(f) => f,
            Err(_) => return,
        };
        match frame {
            ClientFrame::Hello { .. } if s.refuse.lock().unwrap().is_some() => {
                let reason = s.refuse.lock().unwrap().clone().expect("checked");
                let _ = out.send(ServerFrame::Error { reason });
                // Time for the writer to send it before the connection is dropped.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return;
            }
            ClientFrame::Hello { version, .. } | ClientFrame::HelloInGroup { version, .. } => {
                let _ = out.send(ServerFrame::Welcome {
                    version,
                    node: s.id,
                });
            }
            ClientFrame::Heartbeats => {
                let (s, out) = (s.clone(), out.clone());
                beats = Some(AbortOnDrop(tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(HEARTBEAT_PERIOD).await;
                        let leader = s.leader.lock().unwrap().clone();
                        if out
                            .send(ServerFrame::Heartbeat { term: 1, leader })
                            .is_err()
                        {
                            return;
                        }
                    }
                })));
            }
            ClientFrame::Request { id, request } => {
                s.seen.lock().unwrap().push(request.clone());
                if let Some(response) = (s.handler)(&request) {
                    let _ = out.send(ServerFrame::Response { id, response });
                }
            }
        }
        let _ = &beats;
    }
}
