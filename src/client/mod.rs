//! The client library: connections to any node, leader following with bounded retries, and
//! typed errors that say whether a request may have taken effect.
//!
//! [`Client::request`] sends a request to the node it last reached (or the first of its
//! server list that answers), follows `NotLeader` redirects, and retries what is safe to
//! retry — at most [`ATTEMPTS_MAX`] tries within [`REQUEST_DEADLINE`]. Every write of the
//! machine is idempotent by its ids (a retried `OpenSession` at worst opens a session that
//! expires unused), so a write whose answer was lost is retried too; when retries run out
//! after such a loss the error is [`ClientError::OutcomeUnknown`], not "failed".

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::protocol::{
    CLIENT_FRAME_MAX, ClientFrame, Failure, PROTOCOL_VERSION, Request, Response, ServerFrame,
};
use crate::wire;

/// Most tries of one request (connects and redirects included). Failed tries pause
/// [`RETRY_PAUSE`], so [`REQUEST_DEADLINE`] is what usually ends the retries.
pub const ATTEMPTS_MAX: u32 = 200;
/// Longest a request is retried for. Covers a leader election (about 1 s) several times.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Longest a connect plus hello may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between tries when no leader is known.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Why a request has no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// No node could be reached, or none served it in time; it was not applied.
    Unreachable(String),
    /// It was sent, and may or may not have been applied.
    OutcomeUnknown(String),
    /// A node broke the protocol.
    Protocol(String),
    /// A node answered that it cannot serve it; see the failure for whether it applied.
    Failed(Failure),
}

impl ClientError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Unreachable(_) | ClientError::OutcomeUnknown(_) => true,
            ClientError::Protocol(_) => false,
            ClientError::Failed(f) => !matches!(f, Failure::BadRequest(_)),
        }
    }

    /// Whether the request certainly did not take effect.
    pub fn definitely_failed(&self) -> bool {
        match self {
            ClientError::Unreachable(_) | ClientError::Protocol(_) => true,
            ClientError::OutcomeUnknown(_) => false,
            ClientError::Failed(f) => !matches!(f, Failure::OutcomeUnknown(_)),
        }
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(why) => write!(f, "unreachable: {why}"),
            ClientError::OutcomeUnknown(why) => write!(f, "outcome unknown: {why}"),
            ClientError::Protocol(why) => write!(f, "protocol error: {why}"),
            ClientError::Failed(failure) => write!(f, "{failure}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// One connection to one node, after the hello.
pub struct Connection {
    stream: TcpStream,
    /// The node's id, from its welcome.
    pub node: u64,
    next_id: u64,
}

impl Connection {
    /// Connects to `addr` and says hello.
    pub async fn open(addr: &str) -> Result<Connection, ClientError> {
        let opened = async {
            let mut stream = TcpStream::connect(addr)
                .await
                .map_err(|e| ClientError::Unreachable(format!("{addr}: {e}")))?;
            let _ = stream.set_nodelay(true);
            wire::write_frame(
                &mut stream,
                &ClientFrame::Hello {
                    version: PROTOCOL_VERSION,
                },
            )
            .await
            .map_err(|e| ClientError::Unreachable(format!("{addr}: {e}")))?;
            match wire::read_frame::<_, ServerFrame>(&mut stream, CLIENT_FRAME_MAX).await {
                Ok(ServerFrame::Welcome { node, .. }) => Ok(Connection {
                    stream,
                    node,
                    next_id: 1,
                }),
                Ok(ServerFrame::Error { reason }) => {
                    Err(ClientError::Protocol(format!("{addr}: {reason}")))
                }
                Ok(other) => Err(ClientError::Protocol(format!(
                    "{addr}: expected a welcome, got {other:?}"
                ))),
                Err(e) => Err(ClientError::Unreachable(format!("{addr}: {e}"))),
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT, opened)
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Unreachable(format!(
                    "{addr}: no welcome within {CONNECT_TIMEOUT:?}"
                )))
            })
    }

    /// Sends `request` and waits for its response (events that arrive meanwhile are
    /// skipped). An error after sending means the outcome is unknown.
    pub async fn call(&mut self, request: &Request) -> Result<Response, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        wire::write_frame(
            &mut self.stream,
            &ClientFrame::Request {
                id,
                request: request.clone(),
            },
        )
        .await
        .map_err(|e| ClientError::OutcomeUnknown(e.to_string()))?;
        loop {
            match wire::read_frame::<_, ServerFrame>(&mut self.stream, CLIENT_FRAME_MAX).await {
                Ok(ServerFrame::Response { id: got, response }) if got == id => {
                    return Ok(response);
                }
                Ok(ServerFrame::Response { .. } | ServerFrame::Event(_)) => continue,
                Ok(ServerFrame::Error { reason }) => return Err(ClientError::Protocol(reason)),
                Ok(ServerFrame::Welcome { .. }) => {
                    return Err(ClientError::Protocol("a second welcome".into()));
                }
                Err(e) => return Err(ClientError::OutcomeUnknown(e.to_string())),
            }
        }
    }
}

/// A client of the cluster, following its leader.
pub struct Client {
    servers: Vec<String>,
    /// The address to try first: the last that answered, or a redirect.
    preferred: Option<String>,
    conn: Option<(String, Connection)>,
}

impl Client {
    /// A client of the cluster reachable through any of `servers` (`host:port`).
    pub fn new(servers: Vec<String>) -> Client {
        Client {
            servers,
            preferred: None,
            conn: None,
        }
    }

    /// Sends `request` to the leader (or, for `Status` and `ReadLocal`, to whichever node
    /// answers first), following redirects and retrying within the bounds above.
    pub async fn request(&mut self, request: Request) -> Result<Response, ClientError> {
        let started = Instant::now();
        let mut last_error =
            ClientError::Unreachable(format!("none of {:?} answered", self.servers));
        let mut maybe_applied = false;
        let mut next_server = 0usize;
        for _ in 0..ATTEMPTS_MAX {
            if started.elapsed() > REQUEST_DEADLINE {
                break;
            }
            if self.conn.is_none() {
                let addr = self.preferred.take().unwrap_or_else(|| {
                    let a = self.servers[next_server % self.servers.len()].clone();
                    next_server += 1;
                    a
                });
                match Connection::open(&addr).await {
                    Ok(c) => self.conn = Some((addr, c)),
                    Err(e) => {
                        last_error = e;
                        // Pause once per round of the server list, and after a redirect to
                        // a node that is down (the cluster is electing).
                        if next_server % self.servers.len() == 0 || self.servers.len() == 1 {
                            tokio::time::sleep(RETRY_PAUSE).await;
                        }
                        continue;
                    }
                }
            }
            let (addr, conn) = self.conn.as_mut().expect("connected above");
            match conn.call(&request).await {
                Ok(Response::Failed(Failure::NotLeader { leader })) => {
                    let here = addr.clone();
                    self.conn = None;
                    match leader {
                        Some((_, leader_addr)) if leader_addr != here => {
                            self.preferred = Some(leader_addr)
                        }
                        _ => tokio::time::sleep(RETRY_PAUSE).await,
                    }
                    last_error = ClientError::Failed(Failure::NotLeader { leader: None });
                }
                Ok(Response::Failed(
                    f @ (Failure::Unavailable(_) | Failure::OutcomeUnknown(_)),
                )) => {
                    maybe_applied |= matches!(f, Failure::OutcomeUnknown(_));
                    last_error = ClientError::Failed(f);
                    self.conn = None;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Ok(response) => {
                    self.preferred = Some(addr.clone());
                    return Ok(response);
                }
                Err(e) => {
                    maybe_applied |= matches!(e, ClientError::OutcomeUnknown(_));
                    last_error = e;
                    self.conn = None;
                }
            }
        }
        if maybe_applied && is_write(&request) {
            return Err(ClientError::OutcomeUnknown(last_error.to_string()));
        }
        Err(last_error)
    }

    /// Asks one node, without redirects or retries: for status of a given member.
    pub async fn ask_node(addr: &str, request: &Request) -> Result<Response, ClientError> {
        let mut conn = Connection::open(addr).await?;
        tokio::time::timeout(CONNECT_TIMEOUT, conn.call(request))
            .await
            .unwrap_or_else(|_| Err(ClientError::OutcomeUnknown(format!("{addr}: no answer"))))
    }
}

fn is_write(request: &Request) -> bool {
    matches!(
        request,
        Request::Write(_) | Request::AddNode { .. } | Request::RemoveNode { .. }
    )
}
