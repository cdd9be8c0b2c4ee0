//! The import graph of `src/`, read by parsing (`syn`), not by searching
//! text: every `use` tree and every path in the code, with `crate::`,
//! `super::`, `self::` and a child module's name resolved from the module
//! it is written in (inline modules included), down to the file that
//! defines what it names. `layout.rs` holds the floors and circles to it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module's path from the crate root (`["ops", "drain", "stage"]`).
pub type ModPath = Vec<String>;

/// Every source file of `src/`: its module path and its code.
pub fn source_files(src: &Path) -> Vec<(ModPath, PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let code = fs::read_to_string(&file).expect("a source file");
            (module_of(src, &file), file, code)
        })
        .collect()
}

/// Every `.rs` file under `dir`, into `out`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path: `ops/stages/drain.rs` is `ops::stages::drain`,
/// `ops/stages/mod.rs` is `ops::stages`, `lib.rs` and `main.rs` the root
/// (main is named `main` so that it has a room of its own).
pub fn module_of(src: &Path, file: &Path) -> ModPath {
    let relative = file.strip_prefix(src).expect("under src/");
    let mut parts: ModPath = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts
        .last()
        .is_some_and(|last| last == "mod" || last == "lib")
    {
        parts.pop();
    }
    parts
}

/// The modules that exist as files: each module path, for resolving a
/// path to the file that defines what it names.
pub fn file_modules(files: &[(ModPath, PathBuf, String)]) -> BTreeSet<ModPath> {
    files.iter().map(|(module, _, _)| module.clone()).collect()
}

/// The longest prefix of `path` that is a file module (what the path's
/// items live in); the root when none is.
pub fn file_of(path: &[String], modules: &BTreeSet<ModPath>) -> ModPath {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| modules.contains(prefix))
        .unwrap_or_default()
}

/// Every module path a file's code names, resolved absolute (not yet cut
/// to a file module). `module` is the file's own module path.
pub fn named_paths(module: &[String], code: &str, modules: &BTreeSet<ModPath>) -> Vec<ModPath> {
    let file = syn::parse_file(code).expect("src/ parses");
    let mut visitor = Names {
        stack: module.to_vec(),
        modules,
        found: Vec::new(),
    };
    visitor.visit_file(&file);
    visitor.found
}

struct Names<'a> {
    /// The module the code being visited is in (inline modules pushed).
    stack: ModPath,
    modules: &'a BTreeSet<ModPath>,
    found: Vec<ModPath>,
}

impl Names<'_> {
    /// Resolves a path's leading segments from the current module: `crate`,
    /// `super` (any number), `self`, or the name of a child module. `None`
    /// for anything else (an outside crate, a local item, a prelude name).
    fn resolve(&self, segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?;
        let mut base = self.stack.clone();
        let mut rest = segments;
        match first.as_str() {
            "crate" => {
                base.clear();
                rest = &segments[1..];
            }
            "super" | "self" => {
                while let Some(word) = rest.first() {
                    match word.as_str() {
                        "super" => {
                            base.pop()?;
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
            }
            name => {
                let mut child = base.clone();
                child.push(name.to_string());
                if !self.modules.contains(&child) {
                    return None;
                }
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn note(&mut self, segments: &[String]) {
        if let Some(path) = self.resolve(segments) {
            self.found.push(path);
        }
    }

    /// Every full path of a `use` tree, `prefix` first.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(&path.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(name) => {
                let word = name.ident.to_string();
                if word == "self" {
                    self.note(&prefix.clone());
                } else {
                    prefix.push(word);
                    self.note(&prefix.clone());
                    prefix.pop();
                }
            }
            syn::UseTree::Rename(rename) => {
                prefix.push(rename.ident.to_string());
                self.note(&prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.note(&prefix.clone()),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(tree, prefix);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_some() {
            self.stack.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.stack.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_none() {
            self.use_tree(&item.tree, &mut Vec::new());
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        // `crate::`, `super::`, `self::` or a child module's name
        // (`stage::rebuild(…)` in `drain/mod.rs`); `resolve` leaves the rest.
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.note(&segments);
        }
        syn::visit::visit_path(self, path);
    }

    /// `pub(in crate::ops)` names who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Paths inside a macro's tokens (`format!("{}", crate::x::Y)`) are
        // not parsed as paths: read them as an expression list when they
        // are one.
        if let Ok(args) = mac.parse_body_with(
            syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated,
        ) {
            for arg in &args {
                self.visit_expr(arg);
            }
        }
        syn::visit::visit_macro(self, mac);
    }
}

/// The file-module graph: for each file module, the file modules its code
/// names (itself left out).
pub fn graph(files: &[(ModPath, PathBuf, String)]) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let modules = file_modules(files);
    files
        .iter()
        .map(|(module, _, code)| {
            let targets = named_paths(module, code, &modules)
                .iter()
                .map(|path| file_of(path, &modules))
                .filter(|target| target != module)
                .collect();
            (module.clone(), targets)
        })
        .collect()
}

/// The circles inside each folder: the folder's own module (its `mod.rs`)
/// and its direct children (a child folder counted whole) form a graph
/// whose edges are the names between them; every cycle of it, as the
/// members' paths.
pub fn circles_inside_folders(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<String>> {
    let folders: BTreeSet<ModPath> = graph
        .keys()
        .filter(|m| {
            graph
                .keys()
                .any(|other| other.len() == m.len() + 1 && other.starts_with(m))
        })
        .cloned()
        .collect();
    let mut circles = Vec::new();
    for folder in &folders {
        // The node (inside this folder) a module belongs to, if any.
        let node = |module: &ModPath| -> Option<ModPath> {
            if module == folder {
                return Some(folder.clone());
            }
            module
                .starts_with(folder)
                .then(|| module[..folder.len() + 1].to_vec())
                .filter(|_| module.len() > folder.len())
        };
        let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (from, targets) in graph {
            let Some(a) = node(from) else { continue };
            for to in targets {
                if let Some(b) = node(to) {
                    if a != b {
                        edges.entry(a.clone()).or_default().insert(b);
                    }
                }
            }
        }
        for cycle in cycles(&edges) {
            circles.push(cycle.iter().map(|m| m.join("::")).collect());
        }
    }
    circles
}

/// One cycle through each strongly connected group of two or more nodes
/// (Tarjan's algorithm; the group's members, sorted).
fn cycles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        on_stack: BTreeSet<ModPath>,
        groups: Vec<Vec<ModPath>>,
    }
    fn connect(state: &mut State, node: &ModPath) {
        let at = state.index.len();
        state.index.insert(node.clone(), at);
        state.low.insert(node.clone(), at);
        state.stack.push(node.clone());
        state.on_stack.insert(node.clone());
        let empty = BTreeSet::new();
        let edges = state.edges;
        for next in edges.get(node).unwrap_or(&empty) {
            if !state.index.contains_key(next) {
                connect(state, next);
                let low = state.low[next].min(state.low[node]);
                state.low.insert(node.clone(), low);
            } else if state.on_stack.contains(next) {
                let low = state.index[next].min(state.low[node]);
                state.low.insert(node.clone(), low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut group = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(&top);
                let done = &top == node;
                group.push(top);
                if done {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                state.groups.push(group);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    let nodes: BTreeSet<ModPath> = edges
        .iter()
        .flat_map(|(from, to)| std::iter::once(from.clone()).chain(to.iter().cloned()))
        .collect();
    for node in &nodes {
        if !state.index.contains_key(node) {
            connect(&mut state, node);
        }
    }
    state.groups
}

/// Whether `attrs` hold `#[cfg(test)]`: a test module, which the checks
/// of `src/` leave out.
pub fn is_test_module(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|meta| meta.path().is_ident("test"))
    })
}

/// `src/`'s files, each by its path under `src/`, with its code.
pub fn src_files() -> Vec<(PathBuf, String)> {
    let src = crate::workspace().join("src");
    source_files(&src)
        .into_iter()
        .map(|(_, file, code)| {
            (
                file.strip_prefix(&src).expect("under src/").to_path_buf(),
                code,
            )
        })
        .collect()
}

/// What a visitor made with `found(file) -> findings` says of each of
/// `files` but those `skip` names, each finding after its file's path.
pub fn findings(
    files: &[(PathBuf, String)],
    skip: impl Fn(&Path) -> bool,
    found: impl Fn(&syn::File) -> Vec<String>,
) -> Vec<String> {
    let mut all = Vec::new();
    for (file, code) in files.iter().filter(|(file, _)| !skip(file)) {
        let parsed = syn::parse_file(code).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        all.extend(
            found(&parsed)
                .into_iter()
                .map(|f| format!("{}: {f}", file.display())),
        );
    }
    all
}
