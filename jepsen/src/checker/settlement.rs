//! The settlement ledger (G3, G5): every acknowledged settle is charged exactly once — the
//! final spend lies between the acknowledged charges and those plus the settles whose
//! outcome is unknown — and a settle reusing a key with another payload is refused.

use super::{Verdict, oks, u};
use crate::history::{Kind, Op};

pub fn check(ops: &[Op]) -> Verdict {
    let acked: u64 = oks(ops, "settle")
        .filter(|o| o.value.get("duplicate").and_then(|d| d.as_bool()) == Some(false))
        .filter_map(|o| u(o, "tokens"))
        .sum();
    let unknown: u64 = ops
        .iter()
        .filter(|o| o.kind == Kind::Info && o.f == "settle")
        .filter_map(|o| u(o, "tokens"))
        .sum();
    if let Some(bad) = oks(ops, "settle-conflict").next() {
        return Verdict::Invalid(format!("a conflicting settle was accepted: {}", bad.value));
    }
    let Some(spent) = oks(ops, "spent").last().and_then(|o| u(o, "tokens")) else {
        return Verdict::Unknown("no final read of the spend".into());
    };
    if oks(ops, "settle").next().is_none() {
        return Verdict::Unknown("no settle was acknowledged".into());
    }
    if spent < acked {
        return Verdict::Invalid(format!(
            "spent {spent} < {acked} acknowledged: an acknowledged settle was lost"
        ));
    }
    if spent > acked + unknown {
        return Verdict::Invalid(format!(
            "spent {spent} > {acked} acknowledged + {unknown} unknown: a settle was charged twice"
        ));
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    fn settle(kind: Kind, tokens: u64, duplicate: bool) -> Op {
        op(
            1,
            kind,
            "settle",
            json!({"key": "r/1", "tokens": tokens, "duplicate": duplicate}),
            1,
        )
    }

    fn spent(tokens: u64) -> Op {
        op(1, Kind::Ok, "spent", json!({"tokens": tokens}), 9)
    }

    #[test]
    fn the_spend_between_acknowledged_and_unknown_is_valid() {
        let h = [
            settle(Kind::Ok, 5, false),
            settle(Kind::Ok, 5, true),
            settle(Kind::Info, 3, false),
            spent(8),
        ];
        assert_eq!(check(&h), Verdict::Valid);
        assert_eq!(
            check(&h[..3].iter().cloned().chain([spent(5)]).collect::<Vec<_>>()),
            Verdict::Valid
        );
    }

    #[test]
    fn a_lost_or_doubled_charge_is_invalid() {
        assert!(matches!(
            check(&[settle(Kind::Ok, 5, false), spent(4)]),
            Verdict::Invalid(_)
        ));
        assert!(matches!(
            check(&[
                settle(Kind::Ok, 5, false),
                settle(Kind::Ok, 5, true),
                spent(10)
            ]),
            Verdict::Invalid(_)
        ));
    }

    #[test]
    fn an_accepted_conflict_is_invalid() {
        let h = [
            settle(Kind::Ok, 5, false),
            op(1, Kind::Ok, "settle-conflict", json!({"key": "r/1"}), 2),
            spent(5),
        ];
        assert!(matches!(check(&h), Verdict::Invalid(_)));
    }
}
