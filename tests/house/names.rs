//! One name, one type: no struct, enum, union, trait or type alias is
//! declared twice in `src/`, outside test modules (a reader who meets
//! `Found` should not have to ask which of three). Associated types
//! (`type Err` of `FromStr`) are the trait's names, not the crate's.
//! Read by parsing, so nested modules count and comments do not.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::graph::{is_test_module, src_files};

/// Every type declared at item level in `items` (into nested inline
/// modules, but not `#[cfg(test)]` ones), with where it is.
fn declared(items: &[syn::Item], file: &str, out: &mut BTreeMap<String, Vec<String>>) {
    for item in items {
        let name = match item {
            syn::Item::Struct(s) => Some(&s.ident),
            syn::Item::Enum(e) => Some(&e.ident),
            syn::Item::Union(u) => Some(&u.ident),
            syn::Item::Trait(t) => Some(&t.ident),
            syn::Item::Type(t) => Some(&t.ident),
            syn::Item::Mod(m) if !is_test_module(&m.attrs) => {
                if let Some((_, inner)) = &m.content {
                    declared(inner, file, out);
                }
                None
            }
            _ => None,
        };
        if let Some(name) = name {
            out.entry(name.to_string())
                .or_default()
                .push(file.to_string());
        }
    }
}

/// The names declared more than once in `files`, with their files.
fn declared_twice(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut seen = BTreeMap::new();
    for (file, code) in files {
        let parsed = syn::parse_file(code).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        declared(&parsed.items, &file.display().to_string(), &mut seen);
    }
    seen.into_iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect()
}

#[test]
fn no_type_name_is_declared_twice_in_src() {
    let files = src_files();
    let twice = declared_twice(&files);
    assert!(
        twice.is_empty(),
        "one name, one type:\n{}",
        twice.join("\n")
    );
}

#[test]
fn a_name_declared_in_two_files_or_a_nested_module_is_seen_and_tests_and_impls_are_not() {
    let files = vec![
        (PathBuf::from("a.rs"), "pub struct Found; impl std::str::FromStr for Found { type Err = (); fn from_str(_: &str) -> Result<Found, ()> { Ok(Found) } }".to_string()),
        (PathBuf::from("b.rs"), "mod inner { enum Found { A } } #[cfg(test)] mod tests { struct Need; }".to_string()),
        (PathBuf::from("c.rs"), "struct Need; type Err = u8;".to_string()),
    ];
    assert_eq!(declared_twice(&files), ["Found: a.rs, b.rs"]);
}
