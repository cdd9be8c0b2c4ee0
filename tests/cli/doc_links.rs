//! Links between the docs hold: every relative Markdown link in the
//! README, the guide and the other documents names a file of the
//! repository, and a `#anchor` names a heading of its page (as GitHub
//! makes anchors). A moved chapter or a renamed heading fails here.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::support::{documents, workspace};

/// The Markdown of `text` outside fenced code blocks and inline code.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // Inline code spans hold no links.
            let mut inside = false;
            for part in line.split('`') {
                if !inside {
                    out.push_str(part);
                }
                inside = !inside;
            }
            out.push('\n');
        }
    }
    out
}

/// Every `[text](target)` target of `text` (pure).
fn link_targets(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut targets = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            targets.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    targets
}

/// The anchors GitHub makes of a page's headings (pure): lowercased,
/// punctuation but `-` and `_` dropped, spaces made `-`.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| {
            line.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// What is wrong with the links of `doc`.
fn broken_links(doc: &Path) -> Vec<String> {
    let text = fs::read_to_string(doc).expect("a document");
    let mut broken = Vec::new();
    for target in link_targets(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            doc.to_path_buf()
        } else {
            doc.parent().expect("a directory").join(path)
        };
        if !file.exists() {
            broken.push(format!("{}: {target} (no such file)", doc.display()));
            continue;
        }
        if let Some(anchor) = anchor.filter(|_| file.extension().is_some_and(|e| e == "md")) {
            let page = fs::read_to_string(&file).expect("a linked page");
            if !anchors(&page).contains(anchor) {
                broken.push(format!("{}: {target} (no such heading)", doc.display()));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_names_a_file_and_a_heading_that_exist() {
    let broken: Vec<String> = documents().iter().flat_map(|d| broken_links(d)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A planted link to a moved chapter, and one to a heading that is not
/// there, are named; a link in a code block is not a link.
#[test]
fn a_planted_broken_link_is_named() {
    let dir = tempfile::tempdir().expect("a temp dir");
    fs::write(
        dir.path().join("b.md"),
        "# The chapter\n\n## A section: here\n",
    )
    .expect("b.md");
    let a = dir.path().join("a.md");
    fs::write(
        &a,
        "See [b](b.md#a-section-here), [gone](c.md), [nowhere](b.md#nope).\n\n```\n[x](y.md)\n```\n",
    )
    .expect("a.md");
    let broken = broken_links(&a);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].ends_with("c.md (no such file)"), "{broken:?}");
    assert!(
        broken[1].ends_with("b.md#nope (no such heading)"),
        "{broken:?}"
    );
}

/// The rows of the first table headed `| command | does |` in `text`,
/// with links made relative to the guide.
fn command_table(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|line| *line != "| command | does |")
        .take_while(|line| line.starts_with('|'))
        .map(|line| line.replace("](docs/guide/", "]("))
        .collect()
}

/// The README's commands at a glance are the guide's table, row for row:
/// shown twice, held to one text.
#[test]
fn the_readme_s_command_table_is_the_guide_s() {
    let root = workspace();
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md");
    let guide = fs::read_to_string(root.join("docs/guide/commands.md")).expect("commands.md");
    let table = command_table(&readme);
    assert!(table.len() > 20, "{table:?}");
    assert!(
        table.iter().any(|row| row.starts_with("| `dump "))
            && table.iter().any(|row| row.starts_with("| `undump ")),
        "every command, dump and undump included: {table:?}"
    );
    assert_eq!(table, command_table(&guide));
    // Every command the binary has is in it.
    let missing: Vec<String> = cudackpt::internal::cli_command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|name| !table.iter().any(|row| row.contains(&format!("`{name}"))))
        .collect();
    assert!(
        missing.is_empty(),
        "commands the table leaves out: {missing:?}"
    );
}

/// mdbook, as CI installs it (`CUDACKPT_TEST_MDBOOK`) or on PATH.
fn mdbook() -> Option<std::path::PathBuf> {
    if let Some(named) = std::env::var_os("CUDACKPT_TEST_MDBOOK") {
        return Some(named.into());
    }
    let found = std::process::Command::new("mdbook")
        .arg("--version")
        .output();
    found
        .is_ok_and(|out| out.status.success())
        .then(|| "mdbook".into())
}

/// The relative links and sources of the HTML under `root` whose target
/// is not there (a folder counts when it has an index.html).
fn dead_in_html(root: &Path) -> Vec<String> {
    let mut dead = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("a book folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "html") {
                continue;
            }
            let html = fs::read_to_string(&path).expect("a page");
            for attribute in ["href=\"", "src=\""] {
                for piece in html.split(attribute).skip(1) {
                    let target = piece.split('"').next().unwrap_or_default();
                    let file = target.split(['#', '?']).next().unwrap_or_default();
                    let outside = file.is_empty() || file.starts_with('/') || file.contains(':');
                    if outside {
                        continue;
                    }
                    let resolved = path.parent().expect("a folder").join(file);
                    let there = if resolved.is_dir() {
                        resolved.join("index.html").exists()
                    } else {
                        resolved.exists()
                    };
                    if !there {
                        dead.push(format!(
                            "{}: {target}",
                            path.strip_prefix(root).unwrap_or(&path).display()
                        ));
                    }
                }
            }
        }
    }
    dead.sort();
    dead.dedup();
    dead
}

/// `mdbook build docs` builds the guide and the documents beside it into
/// a book with no dead link (the guide's 30 links to ../benchmarks.md,
/// ../gpu-results.md, ../driver-facts.md and ../../schema/ were dead), and
/// where it builds by default git ignores.
#[test]
fn the_book_builds_with_no_dead_link() {
    let Some(mdbook) = mdbook() else {
        crate::support::prerequisite(
            "build the book (mdbook: cargo install mdbook --locked, or CUDACKPT_TEST_MDBOOK)",
            false,
        );
        return;
    };
    let out = tempfile::tempdir().expect("tempdir");
    let built = std::process::Command::new(&mdbook)
        .arg("build")
        .arg(workspace().join("docs"))
        .arg("--dest-dir")
        .arg(out.path())
        .output()
        .expect("mdbook build");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    assert!(
        out.path().join("guide/install.html").exists()
            && out.path().join("benchmarks.html").exists()
    );
    let dead = dead_in_html(out.path());
    assert!(
        dead.is_empty(),
        "dead links in the book:\n{}",
        dead.join("\n")
    );
    let book = fs::read_to_string(workspace().join("docs/book.toml")).expect("docs/book.toml");
    assert!(book.contains("build-dir = \"book\""), "{book}");
    // The book says how to get mdbook, on its first page.
    let opening = fs::read_to_string(workspace().join("docs/README.md")).expect("docs/README.md");
    assert!(
        opening.contains("cargo install mdbook --locked") && opening.contains("mdbook build docs"),
        "{opening}"
    );
    let ignored = fs::read_to_string(workspace().join(".gitignore")).expect(".gitignore");
    assert!(
        ignored.lines().any(|line| line == "/docs/book/"),
        "docs/book/ is ignored"
    );
}
