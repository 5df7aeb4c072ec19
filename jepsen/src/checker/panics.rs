//! No panic in any node's log.

use super::verdict::Verdict;

/// Judges the node logs (`(name, text)`).
pub fn check(logs: &[(String, String)]) -> Verdict {
    if logs.is_empty() {
        return Verdict::Unknown("no node logs".into());
    }
    for (name, text) in logs {
        if let Some(line) = text.lines().find(|l| l.contains("panicked")) {
            return Verdict::Invalid(format!("{name}: {line}"));
        }
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_line_is_invalid() {
        assert_eq!(
            check(&[("n1".into(), "node=1 INFO ok\n".into())]),
            Verdict::Valid
        );
        assert!(matches!(
            check(&[("n1".into(), "thread 'x' panicked at src/a.rs:1".into())]),
            Verdict::Invalid(_)
        ));
    }
}
