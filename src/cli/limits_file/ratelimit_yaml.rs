//! envoyproxy/ratelimit's configuration file, read and compiled to Weir definitions: one
//! limit per descriptor node, as `weir_core::rls` describes (the matcher the server runs
//! finds a descriptor's limit by the names given here).
//!
//! The format (one file per domain):
//!
//! ```yaml
//! domain: edge            # the tenant
//! descriptors:
//!   - key: remote_address # a node: key, optional value, optional rate_limit
//!     rate_limit: {unit: second, requests_per_unit: 10}
//!   - key: path
//!     value: /login
//!     shadow_mode: true
//!     rate_limit: {unit: minute, requests_per_unit: 5, name: login, replaces: [{name: x}]}
//!     descriptors: [...]  # nested nodes: the descriptor's next entry
//! ```
//!
//! `rate_limit` holds `unit` (second, minute, hour, day, week, month, year; any case),
//! `requests_per_unit`, `unlimited`, `name` and `replaces`; a node also takes
//! `detailed_metric` (read, and without effect: Weir's metrics are per tenant). A `value`
//! ending in `*` is ratelimit's wildcard (a prefix match, each value counted apart), which
//! also adds a marker limit (`path::wildcards_name`) so the matcher looks for prefixes only
//! under its parent. Unknown fields, a rate of 0 requests, two sibling nodes with the same
//! key and value, two sibling wildcards of one key where one prefix starts the other (ratelimit
//! would take the first in file order, Weir the longest: refused rather than differ), and a
//! `replaces` naming no rule are refused, naming the node's path. See `weir_core::rls` for
//! what each node becomes.
//!
//! A keyed node's `keys_max` ([`KeysMax`]): the one given for its name, else the one given
//! for the file, else the one the limit has now (so an apply keeps what `weir limit define
//! --keys-max` or an earlier apply set), else `RLS_KEYS_MAX_DEFAULT`. The file itself has no
//! field for it: envoyproxy/ratelimit refuses a file with a key it does not know.
//!
//! Invariants: compiling changes nothing but its output; a file is refused as a whole, never
//! half compiled; every definition returned has passed `Definition::validate`. The YAML
//! reader (`serde_norway`) lives here, with the CLI that reads files, and never in the
//! core or the client.

use std::collections::BTreeMap;

use serde::Deserialize;

use weir_core::bounds::RLS_KEYS_MAX_DEFAULT;
use weir_core::machine::Definition;
use weir_core::rls::path::{Segment, as_written, limit_name, replaces_name, wildcards_name};
use weir_core::rls::unit_seconds;

/// The live-key bounds of the keyed limits a file compiles to (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeysMax {
    /// For the limits of the nodes named, by limit name (escaped or as written).
    pub of: BTreeMap<String, u32>,
    /// For every other keyed limit of the file.
    pub file: Option<u32>,
    /// What the tenant's limits have now, by limit name.
    pub now: BTreeMap<String, u32>,
}

impl KeysMax {
    /// The bound of the keyed limit `name`.
    fn of(&self, name: &str) -> u32 {
        self.of
            .get(name)
            .or_else(|| self.of.get(&as_written(name)))
            .copied()
            .or(self.file)
            .or_else(|| self.now.get(name).copied())
            .unwrap_or(RLS_KEYS_MAX_DEFAULT)
    }

    /// A name given in `of` that names no keyed limit of `definitions`.
    fn unknown(&self, definitions: &[Definition]) -> Option<&str> {
        self.of.keys().map(String::as_str).find(|n| {
            !definitions
                .iter()
                .any(|d| d.keyed && (d.name == *n || as_written(&d.name) == *n))
        })
    }
}

/// A whole ratelimit file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatelimitFile {
    pub domain: String,
    #[serde(default)]
    pub descriptors: Vec<Node>,
}

/// One descriptor node.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub key: String,
    /// `None` (or empty): the node matches any value of `key`.
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
    #[serde(default)]
    pub descriptors: Vec<Node>,
}

/// A node's limit.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    #[serde(default)]
    pub unit: Option<String>,
    #[serde(default)]
    pub requests_per_unit: Option<u32>,
    #[serde(default)]
    pub unlimited: bool,
    /// The rule's name, for `replaces`.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub replaces: Vec<Replaces>,
}

/// One rule another replaces.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replaces {
    pub name: String,
}

/// Reads a ratelimit file; the error names the line and column.
pub fn parse(text: &str) -> Result<RatelimitFile, String> {
    serde_norway::from_str(text).map_err(|e| format!("ratelimit YAML: {e}"))
}

/// A node as the walk found it: its path and its rule.
struct Found<'a> {
    path: Vec<Segment<'a>>,
    node: &'a Node,
}

impl RatelimitFile {
    /// The definitions of the file (tenant = domain) with the default live-key bound: see
    /// [`RatelimitFile::compile_with`].
    pub fn compile(&self) -> Result<Vec<Definition>, String> {
        self.compile_with(&KeysMax::default())
    }

    /// The definitions of the file (tenant = domain), in tree order, markers of wildcards
    /// and `replaces` last, keyed ones bounded by `keys_max`; or why the file is refused,
    /// naming the node.
    pub fn compile_with(&self, keys_max: &KeysMax) -> Result<Vec<Definition>, String> {
        if self.domain.is_empty() {
            return Err("domain is empty".into());
        }
        let mut found = Vec::new();
        let mut markers = Vec::new();
        walk(&self.descriptors, &mut Vec::new(), &mut found, &mut markers)?;
        let mut by_rule: BTreeMap<&str, &[Segment<'_>]> = BTreeMap::new();
        let mut out = Vec::with_capacity(found.len());
        for f in &found {
            let mut d = self.definition(f)?;
            if d.keyed {
                d.keys_max = Some(keys_max.of(&d.name));
            }
            d.validate().map_err(|r| format!("{}: {r}", d.name))?;
            out.push(d);
            if let Some(name) = f.node.rate_limit.as_ref().and_then(|r| r.name.as_deref())
                && by_rule.insert(name, &f.path).is_some()
            {
                return Err(format!("rate_limit name {name:?} is given twice"));
            }
        }
        if let Some(name) = keys_max.unknown(&out) {
            return Err(format!(
                "--keys-max names {name}, which is no keyed limit of the file"
            ));
        }
        for marker in markers {
            out.push(self.named(marker, 0.0, None, false, false));
        }
        for f in &found {
            let Some(rule) = &f.node.rate_limit else {
                continue;
            };
            for r in &rule.replaces {
                let replaced = by_rule.get(r.name.as_str()).ok_or_else(|| {
                    format!(
                        "{}: replaces {:?}, which no rate_limit names",
                        limit_name(&f.path),
                        r.name
                    )
                })?;
                let marker = self.named(replaces_name(&f.path, replaced), 0.0, None, false, false);
                marker
                    .validate()
                    .map_err(|r| format!("{}: {r}", marker.name))?;
                out.push(marker);
            }
        }
        Ok(out)
    }

    fn named(
        &self,
        name: String,
        per_second: f64,
        burst: Option<u64>,
        keyed: bool,
        shadow: bool,
    ) -> Definition {
        Definition {
            tenant: self.domain.clone(),
            name,
            concurrent: 0,
            per_second,
            burst,
            keyed,
            keys_max: None,
            shadow,
        }
    }

    /// The definition of one node.
    fn definition(&self, f: &Found<'_>) -> Result<Definition, String> {
        let name = limit_name(&f.path);
        let keyed = f.path.iter().any(Segment::keyed);
        let shadow = f.node.shadow_mode;
        let Some(rule) = f.node.rate_limit.as_ref().filter(|r| !r.unlimited) else {
            return Ok(self.named(name, 0.0, None, false, shadow));
        };
        let (Some(unit), Some(requests)) = (&rule.unit, rule.requests_per_unit) else {
            return Err(format!(
                "{name}: rate_limit needs unit and requests_per_unit (or unlimited: true)"
            ));
        };
        let seconds = unit_seconds(unit).ok_or_else(|| {
            format!("{name}: unit {unit:?} is not second, minute, hour, day, week, month or year")
        })?;
        if requests == 0 {
            return Err(format!(
                "{name}: requests_per_unit 0 refuses every request; remove the descriptor's \
                 traffic at the proxy instead"
            ));
        }
        Ok(self.named(
            name,
            requests as f64 / seconds as f64,
            Some(requests as u64),
            keyed,
            shadow,
        ))
    }
}

/// Collects `nodes` and their descendants under `path`, and the names of the wildcard
/// markers their wildcards need; refuses duplicates and overlapping wildcards.
fn walk<'a>(
    nodes: &'a [Node],
    path: &mut Vec<Segment<'a>>,
    found: &mut Vec<Found<'a>>,
    markers: &mut Vec<String>,
) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    // Wildcard prefixes of this level, by key.
    let mut wildcards: Vec<(&str, &str)> = Vec::new();
    for node in nodes {
        let segment = Segment::of_node(&node.key, node.value.as_deref());
        if let (true, Some(prefix)) = (segment.wildcard, segment.value) {
            let overlapping = wildcards
                .iter()
                .find(|(k, p)| *k == node.key && (p.starts_with(prefix) || prefix.starts_with(p)));
            let marker = wildcards_name(path, &node.key);
            path.push(segment.clone());
            let name = limit_name(path);
            if let Some((_, p)) = overlapping {
                return Err(format!(
                    "{name}: overlaps the wildcard {p:?}* of the same key (ratelimit takes \
                     the first in file order, Weir the longest prefix): make the prefixes \
                     disjoint"
                ));
            }
            path.pop();
            wildcards.push((&node.key, prefix));
            if !markers.contains(&marker) {
                markers.push(marker);
            }
        }
        path.push(segment);
        let name = limit_name(path);
        if node.key.is_empty() {
            return Err(format!("{name}: a descriptor's key is empty"));
        }
        if !seen.insert(name.clone()) {
            return Err(format!("{name}: the descriptor is given twice"));
        }
        found.push(Found {
            path: path.clone(),
            node,
        });
        walk(&node.descriptors, path, found, markers)?;
        path.pop();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::rls::path::{replaced, resolve};

    const EXAMPLE: &str = include_str!("../../../docs/envoy-ratelimit.yaml");

    fn compiled() -> Vec<Definition> {
        parse(EXAMPLE).unwrap().compile().unwrap()
    }

    fn find<'a>(defs: &'a [Definition], name: &str) -> &'a Definition {
        defs.iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("no {name}"))
    }

    #[test]
    fn every_node_is_a_limit_and_a_window_is_a_bucket_of_its_size() {
        let defs = compiled();
        assert!(defs.iter().all(|d| d.tenant == "edge" && d.concurrent == 0));
        let per_ip = find(&defs, "envoy:remote_address");
        assert_eq!(
            (per_ip.per_second, per_ip.burst, per_ip.keyed),
            (10.0, Some(10), true)
        );
        let one = find(&defs, "envoy:remote_address=10.0.0.5");
        assert_eq!(
            (one.per_second, one.burst, one.keyed),
            (2.0, Some(2), false)
        );
        let unlimited = find(&defs, "envoy:remote_address=127.0.0.1");
        assert_eq!((unlimited.per_second, unlimited.keyed), (0.0, false));
        let inner = find(&defs, "envoy:message_type=marketing");
        assert_eq!(inner.per_second, 0.0);
        let nested = find(&defs, "envoy:message_type=marketing/to_number");
        assert_eq!(
            (nested.per_second, nested.burst, nested.keyed),
            (3.0 / 86_400.0, Some(3), true)
        );
        assert!(find(&defs, "envoy:path=%2Fsearch").shadow);
        assert_eq!(find(&defs, "envoy:plan=gold").per_second, 10.0);
        // The marker that api_key's rule replaces the `generic` one.
        find(&defs, "envoy~api_key~plan");
        assert_eq!(defs.len(), 11);
    }

    #[test]
    fn descriptors_match_as_ratelimit_documents() {
        let defs = compiled();
        let exists = |n: &str| defs.iter().any(|d| d.name == n);
        let name = |entries: &[(&str, &str)]| resolve(entries, exists).map(|m| (m.name, m.key));
        assert_eq!(
            name(&[("remote_address", "10.0.0.9")]),
            Some(("envoy:remote_address".into(), Some("10.0.0.9".into())))
        );
        assert_eq!(
            name(&[("remote_address", "10.0.0.5")]),
            Some(("envoy:remote_address=10.0.0.5".into(), None))
        );
        assert_eq!(
            name(&[("message_type", "marketing"), ("to_number", "555")]),
            Some((
                "envoy:message_type=marketing/to_number".into(),
                Some("555".into())
            ))
        );
        // A message type with no node of its own matches nothing (no `message_type` node).
        assert_eq!(
            name(&[("message_type", "alert"), ("to_number", "555")]),
            None
        );
        assert_eq!(name(&[("unknown", "x")]), None);
        let plan = resolve(&[("plan", "silver")], exists).unwrap();
        let key = resolve(&[("api_key", "k1")], exists).unwrap();
        let gold = resolve(&[("plan", "gold")], exists).unwrap();
        assert_eq!(replaced(&[&plan, &key], exists), vec![true, false]);
        assert_eq!(replaced(&[&gold, &key], exists), vec![false, false]);
    }

    #[test]
    fn bad_files_are_refused_naming_the_node() {
        let refused = |text: &str| parse(text).and_then(|f| f.compile()).unwrap_err();
        let e = refused(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
        );
        assert!(e.contains("envoy:k: unit \"fortnight\""), "{e}");
        let e = refused(
            "domain: d\ndescriptors:\n  - key: k\n    value: a*\n  - key: k\n    value: ab*\n",
        );
        assert!(
            e.contains("envoy:k=ab*: overlaps the wildcard \"a\"*"),
            "{e}"
        );
        let e = refused("domain: d\ndescriptors:\n  - key: k\n  - key: k\n");
        assert!(e.contains("envoy:k: the descriptor is given twice"), "{e}");
        let e = refused(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
        );
        assert!(e.contains("requests_per_unit 0"), "{e}");
        let e = refused("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n");
        assert!(e.contains("needs unit and requests_per_unit"), "{e}");
        let e = refused(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, replaces: [{name: z}]}\n",
        );
        assert!(
            e.contains("replaces \"z\", which no rate_limit names"),
            "{e}"
        );
        let e = refused("domain: d\ndescriptors:\n  - key: k\n    colour: red\n");
        assert!(
            e.contains("unknown field `colour`") && e.contains("line 4"),
            "{e}"
        );
        let e = refused(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1}\n",
        );
        assert!(e.contains("below one micro-token a second"), "{e}");
        let long = "k".repeat(130);
        let e = refused(&format!("domain: d\ndescriptors:\n  - key: {long}\n"));
        assert!(e.contains("limit name is 136 bytes"), "{e}");
    }

    #[test]
    fn keyed_limits_get_a_gateway_bound_kept_or_set_per_file_and_per_node() {
        let file = parse(EXAMPLE).unwrap();
        let keys_max = |k: &KeysMax, name: &str| {
            let defs = file.compile_with(k).unwrap();
            find(&defs, name).keys_max
        };
        let none = KeysMax::default();
        assert_eq!(
            keys_max(&none, "envoy:remote_address"),
            Some(RLS_KEYS_MAX_DEFAULT)
        );
        assert_eq!(keys_max(&none, "envoy:remote_address=10.0.0.5"), None);
        // What the limit has now is kept; a flag for the file wins over it, one for the
        // node (named as the file writes it) over both.
        let mut k = KeysMax::default();
        k.now.insert("envoy:path=%2Fsearch".into(), 5);
        k.now.insert("envoy:remote_address".into(), 7);
        assert_eq!(keys_max(&k, "envoy:remote_address"), Some(7));
        k.file = Some(200_000);
        assert_eq!(keys_max(&k, "envoy:remote_address"), Some(200_000));
        assert_eq!(keys_max(&k, "envoy:api_key"), Some(200_000));
        k.of.insert("envoy:message_type=marketing/to_number".into(), 9);
        assert_eq!(
            keys_max(&k, "envoy:message_type=marketing/to_number"),
            Some(9)
        );
        k.of.insert("envoy:path=/search".into(), 3);
        let e = file.compile_with(&k).unwrap_err();
        assert!(
            e.contains("--keys-max names envoy:path=/search, which is no keyed limit"),
            "{e}"
        );
    }

    #[test]
    fn a_wildcard_is_a_keyed_node_with_a_marker_under_its_parent() {
        let text = "domain: d\ndescriptors:\n  - key: path\n    value: /v1/*\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: path\n    value: /v2*\n    descriptors:\n      - key: user\n        value: a*\n        rate_limit: {unit: second, requests_per_unit: 1}\n";
        let defs = parse(text).unwrap().compile().unwrap();
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "envoy:path=%2Fv1%2F*",
                "envoy:path=%2Fv2*",
                "envoy:path=%2Fv2*/user=a*",
                "envoy*path",
                "envoy*path=%2Fv2*/user",
            ]
        );
        let v1 = find(&defs, "envoy:path=%2Fv1%2F*");
        assert_eq!((v1.keyed, v1.burst), (true, Some(2)));
        let exists = |n: &str| defs.iter().any(|d| d.name == n);
        let m = resolve(&[("path", "/v2/x"), ("user", "ann")], exists).unwrap();
        assert_eq!(
            (m.name.as_str(), m.key.as_deref()),
            ("envoy:path=%2Fv2*/user=a*", Some("%2Fv2%2Fx/ann"))
        );
    }
}
