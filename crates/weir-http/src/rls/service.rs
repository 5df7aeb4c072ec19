//! [`RlsService`]: `ShouldRateLimit`, from the caller's token to the answer (see the
//! module above for the steps).

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};
use weir_client::ClientError;
use weir_core::machine::{AcquireParts, Command, Part, Priority, Refusal, Reply};
use weir_core::rls::path::override_name;
use weir_proto::protocol::{Failure, Request as ClientRequest};

use super::answer::{Taken, response};
use super::gate::{Admitted, bearer};
use super::leases::NodeLeases;
use super::pending::Pending;
use super::plan::{Plan, plan};
use super::request::{Checked, check};
use crate::callers::{act_as, current};
use crate::context::HttpCtx;
use weir_server::security::authorize;

/// The service: the HTTP port's context (its callers, one internal client and take
/// session per token, and this node's applied state), whether answers carry the
/// `RateLimit-*` headers, and the takes this node has not applied yet.
pub struct RlsService {
    ctx: Arc<HttpCtx>,
    headers: bool,
    /// Takes granted through this node and not yet applied here.
    pending: Pending,
    /// How a descriptor whose limit has no room for a new key answers: `OVER_LIMIT` when
    /// true, else `OK` (the default: a gateway fails open).
    keys_full_over_limit: bool,
    /// The limits whose want of room for keys was logged (once each, see [`KeysFull`]).
    keys_full: KeysFull,
    /// The token leases this node holds for the parts it is asked often (`leases.rs`).
    leases: NodeLeases,
}

impl RlsService {
    pub fn new(ctx: Arc<HttpCtx>, headers: bool) -> RlsService {
        RlsService {
            ctx,
            headers,
            pending: Pending::default(),
            keys_full_over_limit: false,
            keys_full: KeysFull::default(),
            leases: NodeLeases::new(true),
        }
    }

    /// Decides the parts asked often from token leases this node holds (`true`, the
    /// default), or asks the cluster for every request (`false`).
    pub fn local_leases(mut self, on: bool) -> RlsService {
        self.leases = NodeLeases::new(on);
        self
    }

    /// Answers a descriptor whose limit has no room for a new key `OVER_LIMIT` (`true`) or
    /// `OK` (`false`, the default).
    pub fn keys_full_over_limit(mut self, over_limit: bool) -> RlsService {
        self.keys_full_over_limit = over_limit;
        self
    }
}

/// Most limits whose want of room for keys is remembered as logged; past it a limit is
/// logged each time it is found full (still rare: a full limit is an operator's matter).
const KEYS_FULL_LOGGED_MAX: usize = 1_024;

/// The limits already logged as having no room for a new key.
#[derive(Default)]
struct KeysFull {
    logged: std::sync::Mutex<std::collections::BTreeSet<(String, String)>>,
}

impl KeysFull {
    /// Logs, the first time for this limit, that it has no room for a new key.
    fn log_once(&self, tenant: &str, limit: &str, keys_max: u64) {
        if self.first(tenant, limit) {
            tracing::warn!(
                "limit {tenant}/{limit} has {keys_max} live keys, its keys_max: a new key's \
                 descriptors are answered as grpc_keys_full_over_limit says until keys drop \
                 (raise it with `weir limits apply --keys-max`)"
            );
        }
    }

    /// Logs, the first time for this override limit, that its tenant has no room for it.
    fn log_override_once(&self, tenant: &str, limit: &str, max: u64) {
        if self.first(tenant, limit) {
            tracing::warn!(
                "tenant {tenant} has {max} override limits, the bound: descriptors \
                 overriding their limit to a new rate ({limit}) are answered as \
                 grpc_keys_full_over_limit says"
            );
        }
    }

    /// Whether (tenant, limit) is logged for the first time; remembers it.
    fn first(&self, tenant: &str, limit: &str) -> bool {
        let mut logged = weir_server::lock::lock(&self.logged);
        let key = (tenant.to_owned(), limit.to_owned());
        if logged.contains(&key) {
            return false;
        }
        if logged.len() < KEYS_FULL_LOGGED_MAX {
            logged.insert(key);
        }
        true
    }
}

/// The limit a refusal says has no room for a new key (`AtCapacity` of "keys of limit
/// TENANT/NAME"), with its bound.
fn keys_full_limit<'r>(refusal: &'r Refusal, tenant: &str) -> Option<(&'r str, u64)> {
    let Refusal::AtCapacity { what, limit } = refusal else {
        return None;
    };
    let name = what.strip_prefix("keys of limit ")?.strip_prefix(tenant)?;
    Some((name.strip_prefix('/')?, *limit))
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // The gate authenticated the request (one lookup of its token); a request that
        // reached the service another way is authenticated here, the same way.
        let caller = match request.extensions().get::<Admitted>() {
            Some(admitted) => admitted.0.clone(),
            None => {
                let token = bearer(request.metadata().as_ref())?;
                self.ctx
                    .callers
                    .for_token(token)
                    .map_err(Status::unauthenticated)?
            }
        };
        // The role is checked against the domain before the request's fields and before
        // the tenant's limits are read, so a token of another tenant learns nothing of
        // them and is told it is forbidden, not what is wrong with its request; the take
        // is checked again by the client port.
        let probe = ClientRequest::Write(Command::AcquireParts(take(
            &request.get_ref().domain,
            0,
            0,
            vec![],
        )));
        authorize(&caller.principal.role, &probe).map_err(Status::permission_denied)?;
        let checked = check(request.into_inner()).map_err(Status::invalid_argument)?;
        // The tenant's group decides it: its state is read, its leases held and its tokens
        // taken there, through the caller's client and take session of that group.
        let acting = self.ctx.for_tenant(caller.clone(), &checked.tenant);
        act_as(acting, async move {
            // The default group's caller keeps the others (`Caller::in_group`).
            let _kept = caller;
            self.decide(checked).await
        })
        .await
        .map(Response::new)
    }
}

impl RlsService {
    async fn decide(&self, checked: Checked) -> Result<RateLimitResponse, Status> {
        let caller = current();
        let principal = caller.principal.id.as_str();
        let (plan, held, opens) = {
            let state = self.ctx.state().lock();
            let plan = plan(&state.machine, &checked).map_err(Status::invalid_argument)?;
            let (held, opens) = self.leases.note(
                principal,
                &caller.client,
                &plan.tenant,
                &plan.parts,
                &state.machine,
            );
            (plan, held, opens)
        };
        self.leases.open(opens);
        // The parts on an override limit the tenant has no room to make answer as a key
        // without room does: left out of the take.
        let mut left_out = vec![false; plan.parts.len()];
        for &(requests, unit_s) in &plan.overrides {
            if !self.make_override(&plan.tenant, requests, unit_s).await? {
                let name = override_name(requests, unit_s);
                for (i, p) in plan.parts.iter().enumerate() {
                    left_out[i] |= p.limit == name;
                }
            }
        }
        // Negative hits go back to the local bucket of a lease held on their part, the
        // others to the cluster's, before the take.
        let mut returned = vec![None; plan.returns.len()];
        let mut to_cluster = Vec::new();
        for (n, part) in plan.returns.iter().enumerate() {
            match self.leases.held(principal, &plan.tenant, part) {
                Some(h) if h.give_back(part.units) => returned[n] = Some(h.bucket()),
                _ => to_cluster.push(part.clone()),
            }
        }
        if !to_cluster.is_empty() {
            self.give_back(&plan.tenant, to_cluster).await?;
        }
        if let Some(held) = held
            && plan.overrides.is_empty()
            && NodeLeases::take(&held, &plan.parts)
        {
            let n = plan.parts.len();
            let state = self.ctx.state().lock();
            let taken = Taken {
                over: vec![false; n],
                keys_full: vec![false; n],
                keys_full_over_limit: self.keys_full_over_limit,
                unapplied: vec![0; n],
                local: Some(held.iter().map(|h| h.bucket()).collect()),
                returned,
            };
            return Ok(response(&plan, &state.machine, &taken, self.headers));
        }
        let (over, keys_full) = self.take_with_room(&plan, left_out).await?;
        let state = self.ctx.state().lock();
        let taken = Taken {
            over,
            keys_full,
            keys_full_over_limit: self.keys_full_over_limit,
            unapplied: self
                .pending
                .unapplied(&state.machine, &plan.tenant, &plan.parts),
            local: None,
            returned,
        };
        Ok(response(&plan, &state.machine, &taken, self.headers))
    }

    /// Takes the parts of `plan`, leaving out those of a limit with no room for a new key
    /// (and taking the rest again without them, at most once per part): per part, whether
    /// it was refused for want of tokens, and whether it was left out.
    async fn take_with_room(
        &self,
        plan: &Plan,
        mut left_out: Vec<bool>,
    ) -> Result<(Vec<bool>, Vec<bool>), Status> {
        let n = plan.parts.len();
        // Ends: each round that goes on leaves out at least one more part.
        loop {
            let kept: Vec<usize> = (0..n).filter(|&i| !left_out[i]).collect();
            if kept.is_empty() {
                return Ok((vec![false; n], left_out));
            }
            let parts: Vec<Part> = kept.iter().map(|&i| plan.parts[i].clone()).collect();
            match self.take(&plan.tenant, &parts).await? {
                Ok(()) => return Ok((vec![false; n], left_out)),
                Err(refusal) => {
                    if let Some((limit, keys_max)) = keys_full_limit(&refusal, &plan.tenant) {
                        let full: Vec<usize> = kept
                            .iter()
                            .copied()
                            .filter(|&i| plan.parts[i].limit == limit)
                            .collect();
                        if !full.is_empty() {
                            self.keys_full.log_once(&plan.tenant, limit, keys_max);
                            for i in full {
                                left_out[i] = true;
                            }
                            continue;
                        }
                    }
                    let sub = Plan {
                        tenant: plan.tenant.clone(),
                        targets: Vec::new(),
                        parts,
                        returns: Vec::new(),
                        overrides: Vec::new(),
                    };
                    let over_kept = self.refused(&sub, refusal)?;
                    let mut over = vec![false; n];
                    for (j, &i) in kept.iter().enumerate() {
                        over[i] = over_kept[j];
                    }
                    return Ok((over, left_out));
                }
            }
        }
    }

    /// Makes the limit of overrides of `requests` per `unit_s` seconds in `tenant`: `true`
    /// when it exists, `false` when the tenant has no room for another (logged once).
    async fn make_override(
        &self,
        tenant: &str,
        requests: u32,
        unit_s: u64,
    ) -> Result<bool, Status> {
        let command = Command::DefineOverride {
            tenant: tenant.to_owned(),
            requests,
            unit_s,
        };
        match self.write(command).await? {
            Reply::Done => Ok(true),
            Reply::Refused(Refusal::AtCapacity { limit, .. }) => {
                self.keys_full
                    .log_override_once(tenant, &override_name(requests, unit_s), limit);
                Ok(false)
            }
            other => Err(unexpected("an override's limit", &other)),
        }
    }

    /// Returns the hits of negative descriptors (`parts`) to their buckets, in one entry
    /// before the take (so a request that returns and takes sees its own return).
    async fn give_back(&self, tenant: &str, parts: Vec<Part>) -> Result<(), Status> {
        let command = Command::ReturnTokens {
            tenant: tenant.to_owned(),
            parts,
        };
        match self.write(command).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected("a return of tokens", &other)),
        }
    }

    /// Writes `command` through the caller's client: its reply,
    /// with the refusals every write of this service answers alike made statuses (a bad
    /// request, a limit removed meanwhile).
    async fn write(&self, command: Command) -> Result<Reply, Status> {
        match self.send(command).await? {
            Reply::Refused(Refusal::Invalid(why)) => Err(Status::invalid_argument(why)),
            Reply::Refused(Refusal::UnknownLimit { tenant, name }) => {
                Err(Status::unavailable(format!(
                    "limit {tenant}/{name} was removed while the request was decided; try again"
                )))
            }
            other => Ok(other),
        }
    }

    /// Takes `parts` of `tenant` in one entry: granted, or the machine's refusal.
    async fn take(&self, tenant: &str, parts: &[Part]) -> Result<Result<(), Refusal>, Status> {
        // Two tries: the caller's take session may have expired since its last take.
        for _ in 0..2 {
            let (session, ticket) = self.ctx.take_ticket().await.map_err(client_status)?;
            let command = Command::AcquireParts(take(tenant, session, ticket, parts.to_vec()));
            let reply = self.send(command).await?;
            match reply {
                Reply::Granted { .. } => {
                    let state = self.ctx.state().lock();
                    let id = (session, ticket);
                    self.pending.add(&state.machine, id, tenant, parts);
                    return Ok(Ok(()));
                }
                Reply::Refused(Refusal::UnknownSession { .. }) => {
                    self.ctx.take_session_lost(session).await;
                }
                Reply::Refused(r) => return Ok(Err(r)),
                other => {
                    return Err(Status::internal(format!(
                        "unexpected answer to a take: {other:?}"
                    )));
                }
            }
        }
        Err(Status::unavailable(
            "the node's take session could not be opened",
        ))
    }

    /// Sends `command` for the current caller: through the client port's write path in this
    /// process while this node leads (the same checks, no loopback connection), else, or
    /// when leadership moved meanwhile (`NotLeader`: never proposed), or on a node of
    /// several groups for a tenant placed nowhere yet or in another group (`Unplaced`,
    /// `WrongGroup`: never proposed), through the caller's internal client, which follows
    /// the leader and places the tenant or follows it to its group as the library does.
    async fn send(&self, command: Command) -> Result<Reply, Status> {
        if self.ctx.leads() {
            let caller = current();
            let writer = &self.ctx.door().writer;
            match writer.write(&caller.principal, command.clone()).await {
                Err(
                    Failure::NotLeader { .. }
                    | Failure::Unplaced { .. }
                    | Failure::WrongGroup { .. },
                ) => {}
                done => return done.map_err(|f| client_status(ClientError::Failed(f))),
            }
        }
        self.ctx
            .client()
            .write(command)
            .await
            .map_err(client_status)
    }

    /// Which parts a refusal of the take puts over their limit, or the gRPC error it is.
    fn refused(&self, plan: &Plan, refusal: Refusal) -> Result<Vec<bool>, Status> {
        match refusal {
            Refusal::Busy { .. } => {
                let state = self.ctx.state().lock();
                let machine = &state.machine;
                let unapplied = self.pending.unapplied(machine, &plan.tenant, &plan.parts);
                let short: Vec<bool> = plan
                    .parts
                    .iter()
                    .zip(unapplied)
                    .map(|(p, gone)| {
                        machine
                            .bucket_now(&plan.tenant, &p.limit, p.key.as_deref())
                            .is_some_and(|b| {
                                !b.spec.shadow && b.tokens.saturating_sub(gone) < p.units as u64
                            })
                    })
                    .collect();
                Ok(if short.contains(&true) {
                    short
                } else {
                    all_but_shadow(plan, &state.machine)
                })
            }
            Refusal::TooLarge { name, .. } => {
                Ok(plan.parts.iter().map(|p| p.limit == name).collect())
            }
            // A halt is the operator's refusal of the tenant's traffic.
            Refusal::Halted { .. } => {
                let state = self.ctx.state().lock();
                Ok(all_but_shadow(plan, &state.machine))
            }
            // A bound of the state (live keys of the machine, sessions, tickets), not the
            // caller's rate: the service cannot decide now (Envoy's `failure_mode_deny`
            // chooses).
            Refusal::AtCapacity { what, limit } => Err(Status::unavailable(format!(
                "the cluster's state is at a bound ({what}: {limit}); not decided"
            ))),
            Refusal::Invalid(why) => Err(Status::invalid_argument(why)),
            Refusal::UnknownLimit { tenant, name } => Err(Status::unavailable(format!(
                "limit {tenant}/{name} was removed while the request was decided; try again"
            ))),
            other => Err(Status::failed_precondition(other.to_string())),
        }
    }
}

/// The error of a reply no write of this service expects.
fn unexpected(what: &str, reply: &Reply) -> Status {
    Status::internal(format!("unexpected answer to {what}: {reply:?}"))
}

/// Every part but those on shadow limits (which are never refused).
fn all_but_shadow(plan: &Plan, machine: &weir_core::machine::Machine) -> Vec<bool> {
    plan.parts
        .iter()
        .map(|p| {
            !machine
                .bucket_now(&plan.tenant, &p.limit, p.key.as_deref())
                .is_some_and(|b| b.spec.shadow)
        })
        .collect()
}

/// The take of `parts` in `tenant`: decided now (`wait = false`), no estimate.
fn take(
    tenant: &str,
    session: u64,
    ticket: u64,
    parts: Vec<weir_core::machine::Part>,
) -> AcquireParts {
    AcquireParts {
        session,
        ticket,
        tenant: tenant.to_owned(),
        parts,
        priority: Priority::default(),
        agent: None,
        wait: false,
        estimate: false,
    }
}

/// The gRPC status of a failure to reach or use the cluster.
fn client_status(e: ClientError) -> Status {
    match e {
        ClientError::Failed(Failure::Forbidden(why)) => Status::permission_denied(why),
        ClientError::Failed(Failure::BadRequest(why)) => Status::invalid_argument(why),
        ClientError::Refused(why) => Status::unauthenticated(why),
        ClientError::OutcomeUnknown(why) | ClientError::Failed(Failure::OutcomeUnknown(why)) => {
            Status::unavailable(format!(
                "outcome unknown, the take may have been charged: {why}"
            ))
        }
        other => Status::unavailable(other.to_string()),
    }
}
