//! No function in `src/` is longer than the house allows (80 lines, its
//! signature and body; tests included): a function that grows past it is
//! split by what it does. Read by parsing (`syn`, with line numbers), so
//! methods, nested functions and functions in macros' reach count.

use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::graph::src_files;

/// The most lines one function may span.
const LONGEST: usize = 80;

/// Every function's name and length in lines, with its first line.
#[derive(Default)]
struct Lengths(Vec<(String, usize, usize)>);

impl Lengths {
    fn note(&mut self, name: &syn::Ident, whole: proc_macro2::Span) {
        let (first, last) = (whole.start().line, whole.end().line);
        self.0
            .push((name.to_string(), first, last.saturating_sub(first) + 1));
    }
}

impl Lengths {
    /// A function from its signature to the end of its body.
    fn note_fn(&mut self, sig: &syn::Signature, body: &syn::Block) {
        let whole = sig.span().join(body.span()).unwrap_or(body.span());
        self.note(&sig.ident, whole);
    }
}

impl<'ast> Visit<'ast> for Lengths {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.note_fn(&item.sig, &item.block);
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.note_fn(&item.sig, &item.block);
        syn::visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            self.note_fn(&item.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, item);
    }
}

/// The functions of `code` longer than `limit` lines: `NAME (N lines,
/// from line L)`.
fn longer_than(code: &str, limit: usize) -> Vec<String> {
    let file = syn::parse_file(code).expect("the source parses");
    let mut lengths = Lengths::default();
    lengths.visit_file(&file);
    lengths
        .0
        .into_iter()
        .filter(|(_, _, lines)| *lines > limit)
        .map(|(name, first, lines)| format!("{name} ({lines} lines, from line {first})"))
        .collect()
}

#[test]
fn no_function_in_src_is_longer_than_80_lines() {
    let mut long = Vec::new();
    for (path, code) in src_files() {
        for function in longer_than(&code, LONGEST) {
            long.push(format!("{}: {function}", path.display()));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {LONGEST} lines (split each by what it does):\n{}",
        long.join("\n")
    );
}

/// The count is of lines, signature to closing brace, and sees a method
/// as well as a free function.
#[test]
fn a_planted_long_method_is_seen() {
    let body = "    let _ = 1;\n".repeat(79);
    let code =
        format!("struct S;\nimpl S {{\n    fn long(&self) {{\n{body}    }}\n}}\nfn short() {{}}\n");
    assert_eq!(
        longer_than(&code, LONGEST),
        ["long (81 lines, from line 3)"]
    );
    let shorter = format!("fn fits() {{\n{}}}\n", "    let _ = 1;\n".repeat(78));
    assert!(longer_than(&shorter, LONGEST).is_empty());
}
