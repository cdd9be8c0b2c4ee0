//! The PyTorch drain client (clients/python) is tested with the rest: its
//! unittest suite runs here under each interpreter `CUDACKPT_TEST_PYTHON`
//! names (a list, separated by `:` as `PATH` is: `.ci/run` makes one venv
//! per tested torch, with Lightning and transformers beside it), else
//! `python3`. Without torch (or a framework) those tests skip and say
//! why; in CI (`CI` set) such a skip fails this test, so CI always runs
//! them. Only a test that names a torch it cannot run on ("not on torch
//! 2.9: …") may skip in CI, under that torch.

use std::ffi::OsString;
use std::process::{Command, Stdio};

use crate::support::workspace;

/// The interpreters to test the client under.
fn interpreters() -> Vec<OsString> {
    match std::env::var_os("CUDACKPT_TEST_PYTHON") {
        Some(list) if !list.is_empty() => std::env::split_paths(&list)
            .map(|path| path.into_os_string())
            .collect(),
        _ => vec!["python3".into()],
    }
}

/// Runs the client's suite under `python`; what went wrong, if anything.
fn suite_under(python: &OsString) -> Option<String> {
    let client = workspace().join("clients/python");
    let torch = Command::new(python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("no torch".to_string(), |o| {
            format!("torch {}", String::from_utf8_lossy(&o.stdout).trim())
        });
    let output = Command::new(python)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(client.join("tests"))
        .env("PYTHONPATH", client.join("src"))
        .env_remove("CUDACKPT_DRAIN_SIGNAL")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("could not run {python:?}: {e}"));
    let report = String::from_utf8_lossy(&output.stderr);
    let under = format!("{python:?} ({torch})");
    if !output.status.success() {
        return Some(format!(
            "the client's tests failed under {under}:\n{report}"
        ));
    }
    let ran = report
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split_whitespace()
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    if ran < 8 {
        return Some(format!(
            "the suite ran {ran} tests under {under}:\n{report}"
        ));
    }
    // A test that names the torch it cannot run on ("not on torch 2.9: …",
    // an upstream limit) is allowed to skip there; any other skip is a
    // missing package.
    let (by_version, skipped): (Vec<&str>, Vec<&str>) = report
        .lines()
        .filter(|l| l.contains(" ... skipped "))
        .partition(|l| {
            // Python quotes the reason with ' or, when it holds one, ".
            l.contains(" ... skipped 'not on torch ") || l.contains(" ... skipped \"not on torch ")
        });
    for line in &by_version {
        eprintln!("under {under}, skipped for its torch: {line}");
    }
    if skipped.is_empty() {
        eprintln!(
            "the client's {ran} tests passed under {under} ({} of them skipped for its torch)",
            by_version.len()
        );
        return None;
    }
    if std::env::var_os("CI").is_some() {
        return Some(format!(
            "CI must run every client test: under {under} these skipped (.ci/run installs torch, Lightning and transformers):\n{}",
            skipped.join("\n")
        ));
    }
    eprintln!(
        "under {under}, {} of the client's tests skipped:\n{}",
        skipped.len(),
        skipped.join("\n")
    );
    crate::support::skipped(&format!(
        "{} of the Python client's tests under {under} (they need torch, Lightning, transformers: CUDACKPT_TEST_PYTHON names a Python that has them)",
        skipped.len()
    ));
    None
}

#[test]
fn the_python_drain_client_passes_its_own_tests_under_each_interpreter() {
    let failures: Vec<String> = interpreters().iter().filter_map(suite_under).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
