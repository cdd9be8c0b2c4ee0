//! Help and version: snapshots of what people read first.

use crate::support::{snapshot_settings, texts, Fixture};

/// `cudackpt ARGS` as a user without CUDACKPT_LIBCUDA sees it.
pub(crate) fn help(fx: &Fixture, args: &[&str]) -> String {
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

/// The release a CHANGELOG heading names (`## [0.3.0] - DATE`), or
/// `Unreleased`.
fn changelog_sections(changelog: &str) -> Vec<&str> {
    changelog
        .lines()
        .filter_map(|line| line.strip_prefix("## ["))
        .filter_map(|rest| rest.split(']').next())
        .collect()
}

/// A build after a release says so: while the CHANGELOG has an
/// `[Unreleased]` section, the version is the last release's with `+dev`
/// (in `--version`, `--version --json` and so the `.deb`, which takes
/// Cargo's); a release's build carries the release's own.
#[test]
fn a_build_after_a_release_says_it_is_not_that_release() {
    let changelog = std::fs::read_to_string(crate::support::workspace().join("CHANGELOG.md"))
        .expect("CHANGELOG.md");
    let sections = changelog_sections(&changelog);
    let version = env!("CARGO_PKG_VERSION");
    let (expected, release) = match sections.as_slice() {
        ["Unreleased", last, ..] => (format!("{last}+dev"), *last),
        [last, ..] => (last.to_string(), *last),
        [] => panic!("the CHANGELOG has no section"),
    };
    assert_eq!(
        version, expected,
        "Cargo.toml's version, for a CHANGELOG whose sections are {sections:?}"
    );
    let fx = Fixture::new();
    assert_eq!(help(&fx, &["--version"]), format!("cudackpt {expected}\n"));
    for args in [["--json", "--version"], ["--version", "--json"]] {
        let document: serde_json::Value =
            serde_json::from_str(&help(&fx, &args)).expect("one JSON document");
        crate::schema_check::validate(&document);
        assert_eq!(document["document"], "version");
        assert_eq!(document["version"], expected.as_str());
        assert_eq!(document["release"], release);
        assert_eq!(document["is_release"], sections[0] != "Unreleased");
    }
}

/// Each release in the CHANGELOG names its commit, and where the clone
/// has the history, that commit exists and its Cargo.toml has the
/// release's version.
#[test]
fn each_release_names_its_commit() {
    let root = crate::support::workspace();
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).expect("CHANGELOG.md");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let history = git(&["rev-parse", "--is-shallow-repository"])
        .is_some_and(|shallow| shallow.trim() == "false");
    let mut releases = 0;
    for section in changelog.split("\n## [").skip(1) {
        let release = section.split(']').next().unwrap_or_default();
        if release == "Unreleased" {
            continue;
        }
        releases += 1;
        let commit = section
            .lines()
            .find_map(|line| line.strip_prefix("Release commit: `"))
            .and_then(|rest| rest.split('`').next())
            .unwrap_or_else(|| {
                panic!("release {release} names no commit (a line `Release commit: `HASH`.`)")
            });
        assert!(
            commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "release {release}: {commit:?}"
        );
        if history {
            let manifest = git(&["show", &format!("{commit}:Cargo.toml")]).unwrap_or_else(|| {
                panic!("release {release}'s commit {commit} is not in this clone's history")
            });
            assert!(
                manifest.contains(&format!("\nversion = \"{release}\"\n")),
                "{commit}'s Cargo.toml is not version {release}"
            );
        }
    }
    assert!(releases >= 3, "the CHANGELOG's releases: {releases}");
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
