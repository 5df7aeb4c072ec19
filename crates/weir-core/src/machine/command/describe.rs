//! What the node asks of a [`Command`] besides applying it, answered in one place:
//! [`Command::describe`], one table with one row per variant. The edge, authorization, the
//! proposer, the activity feed, validation and the machine's totals read a command's facts
//! here instead of matching on its variants, so a command is added as its variant, its row
//! here, its argument rules (`machine::validate`) and its handler in `Machine::apply`.
//!
//! A row states facts, never policy: which tenant and session a command names, whether it is
//! an operator's control (and over what), its encoded-size bound, and what it does that
//! the edge or the feed follows ([`Effect`]). Which role may send what is the server's
//! decision, made from these facts in one function of its own.
//!
//! Invariants:
//! - The table is one exhaustive `match`: a new variant does not compile until its row is
//!   written.
//! - Every command that names a tenant reports it in [`Description::tenant`]; every command
//!   that acts on an existing session reports it in [`Description::session`].
//! - Nothing here reads the state or refuses anything.

use std::borrow::Cow;

use super::{Command, Definition, HaltScope, SessionId, TicketId};
use crate::bounds::{APPLY_COMMAND_BYTES_MAX, COMMAND_BYTES_MAX, MOVE_BYTES_MAX};

/// The facts of one command, borrowed from it: its row of [`Command::describe`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Description<'a> {
    /// The tenant it acts in: the one named by a limit, tenant, run, settlement, halt or
    /// acquire command; `None` for the session commands and `Tick`. Authorization, and the
    /// machine's accounting of tenant-level totals, both read it.
    pub tenant: Option<&'a str>,
    /// The session it acts for: keep-alive, close, acquire, release and settle name one;
    /// `None` for the rest (an open names no session yet). The edge checks its owner (G10)
    /// and follows its events.
    pub session: Option<SessionId>,
    /// The operator's control it is, if it is one: a write that sets what a tenant may do,
    /// or the proposer's own clock.
    pub control: Option<Control>,
    /// Whether it may change its tenant's receipts, runs, periods or halts, the containers
    /// whose sizes the machine's tenant-level totals count (limit and permit commands change
    /// none of them; `Tick` prunes receipts and keeps the totals itself).
    pub tenant_records: bool,
    /// Its largest encoded size, in bytes: the proposer refuses it above this.
    pub bytes_max: usize,
    /// What it does that the edge or the activity feed follows.
    pub effect: Effect<'a>,
}

/// What an operator's control governs. A tenant's own token must not send one, or it could
/// lift or raise what its operator set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// The tenant's limit definitions: `DefineLimit`, `Define`, `RemoveLimit`, `ApplyLimits`.
    Limits,
    /// The tenant's ceiling and budgets: `SetTenant`.
    Ceilings,
    /// Halts, set and cleared: `SetHalt`, `ClearHalt`.
    Halts,
    /// The passage of time: `Tick`, which the proposer sends itself.
    Time,
    /// Where a tenant lives: a move's `FreezeTenant`, `AdoptTenant` and `DropFrozen`, and
    /// the metadata group's `PlaceTenant`.
    Placement,
}

/// What a command does that the edge (which sessions a connection follows) or the
/// activity feed (what the console shows) follows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Effect<'a> {
    /// Opens a session with this TTL (ms).
    Opens { ttl_ms: u64 },
    /// Closes this session.
    Closes { session: SessionId },
    /// Releases (or withdraws) this ticket.
    Releases {
        session: SessionId,
        ticket: TicketId,
    },
    /// Asks for a ticket: `limit` is its (first) part's limit, empty when it names none.
    Asks {
        tenant: &'a str,
        limit: &'a str,
        session: SessionId,
        ticket: TicketId,
    },
    /// Sets a halt on `scope`.
    SetsHalt {
        tenant: &'a str,
        scope: &'a HaltScope,
        reason: &'a str,
    },
    /// Clears a halt on `scope`.
    ClearsHalt {
        tenant: &'a str,
        scope: &'a HaltScope,
    },
    /// Defines (or redefines) one limit.
    Defines { tenant: &'a str, name: &'a str },
    /// Removes one limit.
    Removes { tenant: &'a str, name: &'a str },
    /// Nothing the edge or the feed follows.
    Other,
}

impl<'a> Description<'a> {
    /// A command on the session `session` (or opening one, `None`), in no tenant.
    fn on_session(session: Option<SessionId>, effect: Effect<'a>) -> Description<'a> {
        Description {
            tenant: None,
            session,
            control: None,
            tenant_records: false,
            bytes_max: COMMAND_BYTES_MAX,
            effect,
        }
    }

    /// A tenant's own work in `tenant`, on no session, that changes its records.
    fn in_tenant(tenant: &'a str) -> Description<'a> {
        Description {
            tenant: Some(tenant),
            session: None,
            control: None,
            tenant_records: true,
            bytes_max: COMMAND_BYTES_MAX,
            effect: Effect::Other,
        }
    }

    /// An operator's `control` over `tenant`, changing none of its records.
    fn control(tenant: &'a str, control: Control, effect: Effect<'a>) -> Description<'a> {
        Description {
            tenant: Some(tenant),
            session: None,
            control: Some(control),
            tenant_records: false,
            bytes_max: COMMAND_BYTES_MAX,
            effect,
        }
    }

    /// An acquire in `tenant` for `session`'s `ticket`, first part on `limit`.
    fn asks(
        tenant: &'a str,
        limit: &'a str,
        session: SessionId,
        ticket: TicketId,
    ) -> Description<'a> {
        Description {
            tenant: Some(tenant),
            session: Some(session),
            control: None,
            tenant_records: false,
            bytes_max: COMMAND_BYTES_MAX,
            effect: Effect::Asks {
                tenant,
                limit,
                session,
                ticket,
            },
        }
    }
}

impl Command {
    /// This command's facts: the table every bookkeeping question is answered from.
    pub fn describe(&self) -> Description<'_> {
        use Control::{Ceilings, Halts, Limits, Placement, Time};
        match self {
            Command::DefineLimit { tenant, name, .. } => {
                Description::control(tenant, Limits, Effect::Defines { tenant, name })
            }
            Command::Define(d) => Description::control(
                &d.tenant,
                Limits,
                Effect::Defines {
                    tenant: &d.tenant,
                    name: &d.name,
                },
            ),
            Command::RemoveLimit { tenant, name } => {
                Description::control(tenant, Limits, Effect::Removes { tenant, name })
            }
            Command::ApplyLimits { tenant, .. } => Description {
                bytes_max: APPLY_COMMAND_BYTES_MAX,
                ..Description::control(tenant, Limits, Effect::Other)
            },
            Command::SetTenant { tenant, .. } => Description {
                tenant_records: true,
                ..Description::control(tenant, Ceilings, Effect::Other)
            },
            Command::SetHalt {
                tenant,
                scope,
                reason,
            } => Description {
                tenant_records: true,
                ..Description::control(
                    tenant,
                    Halts,
                    Effect::SetsHalt {
                        tenant,
                        scope,
                        reason,
                    },
                )
            },
            Command::ClearHalt { tenant, scope } => Description {
                tenant_records: true,
                ..Description::control(tenant, Halts, Effect::ClearsHalt { tenant, scope })
            },
            Command::Reserve { tenant, .. } | Command::ReleaseRun { tenant, .. } => {
                Description::in_tenant(tenant)
            }
            Command::Settle(s) => Description::in_tenant(&s.tenant),
            Command::Acquire(a) => Description::asks(&a.tenant, &a.limit, a.session, a.ticket),
            Command::AcquireParts(a) => Description::asks(
                &a.tenant,
                a.parts.first().map_or("", |p| p.limit.as_str()),
                a.session,
                a.ticket,
            ),
            Command::OpenSession { ttl_ms } | Command::OpenSessionFor { ttl_ms, .. } => {
                Description::on_session(None, Effect::Opens { ttl_ms: *ttl_ms })
            }
            Command::KeepAlive { session }
            | Command::KeepAliveAcked { session, .. }
            | Command::SettleTake { session, .. } => {
                Description::on_session(Some(*session), Effect::Other)
            }
            Command::CloseSession { session } => {
                Description::on_session(Some(*session), Effect::Closes { session: *session })
            }
            Command::Release { session, ticket } => Description::on_session(
                Some(*session),
                Effect::Releases {
                    session: *session,
                    ticket: *ticket,
                },
            ),
            Command::ReturnTokens { tenant, .. } | Command::DefineOverride { tenant, .. } => {
                Description {
                    tenant_records: false,
                    ..Description::in_tenant(tenant)
                }
            }
            Command::LeaseTokens(l) => Description {
                tenant: Some(&l.tenant),
                ..Description::on_session(Some(l.session), Effect::Other)
            },
            Command::Tick => Description {
                control: Some(Time),
                ..Description::on_session(None, Effect::Other)
            },
            Command::FreezeTenant { tenant, .. }
            | Command::DropFrozen { tenant }
            | Command::PlaceTenant { tenant, .. } => {
                Description::control(tenant, Placement, Effect::Other)
            }
            Command::AdoptTenant { tenant, .. } => Description {
                // The value, and the tenant's name and the lengths around it.
                bytes_max: MOVE_BYTES_MAX + COMMAND_BYTES_MAX,
                ..Description::control(tenant, Placement, Effect::Other)
            },
        }
    }

    /// The tenant this command acts in ([`Description::tenant`]).
    pub fn tenant(&self) -> Option<&str> {
        self.describe().tenant
    }

    /// The session this command acts for ([`Description::session`]).
    pub fn session(&self) -> Option<SessionId> {
        self.describe().session
    }

    /// The operator's control this command is, if any ([`Description::control`]).
    pub fn control(&self) -> Option<Control> {
        self.describe().control
    }

    /// The tenant whose receipts, runs, periods or halts this command may change, if any:
    /// its tenant when [`Description::tenant_records`].
    pub fn tenant_counted(&self) -> Option<&str> {
        let d = self.describe();
        d.tenant.filter(|_| d.tenant_records)
    }

    /// This command's largest encoded size ([`Description::bytes_max`]).
    pub fn bytes_max(&self) -> usize {
        self.describe().bytes_max
    }

    /// What this command does that the edge or the feed follows ([`Description::effect`]).
    pub fn effect(&self) -> Effect<'_> {
        self.describe().effect
    }

    /// The definition a `DefineLimit` (as [`Definition::from_legacy`] reads it) or a
    /// `Define` writes; `None` for the rest. The machine validates and applies both through
    /// it.
    pub fn definition(&self) -> Option<Cow<'_, Definition>> {
        match self {
            Command::DefineLimit {
                tenant,
                name,
                concurrent,
                per_second,
                burst,
            } => Some(Cow::Owned(Definition::from_legacy(
                tenant,
                name,
                *concurrent,
                *per_second,
                *burst,
            ))),
            Command::Define(d) => Some(Cow::Borrowed(d)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Acquire, Priority, Settle};
    use super::*;

    #[test]
    fn a_command_names_its_tenant_and_its_session() {
        let acquire = Command::Acquire(Acquire {
            session: 7,
            ticket: 1,
            tenant: "t".into(),
            limit: "l".into(),
            units: 1,
            priority: Priority::default(),
            agent: None,
            wait: true,
        });
        let settle = Command::Settle(Settle {
            tenant: "s".into(),
            run: "r".into(),
            epoch: 1,
            period: None,
            tokens: 0,
            minor_units: 0,
            release_slot: false,
        });
        let halt = Command::SetHalt {
            tenant: "h".into(),
            scope: HaltScope::Tenant,
            reason: String::new(),
        };
        let named = |c: &Command| (c.tenant().map(str::to_owned), c.session());
        assert_eq!(named(&acquire), (Some("t".into()), Some(7)));
        assert_eq!(named(&settle), (Some("s".into()), None));
        assert_eq!(named(&halt), (Some("h".into()), None));
        assert_eq!(
            named(&Command::Release {
                session: 9,
                ticket: 1
            }),
            (None, Some(9))
        );
        assert_eq!(named(&Command::OpenSession { ttl_ms: 1 }), (None, None));
        assert_eq!(named(&Command::Tick), (None, None));
    }

    #[test]
    fn controls_records_and_bounds_are_stated_by_the_row() {
        let halt = Command::SetHalt {
            tenant: "h".into(),
            scope: HaltScope::Tenant,
            reason: String::new(),
        };
        assert_eq!(halt.control(), Some(Control::Halts));
        assert_eq!(halt.tenant_counted(), Some("h"));
        let remove = Command::RemoveLimit {
            tenant: "t".into(),
            name: "l".into(),
        };
        assert_eq!(remove.control(), Some(Control::Limits));
        assert_eq!(remove.tenant_counted(), None);
        assert_eq!(Command::Tick.control(), Some(Control::Time));
        let apply = Command::ApplyLimits {
            tenant: "t".into(),
            definitions: vec![],
            prune: false,
        };
        assert_eq!(apply.bytes_max(), APPLY_COMMAND_BYTES_MAX);
        assert_eq!(remove.bytes_max(), COMMAND_BYTES_MAX);
        assert_eq!(
            Command::OpenSession { ttl_ms: 5 }.effect(),
            Effect::Opens { ttl_ms: 5 }
        );
    }
}
