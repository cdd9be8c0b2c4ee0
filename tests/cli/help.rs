//! Help and version: snapshots of what people read first.

use crate::support::{snapshot_settings, texts, Fixture};

/// `cudackpt ARGS` as a user without CUDACKPT_LIBCUDA sees it.
fn help(fx: &Fixture, args: &[&str]) -> String {
    let output = fx
        .cudackpt(args)
        .env_remove("CUDACKPT_LIBCUDA")
        .assert()
        .success()
        .stderr("")
        .get_output()
        .clone();
    texts(&output).0
}

#[test]
fn top_level_help() {
    let fx = Fixture::new();
    let text = help(&fx, &["--help"]);
    for command in [
        "state",
        "lock",
        "checkpoint",
        "restore",
        "unlock",
        "toggle",
        "suspend",
        "resume",
        "restore-tid",
        "wait",
        "doctor",
        "demo",
        "completions",
        "man",
    ] {
        assert!(
            text.contains(&format!("\n  {command} ")),
            "{command} missing"
        );
    }
    snapshot_settings(&fx, &[]).bind(|| insta::assert_snapshot!("help_top_level", text));
}

#[test]
fn subcommand_help() {
    let fx = Fixture::new();
    let text = help(&fx, &["suspend", "--help"]);
    assert!(text.contains("--timeout <T>") && text.contains("--pid <PID>"));
    assert_eq!(text, help(&fx, &["help", "suspend"]));
    snapshot_settings(&fx, &[]).bind(|| insta::assert_snapshot!("help_suspend", text));
}

#[test]
fn short_help_is_a_summary() {
    let fx = Fixture::new();
    let short = help(&fx, &["-h"]);
    let long = help(&fx, &["--help"]);
    assert!(short.starts_with("Checkpoint and restore the CUDA state of running processes"));
    assert!(short.len() < long.len());
}

#[test]
fn version_is_the_package_version() {
    let fx = Fixture::new();
    assert_eq!(
        help(&fx, &["--version"]),
        format!("cudackpt {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn no_command_is_a_usage_error_that_shows_help() {
    let fx = Fixture::new();
    let output = fx
        .cudackpt(&[])
        .assert()
        .code(2)
        .stdout("")
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(stderr.contains("Usage: cudackpt"), "{stderr}");
}
