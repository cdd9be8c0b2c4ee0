//! Only the output room writes to the terminal (issue 35, item 6): nowhere
//! else in `src/` does code name `stderr` or `stdout` (`std::io::stderr`,
//! a `use` of it), print with `print!`, `println!`, `eprint!`,
//! `eprintln!` or `dbg!`, or begin a text with `cudackpt: `, the prefix
//! `output::stderr` puts on every line. The rooms below the output hand
//! their last words up through `exit::last_words`. Read by parsing, so
//! comments and test modules do not count.

use std::path::PathBuf;

use syn::visit::Visit;

use crate::graph::{findings, is_test_module, src_files};

#[derive(Default)]
struct Writers {
    found: Vec<String>,
}

const STREAMS: [&str; 2] = ["stderr", "stdout"];
const PRINTS: [&str; 5] = ["print", "println", "eprint", "eprintln", "dbg"];

impl<'a> Visit<'a> for Writers {
    fn visit_path(&mut self, path: &'a syn::Path) {
        if let Some(last) = path.segments.last() {
            let name = last.ident.to_string();
            if STREAMS.contains(&name.as_str()) {
                self.found.push(format!("names {name}"));
            }
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_use_name(&mut self, name: &'a syn::UseName) {
        if STREAMS.contains(&name.ident.to_string().as_str()) {
            self.found.push(format!("imports {}", name.ident));
        }
    }

    fn visit_macro(&mut self, mac: &'a syn::Macro) {
        if let Some(last) = mac.path.segments.last() {
            let name = last.ident.to_string();
            if PRINTS.contains(&name.as_str()) {
                self.found.push(format!("prints with {name}!"));
            }
        }
        // format!("cudackpt: …") and the like: the literal is in the tokens.
        let tokens = mac.tokens.to_string();
        if tokens.contains("\"cudackpt: ") {
            self.found
                .push(format!("writes the prefix itself: {tokens}"));
        }
        syn::visit::visit_macro(self, mac);
    }

    fn visit_lit_str(&mut self, lit: &'a syn::LitStr) {
        if lit.value().starts_with("cudackpt: ") {
            self.found
                .push(format!("writes the prefix itself: {:?}", lit.value()));
        }
    }

    fn visit_item_mod(&mut self, module: &'a syn::ItemMod) {
        if !is_test_module(&module.attrs) {
            syn::visit::visit_item_mod(self, module);
        }
    }
}

/// Each writer in `files` (path under src/, code) outside `output/`.
fn writers_outside_output(files: &[(PathBuf, String)]) -> Vec<String> {
    findings(
        files,
        |file| file.starts_with("output"),
        |parsed| {
            let mut writers = Writers::default();
            writers.visit_file(parsed);
            writers.found
        },
    )
}

#[test]
fn only_the_output_room_writes_to_the_terminal() {
    let files = src_files();
    let found = writers_outside_output(&files);
    assert!(
        found.is_empty(),
        "write through src/output (output::stderr; exit::last_words from below it):\n{}",
        found.join("\n")
    );
}

#[test]
fn each_way_of_writing_around_the_output_room_is_seen() {
    let planted =
        |code: &str| writers_outside_output(&[(PathBuf::from("ops/x.rs"), code.to_string())]);
    assert_eq!(planted("fn f() { let _ = std::io::stderr(); }").len(), 1);
    assert_eq!(planted("use std::io::{stderr, Write}; fn f() {}").len(), 1);
    assert_eq!(planted("fn f() { eprintln!(\"x\"); }").len(), 1);
    assert_eq!(
        planted("fn f() -> String { format!(\"cudackpt: {}\", 1) }").len(),
        1
    );
    assert_eq!(
        planted("const A: &str = \"cudackpt: warning: x\";").len(),
        1
    );
    // Not writing: the output room, tests, other words.
    assert!(writers_outside_output(&[(
        PathBuf::from("output/x.rs"),
        "fn f() { eprintln!(\"x\"); }".into()
    )])
    .is_empty());
    assert!(planted("#[cfg(test)] mod tests { fn f() { println!(\"x\"); } }").is_empty());
    assert!(planted("fn f() -> &'static str { \"see `cudackpt recover`\" }").is_empty());
}
