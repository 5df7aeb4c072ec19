//! Requests routed by tenant on a node of several groups: which group decides a request,
//! and the placements the metadata group keeps (`PlaceTenant`).
//!
//! A connection speaks to one group (its hello names it, or the node's default group,
//! `node::client_group`). A write or read naming a tenant is served only on a connection
//! to the group the tenant is placed in, as this node's metadata machine has applied it:
//! - placed in the connection's group: served;
//! - placed in another: `WrongGroup` naming it, not applied (the client asks there);
//! - placed nowhere yet, as far as this node has applied: `Unplaced`, not applied (the
//!   client places it, [`place_tenant`], and asks again).
//!
//! Commands naming no tenant (a session's open, keep-alive and close, a release by ticket)
//! go to the connection's group: a session lives in the group it was opened in, and a
//! client that holds permits of tenants of two groups opens a session in each (through a
//! client of each group, `Client::in_group`).
//!
//! A connection of protocol 6 or below cannot place a tenant, nor decode `WrongGroup` and
//! `Unplaced`: for it the node places an unplaced tenant in the default group itself
//! ([`route`]), and tells the rest in a `BadRequest`.
//!
//! Invariant: a tenant's requests are decided in one group only. It holds because a
//! placement is made once and never changed by `PlaceTenant` (the machine refuses another
//! group, `machine::state::placement`), so a node's metadata machine, however far behind,
//! routes a tenant to its one group or to none; and because a tenant placed nowhere is
//! served nowhere (no group decides a tenant by default, which a later placement could
//! contradict). A node of one group routes nothing: its one group decides every tenant.

use weir_core::machine::{Command, Refusal, Reply};
use weir_proto::protocol::{Failure, Request, Response, group_failure_for};

use super::ctx::{Ctx, Metadata};
use crate::raft::GroupId;
use crate::security::{Principal, authorize};

/// The data group a tenant is placed in when its placement names none: the first.
pub const DEFAULT_DATA_GROUP: u64 = 1;

/// `Err` with the failure (in words a connection of `version` decodes) when `request`
/// names a tenant this connection's group does not decide; `Ok` for everything else. A
/// connection of protocol 6 or below cannot place a tenant: for it, the node places an
/// unplaced tenant in the default group itself (as the library does for protocol 7),
/// when `principal` may, and routes again.
pub async fn route(
    ctx: &Ctx,
    principal: &Principal,
    version: u32,
    request: &Request,
) -> Result<(), Failure> {
    let routed = route_in(ctx.metadata.as_ref(), ctx.group, request);
    let Err(Failure::Unplaced { tenant }) = routed else {
        return routed.map_err(|f| group_failure_for(version, f));
    };
    let place = Request::PlaceTenant {
        tenant,
        group: None,
    };
    if version >= 7 || authorize(&principal.role, &place).is_err() {
        let Request::PlaceTenant { tenant, .. } = place else {
            unreachable!("made above");
        };
        return Err(group_failure_for(version, Failure::Unplaced { tenant }));
    }
    let Request::PlaceTenant { tenant, .. } = place else {
        unreachable!("made above");
    };
    match place_tenant(ctx, version, tenant, None).await {
        Response::Placed { .. } => route_in(ctx.metadata.as_ref(), ctx.group, request)
            .map_err(|f| group_failure_for(version, f)),
        Response::Failed(f) => Err(group_failure_for(version, f)),
        other => Err(Failure::Unavailable(format!(
            "placing the tenant answered {other:?}"
        ))),
    }
}

/// Which group decides `request` on a connection to group `group` of a node whose
/// metadata group is `metadata` (`None`: a node of one group, which routes nothing): `Ok`
/// when it is that group or the request names no tenant, else `WrongGroup` or `Unplaced`
/// (the client port's rule, and that of a front door in the same process,
/// `super::local_write`).
pub fn route_in(
    metadata: Option<&Metadata>,
    group: GroupId,
    request: &Request,
) -> Result<(), Failure> {
    let Some(metadata) = metadata else {
        return Ok(());
    };
    let tenant = match request {
        Request::Write(command) => command.tenant(),
        Request::Read(query) | Request::ReadLocal(query) => Some(query.tenant()),
        _ => None,
    };
    let Some(tenant) = tenant else {
        return Ok(());
    };
    let placed = metadata.state.lock().machine.placement(tenant);
    Err(match placed {
        Some(placed) if placed == u64::from(group) => return Ok(()),
        Some(placed) => Failure::WrongGroup {
            tenant: tenant.to_owned(),
            group: placed,
        },
        None => Failure::Unplaced {
            tenant: tenant.to_owned(),
        },
    })
}

/// `PlaceTenant`: places `tenant` in `group` (or finds where it lives, placing it in
/// [`DEFAULT_DATA_GROUP`] if nowhere), through the metadata group's log. A placement this
/// node has applied already is answered from it, without an entry: it never changes. A
/// tenant the default group holds with no placement (state from before placements
/// existed) is placed there: asked for another group, the placement is refused, naming
/// why, since its state would be left behind.
pub async fn place_tenant(ctx: &Ctx, version: u32, tenant: String, group: Option<u64>) -> Response {
    if let Err(why) =
        weir_core::machine::name_rule("tenant", &tenant, weir_core::bounds::NAME_BYTES_MAX)
    {
        return Response::Failed(Failure::BadRequest(why));
    }
    let Some(metadata) = &ctx.metadata else {
        // One group decides every tenant.
        return match group {
            None | Some(0) => Response::Placed { tenant, group: 0 },
            Some(g) => Response::Failed(Failure::BadRequest(format!(
                "this node hosts one group (0), not group {g}: every tenant lives in it"
            ))),
        };
    };
    if let Some(g) = group
        && !(1..=u64::from(ctx.groups)).contains(&g)
    {
        return Response::Failed(Failure::BadRequest(format!(
            "group {g} is not a data group of this node, which hosts data groups 1 to {}",
            ctx.groups
        )));
    }
    let placed = metadata.state.lock().machine.placement(&tenant);
    let failure = match (placed, group) {
        (Some(p), None) => return Response::Placed { tenant, group: p },
        (Some(p), Some(g)) if p == g => return Response::Placed { tenant, group: p },
        (Some(p), Some(_)) => Failure::WrongGroup { tenant, group: p },
        (None, asked) => {
            let held = metadata.default_state.lock().machine.holds_tenant(&tenant);
            if held && asked.is_some_and(|g| g != DEFAULT_DATA_GROUP) {
                return Response::Failed(Failure::BadRequest(format!(
                    "tenant {tenant} has state in group {DEFAULT_DATA_GROUP} from before \
                     tenants were placed: it is placed there, its state with it (moving a \
                     tenant is not built yet)"
                )));
            }
            return propose_place(metadata, version, tenant, asked).await;
        }
    };
    Response::Failed(group_failure_for(version, failure))
}

/// Proposes `PlaceTenant` in the metadata group (`asked`, or the default group) and
/// answers by its reply: a placement another request made first answers a request that
/// named no group with that placement.
async fn propose_place(
    metadata: &Metadata,
    version: u32,
    tenant: String,
    asked: Option<u64>,
) -> Response {
    let command = Command::PlaceTenant {
        tenant: tenant.clone(),
        group: asked.unwrap_or(DEFAULT_DATA_GROUP),
    };
    match metadata.proposer.propose(command).await {
        Ok((_, Reply::Placed { group })) => Response::Placed { tenant, group },
        Ok((_, Reply::Refused(Refusal::Placed { tenant, group }))) if asked.is_none() => {
            Response::Placed { tenant, group }
        }
        Ok((_, Reply::Refused(Refusal::Placed { tenant, group }))) => Response::Failed(
            group_failure_for(version, Failure::WrongGroup { tenant, group }),
        ),
        // At capacity, or a command the machine found invalid: nothing placed.
        Ok((_, Reply::Refused(refusal))) => {
            Response::Failed(Failure::BadRequest(refusal.to_string()))
        }
        Ok((index, reply)) => Response::Written { index, reply },
        Err(failure) => Response::Failed(failure),
    }
}
