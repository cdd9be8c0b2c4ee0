//! The figures the docs quote are the runs': `tests/figures/check.py`
//! computes every figure of the README, docs/benchmarks.md and the guide
//! again from the committed run it comes from (rounded as
//! docs/benchmarks.md says once), and fails on a figure no run backs.

use std::fs;
use std::process::Command;

use crate::support::workspace;

fn check(args: &[&str]) -> std::process::Output {
    Command::new("python3")
        .arg(workspace().join("tests/figures/check.py"))
        .args(args)
        .output()
        .expect("python3 tests/figures/check.py")
}

/// Every figure is its run's.
#[test]
fn the_docs_figures_are_their_runs() {
    let output = check(&[]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let checked: usize = said
        .split(" quotes, rows and settings checked")
        .next()
        .and_then(|n| n.trim().rsplit('\n').next())
        .and_then(|n| n.parse().ok())
        .expect("how many were checked");
    assert!(checked > 200, "{said}");
}

/// The harm a figure can do: the README said "280–326x" where its run
/// gives 278–326x. Planted again in a copy of the docs, the check names
/// it; so does a figure that no run backs.
#[test]
fn a_figure_its_run_does_not_give_is_named() {
    let copy = tempfile::tempdir().expect("tempdir");
    let root = workspace();
    fs::create_dir_all(copy.path().join("docs/guide")).expect("docs/guide");
    let bench = "docs/benchmarks.md";
    fs::copy(root.join(bench), copy.path().join(bench)).expect("copy");
    for entry in fs::read_dir(root.join("docs/guide"))
        .expect("guide")
        .flatten()
    {
        fs::copy(
            entry.path(),
            copy.path().join("docs/guide").join(entry.file_name()),
        )
        .expect("copy");
    }
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md");
    assert!(readme.contains("278–326x on a checkpointed one"));
    let planted = readme
        .replace(
            "278–326x on a checkpointed one",
            "280–326x on a checkpointed one",
        )
        .replace("- **Groups**:", "- **Groups** (up to 9.9x faster):");
    fs::write(copy.path().join("README.md"), planted).expect("plant");
    let output = check(&["--docs", copy.path().to_str().expect("utf-8")]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains("280–326x") && said.contains("278–326x"),
        "{said}"
    );
    assert!(
        said.contains("the figure '9.9x'") && said.contains("is not tied to a run"),
        "{said}"
    );
}
