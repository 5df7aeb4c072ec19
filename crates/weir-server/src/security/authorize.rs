//! What each [`Role`] may ask (G10, docs/security.md): `admin` everything; `tenant:NAME` its own work
//! inside NAME (sessions, acquires, takes, runs, settlements, reads naming NAME; sessions
//! belong to whoever opened them, checked by the client port against the applied state);
//! `read` only reads: every tenant's state, and the node's status (roles, terms, lag, the
//! digest, which `DigestCache` keeps cheap however often it is asked), so a read-only
//! dashboard sees what an operator does. Snapshot figures, backups, membership changes and
//! ticks are admin's alone: they cost the leader work for every caller or change the
//! cluster itself.
//!
//! The controls an operator sets on a tenant are admin's alone too, so a tenant cannot lift
//! them: halts (set and clear), the tenant's ceiling and budgets (`SetTenant`), and its limit
//! definitions (`DefineLimit`, `RemoveLimit`). A limit's `concurrent` and `per_second` are
//! caps like a ceiling: a tenant that could redefine them could raise its own cap on the
//! shared resource the limit protects (a database's connections, a model's rate), or remove
//! the limit its operator set. A tenant reads all of them.

use super::token::Role;
use weir_core::machine::{Command, Control};
use weir_proto::protocol::Request;

/// `Ok` if `role` may make `request`, else the reason it may not.
pub fn authorize(role: &Role, request: &Request) -> Result<(), String> {
    let tenant = match role {
        Role::Admin => return Ok(()),
        Role::Tenant(t) => Some(t.as_str()),
        Role::Read => None,
    };
    let (asked, write) = match request {
        Request::Write(c) => (command_scope(c), true),
        Request::Read(q) | Request::ReadLocal(q) => (Scope::Tenant(q.tenant()), false),
        Request::Status => (Scope::Observe("status requests"), false),
        Request::AddNode { .. } | Request::RemoveNode { .. } => {
            (Scope::Admin("cluster changes"), true)
        }
        Request::SnapshotCost => (Scope::Admin("snapshot figures"), false),
        Request::BackupBegin | Request::BackupChunk { .. } => (Scope::Admin("backups"), false),
        // Finding where a tenant lives (placing it in the default group if it lives
        // nowhere yet) is its own work; choosing its group is the operator's.
        Request::PlaceTenant {
            tenant,
            group: None,
        } => (Scope::Tenant(tenant), true),
        Request::PlaceTenant { group: Some(_), .. } => (Scope::Admin("tenant placement"), true),
    };
    match (asked, tenant) {
        (Scope::Admin(what), _) => Err(format!("{what} need the admin role, not {role}")),
        (Scope::Observe(_), None) => Ok(()),
        (Scope::Observe(what), Some(_)) => Err(format!(
            "{what} need the admin role or the read role, not {role}"
        )),
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
    /// The node's own figures, across tenants: admin's and read's.
    Observe(&'static str),
}

/// What a write reaches, from the facts its description states ([`Command::describe`]): an
/// operator's control is admin's, naming what it controls; other work is its tenant's, or,
/// naming none, a session's.
fn command_scope(command: &Command) -> Scope<'_> {
    let described = command.describe();
    match (described.control, described.tenant) {
        (Some(Control::Limits), _) => Scope::Admin("limit definitions"),
        (Some(Control::Ceilings), _) => Scope::Admin("a tenant's ceiling and budgets"),
        (Some(Control::Halts), _) => Scope::Admin("halts"),
        (Some(Control::Time), _) => Scope::Admin("ticks"),
        (Some(Control::Placement), _) => Scope::Admin("tenant placement"),
        (None, Some(tenant)) => Scope::Tenant(tenant),
        (None, None) => Scope::Session,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::machine::{Change, Definition, HaltScope};
    use weir_proto::protocol::Query;

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
        let read = |t: &str| Request::Read(Query::limits(t));
        let reserve = |t: &str| {
            Request::Write(Command::Reserve {
                tenant: t.into(),
                run: "r".into(),
                agent: None,
                period: None,
                hold_tokens: None,
                hold_minor: None,
            })
        };
        assert!(authorize(&a, &reserve("a")).is_ok());
        assert!(authorize(&a, &reserve("b")).is_err());
        assert!(authorize(&a, &read("a")).is_ok());
        assert!(authorize(&Role::Admin, &define("a")).is_ok());
        // Every way of defining limits is admin's: a keyed definition and an apply too.
        let keyed = Definition {
            keyed: true,
            ..Definition::from_legacy("a", "k", 0, 1.0, None)
        };
        let apply = Command::ApplyLimits {
            tenant: "a".into(),
            definitions: vec![keyed.clone()],
            prune: false,
        };
        for write in [Command::Define(keyed), apply] {
            assert!(authorize(&a, &Request::Write(write.clone())).is_err());
            assert!(authorize(&Role::Admin, &Request::Write(write)).is_ok());
        }
        assert!(authorize(&a, &read("b")).is_err());
        assert!(authorize(&a, &Request::Status).is_err());
        // A read-only dashboard sees the node table; it still changes nothing.
        assert!(authorize(&Role::Read, &Request::Status).is_ok());
        assert!(authorize(&Role::Read, &Request::SnapshotCost).is_err());
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
        let chunk = Request::BackupChunk {
            index: 1,
            offset: 0,
        };
        for backup in [Request::BackupBegin, chunk] {
            assert!(authorize(&Role::Admin, &backup).is_ok());
            let why = authorize(&Role::Read, &backup).unwrap_err();
            assert!(why.contains("backups need the admin role"), "{why}");
            assert!(authorize(&a, &backup).is_err());
        }
    }

    /// Halts, ceilings, budgets and limit definitions are the operator's: a tenant token
    /// can neither lift nor raise them in its own tenant; an admin can.
    #[test]
    fn the_controls_over_a_tenant_are_admins_alone() {
        let a = Role::Tenant("a".into());
        let controls = [
            Command::SetHalt {
                tenant: "a".into(),
                scope: HaltScope::Tenant,
                reason: "incident".into(),
            },
            Command::ClearHalt {
                tenant: "a".into(),
                scope: HaltScope::Tenant,
            },
            Command::ClearHalt {
                tenant: "a".into(),
                scope: HaltScope::Agent("x".into()),
            },
            Command::SetTenant {
                tenant: "a".into(),
                max_running: Change::Set(100),
                budget_tokens: Change::Set(1_000_000),
                budget_minor: Change::Keep,
            },
            Command::DefineLimit {
                tenant: "a".into(),
                name: "x".into(),
                concurrent: 1_000,
                per_second: 0.0,
                burst: None,
            },
            Command::RemoveLimit {
                tenant: "a".into(),
                name: "x".into(),
            },
        ];
        for command in controls {
            let request = Request::Write(command);
            let why = authorize(&a, &request).unwrap_err();
            assert!(why.contains("need the admin role, not tenant:a"), "{why}");
            assert!(authorize(&Role::Read, &request).is_err());
            assert!(authorize(&Role::Admin, &request).is_ok());
        }
    }

    #[test]
    fn a_tenant_returns_tokens_and_makes_override_limits_in_its_own_tenant_only() {
        let a = Role::Tenant("a".into());
        let writes = |t: &str| {
            [
                Command::ReturnTokens {
                    tenant: t.into(),
                    parts: vec![weir_core::machine::Part {
                        limit: "x".into(),
                        key: None,
                        units: 1,
                    }],
                },
                Command::DefineOverride {
                    tenant: t.into(),
                    requests: 5,
                    unit_s: 60,
                },
            ]
        };
        for command in writes("a") {
            let request = Request::Write(command);
            assert!(authorize(&a, &request).is_ok());
            assert!(authorize(&Role::Read, &request).is_err());
        }
        for command in writes("b") {
            let why = authorize(&a, &Request::Write(command)).unwrap_err();
            assert!(why.contains("may not act in tenant \"b\""), "{why}");
        }
    }
}
