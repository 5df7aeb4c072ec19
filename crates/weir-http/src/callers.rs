//! Who an HTTP request acts for: its `Authorization: Bearer TOKEN` turned into a [`Caller`],
//! the internal client that carries the request to the cluster *with that token*, so the
//! client port authenticates and authorizes it exactly as it does a binary client's
//! request — one authorization path (`security::authorize`), never a second one here.
//!
//! - [`authenticate`] (a middleware) answers 401 `Unauthenticated` for a missing or unknown
//!   token when tokens are configured, before anything is sent (the body is dropped as it
//!   arrives, bounded, never buffered); otherwise it runs the
//!   handler with the request's caller set ([`current`]). Without tokens configured no
//!   header is needed and every request shares the anonymous caller.
//! - `/healthz` and `/readyz` are open. `/metrics` is open to a peer on a loopback address
//!   (the local scraper) unless the node's config says `metrics_loopback_open = false`;
//!   from anywhere else (and then from loopback too) it needs an `admin` or `read` token,
//!   because it shows every tenant's figures.
//! - [`Callers`] caches one caller per token, by the token's sha256 (never the secret as
//!   a key), at most [`CALLERS_MAX`]: the least recently used is evicted past that. A
//!   token reload (SIGHUP) empties the cache, so a revoked token's client is dropped.
//!
//! Invariants:
//! - A caller's client sends its own token, or none for the anonymous caller; requests of
//!   two tokens never share a connection, so a session is bound to the principal whose
//!   request opened it.
//! - Each caller has its own take sessions (sessions belong to their opener), one at a
//!   time, each for at most `TAKE_SESSION_TICKETS` takes (`context.rs`).
//! - A caller speaks to one group. On a node of several, a request naming another in its
//!   `Weir-Group` header ([`GROUP_HEADER`], checked against the node's data groups: 400
//!   otherwise) acts as the token's caller of that group ([`Caller::in_group`]), kept by
//!   its default group's caller: one client and one take session per group, since a
//!   session is one group's.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::bounds::FORWARD_RETRY_MAX;
use super::error::ApiError;
use super::listener::PeerAddr;
use weir_client::Client;
use weir_core::machine::SessionId;
use weir_proto::tls::{ClientSecurity, Connector};
use weir_server::security::{Principal, Role, Tokens};

/// The header a request names the group it speaks to with, on a node of several groups (a
/// session is one group's; the node's default group without it).
pub const GROUP_HEADER: &str = "weir-group";

/// Most callers cached at once. Each holds a connection to the cluster (one per group it
/// has spoken to, on a node of several groups); a few hundred tokens in use through one
/// node is far above a deployment's usual count, and a miss only costs a new connection.
pub const CALLERS_MAX: usize = 256;

/// One principal's way into the cluster.
pub struct Caller {
    pub client: Client,
    /// Who the caller is: what a session's owner is checked against where this node answers
    /// without the client port (the event stream).
    pub principal: Principal,
    /// The principal's current session for takes, once opened, with the ticket at which
    /// the next take opens another (`HttpCtx::take_ticket`).
    ///
    /// A tokio mutex, held across the open, so concurrent first takes open one session.
    pub take_session: tokio::sync::Mutex<Option<TakeSession>>,
    /// The next take's ticket in that session. Tickets are never reused in a session.
    pub take_ticket: AtomicU64,
    /// The group this caller's client speaks to (`None`: the node's default group).
    group: Option<u64>,
    /// The node's default group (the one a request naming none speaks to).
    default_group: u64,
    /// The principal's caller of the default group, which keeps the others; empty in that
    /// caller itself (weak: it keeps this one).
    root: std::sync::Weak<Caller>,
    /// This principal's callers in other groups, made the first time a request of theirs
    /// goes there ([`Caller::in_group`]): each its own client of that group, and its own
    /// take sessions, since a session is one group's. Kept in the default group's caller.
    others: std::sync::Mutex<HashMap<u64, Arc<Caller>>>,
}

/// A take session and the first ticket not to be taken in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TakeSession {
    pub id: SessionId,
    pub until: u64,
}

impl Caller {
    fn new(client: Client, principal: Principal, default_group: u64) -> Caller {
        Caller {
            client,
            principal,
            take_session: tokio::sync::Mutex::new(None),
            take_ticket: AtomicU64::new(1),
            group: None,
            default_group,
            root: std::sync::Weak::new(),
            others: Default::default(),
        }
    }

    /// The group this caller speaks to.
    pub fn group(&self) -> u64 {
        self.group.unwrap_or(self.default_group)
    }

    /// The same principal's caller in group `group`: `self` when it speaks there, else the
    /// one its default group's caller keeps for that group, made the first time (at most
    /// one per group the node hosts).
    pub fn in_group(self: &Arc<Self>, group: u64) -> Arc<Caller> {
        let group = (group != self.default_group).then_some(group);
        if self.group == group {
            return self.clone();
        }
        if self.group.is_some() {
            return match self.root.upgrade() {
                Some(root) => root.in_group(group.unwrap_or(self.default_group)),
                // Its default group's caller was evicted meanwhile: a caller for this
                // request only.
                None => {
                    let g = group.unwrap_or(self.default_group);
                    let mut caller = Caller::new(
                        self.client.clone().in_group(g),
                        self.principal.clone(),
                        self.default_group,
                    );
                    caller.group = group;
                    Arc::new(caller)
                }
            };
        }
        let Some(g) = group else {
            unreachable!("the default group's caller answered itself above");
        };
        let mut others = weir_server::lock::lock(&self.others);
        others
            .entry(g)
            .or_insert_with(|| {
                let mut caller = Caller::new(
                    self.client.clone().in_group(g),
                    self.principal.clone(),
                    self.default_group,
                );
                caller.group = Some(g);
                caller.root = Arc::downgrade(self);
                Arc::new(caller)
            })
            .clone()
    }
}

/// The cache of callers, by token hash.
pub struct Callers {
    /// Where every caller's client reaches the cluster (this node first).
    servers: Vec<String>,
    /// TLS to the client port, verified against the node's CA (plaintext without `[tls]`).
    connector: Connector,
    /// The node's token table: what 401 is decided against.
    tokens: Arc<Tokens>,
    /// Changes on every token reload; the cache is emptied when it has.
    reloads: tokio::sync::watch::Receiver<u64>,
    /// A std lock: held only to look up or insert, never across an await.
    cache: std::sync::Mutex<Cache>,
    /// Whether `/metrics` is served to loopback peers without a token.
    metrics_loopback_open: bool,
    /// The group a request naming none speaks to, and every group a request may name
    /// (`Weir-Group`): the node's data groups.
    default_group: u64,
    groups: Vec<u64>,
}

#[derive(Default)]
struct Cache {
    /// The reload count the entries were made under.
    reload: u64,
    /// Token hash → (caller, last use). Last use is `clock` at the time.
    entries: HashMap<String, (Arc<Caller>, u64)>,
    clock: u64,
}

impl Callers {
    pub fn new(servers: Vec<String>, connector: Connector, tokens: Arc<Tokens>) -> Callers {
        let reloads = tokens.reloads();
        Callers {
            servers,
            connector,
            tokens,
            reloads,
            cache: Default::default(),
            metrics_loopback_open: true,
            default_group: 0,
            groups: vec![0],
        }
    }

    /// The node's data groups, `hosted`, and the one a request naming none speaks to
    /// (default: the one group, 0, of a node of one group).
    pub fn groups(mut self, default_group: u64, hosted: Vec<u64>) -> Callers {
        self.default_group = default_group;
        self.groups = hosted;
        self
    }

    /// Whether `/metrics` is served to loopback peers without a token (default yes).
    pub fn metrics_loopback_open(mut self, open: bool) -> Callers {
        self.metrics_loopback_open = open;
        self
    }

    /// The node's token table (reloaded on SIGHUP).
    pub fn tokens(&self) -> &Arc<Tokens> {
        &self.tokens
    }

    /// The principal `token` makes here, or why it is refused.
    fn principal(&self, token: Option<&str>) -> Result<Principal, String> {
        self.tokens.authenticate(token)
    }

    /// The caller for `principal`, whose secret is `token`: cached, or made now.
    fn caller(&self, principal: &Principal, token: Option<&str>) -> Arc<Caller> {
        let reload = *self.reloads.borrow();
        let mut cache = weir_server::lock::lock(&self.cache);
        if cache.reload != reload {
            cache.entries.clear();
            cache.reload = reload;
        }
        cache.clock += 1;
        let now = cache.clock;
        if let Some((caller, used)) = cache.entries.get_mut(&principal.id) {
            *used = now;
            return caller.clone();
        }
        if cache.entries.len() >= CALLERS_MAX {
            let oldest = cache
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| id.clone());
            if let Some(id) = oldest {
                cache.entries.remove(&id);
            }
        }
        // The anonymous principal (no tokens configured) sends no token.
        let token = (!principal.id.is_empty()).then(|| token.unwrap_or_default().to_owned());
        let security = ClientSecurity {
            connector: self.connector.clone(),
            token,
        };
        let client = Client::with_security(self.servers.clone(), security)
            .with_retry_deadline(FORWARD_RETRY_MAX);
        let caller = Arc::new(Caller::new(client, principal.clone(), self.default_group));
        cache
            .entries
            .insert(principal.id.clone(), (caller.clone(), now));
        assert!(
            cache.entries.len() <= CALLERS_MAX,
            "callers cache over its bound: {} > {CALLERS_MAX}",
            cache.entries.len()
        );
        caller
    }
}

impl Callers {
    /// The internal clients of group `group` (`None`: the default group) of the callers
    /// cached now (`forward.rs` tells them where that group's leader is).
    pub fn clients(&self, group: Option<u64>) -> Vec<Client> {
        let cache = weir_server::lock::lock(&self.cache);
        cache
            .entries
            .values()
            .filter_map(|(c, _)| match group {
                None => Some(c.client.clone()),
                Some(g) => weir_server::lock::lock(&c.others)
                    .get(&g)
                    .map(|o| o.client.clone()),
            })
            .collect()
    }

    /// The caller for `token` as `authenticate` makes it (for another port carrying
    /// requests into the cluster the same way, the gRPC one), or why the token is refused.
    pub fn for_token(&self, token: Option<&str>) -> Result<Arc<Caller>, String> {
        let principal = self.principal(token)?;
        Ok(self.caller(&principal, token))
    }
}

/// Runs `work` as `caller`'s request: `current()` and the context's writes, reads and take
/// session act for it.
pub async fn act_as<F: std::future::Future>(caller: Arc<Caller>, work: F) -> F::Output {
    CURRENT.scope(caller, work).await
}

tokio::task_local! {
    /// The caller of the request being handled, set by [`authenticate`] around the handler.
    static CURRENT: Arc<Caller>;
}

/// The caller of the request being handled. Panics outside a request that
/// [`authenticate`] let through: a handler that sends to the cluster on an open route is a
/// bug.
pub fn current() -> Arc<Caller> {
    CURRENT.with(|c| c.clone())
}

/// The caller of the request being handled; `None` outside one (an open route).
pub fn try_current() -> Option<Arc<Caller>> {
    CURRENT.try_with(|c| c.clone()).ok()
}

/// Routes served without a token: health, and the console's page and assets (which hold
/// no data: the page asks `/v1` for everything with its token, `console.rs`).
fn open_route(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/ui") || path.starts_with("/ui/")
}

/// The middleware: authenticates the bearer token and runs the handler as its caller.
pub async fn authenticate(
    State(callers): State<Arc<Callers>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    if open_route(&path) {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<PeerAddr>>()
        .map(|c| c.0.0);
    if path == "/metrics"
        && callers.metrics_loopback_open
        && peer.is_some_and(|a| a.ip().is_loopback())
    {
        return next.run(request).await;
    }
    let token = match bearer(&request) {
        Ok(t) => t,
        Err(why) => return unauthenticated(request, why).await,
    };
    let principal = match callers.principal(token.as_deref()) {
        Ok(p) => p,
        Err(why) => return unauthenticated(request, why).await,
    };
    if path == "/metrics" {
        // The anonymous principal (no tokens configured) is admin.
        if !matches!(principal.role, Role::Admin | Role::Read) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "role {} may not read /metrics: it shows every tenant's figures",
                    principal.role
                ),
            )
            .into_response();
        }
        return next.run(request).await;
    }
    let caller = callers.caller(&principal, token.as_deref());
    let acting = match named_group(&request, &callers.groups) {
        Ok(None) => caller.clone(),
        Ok(Some(group)) => caller.in_group(group),
        Err(why) => {
            super::error::drain(request.into_body()).await;
            return ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", why).into_response();
        }
    };
    // The default group's caller is kept for the whole request: it keeps the others, so a
    // request that moves to another group finds that group's caller there, even if the
    // cache evicted the token meanwhile.
    CURRENT
        .scope(acting, async move {
            let _kept = caller;
            next.run(request).await
        })
        .await
}

/// The group a request names in its [`GROUP_HEADER`], one of `hosted`; `None` without the
/// header.
fn named_group(request: &Request, hosted: &[u64]) -> Result<Option<u64>, String> {
    let Some(value) = request.headers().get(GROUP_HEADER) else {
        return Ok(None);
    };
    let named = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    match named {
        Some(group) if hosted.contains(&group) => Ok(Some(group)),
        _ => Err(format!(
            "the Weir-Group header names a data group of this node, one of {hosted:?}; got {:?}",
            String::from_utf8_lossy(value.as_bytes())
        )),
    }
}

/// The token of an `Authorization: Bearer TOKEN` header; `None` without the header.
fn bearer(request: &Request) -> Result<Option<String>, String> {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| "the Authorization header is not text".to_string())?;
    match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() => {
            Ok(Some(token.trim().to_owned()))
        }
        _ => Err("the Authorization header is not `Bearer TOKEN`".into()),
    }
}

/// The 401 for `request`, after its body is drained (bounded: `error::drain`) so a client
/// still sending it can read the answer.
async fn unauthenticated(request: Request, why: String) -> Response {
    super::error::drain(request.into_body()).await;
    let why = why.replace(
        "pass --token or set WEIR_TOKEN",
        "send `Authorization: Bearer TOKEN`",
    );
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "Unauthenticated", why).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        "Bearer".parse().expect("a header value"),
    );
    response
}
