//! [`RlsService`]: `ShouldRateLimit`, from the caller's token to the answer (see the
//! module above for the steps).

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use weir_client::ClientError;
use weir_core::machine::{AcquireParts, Command, Priority, Refusal, Reply};
use weir_proto::protocol::{Failure, Request as ClientRequest};

use super::answer::{Taken, response};
use super::pending::Pending;
use super::plan::{Plan, plan};
use super::request::{Checked, check};
use crate::callers::act_as;
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
}

impl RlsService {
    pub fn new(ctx: Arc<HttpCtx>, headers: bool) -> RlsService {
        RlsService {
            ctx,
            headers,
            pending: Pending::default(),
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let token = bearer(request.metadata())?;
        let caller = self
            .ctx
            .callers
            .for_token(token.as_deref())
            .map_err(Status::unauthenticated)?;
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
        act_as(caller, self.decide(checked))
            .await
            .map(Response::new)
    }
}

impl RlsService {
    async fn decide(&self, checked: Checked) -> Result<RateLimitResponse, Status> {
        let plan = {
            let state = self.ctx.state.lock();
            plan(&state.machine, &checked)
        }
        .map_err(Status::invalid_argument)?;
        let over = if plan.parts.is_empty() {
            Vec::new()
        } else {
            self.take(&plan).await?
        };
        let state = self.ctx.state.lock();
        let taken = Taken {
            over,
            unapplied: self
                .pending
                .unapplied(&state.machine, &plan.tenant, &plan.parts),
        };
        Ok(response(&plan, &state.machine, &taken, self.headers))
    }

    /// Takes every part of `plan` in one entry: whether each part was refused for want of
    /// room (all `false` when granted).
    async fn take(&self, plan: &Plan) -> Result<Vec<bool>, Status> {
        // Two tries: the caller's take session may have expired since its last take.
        for _ in 0..2 {
            let (session, ticket) = self.ctx.take_ticket().await.map_err(client_status)?;
            let command =
                Command::AcquireParts(take(&plan.tenant, session, ticket, plan.parts.clone()));
            let reply = self
                .ctx
                .client()
                .write(command)
                .await
                .map_err(client_status)?;
            match reply {
                Reply::Granted { .. } => {
                    let state = self.ctx.state.lock();
                    let id = (session, ticket);
                    self.pending
                        .add(&state.machine, id, &plan.tenant, &plan.parts);
                    return Ok(vec![false; plan.parts.len()]);
                }
                Reply::Refused(Refusal::UnknownSession { .. }) => {
                    self.ctx.take_session_lost(session).await;
                }
                Reply::Refused(r) => return self.refused(plan, r),
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

    /// Which parts a refusal of the take puts over their limit, or the gRPC error it is.
    fn refused(&self, plan: &Plan, refusal: Refusal) -> Result<Vec<bool>, Status> {
        match refusal {
            Refusal::Busy { .. } => {
                let state = self.ctx.state.lock();
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
            Refusal::AtCapacity { .. } | Refusal::Halted { .. } => {
                let state = self.ctx.state.lock();
                Ok(all_but_shadow(plan, &state.machine))
            }
            Refusal::Invalid(why) => Err(Status::invalid_argument(why)),
            Refusal::UnknownLimit { tenant, name } => Err(Status::unavailable(format!(
                "limit {tenant}/{name} was removed while the request was decided; try again"
            ))),
            other => Err(Status::failed_precondition(other.to_string())),
        }
    }
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

/// The token of `authorization: Bearer TOKEN` metadata; `None` without it.
pub(super) fn bearer(metadata: &MetadataMap) -> Result<Option<String>, Status> {
    let Some(value) = metadata.get("authorization") else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| Status::unauthenticated("the authorization metadata is not text"))?;
    match text.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(Some(token.trim().to_owned()))
        }
        _ => Err(Status::unauthenticated(
            "the authorization metadata is not `Bearer TOKEN`",
        )),
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
