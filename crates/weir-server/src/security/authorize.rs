//! What each [`Role`] may ask (spec §7): `admin` everything; `tenant:NAME` every operation
//! and read naming NAME, and sessions (which belong to whoever opened them, checked by the
//! client port against the applied state); `read` only reads. Status digests, snapshot
//! figures, membership changes and ticks are admin's alone: they cost the leader work for
//! every caller or change the cluster itself.

use super::token::Role;
use weir_client::protocol::{Query, Request};
use weir_core::machine::Command;

/// `Ok` if `role` may make `request`, else the reason it may not.
pub fn authorize(role: &Role, request: &Request) -> Result<(), String> {
    let tenant = match role {
        Role::Admin => return Ok(()),
        Role::Tenant(t) => Some(t.as_str()),
        Role::Read => None,
    };
    let (asked, write) = match request {
        Request::Write(c) => (command_tenant(c), true),
        Request::Read(q) | Request::ReadLocal(q) => (Scope::Tenant(query_tenant(q)), false),
        Request::Status => (Scope::Admin("status"), false),
        Request::AddNode { .. } | Request::RemoveNode { .. } => {
            (Scope::Admin("cluster changes"), true)
        }
        Request::SnapshotCost => (Scope::Admin("snapshot figures"), false),
    };
    match (asked, tenant) {
        (Scope::Admin(what), _) => Err(format!("{what} need the admin role, not {role}")),
        (_, None) if write => Err("the read role may only read".into()),
        (Scope::Tenant(_), None) => Ok(()),
        (Scope::Session, _) => Ok(()),
        (Scope::Tenant(asked), Some(mine)) if asked == mine => Ok(()),
        (Scope::Tenant(asked), Some(_)) => {
            Err(format!("role {role} may not act in tenant {asked:?}"))
        }
    }
}

/// What a request reaches.
enum Scope<'a> {
    /// One tenant's limits, runs, budgets or halts.
    Tenant(&'a str),
    /// A session: allowed to any writer, then checked against its owner.
    Session,
    /// The node or the cluster.
    Admin(&'static str),
}

fn command_tenant(command: &Command) -> Scope<'_> {
    match (command, command.tenant()) {
        (Command::Tick, _) => Scope::Admin("ticks"),
        (_, Some(tenant)) => Scope::Tenant(tenant),
        (_, None) => Scope::Session,
    }
}

fn query_tenant(query: &Query) -> &str {
    match query {
        Query::Limit { tenant, .. }
        | Query::Limits { tenant }
        | Query::ValidateFence { tenant, .. }
        | Query::Spent { tenant, .. }
        | Query::Running { tenant }
        | Query::Halts { tenant }
        | Query::Tenant { tenant } => tenant,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_read_and_admin_reach_what_the_spec_says() {
        let a = Role::Tenant("a".into());
        let define = |t: &str| {
            Request::Write(Command::DefineLimit {
                tenant: t.into(),
                name: "x".into(),
                concurrent: 1,
                per_second: 0.0,
                burst: None,
            })
        };
        let read = |t: &str| Request::Read(Query::Limits { tenant: t.into() });
        assert!(authorize(&a, &define("a")).is_ok());
        assert!(authorize(&a, &define("b")).is_err());
        assert!(authorize(&a, &read("b")).is_err());
        assert!(authorize(&a, &Request::Status).is_err());
        assert!(authorize(&Role::Read, &read("b")).is_ok());
        assert!(authorize(&Role::Read, &define("b")).is_err());
        assert!(
            authorize(
                &Role::Read,
                &Request::Write(Command::OpenSession { ttl_ms: 1 })
            )
            .is_err()
        );
        assert!(authorize(&Role::Admin, &Request::RemoveNode { id: 2 }).is_ok());
        assert!(authorize(&a, &Request::RemoveNode { id: 2 }).is_err());
    }
}
