//! Every environment variable is read in one module, `src/environment.rs`
//! (issue 35, item 6): nowhere else in `src/` does code call
//! `std::env::var`, `var_os`, `vars` or `vars_os`, import them, name a
//! variable as a string for clap's `env =`, or spell a `CUDACKPT_*` name
//! as a string of its own. The tests' stand-ins (`CUDACKPT_DEBUG_*`) are
//! read only through `environment::debug`, which a release build answers
//! with nothing, and the man page says so of each. Read by parsing
//! (`syn`), so comments and messages that mention a variable do not count.

use std::path::PathBuf;

use syn::visit::Visit;

use crate::graph::{findings, is_test_module, src_files};

/// What reads the environment around the one module, in one file.
#[derive(Default)]
struct Readers {
    found: Vec<String>,
}

const READS: [&str; 4] = ["var", "var_os", "vars", "vars_os"];
const GENERIC: [&str; 3] = ["os", "text", "flag"];

impl Readers {
    fn path(&mut self, path: &syn::Path) {
        let names: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let [.., env, read] = names.as_slice() {
            if env == "env" && READS.contains(&read.as_str()) {
                self.found
                    .push(format!("reads the environment: {}", names.join("::")));
            }
        }
    }
}

impl<'a> Visit<'a> for Readers {
    fn visit_path(&mut self, path: &'a syn::Path) {
        self.path(path);
        syn::visit::visit_path(self, path);
    }

    fn visit_use_tree(&mut self, tree: &'a syn::UseTree) {
        if let syn::UseTree::Path(p) = tree {
            if p.ident == "env" {
                let mut names = Vec::new();
                collect_use_names(&p.tree, &mut names);
                for name in names.iter().filter(|n| READS.contains(&n.as_str())) {
                    self.found.push(format!("imports env::{name}"));
                }
            }
        }
        syn::visit::visit_use_tree(self, tree);
    }

    fn visit_lit_str(&mut self, lit: &'a syn::LitStr) {
        let text = lit.value();
        let is_name = text.len() > "CUDACKPT_".len()
            && text.starts_with("CUDACKPT_")
            && text.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
        if is_name {
            self.found
                .push(format!("names {text} (its constant is in environment.rs)"));
        }
    }

    fn visit_attribute(&mut self, attr: &'a syn::Attribute) {
        // clap's `#[arg(env = "NAME")]` reads NAME itself.
        if let syn::Meta::List(list) = &attr.meta {
            let tokens: Vec<String> = list
                .tokens
                .clone()
                .into_iter()
                .map(|t| t.to_string())
                .collect();
            for pair in tokens.windows(3) {
                if pair[0] == "env" && pair[1] == "=" && pair[2].starts_with('"') {
                    self.found
                        .push(format!("clap reads {} (name its constant)", pair[2]));
                }
            }
        }
        syn::visit::visit_attribute(self, attr);
    }

    fn visit_expr_call(&mut self, call: &'a syn::ExprCall) {
        // A test's stand-in read as if it were a setting: only `debug` may.
        if let (syn::Expr::Path(func), Some(syn::Expr::Path(arg))) =
            (&*call.func, call.args.first())
        {
            let called = func
                .path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            let named = arg
                .path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            if GENERIC.contains(&called.as_str()) && named.starts_with("DEBUG_") {
                self.found.push(format!(
                    "reads {named} with {called}(), which a release build would honour"
                ));
            }
        }
        syn::visit::visit_expr_call(self, call);
    }

    fn visit_item_mod(&mut self, module: &'a syn::ItemMod) {
        // Tests set and read variables as they please.
        if !is_test_module(&module.attrs) {
            syn::visit::visit_item_mod(self, module);
        }
    }
}

fn collect_use_names(tree: &syn::UseTree, out: &mut Vec<String>) {
    match tree {
        syn::UseTree::Name(n) => out.push(n.ident.to_string()),
        syn::UseTree::Rename(r) => out.push(r.ident.to_string()),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| collect_use_names(t, out)),
        syn::UseTree::Path(p) => collect_use_names(&p.tree, out),
        syn::UseTree::Glob(_) => out.push("*".to_string()),
    }
}

/// Each finding in `files` (path, code), but in `environment.rs`.
fn readers_outside(files: &[(PathBuf, String)]) -> Vec<String> {
    findings(
        files,
        |file| file.ends_with("environment.rs"),
        |parsed| {
            let mut readers = Readers::default();
            readers.visit_file(parsed);
            readers.found
        },
    )
}

fn src() -> PathBuf {
    crate::workspace().join("src")
}

#[test]
fn every_environment_variable_is_read_in_one_module() {
    let files = src_files();
    let found = readers_outside(&files);
    assert!(
        found.is_empty(),
        "read the environment through src/environment.rs:\n{}",
        found.join("\n")
    );
}

#[test]
fn each_way_around_the_module_is_seen() {
    let planted = |code: &str| readers_outside(&[(PathBuf::from("x.rs"), code.to_string())]);
    assert_eq!(
        planted("fn f() { let _ = std::env::var_os(\"HOME\"); }").len(),
        1
    );
    assert_eq!(planted("use std::env::{var, args_os}; fn f() {}").len(), 1);
    assert_eq!(
        planted("fn f() -> &'static str { \"CUDACKPT_NEW\" }").len(),
        1
    );
    assert_eq!(
        planted("#[derive(clap::Args)] struct A { #[arg(long, env = \"X\")] x: u8 }").len(),
        1
    );
    assert_eq!(
        planted("fn f() { let _ = environment::os(DEBUG_KILL_AT); }").len(),
        1
    );
    // Not readings: messages, other env functions, tests, the one module.
    assert!(planted("fn f() { let _ = (\"set CUDACKPT_FORCE=1\", std::env::args_os(), std::env::current_exe()); }").is_empty());
    assert!(planted("#[cfg(test)] mod tests { fn f() { std::env::set_var(\"A\", \"1\"); let _ = std::env::var(\"A\"); } }").is_empty());
    assert!(readers_outside(&[(
        PathBuf::from("environment.rs"),
        "fn f() { let _ = std::env::var_os(\"A\"); }".into()
    )])
    .is_empty());
}

/// A variable that only tests should set (a stand-in for the host's GPUs,
/// a pause, a kill) must not steer a root cudackpt that a user started with
/// their environment: it is named `CUDACKPT_DEBUG_*`, the man page says
/// release builds ignore it, and `environment::debug` reads it only in a
/// debug build. `CUDACKPT_DRIVER_GPUS_DIR` once let any environment show a
/// release build GPUs that were not there.
#[test]
fn variables_for_tests_are_read_by_debug_builds_only() {
    let code = std::fs::read_to_string(src().join("environment.rs")).expect("environment.rs");
    let parsed = syn::parse_file(&code).expect("environment.rs parses");
    let mut wrong = Vec::new();
    let mut debug_names = Vec::new();
    for item in &parsed.items {
        if let syn::Item::Const(c) = item {
            let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(value),
                ..
            }) = &*c.expr
            else {
                continue;
            };
            let (constant, value) = (c.ident.to_string(), value.value());
            if constant.starts_with("DEBUG_") != value.starts_with("CUDACKPT_DEBUG_") {
                wrong.push(format!("{constant} = {value}: a stand-in for tests is DEBUG_ and CUDACKPT_DEBUG_*, nothing else"));
            }
            if constant.starts_with("DEBUG_") {
                debug_names.push(value);
            }
        }
    }
    let page = std::process::Command::new(env!("CARGO_BIN_EXE_cudackpt"))
        .arg("man")
        .output()
        .expect("cudackpt man");
    let page = String::from_utf8_lossy(&page.stdout).replace("\\-", "-");
    for name in &debug_names {
        let said = page.split(name.as_str()).nth(1).unwrap_or("");
        let said = &said[..said.len().min(600)];
        if !said.contains("Release builds ignore it") {
            wrong.push(format!(
                "the man page does not say release builds ignore {name}"
            ));
        }
    }
    let debug_fn = code
        .split("pub fn debug(")
        .nth(1)
        .expect("environment::debug")
        .split("\n}\n")
        .next()
        .expect("its body");
    if !debug_fn.contains("cfg!(debug_assertions)") {
        wrong.push(
            "environment::debug must answer only in debug builds (cfg!(debug_assertions))"
                .to_string(),
        );
    }
    assert!(debug_names.len() >= 7, "{debug_names:?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
