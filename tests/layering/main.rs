//! The house's layering, checked: every crate of the workspace is read as source, and the
//! test fails on a file-level import cycle or on an import that goes up the order its crate
//! root declares.
//!
//! What it reads: each crate root (`lib.rs`, or `main.rs` where there is no `lib.rs`), its
//! `mod` declarations (file modules, `name.rs` or `name/mod.rs`), and in every file the
//! paths it names: `use` declarations (groups expanded, `as` followed) and paths written
//! inline (`crate::…`, `super::…`, `self::…`, or one that starts with a name a `use`
//! brought in). A path resolves to the file of the deepest module it names; a name that a
//! `mod.rs`, `lib.rs` or parent file re-exports from its own children resolves to the file
//! that defines it.
//!
//! The two rules:
//! - **No cycles.** The graph of file A imports file B has no cycle (two files importing
//!   each other is the shortest). A re-export of a file's own descendants (`pub use
//!   child::Item` in a module's table of contents) is not an edge: it is how a module lists
//!   what it offers, not something it depends on.
//! - **The declared order.** The top-level modules of a crate root are declared in layer
//!   order, highest first: a file of the module declared at position i imports only modules
//!   declared after it (or its own). A new module goes where its imports allow, and the
//!   root's `//!` doc says so.
//!
//! Test code (`#[cfg(test)]` modules, inline or in their own file) is left out: it imports
//! what it tests from anywhere and is no layer.
//!
//! The checker's own tests build small crates in a temporary directory with a planted
//! cycle, a planted upward import and the patterns that must pass (re-exports, test
//! modules, glob imports), so a checker that stopped seeing would fail here too.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One module file of a crate.
#[derive(Debug)]
struct ModFile {
    /// Module path from the crate root (empty for the root).
    path: Vec<String>,
    file: PathBuf,
    /// Where its children's files are: its own directory for `lib.rs`, `main.rs` and
    /// `mod.rs`, a directory named after it for `name.rs` (`name/`).
    dir: PathBuf,
    /// Its production tokens, each with the inline module it sits in ([`production`]).
    prod: Vec<(Token, Vec<String>)>,
}

/// A crate's files and the imports among them.
struct Crate {
    name: String,
    files: Vec<ModFile>,
    /// Module path → index in `files`.
    by_path: BTreeMap<Vec<String>, usize>,
    /// Top-level modules in declaration order (test modules left out).
    order: Vec<String>,
}

/// A path a file names, with the line it is on.
#[derive(Debug, Clone)]
struct Named {
    segments: Vec<String>,
    line: usize,
    /// Written as `pub use` (or `pub(…) use`): a re-export.
    reexport: bool,
}

/// The source of one file with comments, strings and character literals blanked (lines
/// kept), and the inline modules it holds.
fn strip(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &chars[i..j.min(chars.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{…}') or a lifetime ('a).
            let close = if next == Some('\\') {
                (i + 2..chars.len().min(i + 12)).find(|&j| chars[j] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(end) => {
                    for _ in i..=end {
                        out.push(' ');
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// A token of stripped source: an identifier, `::`, or one punctuation character.
#[derive(Debug, Clone, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

fn tokens(stripped: &str) -> Vec<Token> {
    let chars: Vec<char> = stripped.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token {
                text: chars[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

/// The tokens of a file with every `#[cfg(test)]` item left out, and the inline module
/// each remaining token sits in (a path below the file's own module).
fn production(tokens: &[Token]) -> Vec<(Token, Vec<String>)> {
    let mut out = Vec::new();
    // Open braces: Some(name) for an inline module's, None for any other.
    let mut braces: Vec<Option<String>> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if is_cfg_test(tokens, i) {
            // Skip the attribute and the item it guards: to its `;` or its closing brace.
            let mut j = i;
            while j < tokens.len() && tokens[j].text != "]" {
                j += 1;
            }
            j += 1;
            let mut depth = 0;
            while j < tokens.len() {
                match tokens[j].text.as_str() {
                    "{" => depth += 1,
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ";" if depth == 0 => break,
                    _ => {}
                }
                j += 1;
            }
            i = j + 1;
            continue;
        }
        let t = &tokens[i];
        match t.text.as_str() {
            "{" => {
                let inline =
                    (i >= 2 && tokens[i - 2].text == "mod").then(|| tokens[i - 1].text.clone());
                braces.push(inline);
            }
            "}" => {
                braces.pop();
            }
            _ => {}
        }
        let inner: Vec<String> = braces.iter().flatten().cloned().collect();
        out.push((t.clone(), inner));
        i += 1;
    }
    out
}

fn is_cfg_test(tokens: &[Token], i: usize) -> bool {
    let texts: Vec<&str> = tokens[i..tokens.len().min(i + 7)]
        .iter()
        .map(|t| t.text.as_str())
        .collect();
    texts.starts_with(&["#", "[", "cfg", "(", "test", ")", "]"])
}

/// The `mod name;` declarations of a file, in order, test modules left out.
fn declared_mods(prod: &[(Token, Vec<String>)]) -> Vec<String> {
    let mut out = Vec::new();
    for w in prod.windows(3) {
        if w[0].0.text == "mod" && w[2].0.text == ";" && w[0].1.is_empty() {
            out.push(w[1].0.text.clone());
        }
    }
    out
}

/// Every `use` tree, expanded to full paths: `use a::{b, c::d as e}` gives `a::b` and
/// `a::c::d` (with `e` as the name it binds).
fn uses(prod: &[(Token, Vec<String>)]) -> Vec<(Named, String, Vec<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < prod.len() {
        if prod[i].0.text != "use" {
            i += 1;
            continue;
        }
        let reexport = i >= 1
            && (prod[i - 1].0.text == "pub"
                || (prod[i - 1].0.text == ")" && i >= 4 && prod[i - 4].0.text == "pub"));
        let inner = prod[i].1.clone();
        let line = prod[i].0.line;
        let mut j = i + 1;
        let mut tree = Vec::new();
        while j < prod.len() && prod[j].0.text != ";" {
            tree.push(prod[j].0.text.clone());
            j += 1;
        }
        let mut pos = 0;
        for (segments, bound) in expand(&tree, &mut pos, &[]) {
            out.push((
                Named {
                    segments,
                    line,
                    reexport,
                },
                bound,
                inner.clone(),
            ));
        }
        i = j + 1;
    }
    out
}

fn expand(tree: &[String], pos: &mut usize, prefix: &[String]) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut path = prefix.to_vec();
    while *pos < tree.len() {
        let t = tree[*pos].as_str();
        match t {
            "::" => *pos += 1,
            "{" => {
                *pos += 1;
                loop {
                    out.extend(expand(tree, pos, &path));
                    match tree.get(*pos).map(String::as_str) {
                        Some(",") => *pos += 1,
                        Some("}") => {
                            *pos += 1;
                            return out;
                        }
                        _ => return out,
                    }
                    if tree.get(*pos).map(String::as_str) == Some("}") {
                        *pos += 1;
                        return out;
                    }
                }
            }
            "," | "}" => break,
            "as" => {
                let bound = tree.get(*pos + 1).cloned().unwrap_or_default();
                *pos += 2;
                out.push((path.clone(), bound));
                return out;
            }
            "*" => {
                *pos += 1;
                out.push((path.clone(), "*".into()));
                return out;
            }
            _ => {
                path.push(t.to_string());
                *pos += 1;
            }
        }
    }
    if path.len() > prefix.len() {
        let bound = path.last().cloned().unwrap_or_default();
        let bound = if bound == "self" {
            path.pop();
            path.last().cloned().unwrap_or_default()
        } else {
            bound
        };
        out.push((path, bound));
    }
    out
}

/// Inline paths: `a::b::c` sequences outside `use` declarations, with the inline module
/// they sit in.
fn inline_paths(prod: &[(Token, Vec<String>)]) -> Vec<(Named, Vec<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut in_use = false;
    while i < prod.len() {
        let t = &prod[i].0.text;
        if t == "use" {
            in_use = true;
        }
        if in_use {
            if t == ";" {
                in_use = false;
            }
            i += 1;
            continue;
        }
        let starts = is_ident(t)
            && prod.get(i + 1).is_some_and(|n| n.0.text == "::")
            && (i == 0 || prod[i - 1].0.text != "::");
        if starts {
            let mut segments = vec![t.clone()];
            let mut j = i + 1;
            while j + 1 < prod.len() && prod[j].0.text == "::" && is_ident(&prod[j + 1].0.text) {
                segments.push(prod[j + 1].0.text.clone());
                j += 2;
            }
            out.push((
                Named {
                    segments,
                    line: prod[i].0.line,
                    reexport: false,
                },
                prod[i].1.clone(),
            ));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

impl Crate {
    /// Reads the crate whose root file is `root`.
    fn read(name: &str, root: &Path) -> Result<Crate, String> {
        let mut files = Vec::new();
        let mut order = Vec::new();
        let dir = root
            .parent()
            .ok_or("a root file has a directory")?
            .to_path_buf();
        // (module path, file, where its children are) of the files still to read.
        let mut pending = vec![(Vec::new(), root.to_path_buf(), dir)];
        while let Some((path, file, dir)) = pending.pop() {
            let source =
                fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let m = ModFile {
                path,
                file,
                dir,
                prod: production(&tokens(&strip(&source))),
            };
            for child in declared_mods(&m.prod) {
                if m.path.is_empty() {
                    order.push(child.clone());
                }
                let flat = m.dir.join(format!("{child}.rs"));
                let nested = m.dir.join(&child).join("mod.rs");
                let (file, dir) = if flat.exists() {
                    (flat, m.dir.join(&child))
                } else if nested.exists() {
                    (nested, m.dir.join(&child))
                } else {
                    return Err(format!(
                        "{}: `mod {child};` names no file ({} or {})",
                        m.file.display(),
                        flat.display(),
                        nested.display()
                    ));
                };
                let mut path = m.path.clone();
                path.push(child);
                pending.push((path, file, dir));
            }
            files.push(m);
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let by_path = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.path.clone(), i))
            .collect();
        Ok(Crate {
            name: name.to_string(),
            files,
            by_path,
            order,
        })
    }

    /// The edges of the file-level import graph: (from, to, line, what was named).
    fn edges(&self) -> Vec<(usize, usize, usize, String)> {
        // Re-exports of each file: a name → the path it stands for.
        let mut reexports: BTreeMap<usize, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        let mut parsed = Vec::new();
        for (index, m) in self.files.iter().enumerate() {
            let used = uses(&m.prod);
            let inline = inline_paths(&m.prod);
            for (named, bound, inner) in &used {
                if named.reexport && inner.is_empty() {
                    let absolute = self.absolute(&m.path, &named.segments);
                    if let Some(absolute) = absolute {
                        reexports
                            .entry(index)
                            .or_default()
                            .insert(bound.clone(), absolute);
                    }
                }
            }
            parsed.push((used, inline));
        }
        let mut edges = Vec::new();
        for (index, (used, inline)) in parsed.iter().enumerate() {
            let here = &self.files[index].path;
            // Names a `use` binds in this file (at its own level), for inline paths.
            let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (named, bound, inner) in used {
                let mut module = here.clone();
                module.extend(inner.iter().cloned());
                let Some(absolute) = self.absolute(&module, &named.segments) else {
                    continue;
                };
                if bound != "*" {
                    aliases.insert(bound.clone(), absolute.clone());
                }
                let target = self.resolve(&absolute, &reexports);
                if named.reexport && self.files[target].path.starts_with(here) {
                    continue;
                }
                edges.push((index, target, named.line, named.segments.join("::")));
            }
            for (named, inner) in inline {
                let mut module = here.clone();
                module.extend(inner.iter().cloned());
                let first = named.segments[0].as_str();
                let absolute = if matches!(first, "crate" | "super" | "self") {
                    self.absolute(&module, &named.segments)
                } else if let Some(base) = aliases.get(first) {
                    let mut full = base.clone();
                    full.extend(named.segments[1..].iter().cloned());
                    Some(full)
                } else {
                    None
                };
                if let Some(absolute) = absolute {
                    let target = self.resolve(&absolute, &reexports);
                    edges.push((index, target, named.line, named.segments.join("::")));
                }
            }
        }
        edges.retain(|(from, to, _, _)| from != to);
        edges
    }

    /// A path as written in module `module`, made absolute (from the crate root), or
    /// `None` for a path into another crate.
    fn absolute(&self, module: &[String], segments: &[String]) -> Option<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        let mut rest = segments;
        match segments.first().map(String::as_str) {
            Some("crate") => rest = &segments[1..],
            Some("super") => {
                out = module.to_vec();
                while rest.first().map(String::as_str) == Some("super") {
                    out.pop()?;
                    rest = &rest[1..];
                }
            }
            Some("self") => {
                out = module.to_vec();
                rest = &segments[1..];
            }
            Some(first) => {
                // A path relative to the current module (edition 2018+ allows a child's
                // name); anything else is another crate.
                let mut child = module.to_vec();
                child.push(first.to_string());
                if !self.by_path.contains_key(&child) {
                    return None;
                }
                out = module.to_vec();
            }
            None => return None,
        }
        out.extend(rest.iter().cloned());
        Some(out)
    }

    /// The file that defines what an absolute path names: the deepest module file on the
    /// path, followed through re-exports of its children.
    fn resolve(
        &self,
        absolute: &[String],
        reexports: &BTreeMap<usize, BTreeMap<String, Vec<String>>>,
    ) -> usize {
        let mut path = absolute.to_vec();
        for _ in 0..16 {
            let (depth, file) = (0..=path.len())
                .rev()
                .find_map(|d| self.by_path.get(&path[..d]).map(|&f| (d, f)))
                .expect("the root module is always known");
            let Some(item) = path.get(depth) else {
                return file;
            };
            match reexports.get(&file).and_then(|r| r.get(item)) {
                Some(target) if target.as_slice() != path.as_slice() => {
                    let mut next = target.clone();
                    next.extend(path[depth + 1..].iter().cloned());
                    path = next;
                }
                _ => return file,
            }
        }
        0
    }

    fn display(&self, index: usize) -> String {
        self.files[index].file.display().to_string()
    }

    /// Every breach of the two rules, as lines a reader can act on.
    fn breaches(&self) -> Vec<String> {
        let edges = self.edges();
        let mut out = Vec::new();
        // Rule 2: the declared order of the root's modules.
        let position = |index: usize| {
            self.files[index]
                .path
                .first()
                .and_then(|top| self.order.iter().position(|m| m == top))
        };
        let mut reported = BTreeSet::new();
        for (from, to, line, named) in &edges {
            if let (Some(a), Some(b)) = (position(*from), position(*to))
                && b < a
                && reported.insert((*from, b))
            {
                out.push(format!(
                    "{}: {}:{line} imports `{named}` from `{}`, which the crate root declares above `{}` (imports point down the root's list)",
                    self.name,
                    self.display(*from),
                    self.order[b],
                    self.order[a],
                ));
            }
        }
        if !out.is_empty() {
            out.push(format!(
                "{}: an order of its modules that fits today's imports, highest first: {}",
                self.name,
                self.fitting_order(&edges)
            ));
        }
        // Rule 1: no cycle. Each strongly connected component of more than one file is one.
        let mut graph: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for (from, to, _, _) in &edges {
            graph.entry(*from).or_default().insert(*to);
        }
        for component in components(self.files.len(), &graph) {
            if component.len() < 2 {
                continue;
            }
            let set: BTreeSet<usize> = component.iter().copied().collect();
            let mut lines: Vec<String> = edges
                .iter()
                .filter(|(f, t, _, _)| set.contains(f) && set.contains(t))
                .map(|(f, t, line, named)| {
                    format!(
                        "    {}:{line} -> {} (`{named}`)",
                        self.display(*f),
                        self.display(*t)
                    )
                })
                .collect();
            lines.dedup();
            out.push(format!(
                "{}: a cycle of {} files:\n{}",
                self.name,
                component.len(),
                lines.join("\n")
            ));
        }
        out
    }

    /// The root's modules in an order every import fits (the declared order where imports
    /// allow), or the modules that import each other when none does.
    fn fitting_order(&self, edges: &[(usize, usize, usize, String)]) -> String {
        let top = |index: usize| self.files[index].path.first().cloned();
        let mut needs: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for m in &self.order {
            needs.entry(m.as_str()).or_default();
        }
        for (from, to, _, _) in edges {
            if let (Some(a), Some(b)) = (top(*from), top(*to))
                && a != b
                && let (Some(a), Some(b)) = (
                    self.order.iter().find(|m| **m == a),
                    self.order.iter().find(|m| **m == b),
                )
            {
                // `b` is imported by `a`: it goes below `a`.
                needs.entry(b.as_str()).or_default().insert(a.as_str());
            }
        }
        let mut placed: Vec<&str> = Vec::new();
        while placed.len() < self.order.len() {
            let next = self.order.iter().map(String::as_str).find(|m| {
                !placed.contains(m) && needs[m].iter().all(|above| placed.contains(above))
            });
            match next {
                Some(m) => placed.push(m),
                None => {
                    let rest: Vec<&str> = self
                        .order
                        .iter()
                        .map(String::as_str)
                        .filter(|m| !placed.contains(m))
                        .collect();
                    return format!(
                        "none: {} import each other (after {})",
                        rest.join(", "),
                        placed.join(", ")
                    );
                }
            }
        }
        placed.join(", ")
    }
}

/// Strongly connected components (Tarjan's algorithm, iterative).
fn components(n: usize, graph: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let mut next = 0;
    let empty = BTreeSet::new();
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, Vec<usize>)> = Vec::new();
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        work.push((
            start,
            graph
                .get(&start)
                .unwrap_or(&empty)
                .iter()
                .copied()
                .collect(),
        ));
        while let Some((v, succ)) = work.last_mut() {
            let v = *v;
            if let Some(w) = succ.pop() {
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, graph.get(&w).unwrap_or(&empty).iter().copied().collect()));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some((parent, _)) = work.last() {
                    low[*parent] = low[*parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(component);
                }
            }
        }
    }
    out
}

/// The crate roots of the workspace: every member's `src/lib.rs`, or its `src/main.rs`
/// where it has no library.
fn workspace_roots(root: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs = vec![root.to_path_buf(), root.join("jepsen")];
    if let Ok(entries) = fs::read_dir(root.join("crates")) {
        let mut crates: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        crates.sort();
        dirs.extend(crates);
    }
    let mut out = Vec::new();
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for root_file in ["src/lib.rs", "src/main.rs"] {
            let file = dir.join(root_file);
            if file.exists() {
                out.push((format!("{name}/{root_file}"), file));
            }
        }
    }
    out
}

fn check(root: &Path) -> Vec<String> {
    let mut breaches = Vec::new();
    for (name, file) in workspace_roots(root) {
        match Crate::read(&name, &file).map(|c| c.breaches()) {
            Ok(found) => breaches.extend(found),
            Err(e) => breaches.push(format!("{name}: cannot read: {e}")),
        }
    }
    breaches
}

#[test]
fn no_file_imports_in_a_cycle_and_every_import_points_down_its_crate_roots_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = workspace_roots(root);
    assert!(
        roots.len() >= 5,
        "the workspace's crates were not found: {roots:?}"
    );
    let breaches = check(root);
    assert!(
        breaches.is_empty(),
        "the layering is broken ({} breaches):\n{}",
        breaches.len(),
        breaches.join("\n")
    );
}

/// A small crate in a fresh temporary directory, from (path, source) pairs.
fn scratch(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-layering-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    for (path, source) in files {
        let file = dir.join(path);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, source).unwrap();
    }
    dir
}

fn breaches_of(name: &str, files: &[(&str, &str)]) -> Vec<String> {
    let dir = scratch(name, files);
    let found = Crate::read(name, &dir.join("src/lib.rs")).map(|c| c.breaches());
    fs::remove_dir_all(&dir).unwrap();
    found.unwrap()
}

#[test]
fn two_files_that_import_each_other_are_a_cycle() {
    let found = breaches_of(
        "pair",
        &[
            ("src/lib.rs", "mod server;\nmod store;\n"),
            ("src/server/mod.rs", "mod ctx;\nmod export;\n"),
            (
                "src/server/ctx.rs",
                "use super::export::Slot;\npub struct Ctx;\n",
            ),
            (
                "src/server/export.rs",
                "use crate::server::ctx::Ctx;\npub struct Slot;\n",
            ),
            ("src/store.rs", "pub struct Store;\n"),
        ],
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("a cycle of 2 files"), "{}", found[0]);
    assert!(
        found[0].contains("ctx.rs:1 -> ") && found[0].contains("export.rs:1 -> "),
        "{}",
        found[0]
    );
}

#[test]
fn a_longer_ring_through_an_inline_path_and_an_alias_is_a_cycle() {
    let found = breaches_of(
        "ring",
        &[
            ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("src/a.rs", "pub fn f() { crate::b::g(); }\n"),
            ("src/b.rs", "use crate::c;\npub fn g() { c::h(); }\n"),
            ("src/c.rs", "pub fn h() { let _ = super::a::f; }\n"),
        ],
    );
    assert!(
        found.iter().any(|b| b.contains("a cycle of 3 files")),
        "{found:?}"
    );
}

#[test]
fn an_import_up_the_roots_list_is_refused_and_one_down_it_is_not() {
    let files = [
        (
            "src/lib.rs",
            "pub mod http;\npub mod raft;\npub mod config;\n",
        ),
        ("src/http.rs", "use crate::raft::Raft;\n"),
        (
            "src/raft.rs",
            "use crate::config::Config;\npub struct Raft;\n",
        ),
        ("src/config.rs", "pub struct Config;\n"),
    ];
    assert_eq!(breaches_of("down", &files), Vec::<String>::new());
    let mut planted = files;
    planted[2] = ("src/raft.rs", "use crate::http::X;\npub struct Raft;\n");
    let found = breaches_of("up", &planted);
    assert!(
        found
            .iter()
            .any(|b| b.contains("raft.rs:1 imports `crate::http::X` from `http`")),
        "{found:?}"
    );
}

#[test]
fn reexports_test_modules_globs_comments_and_strings_are_no_edges() {
    let found = breaches_of(
        "quiet",
        &[
            (
                "src/lib.rs",
                "pub mod machine;\n#[cfg(test)]\nmod tests;\npub use machine::Machine;\n",
            ),
            (
                "src/machine/mod.rs",
                "mod apply;\nmod state;\npub use state::{Machine, Thing as Other};\n",
            ),
            (
                "src/machine/state.rs",
                "pub struct Machine;\npub struct Thing;\n#[cfg(test)]\nmod tests {\n    use crate::machine::apply::f;\n    use super::*;\n}\n",
            ),
            (
                "src/machine/apply.rs",
                "use super::Machine; // crate::machine::state\nconst S: &str = \"crate::machine::state::x\";\nfn f(_: &'static str) -> char { 'x' }\n",
            ),
            ("src/tests.rs", "use crate::machine::*;\n"),
        ],
    );
    assert_eq!(found, Vec::<String>::new());
}

/// A heading's anchor as GitHub makes it: lower case, spaces to hyphens, punctuation gone.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every relative link in `text` (a Markdown file at `file`) that names nothing: a missing
/// file or folder, or an anchor no heading of the target makes.
fn dead_links(file: &Path, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut rest = text;
    while let Some(start) = rest.find("](") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        rest = &rest[end..];
        if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target, None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !resolved.exists() {
            out.push(format!("{}: `{target}` names no file", file.display()));
            continue;
        }
        if let Some(anchor) = anchor
            && resolved.extension().is_some_and(|e| e == "md")
        {
            let target_text = fs::read_to_string(&resolved).unwrap_or_default();
            let found = target_text
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| anchor_of(l.trim_start_matches('#')))
                .any(|a| a == anchor);
            if !found {
                out.push(format!(
                    "{}: `{target}`: no heading makes that anchor",
                    file.display()
                ));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_names_a_file_and_heading_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), root.join("jepsen/README.md")];
    for dir in ["docs", "clients/python"] {
        for entry in fs::read_dir(root.join(dir)).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "md") {
                files.push(entry.path());
            }
        }
    }
    let mut dead = Vec::new();
    for file in &files {
        dead.extend(dead_links(file, &fs::read_to_string(file).unwrap()));
    }
    assert!(
        dead.is_empty(),
        "dead links ({}):\n{}",
        dead.len(),
        dead.join("\n")
    );
}

#[test]
fn a_link_to_a_missing_file_or_heading_is_dead() {
    let dir = scratch("links", &[("docs/a.md", "# A map\n## Map of the source\n")]);
    let file = dir.join("README.md");
    let text = "[ok](docs/a.md#map-of-the-source) [gone](docs/b.md) [bad](docs/a.md#nowhere) \
                [web](https://example.com/x)";
    let dead = dead_links(&file, text);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead[0].contains("`docs/b.md` names no file"), "{}", dead[0]);
    assert!(
        dead[1].contains("`docs/a.md#nowhere`: no heading"),
        "{}",
        dead[1]
    );
}
