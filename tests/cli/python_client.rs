//! The PyTorch drain client (clients/python) is tested with the rest: its
//! unittest suite runs here, under the interpreter `CUDACKPT_TEST_PYTHON`
//! names (`.ci/run` makes a venv with the CPU torch from PyPI), else
//! `python3`. Without torch, the two-rank gloo tests skip and say why; in
//! CI (`CI` set) a skip fails this test, so CI always runs them.

use std::process::{Command, Stdio};

use crate::support::workspace;

#[test]
fn the_python_drain_client_passes_its_own_tests() {
    let python = std::env::var_os("CUDACKPT_TEST_PYTHON").unwrap_or_else(|| "python3".into());
    let client = workspace().join("clients/python");
    let output = Command::new(&python)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(client.join("tests"))
        .env("PYTHONPATH", client.join("src"))
        .env_remove("CUDACKPT_DRAIN_SIGNAL")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("could not run {python:?}: {e}"));
    let report = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the client's tests failed:\n{report}"
    );
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
    assert!(ran >= 8, "the suite ran {ran} tests:\n{report}");
    let skipped = report.contains("skipped=");
    if std::env::var_os("CI").is_some() {
        assert!(
            !skipped,
            "CI must run the torch tests: set CUDACKPT_TEST_PYTHON to a Python with torch (.ci/run does)\n{report}"
        );
    } else if skipped {
        eprintln!("the client's torch tests skipped: no torch under {python:?}");
    }
}
