//! Why an acquire found no room, in a person's units: a `Busy` refusal's retry time in
//! seconds from now, and the part of the request (its limit and key) that lacked room and
//! what it lacked.
//!
//! The machine's `Busy` carries a log-clock time (`retry_at_ms`) and names no part, and a
//! timed-out wait names nothing; the wire stays as it is and the CLI asks after the answer:
//! a page of no holders of the request's first limit (`Query::Holders`), which carries the
//! log clock it was read at, and each part's status (`limit_status`, or `key_status` of a
//! keyed part). These reads come a moment after the decision, so a release or a refill in
//! between shows as room: the text says what each part lacked when read, and "every part
//! has room now" when none lacks it any more. A read that fails leaves its clause out.
//! Nothing here changes an exit status; it only words the message.

use weir_client::Client;
use weir_core::machine::{LimitStatus, Part};
use weir_proto::protocol::{Answer, Query};

/// `at_ms` (a log-clock time) as seconds from `now_ms`, the log clock when read:
/// `retry in 1.2 s`, or `retry now` once it has passed.
pub fn retry_in(at_ms: u64, now_ms: u64) -> String {
    match at_ms.checked_sub(now_ms) {
        Some(ms) if ms > 0 => format!("retry in {:.1} s", ms.div_ceil(100) as f64 / 10.0),
        _ => "retry now".into(),
    }
}

/// How a part is written on the command line: `LIMIT[:UNITS][@KEY]`, units only when not 1.
pub fn part_name(part: &Part) -> String {
    let mut name = part.limit.clone();
    if part.units != 1 {
        name.push_str(&format!(":{}", part.units));
    }
    if let Some(key) = &part.key {
        name.push_str(&format!("@{key}"));
    }
    name
}

/// What `part` lacks in `status` (its limit's, or its key's): `None` when it has room.
/// A shadow limit never refuses, so it never lacks room.
pub fn lack(part: &Part, status: &LimitStatus) -> Option<String> {
    let units = part.units as u64;
    if status.shadow {
        return None;
    }
    if status.removing {
        return Some("the limit is being removed".into());
    }
    if status.concurrent > 0 && status.in_use + units > status.concurrent as u64 {
        return Some(format!(
            "{} of {} in use, needs {units}",
            status.in_use, status.concurrent
        ));
    }
    if status.per_second > 0.0 && status.tokens < units {
        return Some(format!(
            "{} of {} tokens at its last refill, needs {units} (refills {} a second)",
            status.tokens, status.burst, status.per_second
        ));
    }
    None
}

/// The log clock of the cluster now, ms, read as a page of no holders of `limit`.
pub async fn log_now_ms(client: &Client, tenant: &str, limit: &str) -> Option<u64> {
    let query = Query::Holders {
        tenant: tenant.into(),
        name: limit.into(),
        after: 0,
        max: 0,
    };
    match client.read(query).await {
        Ok(Answer::Holders(Some(page))) => Some(page.now_ms),
        _ => None,
    }
}

/// `; PART lacks room: WHAT` for each part of `parts` that lacks room now, or `; every
/// part has room now` when none does; empty when no part could be read.
pub async fn lacking(client: &Client, tenant: &str, parts: &[Part]) -> String {
    let mut clauses = Vec::new();
    let mut read = 0;
    for part in parts {
        let status = match &part.key {
            Some(key) => client.key_status(tenant, &part.limit, key).await,
            None => client.limit_status(tenant, &part.limit).await,
        };
        let Ok(Some(status)) = status else { continue };
        read += 1;
        if let Some(what) = lack(part, &status) {
            clauses.push(format!("; {} lacks room: {what}", part_name(part)));
        }
    }
    match (read, clauses.is_empty()) {
        (0, _) => String::new(),
        (_, true) => "; every part has room now".into(),
        (_, false) => clauses.concat(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(concurrent: u32, in_use: u64, per_second: f64, tokens: u64) -> LimitStatus {
        LimitStatus {
            tenant: "t".into(),
            name: "x".into(),
            concurrent,
            per_second,
            burst: 10,
            in_use,
            waiting: 0,
            max_in_use: in_use,
            tokens,
            removing: false,
            keys_max: None,
            live_keys: 0,
            shadow: false,
            shadow_refusals: Default::default(),
            overrun_tokens: 0,
            keyed: false,
        }
    }

    fn part(units: u32, key: Option<&str>) -> Part {
        Part {
            limit: "model".into(),
            key: key.map(str::to_owned),
            units,
        }
    }

    #[test]
    fn a_retry_time_reads_in_seconds_from_now() {
        assert_eq!(retry_in(242_182, 241_000), "retry in 1.2 s");
        assert_eq!(retry_in(1_001, 1_000), "retry in 0.1 s");
        assert_eq!(retry_in(1_000, 1_000), "retry now");
        assert_eq!(retry_in(900, 1_000), "retry now");
    }

    #[test]
    fn a_part_says_what_it_lacks() {
        assert_eq!(part_name(&part(4, Some("gpt-4"))), "model:4@gpt-4");
        assert_eq!(part_name(&part(1, None)), "model");
        assert_eq!(
            lack(&part(1, None), &status(3, 3, 0.0, 0)).as_deref(),
            Some("3 of 3 in use, needs 1")
        );
        assert_eq!(
            lack(&part(4, None), &status(0, 0, 2.0, 1)).as_deref(),
            Some("1 of 10 tokens at its last refill, needs 4 (refills 2 a second)")
        );
        assert_eq!(lack(&part(2, None), &status(3, 1, 2.0, 5)), None);
        let mut shadow = status(1, 1, 0.0, 0);
        shadow.shadow = true;
        assert_eq!(lack(&part(1, None), &shadow), None);
    }
}
