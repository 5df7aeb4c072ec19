//! Limit names for descriptor paths, and the match of a request's descriptor.
//!
//! A name is `envoy:` followed by the path's segments joined by `/`; a segment is `key` or
//! `key=value`, each with `%`, `/`, `=` and `~` written as `%25`, `%2F`, `%3D`, `%7E`, so
//! distinct paths never share a name. Invariant: [`resolve`] finds exactly the names
//! [`limit_name`] gives for the nodes of a compiled file.

/// The prefix of every limit compiled from a ratelimit file.
pub const PREFIX: &str = "envoy:";

/// The prefix of a `replaces` marker limit.
pub const REPLACES_PREFIX: &str = "envoy~";

/// One segment of a descriptor path: a key, and the value a node names (`None`: any value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment<'a> {
    pub key: &'a str,
    pub value: Option<&'a str>,
}

/// `text` with the separators escaped.
fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            '=' => out.push_str("%3D"),
            '~' => out.push_str("%7E"),
            c => out.push(c),
        }
    }
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
/// its tree: for each entry in order, the child `key=value` if it exists, else the child
/// `key`, else no match. `exists` says whether a limit of that name exists in the tenant.
/// An empty descriptor matches nothing.
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
        });
        if !exists(&limit_name(&path)) {
            path.last_mut().expect("just pushed").value = None;
            if !exists(&limit_name(&path)) {
                return None;
            }
            values.push(value);
        }
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
        Segment { key, value }
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

    fn tree(names: &[&str]) -> impl Fn(&str) -> bool {
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
}
