//! Whether a run's ports refused what they must: the `security` op, one row per probe of
//! one node's port. A `--secure` harness run records it at the start
//! ([`crate::secure::check`]: TLS and tokens); the simulator records it at a run's end
//! (`sim::trespass`: the edge's checks of a write, G8 and G10, probed under faults).
//!
//! - A probe that expected a refusal (plaintext, no token, an unknown token, a tenant asking
//!   for status, plaintext HTTP, HTTPS without a token; in the simulator, another
//!   principal's keep-alive of a session or acquire in it, a write breaking an argument
//!   bound) and was served: **invalid** — the node accepted what TLS, tokens and the edge
//!   exist to refuse.
//! - A refusal that did not carry its clear error (a tokenless hello must be told it needs a
//!   token), or a control (the admin token over TLS; the owner's own keep-alive and close)
//!   that was not served: **unknown** — a node that refuses everything (dead, or TLS broken)
//!   proves nothing either way.
//! - No `security` op, or one without probes: unknown.

use super::verdict::Verdict;
use crate::history::{Kind, Op};

/// Whether the history has a `security` op: a secure run's, judged by [`check`].
pub fn present(ops: &[Op]) -> bool {
    ops.iter().any(|o| o.f == "security")
}

pub fn check(ops: &[Op]) -> Verdict {
    let Some(done) = ops
        .iter()
        .find(|o| o.f == "security" && o.kind != Kind::Invoke)
    else {
        return Verdict::Unknown("no security check in the history".into());
    };
    let rows = done
        .value
        .get("probes")
        .and_then(|p| p.as_array())
        .cloned()
        .unwrap_or_default();
    if rows.is_empty() {
        return Verdict::Unknown("the security check probed nothing".into());
    }
    let text = |r: &serde_json::Value, k: &str| {
        r.get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let flag = |r: &serde_json::Value, k: &str| r.get(k).and_then(|v| v.as_bool());
    let mut unsure = vec![];
    for r in &rows {
        let what = format!(
            "node {} {}",
            r.get("node").and_then(|v| v.as_u64()).unwrap_or(0),
            text(r, "probe")
        );
        let (Some(served), Some(reason_ok)) = (flag(r, "served"), flag(r, "reason_ok")) else {
            unsure.push(format!("{what}: malformed row"));
            continue;
        };
        match (text(r, "expect").as_str(), served) {
            ("refused", true) => {
                return Verdict::Invalid(format!(
                    "{what} was served ({}): the port accepts what it must refuse",
                    text(r, "saw")
                ));
            }
            ("refused", false) if !reason_ok => {
                unsure.push(format!(
                    "{what} refused without its clear error: {}",
                    text(r, "saw")
                ));
            }
            ("served", false) => {
                unsure.push(format!(
                    "{what} (the control) not served: {}",
                    text(r, "saw")
                ));
            }
            ("refused", false) | ("served", true) => {}
            (other, _) => unsure.push(format!("{what}: unknown expectation {other:?}")),
        }
    }
    if unsure.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Unknown(unsure.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(kind: Kind, value: serde_json::Value) -> Op {
        Op {
            process: crate::history::NEMESIS,
            kind,
            f: "security".into(),
            value,
            time_ns: 1,
        }
    }

    fn history(rows: serde_json::Value) -> Vec<Op> {
        vec![
            op(Kind::Invoke, json!({})),
            op(Kind::Info, json!({ "probes": rows })),
        ]
    }

    fn probe(name: &str, expect: &str, served: bool, reason_ok: bool) -> serde_json::Value {
        json!({"node": 1, "probe": name, "expect": expect, "served": served,
               "reason_ok": reason_ok, "saw": "x"})
    }

    #[test]
    fn refusals_with_their_errors_and_a_served_control_are_valid() {
        let ops = history(json!([
            probe("tls+admin", "served", true, true),
            probe("plaintext", "refused", false, true),
            probe("no-token", "refused", false, true),
        ]));
        assert!(present(&ops));
        assert_eq!(check(&ops), Verdict::Valid);
    }

    #[test]
    fn a_served_plaintext_connect_or_tokenless_hello_is_invalid() {
        for name in ["plaintext", "no-token", "https-no-token"] {
            let ops = history(json!([
                probe("tls+admin", "served", true, true),
                probe(name, "refused", true, false),
            ]));
            match check(&ops) {
                Verdict::Invalid(why) => assert!(why.contains(name), "{why}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_unclear_refusal_a_dead_control_or_no_check_is_unknown() {
        let unclear = history(json!([
            probe("tls+admin", "served", true, true),
            probe("no-token", "refused", false, false),
        ]));
        assert!(matches!(check(&unclear), Verdict::Unknown(w) if w.contains("clear error")));
        let dead = history(json!([
            probe("tls+admin", "served", false, false),
            probe("plaintext", "refused", false, true),
        ]));
        assert!(matches!(check(&dead), Verdict::Unknown(w) if w.contains("control")));
        assert!(matches!(check(&history(json!([]))), Verdict::Unknown(_)));
        assert!(!present(&[]));
        assert!(matches!(check(&[]), Verdict::Unknown(_)));
    }
}
