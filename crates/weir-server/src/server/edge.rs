//! The network edge's checks: what a client request must satisfy before anything of it is
//! proposed, so that a request that breaks a bound is refused to that client alone and never
//! reaches the log (G8).
//!
//! - A write's arguments: [`Command::validate`], the same function the machine runs first in
//!   `apply` (names, reasons, units, weights, TTLs, a limit's spec). Its refusal is answered
//!   `BadRequest` with the machine's own wording, so a bad name is refused the same way
//!   whether it is found here or, defence in depth, in the machine.
//! - A write's encoded size: checked by the proposer ([`super::proposer`]) against
//!   [`weir_core::bounds::COMMAND_BYTES_MAX`], which the entry bound is built on.
//! - `AddNode`'s addresses ([`ADDR_BYTES_MAX`]) and the cluster's size ([`MEMBERS_MAX`]):
//!   addresses travel in every membership entry.
//! - The sessions a connection follows: [`super::followed`].
//! - An open's owner and id nonce ([`bind_open`]): an `OpenSession` (or an
//!   `OpenSessionFor` a client filled in itself) is proposed as `OpenSessionFor` with the
//!   connection's principal as owner and a random nonce drawn here, never the client's,
//!   below 2^53 ([`SESSION_ID_DRAWN_MAX`]) so that JSON parsers of doubles read it exactly.
//! - A session's owner (G10, [`owned`]): the machine's record of who opened the session
//!   ([`weir_core::machine::Machine::session_owner`]) is checked before a keep-alive,
//!   acquire, release or close of it goes on.
//!
//! [`screen_write`] makes a write's checks in one order (arguments, owner, the open's
//! binding) for the client port, the in-process writer of the front doors
//! ([`super::local_write`]) and the simulated node alike.
//!
//! Bounds that depend on the state (sessions, limits, tickets, waiters open at once) are the
//! machine's: only log order can judge them.

use weir_core::bounds::{ADDR_BYTES_MAX, MEMBERS_MAX, SESSION_ID_DRAWN_MAX};
use weir_core::machine::{Command, Effect, Owner};
use weir_proto::protocol::Failure;

use super::leader::read_failure;
use crate::raft::Raft;
use crate::raft::state_store::AppliedState;
use crate::security::{Principal, Role};
use crate::session_owner::{OwnerCheck, check_owner};

/// The command to propose for a client's `command`: an open becomes `OpenSessionFor` for
/// `owner`, with a nonce from the OS (the session's id, so ids are unguessable) of at most
/// [`SESSION_ID_DRAWN_MAX`] (exact as a JSON number); anything else is proposed as sent.
fn bind_open(command: Command, owner: Option<Owner>) -> Result<Command, Failure> {
    let Effect::Opens { ttl_ms } = command.effect() else {
        return Ok(command);
    };
    let nonce = crate::security::random_u64().map_err(Failure::Unavailable)? & SESSION_ID_DRAWN_MAX;
    Ok(Command::OpenSessionFor {
        ttl_ms,
        owner,
        nonce,
    })
}

/// Checks a write before it is proposed.
fn check_write(command: &Command) -> Result<(), Failure> {
    // PLANTED(edge-unchecked): an acquire's bounds are left to the machine alone.
    if weir_core::planted::is(weir_core::planted::Plant::EdgeUnchecked)
        && matches!(command, Command::Acquire(_))
    {
        return Ok(());
    }
    if let Command::PlaceTenant { .. } = command {
        // Decided in the metadata group alone: a write of it would land in the group the
        // connection speaks to.
        return Err(Failure::BadRequest(
            "a tenant is placed by the PlaceTenant request (weir tenant place), not a write".into(),
        ));
    }
    command
        .validate()
        .map_err(|refusal| Failure::BadRequest(refusal.to_string()))
}

/// Every check the edge makes of a write `principal` sends, in order: its arguments
/// ([`check_write`], first, so that no quorum round is spent on a malformed write), its
/// session's owner ([`owned`]), then an open bound to the principal ([`bind_open`]): the
/// command to propose. The client port, the front doors' in-process writer and the
/// simulated node all screen a write by it.
pub async fn screen_write(
    raft: &Raft,
    state: &AppliedState,
    principal: &Principal,
    command: Command,
) -> Result<Command, Failure> {
    check_write(&command)?;
    owned(raft, state, principal, &command).await?;
    bind_open(command, principal.owner())
}

/// The session-owner rule (G10) for a write `principal` sends: a command naming a session
/// goes on only if this node's machine records the session as unowned or as the
/// principal's own, except that an admin may end any session (close it, release its
/// tickets), so that a revoked principal's permits can be freed before its session
/// expires; keeping another's session alive or acquiring in it stays its owner's alone.
///
/// A session this node has not applied yet may be one a new leader has committed but not
/// applied: then the check waits for a quorum round (`ensure_linearizable`, which also
/// waits for the state to be applied up to the commit index) and looks again, so no
/// committed session's owner is missed. A session still unknown then is left to the
/// machine, which refuses it `UnknownSession`. The wait holds its caller for one round, and
/// only for a request naming a session this node does not have.
async fn owned(
    raft: &Raft,
    state: &AppliedState,
    principal: &Principal,
    command: &Command,
) -> Result<(), Failure> {
    let Some(session) = command.session() else {
        return Ok(());
    };
    let ends = matches!(
        command.effect(),
        Effect::Closes { .. } | Effect::Releases { .. }
    );
    if ends && principal.role == Role::Admin {
        return Ok(());
    }
    // PLANTED(owner-skipped): a keep-alive skips the owner check.
    if weir_core::planted::is(weir_core::planted::Plant::OwnerSkipped)
        && matches!(command, Command::KeepAlive { .. })
    {
        return Ok(());
    }
    let mut check = check_owner(state, principal, session);
    if check == OwnerCheck::Unknown {
        if let Err(e) = raft.ensure_linearizable().await {
            return Err(read_failure(raft, e));
        }
        check = check_owner(state, principal, session);
    }
    match check {
        OwnerCheck::Forbidden(why) => Err(Failure::Forbidden(why)),
        OwnerCheck::Allowed | OwnerCheck::Unknown => Ok(()),
    }
}

/// Checks an `AddNode` before openraft sees it: its addresses' lengths, and that the cluster,
/// now of `members` members, has room for one more.
pub fn check_add_node(peer: &str, client: &str, members: usize) -> Result<(), Failure> {
    for (what, addr) in [("peer", peer), ("client", client)] {
        if addr.is_empty() || addr.len() > ADDR_BYTES_MAX {
            return Err(Failure::BadRequest(format!(
                "{what} address is {} bytes, not in 1..={ADDR_BYTES_MAX}",
                addr.len()
            )));
        }
    }
    if members >= MEMBERS_MAX {
        return Err(Failure::BadRequest(format!(
            "the cluster has {members} members, the bound is {MEMBERS_MAX}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::bounds::{
        COMMAND_BYTES_MAX, KEY_BYTES_MAX, NAME_BYTES_MAX, PARTS_MAX, REASON_BYTES_MAX, UNITS_MAX,
    };
    use weir_core::codec;
    use weir_core::machine::{
        Acquire, AcquireParts, Change, Definition, HaltScope, Part, Priority, Settle,
    };

    fn name() -> String {
        "n".repeat(NAME_BYTES_MAX)
    }

    /// A priority at its bounds: the lowest level, the longest fairness key, the largest weight.
    fn priority() -> Priority {
        Priority {
            level: i32::MIN,
            fairness_key: name(),
            fairness_weight: u32::MAX,
        }
    }

    /// The largest valid command of every kind, each field at its bound.
    fn worst_of_each_kind() -> Vec<Command> {
        vec![
            Command::DefineLimit {
                tenant: name(),
                name: name(),
                concurrent: UNITS_MAX,
                per_second: 1e9,
                burst: Some(weir_core::bounds::BURST_MAX),
            },
            Command::RemoveLimit {
                tenant: name(),
                name: name(),
            },
            Command::OpenSession {
                ttl_ms: weir_core::bounds::SESSION_TTL_MS_MAX,
            },
            Command::KeepAlive { session: u64::MAX },
            Command::CloseSession { session: u64::MAX },
            Command::Acquire(Acquire {
                session: u64::MAX,
                ticket: u64::MAX,
                tenant: name(),
                limit: name(),
                units: UNITS_MAX,
                priority: priority(),
                agent: Some(name()),
                wait: true,
            }),
            Command::Release {
                session: u64::MAX,
                ticket: u64::MAX,
            },
            Command::SetTenant {
                tenant: name(),
                max_running: Change::Set(u32::MAX),
                budget_tokens: Change::Set(u64::MAX),
                budget_minor: Change::Set(u64::MAX),
            },
            Command::Reserve {
                tenant: name(),
                run: name(),
                agent: Some(name()),
                period: Some(name()),
                hold_tokens: Some(u64::MAX),
                hold_minor: Some(u64::MAX),
            },
            Command::ReleaseRun {
                tenant: name(),
                run: name(),
            },
            Command::Settle(Settle {
                tenant: name(),
                run: name(),
                epoch: u64::MAX,
                period: Some(name()),
                tokens: u64::MAX,
                minor_units: u64::MAX,
                release_slot: true,
            }),
            Command::SetHalt {
                tenant: name(),
                scope: HaltScope::Agent(name()),
                reason: "r".repeat(REASON_BYTES_MAX),
            },
            Command::ClearHalt {
                tenant: name(),
                scope: HaltScope::Agent(name()),
            },
            Command::Tick,
            Command::OpenSessionFor {
                ttl_ms: weir_core::bounds::SESSION_TTL_MS_MAX,
                owner: Some(Owner([u8::MAX; 32])),
                nonce: u64::MAX,
            },
            Command::Define(Definition {
                tenant: name(),
                name: name(),
                concurrent: UNITS_MAX,
                per_second: 1e9,
                burst: Some(weir_core::bounds::BURST_MAX),
                keyed: true,
                keys_max: Some(weir_core::bounds::KEYS_LIVE_MAX as u32),
                shadow: true,
            }),
            Command::AcquireParts(AcquireParts {
                session: u64::MAX,
                ticket: u64::MAX,
                tenant: name(),
                parts: (0..PARTS_MAX)
                    .map(|i| Part {
                        limit: format!("{i}{}", "n".repeat(NAME_BYTES_MAX - 1)),
                        key: Some("k".repeat(KEY_BYTES_MAX)),
                        units: UNITS_MAX,
                    })
                    .collect(),
                priority: priority(),
                agent: Some(name()),
                wait: true,
                estimate: true,
            }),
            Command::SettleTake {
                session: u64::MAX,
                ticket: u64::MAX,
                cost: weir_core::bounds::BURST_MAX,
            },
        ]
    }

    #[test]
    fn every_command_within_the_argument_bounds_fits_the_command_byte_bound() {
        for command in worst_of_each_kind() {
            command.validate().unwrap();
            let bytes = codec::encoded_len(&command);
            assert!(bytes <= COMMAND_BYTES_MAX, "{bytes} bytes: {command:?}");
        }
    }

    #[test]
    fn the_largest_valid_apply_fits_its_byte_bound_and_one_more_definition_is_refused() {
        use weir_core::bounds::{APPLY_COMMAND_BYTES_MAX, APPLY_DEFINITIONS_MAX, BURST_MAX};
        let definition = |i: usize| Definition {
            tenant: name(),
            name: format!("{i:0>width$}", width = NAME_BYTES_MAX),
            concurrent: UNITS_MAX,
            per_second: 1e9,
            burst: Some(BURST_MAX),
            keyed: true,
            keys_max: Some(weir_core::bounds::KEYS_LIVE_MAX as u32),
            shadow: true,
        };
        let apply = |n: usize| Command::ApplyLimits {
            tenant: name(),
            definitions: (0..n).map(definition).collect(),
            prune: true,
        };
        let largest = apply(APPLY_DEFINITIONS_MAX);
        largest.validate().unwrap();
        let bytes = codec::encoded_len(&largest);
        assert!(bytes <= APPLY_COMMAND_BYTES_MAX, "{bytes} bytes");
        let err = apply(APPLY_DEFINITIONS_MAX + 1).validate().unwrap_err();
        assert!(err.to_string().contains("257 definitions"), "{err}");
    }

    #[test]
    fn a_name_one_byte_too_long_is_refused_naming_the_field_and_bound() {
        let err = check_write(&Command::RemoveLimit {
            tenant: "t".into(),
            name: "x".repeat(NAME_BYTES_MAX + 1),
        })
        .unwrap_err();
        assert_eq!(
            err,
            Failure::BadRequest(format!(
                "invalid: limit name is {} bytes, the bound is {NAME_BYTES_MAX}",
                NAME_BYTES_MAX + 1
            ))
        );
    }

    /// Session ids are drawn below 2^53, exact in a JSON double, and still spread over
    /// the whole range (the top bits of some draws are set).
    #[test]
    fn drawn_session_ids_are_exact_as_json_numbers() {
        let mut high = 0;
        for _ in 0..10_000 {
            let open = bind_open(Command::OpenSession { ttl_ms: 3_000 }, None).unwrap();
            let Command::OpenSessionFor { nonce, .. } = open else {
                panic!("an open is proposed as OpenSessionFor: {open:?}");
            };
            assert!(nonce <= SESSION_ID_DRAWN_MAX, "{nonce} is above 2^53 - 1");
            assert_eq!(
                nonce as f64 as u64, nonce,
                "{nonce} is not exact as a double"
            );
            high += usize::from(nonce >> 52 == 1);
        }
        assert!(high > 4_000, "{high} of 10,000 draws have bit 52 set");
    }

    #[test]
    fn add_node_addresses_and_cluster_size_are_bounded() {
        check_add_node("127.0.0.1:1", "127.0.0.1:2", 3).unwrap();
        let long = "a".repeat(ADDR_BYTES_MAX + 1);
        assert!(check_add_node(&long, "x", 3).is_err());
        assert!(check_add_node("x", "", 3).is_err());
        assert!(check_add_node("x", "y", MEMBERS_MAX).is_err());
    }
}
