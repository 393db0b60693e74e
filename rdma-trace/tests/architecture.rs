//! The import graph between the source files (every `crate::…`, `super::…` and child-module
//! path, in `use` and in code, macros included; test modules left out): no circle of files,
//! no circle of the top-level modules, and ARCHITECTURE.md's floors are that graph.
//! `RDMA_TRACE_BLESS=1` writes the floors into ARCHITECTURE.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

type Module = Vec<String>;

/// One crate's files: module path → file (relative to `src/`).
struct Tree {
    name: &'static str,
    src: PathBuf,
    modules: BTreeMap<Module, String>,
    /// Files outside the library that use it by its crate name (`main.rs`, `bin/`).
    binaries: BTreeSet<String>,
}

fn tree(dir: &str, name: &'static str) -> Tree {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut modules = BTreeMap::new();
    let mut binaries = BTreeSet::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if rel == "main.rs" || rel.starts_with("bin/") {
            binaries.insert(rel);
            continue;
        }
        let mut m: Module = rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
        if matches!(m.last().map(String::as_str), Some("mod" | "lib")) {
            m.pop();
        }
        modules.insert(m, rel);
    }
    Tree { name, src, modules, binaries }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// What one file names of its crate's modules.
struct Uses<'a> {
    tree: &'a Tree,
    /// The module the code being read is in (a file's, then inline `mod`s).
    at: Module,
    binary: bool,
    found: BTreeSet<Module>,
}

impl Uses<'_> {
    /// `segments` as written at `self.at`, made absolute, if it starts at this crate.
    fn absolute(&self, segments: &[String]) -> Option<Module> {
        let first = segments.first()?;
        let mut base = match first.as_str() {
            "crate" if !self.binary => Vec::new(),
            n if self.binary && n == self.tree.name => Vec::new(),
            "self" => self.at.clone(),
            "super" => {
                let mut b = self.at.clone();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    b.pop();
                    rest = &rest[1..];
                }
                b.extend(rest.iter().cloned());
                return Some(b);
            }
            _ => {
                // a child module of this one, named without `self::` (2018 paths)
                let mut child = self.at.clone();
                child.push(first.clone());
                return (!self.binary && self.tree.modules.contains_key(&child)).then(|| {
                    child.extend(segments[1..].iter().cloned());
                    child
                });
            }
        };
        base.extend(segments[1..].iter().cloned());
        Some(base)
    }

    fn named(&mut self, segments: &[String]) {
        if let Some(abs) = self.absolute(segments) {
            // the longest prefix that is a module file
            let file =
                (1..=abs.len()).rev().map(|n| abs[..n].to_vec()).find(|m| self.tree.modules.contains_key(m));
            if let Some(m) = file {
                self.found.insert(m);
            }
        }
    }

    /// Paths inside a macro's tokens: `crate :: a :: b`, `super :: x`, `child :: y`.
    fn tokens(&mut self, ts: TokenStream) {
        let tokens: Vec<TokenTree> = ts.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let mut path = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(n)),
                    ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        path.push(n.to_string());
                        j += 3;
                    }
                    if path.len() > 1 {
                        self.named(&path);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string().contains("test"))
    })
}

fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push([prefix.as_slice(), &[n.ident.to_string()]].concat()),
        syn::UseTree::Rename(r) => out.push([prefix.as_slice(), &[r.ident.to_string()]].concat()),
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| use_paths(t, prefix, out)),
    }
}

impl<'ast> Visit<'ast> for Uses<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Const(x) => &x.attrs,
            syn::Item::Enum(x) => &x.attrs,
            syn::Item::Fn(x) => &x.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Macro(x) => &x.attrs,
            syn::Item::Mod(x) => &x.attrs,
            syn::Item::Static(x) => &x.attrs,
            syn::Item::Struct(x) => &x.attrs,
            syn::Item::Trait(x) => &x.attrs,
            syn::Item::Type(x) => &x.attrs,
            syn::Item::Use(x) => &x.attrs,
            _ => return syn::visit::visit_item(self, i),
        };
        if !is_test(attrs) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.at.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.at.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        use_paths(&u.tree, &mut Vec::new(), &mut paths);
        for p in paths {
            self.named(&p);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            self.named(&segments);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// file → the files it names (itself and the crate root left out).
fn graph(tree: &Tree) -> BTreeMap<String, BTreeSet<String>> {
    let owner: BTreeMap<&String, &Module> = tree.modules.iter().map(|(m, f)| (f, m)).collect();
    let all = tree.modules.values().chain(tree.binaries.iter());
    all.map(|file| {
        let text = std::fs::read_to_string(tree.src.join(file)).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let binary = tree.binaries.contains(file);
        let at = owner.get(file).map(|m| (*m).clone()).unwrap_or_default();
        let mut uses = Uses { tree, at, binary, found: BTreeSet::new() };
        uses.visit_file(&ast);
        let to = uses
            .found
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| tree.modules[m].clone())
            .filter(|f| f != file)
            .collect();
        (file.clone(), to)
    })
    .collect()
}

/// The circles: strongly connected sets of more than one node (Tarjan).
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct S<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                set.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.out.push(set);
            }
        }
    }
    let mut s = S {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn said(circles: &[Vec<String>], g: &BTreeMap<String, BTreeSet<String>>) -> String {
    let mut text = String::new();
    for c in circles {
        text += &format!("circle: {}\n", c.join(", "));
        for a in c {
            for b in g[a].iter().filter(|b| c.contains(b)) {
                text += &format!("  {a} → {b}\n");
            }
        }
    }
    text
}

/// A file's top-level module: its first folder, or the file itself.
fn top(file: &str) -> String {
    match file.split_once('/') {
        Some((dir, _)) => format!("{dir}/"),
        None => file.to_string(),
    }
}

/// The top-level modules' graph drawn as floors: a module stands one floor above the
/// highest it imports; the ground floor imports nothing of the crate.
fn floors(g: &BTreeMap<String, BTreeSet<String>>) -> (BTreeMap<String, BTreeSet<String>>, String) {
    let mut tops: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, to) in g {
        if a == "lib.rs" {
            continue;
        }
        let e = tops.entry(top(a)).or_default();
        e.extend(to.iter().map(|b| top(b)).filter(|b| *b != top(a)));
    }
    let mut floor: BTreeMap<String, usize> = BTreeMap::new();
    while floor.len() < tops.len() {
        let before = floor.len();
        for (a, to) in &tops {
            if !floor.contains_key(a) && to.iter().all(|b| floor.contains_key(b)) {
                let f = 1 + to.iter().map(|b| floor[b]).max().unwrap_or(0);
                floor.insert(a.clone(), f);
            }
        }
        if floor.len() == before {
            break; // a circle: said by the caller
        }
    }
    let mut text = String::new();
    let highest = floor.values().max().copied().unwrap_or(0);
    for f in (1..=highest).rev() {
        for (a, _) in floor.iter().filter(|(_, n)| **n == f) {
            let to: Vec<&str> = tops[a].iter().map(String::as_str).collect();
            let arrow = if to.is_empty() { String::new() } else { format!(" → {}", to.join(" ")) };
            text += &format!("{f}  {a}{arrow}\n");
        }
    }
    (tops, text)
}

fn section(doc: &str, name: &str) -> Option<String> {
    let open = format!("```imports {name}\n");
    let start = doc.find(&open)? + open.len();
    let end = start + doc[start..].find("```")?;
    Some(doc[start..end].to_string())
}

#[test]
fn no_file_or_top_level_module_imports_in_a_circle_and_architecture_md_draws_the_floors() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md");
    let mut doc = std::fs::read_to_string(&doc_path).unwrap();
    let mut wrong = String::new();
    // an import each crate is known to have, so the reader cannot pass by seeing none
    let known = [
        ("rdma-trace", "rdma_trace", "main.rs", "cli.rs"),
        ("rdma-trace-format", "rdma_trace_format", "reader.rs", "capture.rs"),
    ];
    for (dir, name, a, b) in known {
        let t = tree(dir, name);
        let g = graph(&t);
        assert!(g[a].contains(b), "{dir}: the reader did not see {a} import {b}: {:?}", g[a]);
        let c = circles(&g);
        if !c.is_empty() {
            wrong += &format!("{dir}/src: files that import each other in a circle\n{}", said(&c, &g));
        }
        let (tops, drawn) = floors(&g);
        let tc = circles(&tops);
        if !tc.is_empty() {
            wrong += &format!("{dir}/src: top-level modules that import each other\n{}", said(&tc, &tops));
        }
        let have =
            section(&doc, dir).unwrap_or_else(|| panic!("ARCHITECTURE.md has no ```imports {dir} block"));
        if have != drawn {
            if std::env::var_os("RDMA_TRACE_BLESS").is_some() {
                doc = doc.replacen(
                    &format!("```imports {dir}\n{have}"),
                    &format!("```imports {dir}\n{drawn}"),
                    1,
                );
            } else {
                wrong += &format!(
                    "ARCHITECTURE.md's floors of {dir} are not the code's (RDMA_TRACE_BLESS=1 cargo test -p rdma-trace --test architecture writes them):\n{drawn}"
                );
            }
        }
    }
    if std::env::var_os("RDMA_TRACE_BLESS").is_some() {
        std::fs::write(&doc_path, &doc).unwrap();
    }
    assert!(wrong.is_empty(), "{wrong}");
}

#[test]
fn a_circle_is_found_and_named_and_floors_stop_at_it() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a/x.rs", vec!["b.rs"]),
        ("b.rs", vec!["c.rs"]),
        ("c.rs", vec!["a/y.rs"]),
        ("a/y.rs", vec![]),
        ("d.rs", vec!["c.rs"]),
    ]
    .into_iter()
    .map(|(a, to)| (a.to_string(), to.into_iter().map(String::from).collect()))
    .collect();
    assert!(circles(&g).is_empty(), "files alone: no circle");
    let (tops, drawn) = floors(&g);
    assert_eq!(circles(&tops), vec![vec!["a/".to_string(), "b.rs".into(), "c.rs".into()]]);
    assert!(!drawn.contains("a/"), "a module in a circle stands on no floor: {drawn}");
    assert!(said(&circles(&tops), &tops).contains("a/ → b.rs"));
}

/// No top-level folder of a crate holds over a quarter of its lines: a room that does holds
/// several jobs (issue 43: `output/` once held 24 %, the TUI and explain among them).
#[test]
fn no_folder_holds_over_a_quarter_of_the_lines() {
    for (dir, name) in [("rdma-trace", "rdma_trace"), ("rdma-trace-format", "rdma_trace_format")] {
        let t = tree(dir, name);
        let lines = |rel: &str| std::fs::read_to_string(t.src.join(rel)).map_or(0, |s| s.lines().count());
        let mut per_top: BTreeMap<String, usize> = BTreeMap::new();
        let mut total = 0;
        for rel in t.modules.values() {
            let n = lines(rel);
            total += n;
            if rel.contains('/') {
                *per_top.entry(top(rel)).or_default() += n;
            }
        }
        assert!(total > 1000, "{dir}: {total} lines read: the tree was not found");
        let over: Vec<String> = per_top
            .iter()
            .filter(|(_, n)| **n * 4 > total)
            .map(|(d, n)| format!("{d}: {n} of {total} lines ({:.0} %)", *n as f64 * 100.0 / total as f64))
            .collect();
        assert!(over.is_empty(), "{dir}: a folder holds over a quarter of the lines: {over:?}");
    }
}
