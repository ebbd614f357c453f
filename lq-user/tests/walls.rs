//! The walls of `lq-user/src` (issue 13, docs/architecture.md): a file's folder says what
//! it may touch, and this test checks it from the source itself. Every file is parsed
//! with `syn`; every `use` and every path in its non-test code is resolved to a module of
//! the crate or to an external crate; then:
//!
//! 1. a room imports only the rooms its arrows allow ([`ALLOWED`]);
//! 2. the pure rooms (`core`, `ipfix`, `views`) use no crate or std module that does I/O
//!    ([`IMPURE`]);
//! 3. `unsafe` is allowed only in `sys/` (the crate denies it, and only `lib.rs` may lift
//!    that for `sys`);
//! 4. no two files import each other, directly or round a circle.
//!
//! Code under `#[cfg(test)]` is not checked: a test may open a netns or spawn `yanglint`.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

use syn::visit::Visit;

/// The rooms and the rooms each may import (besides itself). `bin` is `main.rs` and
/// `cli.rs`, the `lqd` binary, which may use anything of the library.
const ALLOWED: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("ipfix", &[]),
    ("config", &["core", "ipfix", "sys"]),
    ("views", &["core", "ipfix", "config"]),
    ("sys", &["core", "ipfix"]),
    ("transport", &["core", "ipfix", "config", "sys"]),
    (
        "roles",
        &["core", "ipfix", "config", "views", "sys", "transport"],
    ),
    (
        "tools",
        &["core", "ipfix", "config", "views", "sys", "transport"],
    ),
    (
        "daemon",
        &[
            "core",
            "ipfix",
            "config",
            "views",
            "sys",
            "transport",
            "roles",
        ],
    ),
];

/// What the pure rooms may not use: crates that do I/O, and std modules and types that
/// read clocks, open files or sockets, start threads or processes. Matched as a path
/// prefix (`std::net::UdpSocket` is I/O; `std::net::IpAddr` is data).
const IMPURE: &[&str] = &[
    "aya",
    "libc",
    "tokio",
    "socket2",
    "rustix",
    "caps",
    "rustls",
    "rustls_pki_types",
    "std::fs",
    "std::process",
    "std::thread",
    "std::env",
    "std::net::UdpSocket",
    "std::net::TcpStream",
    "std::net::TcpListener",
    "std::os::unix::net",
    "std::time::Instant",
    "std::time::SystemTime",
    "std::io::stdin",
    "std::io::stdout",
];

const PURE_ROOMS: &[&str] = &["core", "ipfix", "views"];

/// One source file of the library.
struct SourceFile {
    rel: PathBuf,
    /// Its module path below `crate` (`["core", "controller", "weights"]`).
    module: Vec<String>,
    text: String,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The library's files (the binary's `main.rs` and `cli.rs` are another crate).
fn library_files() -> Vec<SourceFile> {
    let root = src_dir();
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&root).unwrap().to_path_buf();
            let s = rel.to_str().unwrap().trim_end_matches(".rs");
            if s == "main" || s == "cli" {
                return None;
            }
            let mut module: Vec<String> = s.split('/').map(String::from).collect();
            if module.last().is_some_and(|m| m == "mod" || m == "lib") {
                module.pop();
            }
            Some(SourceFile {
                text: fs::read_to_string(&p).unwrap(),
                rel,
                module,
            })
        })
        .collect()
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let t = a.meta.require_list().map(|l| l.tokens.to_string());
            t.is_ok_and(|t| t == "test" || t.starts_with("all (test") || t.contains("test ,"))
        }
    })
}

/// Collects every path a file's non-test code names, as segment lists.
#[derive(Default)]
struct Paths {
    paths: Vec<Vec<String>>,
    unsafe_blocks: usize,
}

impl Paths {
    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                let mut v = prefix.to_vec();
                v.push(p.ident.to_string());
                self.use_tree(&v, &p.tree);
            }
            syn::UseTree::Name(n) => {
                let mut v = prefix.to_vec();
                if n.ident != "self" {
                    v.push(n.ident.to_string());
                }
                self.paths.push(v);
            }
            syn::UseTree::Rename(r) => {
                let mut v = prefix.to_vec();
                if r.ident != "self" {
                    v.push(r.ident.to_string());
                }
                self.paths.push(v);
            }
            syn::UseTree::Glob(_) => self.paths.push(prefix.to_vec()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Trait(t) => &t.attrs,
            _ => return syn::visit::visit_item(self, i),
        };
        if !is_cfg_test(attrs) {
            syn::visit::visit_item(self, i);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // `use ::x` and `use x` name the same external crate or `crate::` path here.
        self.use_tree(&[], &u.tree);
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.paths
            .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }
    fn visit_expr_unsafe(&mut self, e: &'ast syn::ExprUnsafe) {
        self.unsafe_blocks += 1;
        syn::visit::visit_expr_unsafe(self, e);
    }
}

/// Resolves a path named in module `module` to an absolute path below `crate`, or `None`
/// when it does not start at the crate (an external crate, a local name, a prelude type).
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(module.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let mut base = module.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        _ => None,
    }
}

struct Analysis {
    files: Vec<SourceFile>,
    /// Per file: the crate paths it names (resolved) and the external paths.
    internal: Vec<Vec<Vec<String>>>,
    external: Vec<Vec<Vec<String>>>,
    unsafe_blocks: Vec<usize>,
}

fn analyse() -> Analysis {
    let files = library_files();
    assert!(files.len() > 40, "found {} files", files.len());
    let mut internal = Vec::new();
    let mut external = Vec::new();
    let mut unsafe_blocks = Vec::new();
    for f in &files {
        let ast = syn::parse_file(&f.text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", f.rel.display()));
        let mut v = Paths::default();
        v.visit_file(&ast);
        let (mut int, mut ext) = (Vec::new(), Vec::new());
        for p in v.paths {
            match resolve(&f.module, &p) {
                Some(r) if !r.is_empty() => int.push(r),
                Some(_) => {}
                None => ext.push(p),
            }
        }
        internal.push(int);
        external.push(ext);
        unsafe_blocks.push(v.unsafe_blocks);
    }
    Analysis {
        files,
        internal,
        external,
        unsafe_blocks,
    }
}

fn room(module: &[String]) -> &str {
    module.first().map_or("lib", String::as_str)
}

#[test]
fn every_room_imports_only_what_its_arrows_allow() {
    let a = analyse();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut breaches = BTreeSet::new();
    for (i, f) in a.files.iter().enumerate() {
        let from = room(&f.module);
        if from == "lib" {
            continue;
        }
        let ok = allowed
            .get(from)
            .unwrap_or_else(|| panic!("{}: room {from:?} is not in ALLOWED", f.rel.display()));
        for p in &a.internal[i] {
            let to = room(p);
            if to != from && !ok.contains(&to) {
                breaches.insert(format!(
                    "{} ({from}) imports crate::{} ({to})",
                    f.rel.display(),
                    p.join("::")
                ));
            }
        }
    }
    assert!(
        breaches.is_empty(),
        "imports against the walls:\n{}",
        breaches.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn pure_rooms_do_no_io() {
    let a = analyse();
    let mut breaches = BTreeSet::new();
    for (i, f) in a.files.iter().enumerate() {
        if !PURE_ROOMS.contains(&room(&f.module)) {
            continue;
        }
        for p in &a.external[i] {
            let joined = p.join("::");
            for bad in IMPURE {
                if joined == *bad || joined.starts_with(&format!("{bad}::")) {
                    breaches.insert(format!("{}: {joined}", f.rel.display()));
                }
            }
        }
    }
    assert!(
        breaches.is_empty(),
        "I/O in a pure room (core, ipfix, views):\n{}",
        breaches.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn unsafe_lives_only_in_sys() {
    let a = analyse();
    let mut breaches = Vec::new();
    for (i, f) in a.files.iter().enumerate() {
        let r = room(&f.module);
        if r != "sys" && a.unsafe_blocks[i] > 0 {
            breaches.push(format!(
                "{}: {} unsafe blocks",
                f.rel.display(),
                a.unsafe_blocks[i]
            ));
        }
        let lifts = f.text.matches("allow(unsafe_code)").count();
        if lifts > 0 && f.module.is_empty() {
            // lib.rs lifts the crate's deny for `sys` alone.
            let decl = "#[allow(unsafe_code)]\npub mod sys;";
            assert!(
                lifts == 1 && f.text.contains(decl),
                "lib.rs may lift deny(unsafe_code) only on `pub mod sys`"
            );
        } else if lifts > 0 {
            breaches.push(format!("{}: allow(unsafe_code)", f.rel.display()));
        }
    }
    let lib = a.files.iter().find(|f| f.module.is_empty()).unwrap();
    assert!(
        lib.text.contains("#![deny(unsafe_code)]"),
        "lib.rs must deny unsafe_code"
    );
    assert!(
        breaches.is_empty(),
        "unsafe outside sys/:\n{}",
        breaches.join("\n")
    );
}

/// The file-level import graph has no circle: each file's imports resolve to the longest
/// module path that is a file, and a file's own descendants and ancestors (its `mod`
/// declarations, `super` items of a `mod.rs`) do not count as a circle of two rooms.
#[test]
fn no_file_imports_round_a_circle() {
    let a = analyse();
    let modules: BTreeMap<&[String], usize> = a
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.as_slice(), i))
        .collect();
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); a.files.len()];
    for (i, f) in a.files.iter().enumerate() {
        for p in &a.internal[i] {
            let target = (1..=p.len())
                .rev()
                .find_map(|n| modules.get(&p[..n]).copied());
            let Some(t) = target else { continue };
            let tm = &a.files[t].module;
            // A parent naming its child (re-export) or a child its parent (`super::Item`)
            // is the module tree, not an import circle.
            if t == i || tm.starts_with(&f.module) || f.module.starts_with(tm) {
                continue;
            }
            edges[i].insert(t);
        }
    }
    // Tarjan's strongly connected components.
    struct T<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sccs: Vec<Vec<usize>>,
    }
    fn strong(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in t.edges[v].clone().iter() {
            match t.index[w] {
                None => {
                    strong(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                t.sccs.push(c);
            }
        }
    }
    let n = a.files.len();
    let mut t = T {
        edges: &edges,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        sccs: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            strong(&mut t, v);
        }
    }
    let circles: Vec<String> = t
        .sccs
        .iter()
        .map(|c| {
            c.iter()
                .map(|&i| a.files[i].rel.display().to_string())
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The checks see what they must: a file that imports against the walls is caught (the
/// test of the test, on a copy of the rules and a made-up file).
#[test]
fn the_checks_catch_a_breach() {
    let text = "use crate::sys::clock::monotonic_ns;\nuse std::fs;\n\
                fn f() { let _ = unsafe { 1 }; }\n\
                #[cfg(test)]\nmod tests { use crate::daemon::run; }\n";
    let ast = syn::parse_file(text).unwrap();
    let mut v = Paths::default();
    v.visit_file(&ast);
    let module: Vec<String> = vec!["core".into(), "x".into()];
    let int: Vec<Vec<String>> = v.paths.iter().filter_map(|p| resolve(&module, p)).collect();
    assert!(int.iter().any(|p| room(p) == "sys"));
    assert!(
        !int.iter().any(|p| room(p) == "daemon"),
        "cfg(test) code is skipped"
    );
    assert!(v.paths.iter().any(|p| p.join("::") == "std::fs"));
    assert_eq!(v.unsafe_blocks, 1);
    assert_eq!(
        resolve(&module, &["super".into(), "y".into()]),
        Some(vec!["core".to_string(), "y".to_string()])
    );
}
