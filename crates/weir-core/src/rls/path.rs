//! Limit names for descriptor paths, and the match of a request's descriptor.
//!
//! A name is `envoy:` followed by the path's segments joined by `/`; a segment is `key` or
//! `key=value`, each with `%`, `/`, `=`, `~` and `*` written as `%25`, `%2F`, `%3D`, `%7E`,
//! `%2A`, so distinct paths never share a name. A wildcard value (ratelimit's `value:
//! /v1/*`, a prefix match) keeps its last `*` unescaped: `envoy:path=%2Fv1%2F*`, a name no
//! exact value can have. Invariant: [`resolve`] finds exactly the names [`limit_name`] gives
//! for the nodes of a compiled file.
//!
//! A person writes a name as the file wrote it (`envoy:path=/beta`); [`as_written`] gives
//! the text a name reads as, so a tool can find the limit of a written name among a
//! tenant's limits without asking anyone to escape it.

/// The prefix of every limit compiled from a ratelimit file.
pub const PREFIX: &str = "envoy:";

/// The prefix of a `replaces` marker limit.
pub const REPLACES_PREFIX: &str = "envoy~";

/// The prefix of a wildcard marker limit: `envoy*` and the path of a parent followed by the
/// key its wildcard children name; it exists when that parent has a child `key=prefix*`,
/// so the matcher looks for prefixes only where a file put a wildcard.
pub const WILDCARDS_PREFIX: &str = "envoy*";

/// The prefix of a limit made for a descriptor's `limit` override
/// ([`override_name`]): `envoy^` then the override's requests and unit in seconds.
pub const OVERRIDE_PREFIX: &str = "envoy^";

/// The keyed limit that decides descriptors overriding their limit with `requests` per
/// `unit_s` seconds: `envoy^5-per-3600s` (no `/`, so the name is one segment of a URL
/// path). Each descriptor's entries are its key
/// ([`override_key`]), so each override value counts apart, as ratelimit's cache keys do.
pub fn override_name(requests: u32, unit_s: u64) -> String {
    format!("{OVERRIDE_PREFIX}{requests}-per-{unit_s}s")
}

/// Whether `name` is a limit made for a descriptor's override.
pub fn is_override(name: &str) -> bool {
    name.starts_with(OVERRIDE_PREFIX)
}

/// The key of a descriptor's `entries` in an override limit: the segments `key=value`
/// escaped as in a limit name and joined by `/`, so distinct descriptors never share a
/// key. `None` when that text is longer than a key may be: the caller then keys by a
/// digest of it.
pub fn override_key(entries: &[(&str, &str)]) -> Option<String> {
    let mut out = String::new();
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push('/');
        }
        escape(key, &mut out);
        out.push('=');
        escape(value, &mut out);
    }
    (out.len() <= crate::bounds::KEY_BYTES_MAX).then_some(out)
}

/// One segment of a descriptor path: a key, and the value a node names (`None`: any value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment<'a> {
    pub key: &'a str,
    pub value: Option<&'a str>,
    /// `value` is a wildcard's prefix (the file's `value: prefix*`): any value starting
    /// with it.
    pub wildcard: bool,
}

impl<'a> Segment<'a> {
    /// The segment of `key` and a node's `value` as a file writes it (`None` or empty: any
    /// value; ending in `*`: a wildcard of the prefix before it).
    pub fn of_node(key: &'a str, value: Option<&'a str>) -> Segment<'a> {
        let value = value.filter(|v| !v.is_empty());
        match value.and_then(|v| v.strip_suffix('*')) {
            Some(prefix) => Segment {
                key,
                value: Some(prefix),
                wildcard: true,
            },
            None => Segment {
                key,
                value,
                wildcard: false,
            },
        }
    }

    /// Whether the node counts each value apart (no value, or a wildcard).
    pub fn keyed(&self) -> bool {
        self.value.is_none() || self.wildcard
    }
}

/// `text` with the separators escaped.
fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            '=' => out.push_str("%3D"),
            '~' => out.push_str("%7E"),
            '*' => out.push_str("%2A"),
            c => out.push(c),
        }
    }
}

/// The text a limit name reads as: its escapes undone (`envoy:path=%2Fbeta` reads as
/// `envoy:path=/beta`), what a person who read the file writes.
pub fn as_written(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at..at + 3);
        let plain = match code {
            Some("%25") => '%',
            Some("%2F") => '/',
            Some("%3D") => '=',
            Some("%7E") => '~',
            Some("%2A") => '*',
            _ => {
                out.push('%');
                rest = &rest[at + 1..];
                continue;
            }
        };
        out.push(plain);
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    out
}

/// The path's segments as they appear in a name, without the prefix.
fn body(path: &[Segment<'_>]) -> String {
    let mut out = String::new();
    for (i, segment) in path.iter().enumerate() {
        if i > 0 {
            out.push('/');
        }
        escape(segment.key, &mut out);
        if let Some(value) = segment.value {
            out.push('=');
            escape(value, &mut out);
            if segment.wildcard {
                out.push('*');
            }
        }
    }
    out
}

/// The limit name of the node at `path`.
pub fn limit_name(path: &[Segment<'_>]) -> String {
    format!("{PREFIX}{}", body(path))
}

/// The name of the marker saying the node at `by` replaces the node at `replaced`.
pub fn replaces_name(by: &[Segment<'_>], replaced: &[Segment<'_>]) -> String {
    format!("{REPLACES_PREFIX}{}~{}", body(by), body(replaced))
}

/// The name of the marker saying the node at `parent` has wildcard children of `key`.
pub fn wildcards_name(parent: &[Segment<'_>], key: &str) -> String {
    let mut out = format!("{WILDCARDS_PREFIX}{}", body(parent));
    if !parent.is_empty() {
        out.push('/');
    }
    escape(key, &mut out);
    out
}

/// Where a descriptor's walk ended: a node, the key of it the request names, and the path
/// taken (for [`replaces_name`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matched<'a> {
    /// The node's limit name.
    pub name: String,
    /// For a node whose path has a segment without a value (a keyed limit): the request's
    /// values at those segments, escaped and joined by `/`. `None` otherwise.
    pub key: Option<String>,
    pub path: Vec<Segment<'a>>,
}

/// The node a descriptor of `entries` (key, value) reaches, as envoyproxy/ratelimit walks
/// its tree: for each entry in order, the child `key=value` if it exists, else a wildcard
/// child `key=prefix*` whose prefix starts the value (a file has at most one such child:
/// overlapping wildcards are refused), else the child `key`, else no match. `exists` says
/// whether a limit of that name exists in the tenant. An empty descriptor matches nothing.
/// A wildcard or a key alone counts each value apart: those values are the match's key.
pub fn resolve<'a>(
    entries: &[(&'a str, &'a str)],
    exists: impl Fn(&str) -> bool,
) -> Option<Matched<'a>> {
    let mut path: Vec<Segment<'a>> = Vec::with_capacity(entries.len());
    let mut values: Vec<&'a str> = Vec::new();
    for &(key, value) in entries {
        path.push(Segment {
            key,
            value: Some(value),
            wildcard: false,
        });
        if exists(&limit_name(&path)) {
            continue;
        }
        path.pop();
        let wildcard = if exists(&wildcards_name(&path, key)) {
            wildcard_prefix(&path, key, value, &exists)
        } else {
            None
        };
        path.push(Segment {
            key,
            value: wildcard,
            wildcard: wildcard.is_some(),
        });
        if wildcard.is_none() && !exists(&limit_name(&path)) {
            return None;
        }
        values.push(value);
    }
    if path.is_empty() {
        return None;
    }
    let key = (!values.is_empty()).then(|| {
        let mut key = String::new();
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                key.push('/');
            }
            escape(v, &mut key);
        }
        key
    });
    Some(Matched {
        name: limit_name(&path),
        key,
        path,
    })
}

/// The prefix of `value` that a wildcard child of `path` for `key` names, the longest
/// first (a compiled file has at most one that fits: overlapping wildcards are refused).
fn wildcard_prefix<'a>(
    path: &[Segment<'a>],
    key: &'a str,
    value: &'a str,
    exists: &impl Fn(&str) -> bool,
) -> Option<&'a str> {
    let mut child = path.to_vec();
    let ends = value.char_indices().map(|(i, _)| i).chain([value.len()]);
    let ends: Vec<usize> = ends.collect();
    for &end in ends.iter().rev() {
        child.push(Segment {
            key,
            value: Some(&value[..end]),
            wildcard: true,
        });
        let found = exists(&limit_name(&child));
        child.pop();
        if found {
            return Some(&value[..end]);
        }
    }
    None
}

/// Which of `matched` a `replaces` rule drops: `true` at `j` when another matched node `i`
/// replaces node `j` (a marker limit [`replaces_name`] of the two exists).
pub fn replaced(matched: &[&Matched<'_>], exists: impl Fn(&str) -> bool) -> Vec<bool> {
    (0..matched.len())
        .map(|j| {
            (0..matched.len()).any(|i| {
                i != j
                    && matched[i].name != matched[j].name
                    && exists(&replaces_name(&matched[i].path, &matched[j].path))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg<'a>(key: &'a str, value: Option<&'a str>) -> Segment<'a> {
        Segment::of_node(key, value)
    }

    #[test]
    fn names_escape_separators_so_paths_never_collide() {
        let a = limit_name(&[seg("a/b", Some("c"))]);
        let b = limit_name(&[seg("a", None), seg("b", Some("c"))]);
        assert_eq!(a, "envoy:a%2Fb=c");
        assert_eq!(b, "envoy:a/b=c");
        assert_ne!(
            limit_name(&[seg("k", Some("x=y"))]),
            limit_name(&[seg("k=x", Some("y"))])
        );
        assert_eq!(
            replaces_name(&[seg("a", None)], &[seg("b", Some("~"))]),
            "envoy~a~b=%7E"
        );
    }

    fn tree(names: &[&str]) -> impl Fn(&str) -> bool + use<> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        move |n: &str| names.iter().any(|m| m == n)
    }

    #[test]
    fn exact_value_wins_over_the_key_alone_at_each_level() {
        let exists = tree(&["envoy:k", "envoy:k=v", "envoy:k/sub", "envoy:k=v/sub=x"]);
        let m = resolve(&[("k", "v")], &exists).unwrap();
        assert_eq!((m.name.as_str(), m.key), ("envoy:k=v", None));
        let m = resolve(&[("k", "other")], &exists).unwrap();
        assert_eq!(
            (m.name.as_str(), m.key.as_deref()),
            ("envoy:k", Some("other"))
        );
        // No backtracking: k=v was taken, and it has no child `sub=y` nor `sub`.
        assert_eq!(resolve(&[("k", "v"), ("sub", "y")], &exists), None);
        let m = resolve(&[("k", "w"), ("sub", "y")], &exists).unwrap();
        assert_eq!(
            (m.name.as_str(), m.key.as_deref()),
            ("envoy:k/sub", Some("w/y"))
        );
        assert_eq!(resolve(&[("other", "v")], &exists), None);
        assert_eq!(resolve(&[], &exists), None);
    }

    #[test]
    fn a_key_escapes_its_values() {
        let exists = tree(&["envoy:a", "envoy:a/b"]);
        let m = resolve(&[("a", "x/y"), ("b", "z")], &exists).unwrap();
        assert_eq!(m.key.as_deref(), Some("x%2Fy/z"));
    }

    #[test]
    fn a_wildcard_matches_its_prefix_after_exact_values_and_counts_each_value() {
        let wild = limit_name(&[seg("path", Some("/v1/*"))]);
        assert_eq!(wild, "envoy:path=%2Fv1%2F*");
        let marker = wildcards_name(&[], "path");
        assert_eq!(marker, "envoy*path");
        let exists = tree(&["envoy:path", "envoy:path=%2Fv1%2Fexact", &wild, &marker]);
        let m = resolve(&[("path", "/v1/users")], &exists).unwrap();
        assert_eq!(
            (m.name.as_str(), m.key.as_deref()),
            (wild.as_str(), Some("%2Fv1%2Fusers"))
        );
        let m = resolve(&[("path", "/v1/exact")], &exists).unwrap();
        assert_eq!((m.name.as_str(), m.key), ("envoy:path=%2Fv1%2Fexact", None));
        let m = resolve(&[("path", "/v2")], &exists).unwrap();
        assert_eq!(m.name, "envoy:path");
        // A value with a `*` of its own is a value: escaped, never a wildcard's name.
        let m = resolve(&[("path", "/v1/*")], &exists).unwrap();
        assert_eq!(
            (m.name.as_str(), m.key.as_deref()),
            (wild.as_str(), Some("%2Fv1%2F%2A"))
        );
        // Without the marker no prefix is looked for.
        let bare = tree(&["envoy:path", &wild]);
        assert_eq!(
            resolve(&[("path", "/v1/a")], &bare).unwrap().name,
            "envoy:path"
        );
    }

    #[test]
    fn a_name_reads_as_the_file_wrote_it() {
        let name = limit_name(&[seg("path", Some("/beta")), seg("k=x", None)]);
        assert_eq!(name, "envoy:path=%2Fbeta/k%3Dx");
        assert_eq!(as_written(&name), "envoy:path=/beta/k=x");
        assert_eq!(as_written("a%2Fb%zz%"), "a/b%zz%");
    }
}
