//! Halts (G6): once a halt is acknowledged, nothing in its scope is admitted until a clear is
//! sent. A scope is a whole tenant (`agent` null: every agent in it) or one agent in it; the
//! two are independent records. An admission (`reserve` ok, or `acquire` ok of a limit in
//! the halted tenant, with its agent) in scope that was invoked after a halt's acknowledgement
//! and acknowledged before the next clear was invoked is a violation: no linearization can
//! put it outside the halt. (One that overlaps the clear may be ordered after it.)
//!
//! Queued tickets (the spec: a halt refuses the queued tickets in its scope): a waiter that
//! queued behind a blocker (`"queued": true`, `workload::halt_queue`) can be granted only
//! once the blocker's release frees the unit, so when that release was invoked after a
//! halt in the waiter's scope was acknowledged (its `halt-room` fact: the blocker still
//! held, the release acknowledged) and the grant was acknowledged before the clear was
//! invoked, the grant was decided inside the halt: a ticket the halt should have refused.
//!
//! A run in which no admission in scope was even tried inside a halt (granted or refused)
//! judged nothing: unknown, never valid.

use std::collections::HashMap;

use super::ops::{s, u};
use super::verdict::Verdict;
use crate::history::{Kind, Op};

/// A halted window: tenant, agent (`None`: the whole tenant), acknowledged, clear invoked.
type Window = (String, Option<String>, u64, u64);

pub fn check(ops: &[Op]) -> Verdict {
    let mut windows: Vec<Window> = vec![];
    let mut open: Vec<(String, Option<String>, u64)> = vec![];
    for op in ops {
        let Some(tenant) = s(op, "tenant") else {
            continue;
        };
        let agent = s(op, "agent").map(String::from);
        match (op.f.as_str(), op.kind) {
            ("set-halt", Kind::Ok) => open.push((tenant.into(), agent, op.time_ns)),
            ("clear-halt", Kind::Invoke) => {
                open.retain(|(t, a, from)| {
                    if t == tenant && *a == agent {
                        windows.push((t.clone(), a.clone(), *from, op.time_ns));
                        false
                    } else {
                        true
                    }
                });
            }
            _ => {}
        }
    }
    for (t, a, from) in open {
        windows.push((t, a, from, u64::MAX));
    }
    if windows.is_empty() {
        return Verdict::Unknown("no halt was acknowledged".into());
    }
    let mut judged = 0;
    for op in ops.iter().filter(|o| {
        matches!(o.kind, Kind::Ok | Kind::Fail) && (o.f == "reserve" || o.f == "acquire")
    }) {
        let (Some(tenant), Some(agent), Some(invoked)) =
            (s(op, "tenant"), s(op, "agent"), u(op, "invoke_ns"))
        else {
            continue;
        };
        let in_scope =
            |(t, a, _, _): &&Window| t == tenant && a.as_deref().is_none_or(|a| a == agent);
        let done = op.time_ns;
        if windows
            .iter()
            .filter(in_scope)
            .any(|(_, _, from, to)| (*from..*to).contains(&invoked))
        {
            judged += 1;
        }
        if op.kind != Kind::Ok {
            continue;
        }
        if let Some((_, scope, from, to)) = windows
            .iter()
            .filter(in_scope)
            .find(|(_, _, from, to)| *from <= invoked && done < *to)
        {
            return Verdict::Invalid(format!(
                "{tenant}/{agent} admitted a {} invoked at {invoked} ns inside a {} halt acknowledged at {from} ns (cleared at {to})",
                op.f,
                if scope.is_some() { "agent" } else { "tenant" }
            ));
        }
    }
    if let Err(violation) = queued_grants(ops, &windows) {
        return violation;
    }
    if judged == 0 {
        return Verdict::Unknown("no admission in scope was tried inside a halt".into());
    }
    Verdict::Valid
}

/// The queued waiters' rule (module doc): no waiter granted after its room came inside a
/// halt of its scope and before that halt's clear was invoked.
fn queued_grants(ops: &[Op], windows: &[Window]) -> Result<(), Verdict> {
    // The first queued grant of each round, found in one pass.
    let mut grants: HashMap<u64, &Op> = HashMap::new();
    for o in ops.iter().filter(|o| {
        o.kind == Kind::Ok
            && o.f == "acquire"
            && o.value.get("queued").and_then(|q| q.as_bool()) == Some(true)
    }) {
        if let Some(round) = u(o, "round") {
            grants.entry(round).or_insert(o);
        }
    }
    let rooms = ops
        .iter()
        .filter(|o| o.f == "halt-room" && o.kind == Kind::Ok);
    for room in rooms {
        let (Some(round), Some(room_ns)) = (u(room, "round"), u(room, "room_ns")) else {
            continue;
        };
        let granted = grants.get(&round).copied();
        let Some(grant) = granted else { continue };
        let (Some(tenant), Some(agent)) = (s(grant, "tenant"), s(grant, "agent")) else {
            continue;
        };
        if let Some((_, scope, from, to)) = windows.iter().find(|(t, a, from, to)| {
            t == tenant
                && a.as_deref().is_none_or(|a| a == agent)
                && *from <= room_ns
                && grant.time_ns < *to
        }) {
            return Err(Verdict::Invalid(format!(
                "{tenant}/{agent}: a queued ticket (round {round}) was granted at {} ns, its room at {room_ns} ns, inside a {} halt acknowledged at {from} ns (cleared at {to}): the halt should have refused it",
                grant.time_ns,
                if scope.is_some() { "agent" } else { "tenant" }
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    fn at(f: &str, kind: Kind, t: u64, invoke: u64) -> Op {
        op(
            1,
            kind,
            f,
            json!({"tenant": "x", "agent": "a", "invoke_ns": invoke}),
            t,
        )
    }

    #[test]
    fn admissions_outside_the_halt_or_overlapping_its_set_or_clear_are_valid() {
        let valid = [
            // Before the halt, and after its clear was invoked.
            vec![
                at("reserve", Kind::Ok, 5, 4),
                at("set-halt", Kind::Ok, 10, 9),
                at("reserve", Kind::Fail, 12, 11),
                at("clear-halt", Kind::Invoke, 20, 20),
                at("reserve", Kind::Ok, 22, 21),
            ],
            // Invoked before the halt's acknowledgement: allowed to land either side.
            vec![
                at("set-halt", Kind::Ok, 10, 9),
                at("reserve", Kind::Ok, 12, 9),
                at("reserve", Kind::Fail, 14, 13),
            ],
            // Overlapping the clear: may follow it.
            vec![
                at("set-halt", Kind::Ok, 10, 9),
                at("reserve", Kind::Invoke, 19, 19),
                at("clear-halt", Kind::Invoke, 20, 20),
                at("reserve", Kind::Ok, 22, 19),
            ],
        ];
        for h in valid {
            assert_eq!(check(&h), Verdict::Valid, "{h:?}");
        }
    }

    #[test]
    fn a_halt_inside_which_nothing_was_tried_judged_nothing() {
        let h = [
            at("reserve", Kind::Ok, 5, 4),
            at("set-halt", Kind::Ok, 10, 9),
            at("clear-halt", Kind::Invoke, 20, 20),
            at("reserve", Kind::Ok, 22, 21),
        ];
        assert!(matches!(check(&h), Verdict::Unknown(d) if d.contains("no admission")));
    }

    fn queued(kind: Kind, round: u64, t: u64, invoke: u64) -> Op {
        let v = json!({"tenant": "x", "agent": "a", "queued": true, "round": round, "invoke_ns": invoke});
        op(2, kind, "acquire", v, t)
    }

    fn room(round: u64, t: u64) -> Op {
        op(
            3,
            Kind::Ok,
            "halt-room",
            json!({"round": round, "room_ns": t}),
            t,
        )
    }

    #[test]
    fn a_queued_ticket_granted_after_its_room_came_inside_a_halt_is_invalid() {
        // Queued at 5, the halt acknowledged at 10, the room at 12, granted at 14, the
        // clear invoked at 20: the halt should have refused the ticket.
        let h = [
            queued(Kind::Invoke, 1, 5, 5),
            at("set-halt", Kind::Ok, 10, 9),
            room(1, 12),
            queued(Kind::Ok, 1, 14, 5),
            at("clear-halt", Kind::Invoke, 20, 20),
        ];
        assert!(matches!(check(&h), Verdict::Invalid(d) if d.contains("queued ticket (round 1)")));
        // Refused instead, or granted after the clear, or its room before the halt: valid.
        let refused = [
            at("set-halt", Kind::Ok, 10, 9),
            room(1, 12),
            queued(Kind::Fail, 1, 11, 5),
            at("clear-halt", Kind::Invoke, 20, 20),
            room(2, 21),
            queued(Kind::Ok, 2, 22, 15),
            room(3, 8),
            queued(Kind::Ok, 3, 11, 7),
        ];
        assert_eq!(check(&refused), Verdict::Valid);
    }

    #[test]
    fn an_admission_after_an_acknowledged_halt_is_invalid() {
        let h = [
            at("set-halt", Kind::Ok, 10, 9),
            at("reserve", Kind::Ok, 15, 11),
        ];
        assert!(matches!(check(&h), Verdict::Invalid(_)));
    }

    #[test]
    fn a_tenant_halt_covers_every_agent_and_acquires_count_as_admissions() {
        let tenant_halt = op(
            1,
            Kind::Ok,
            "set-halt",
            json!({"tenant": "x", "agent": null}),
            10,
        );
        let acquired = op(
            2,
            Kind::Ok,
            "acquire",
            json!({"tenant": "x", "agent": "b", "limit": "gate", "fence": 7, "invoke_ns": 11}),
            15,
        );
        assert!(
            matches!(check(&[tenant_halt.clone(), acquired.clone()]), Verdict::Invalid(d) if d.contains("tenant halt"))
        );
        // An agent halt of another agent does not cover b; clearing the agent halt does
        // not clear the tenant's.
        let agent_halt = at("set-halt", Kind::Ok, 10, 9);
        let refused = at("acquire", Kind::Fail, 13, 12);
        assert_eq!(
            check(&[agent_halt, refused, acquired.clone()]),
            Verdict::Valid
        );
        let clear_agent = at("clear-halt", Kind::Invoke, 12, 12);
        assert!(matches!(
            check(&[tenant_halt, clear_agent, acquired]),
            Verdict::Invalid(_)
        ));
    }
}
