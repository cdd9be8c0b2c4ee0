//! The GPU suite (tests/gpu) needs a GPU for its scenarios, but not for
//! its machinery: its registry, runner and lifetimes are tested here, under
//! the system's python3, so that CI keeps them whole between GPU runs.

use std::process::{Command, Stdio};

use crate::support::workspace;

#[test]
fn the_gpu_suites_machinery_passes_its_own_tests() {
    passes_its_unittests("tests/gpu", "test_harness");
}

/// The benchmarks' pure parts (bench/test_benches.py): a figure computed
/// wrongly is found here, not in a table.
#[test]
fn the_benchmarks_pure_parts_pass_their_own_tests() {
    passes_its_unittests("bench", "test_benches");
}

/// `python3 -W error -m unittest MODULE` in the workspace's `dir`: it
/// passes, and ran at least one test.
fn passes_its_unittests(dir: &str, module: &str) {
    let output = Command::new("python3")
        .args(["-W", "error", "-m", "unittest", "-v", module])
        .current_dir(workspace().join(dir))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    let report = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{report}");
    assert!(
        report.contains("Ran ") && !report.contains("Ran 0 tests"),
        "{report}"
    );
}

#[test]
fn the_gpu_suite_lists_its_scenarios_without_a_gpu() {
    let output = Command::new("python3")
        .arg(workspace().join("tests/gpu/suite.py"))
        .arg("--list")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed = String::from_utf8_lossy(&output.stdout);
    for name in [
        "doctor",
        "drain_round_trip",
        "four_gpus_kept",
        "two_nodes_kept",
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} missing from --list:\n{listed}"
        );
    }
}
