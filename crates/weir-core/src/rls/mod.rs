//! Envoy's rate-limit service, the pure half: how envoyproxy/ratelimit's configuration maps
//! to Weir limit [`Definition`](crate::machine::Definition)s, the names and the unit
//! ([`unit_seconds`]) that mapping uses, and the rule that finds the limit of a request's
//! descriptor among a tenant's limits ([`path`]). Reading the YAML file and compiling it is
//! the CLI's (`weir limits apply`, its `limits_file::ratelimit_yaml`): the core parses no
//! file format and depends on no YAML reader.
//!
//! # One limit per node of the descriptor tree
//!
//! A ratelimit file is a tree of descriptor nodes (`key`, optional `value`, nested
//! `descriptors`) under a `domain`. Every node becomes one limit of the tenant named by the
//! domain, its name the node's path from the root ([`path::limit_name`]: `envoy:` and the
//! segments `key` or `key=value`, joined by `/`). So the tree lives in the replicated state,
//! and the matcher needs nothing but "does this limit exist": it walks a descriptor's
//! entries as envoyproxy/ratelimit does (exact `key=value` first, then `key` alone, one
//! level per entry, no backtracking) and the node reached by the last entry is the
//! descriptor's limit.
//!
//! - A node with `rate_limit` is a rate-only token bucket: `per_second =
//!   requests_per_unit / unit seconds`, `burst = requests_per_unit`. Keyed when any segment
//!   of its path has no value or a wildcard one (it counts each value apart, as ratelimit's
//!   per-value cache keys do); the key is the request's values at those segments. Compiled
//!   from a file, a keyed limit holds at most `bounds::RLS_KEYS_MAX_DEFAULT` live keys
//!   unless `weir limits apply --keys-max` says otherwise.
//! - A node whose `value` ends in `*` is a wildcard: it matches every value with that
//!   prefix, after the exact values and before the key alone; a marker limit
//!   ([`path::wildcards_name`]) under its parent says where to look for prefixes.
//! - A node with `unlimited: true`, and a node with neither (an inner node), is a limit
//!   with no cap and no rate: it matches, and its descriptors answer OK, never charged.
//! - `shadow_mode` is the limit's shadow mode: evaluated and counted, never refuses.
//! - `replaces`: a marker limit per (replacing node, replaced node), named by
//!   [`path::replaces_name`]; a request that matches both drops the replaced one.
//!
//! # Fixed windows and token buckets
//!
//! ratelimit counts hits in fixed windows aligned to the clock (a minute's counter resets
//! at :00). A token bucket of `burst = requests_per_unit` refilling at `requests_per_unit`
//! per unit admits the same long-run rate and never the double burst a fixed window admits
//! across a window's edge; it admits at most `burst + rate × t` over any span `t` (G1).
//! `duration_until_reset` is the time until the bucket is full again, and on `OVER_LIMIT`
//! the time until the request's hits fit.

pub mod path;

/// Seconds in a ratelimit `unit` (a month is 30 days, a year 365), or `None` for another
/// word.
pub fn unit_seconds(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "second" => 1,
        "minute" => 60,
        "hour" => 3_600,
        "day" => 86_400,
        "week" => 7 * 86_400,
        "month" => 30 * 86_400,
        "year" => 365 * 86_400,
        _ => return None,
    })
}
