//! The gRPC port's gate: what a connection may cost before and between authenticated
//! requests.
//!
//! - [`Gate`] wraps the service: a request's token is read from its headers (the
//!   `authorization` metadata) and a request without a valid one is answered
//!   `UNAUTHENTICATED` at once, its body never read (HTTP/2 discards it), so no
//!   unauthenticated byte is buffered or decoded. An admitted request carries its caller
//!   to the service in its extensions ([`Admitted`]): one authentication a request.
//! - [`GrpcIo`] is a connection as tonic takes it: it holds one of the port's
//!   `RLS_CONNECTIONS_MAX` slots, and closes itself (a read error) when its deadline
//!   passes: `RLS_FIRST_REQUEST_TIMEOUT` after it is accepted, moved to
//!   `RLS_IDLE_TIMEOUT` after each request the gate lets through. A connection that sends
//!   nothing, no HTTP/2 preface, only pings or only refused requests is closed then. The
//!   deadline only moves later, so the connection's timer is moved only when it fires
//!   before the deadline, not at each request.
//!
//! The gate authenticates only; the service checks the role against the request's tenant
//! (forbidden), then the request's fields (invalid), in that order.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Code, Status};

use crate::bounds::{RLS_FIRST_REQUEST_TIMEOUT, RLS_IDLE_TIMEOUT};
use crate::callers::{Caller, Callers};
use weir_proto::tls::Stream;

/// When a connection closes unless a request with a valid token comes first; shared by
/// the connection ([`GrpcIo`]) and every request on it (tonic puts it in each request's
/// extensions).
#[derive(Clone)]
pub struct Deadline(Arc<Mutex<Instant>>);

impl Deadline {
    fn new(at: Instant) -> Deadline {
        Deadline(Arc::new(Mutex::new(at)))
    }

    fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request was let through: the connection may stay `RLS_IDLE_TIMEOUT` more.
    fn authenticated(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now() + RLS_IDLE_TIMEOUT;
    }
}

/// The caller the gate authenticated a request as, in the request's extensions.
#[derive(Clone)]
pub struct Admitted(pub Arc<Caller>);

/// The service behind the gate: requests without a valid token never reach it.
#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    callers: Arc<Callers>,
}

impl<S> Gate<S> {
    pub fn new(inner: S, callers: Arc<Callers>) -> Gate<S> {
        Gate { inner, callers }
    }
}

impl<S: NamedService> NamedService for Gate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower_service::Service<http::Request<Body>> for Gate<S>
where
    S: tower_service::Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let caller = match self.admit(request.headers()) {
            Ok(caller) => caller,
            Err(refusal) => return Box::pin(std::future::ready(Ok(refusal.into_http()))),
        };
        if let Some(deadline) = request.extensions().get::<Deadline>() {
            deadline.authenticated();
        }
        request.extensions_mut().insert(Admitted(caller));
        Box::pin(self.inner.call(request))
    }
}

impl<S> Gate<S> {
    /// The caller of the token `headers` carry, if this node knows it (or the anonymous
    /// caller where tokens are off).
    fn admit(&self, headers: &http::HeaderMap) -> Result<Arc<Caller>, Status> {
        let token = bearer(headers)?;
        self.callers
            .for_token(token)
            .map_err(|why| Status::new(Code::Unauthenticated, why))
    }
}

/// A connection as tonic takes it: the stream, its slot of the port's connections, and
/// its deadline.
pub struct GrpcIo {
    stream: Stream,
    _slot: OwnedSemaphorePermit,
    deadline: Deadline,
    timer: Pin<Box<Sleep>>,
}

impl GrpcIo {
    pub fn new(stream: Stream, slot: OwnedSemaphorePermit) -> GrpcIo {
        let at = Instant::now() + RLS_FIRST_REQUEST_TIMEOUT;
        GrpcIo {
            stream,
            _slot: slot,
            deadline: Deadline::new(at),
            timer: Box::pin(tokio::time::sleep_until(at)),
        }
    }

    /// `Ready` with an error once the deadline has passed. The timer runs to the deadline
    /// it was last set to, never later than the real one (which only moves later); when it
    /// fires early it is set again.
    fn expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            match self.timer.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => {
                    // Requests may have moved the deadline while the timer ran.
                    let at = self.deadline.get();
                    if at > self.timer.deadline() {
                        self.timer.as_mut().reset(at);
                        continue;
                    }
                    return Poll::Ready(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request with a valid token within the gRPC port's timeout",
                    ));
                }
            }
        }
    }
}

impl tonic::transport::server::Connected for GrpcIo {
    type ConnectInfo = Deadline;

    fn connect_info(&self) -> Deadline {
        self.deadline.clone()
    }
}

impl AsyncRead for GrpcIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Poll::Ready(e) = me.expired(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut me.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for GrpcIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The token of `authorization: Bearer TOKEN` metadata; `None` without it.
pub(super) fn bearer(headers: &http::HeaderMap) -> Result<Option<&str>, Status> {
    let Some(value) = headers.get("authorization") else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| Status::unauthenticated("the authorization metadata is not text"))?;
    match text.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(Some(token.trim()))
        }
        _ => Err(Status::unauthenticated(
            "the authorization metadata is not `Bearer TOKEN`",
        )),
    }
}
