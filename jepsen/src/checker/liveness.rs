//! Liveness after heal (G7): once every fault is healed, a probe acquire on each limit that
//! has room is granted within the bound (2 s, plus one leader election, which the heal may
//! need).

use super::{Verdict, u};
use crate::history::{Kind, Op};

/// G7's bound plus one election (openraft's lease and timeout, under 1 s here).
pub const BOUND_MS: u64 = 3_000;

pub fn check(ops: &[Op]) -> Verdict {
    let probes: Vec<&Op> = ops
        .iter()
        .filter(|o| o.f == "probe" && o.kind != Kind::Invoke)
        .collect();
    if probes.is_empty() {
        return Verdict::Unknown("no probe after the heal".into());
    }
    for p in probes {
        if p.kind != Kind::Ok {
            return Verdict::Invalid(format!("a probe after the heal failed: {}", p.value));
        }
        let Some(ms) = u(p, "latency_ms") else {
            return Verdict::Unknown(format!("malformed probe: {}", p.value));
        };
        if ms > BOUND_MS {
            return Verdict::Invalid(format!(
                "a probe was granted {ms} ms after the heal (bound {BOUND_MS} ms)"
            ));
        }
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::op;
    use serde_json::json;

    #[test]
    fn fast_probes_are_valid_slow_or_failed_ones_are_not() {
        assert_eq!(
            check(&[op(1, Kind::Ok, "probe", json!({"latency_ms": 900}), 1)]),
            Verdict::Valid
        );
        assert!(matches!(
            check(&[op(1, Kind::Ok, "probe", json!({"latency_ms": 9000}), 1)]),
            Verdict::Invalid(_)
        ));
        assert!(matches!(
            check(&[op(1, Kind::Fail, "probe", json!({}), 1)]),
            Verdict::Invalid(_)
        ));
        assert!(matches!(check(&[]), Verdict::Unknown(_)));
    }
}
