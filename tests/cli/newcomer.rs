//! The README's "Try it without a GPU" works as written: its block is run,
//! line for line, with only the build line left out and the paths of the
//! binaries this test run built put in (the block names the release build
//! and `target/debug`; CI builds the tests elsewhere).

use std::process::Command;

use crate::support::{cudackpt_bin, fake_libcuda, workspace};

/// The shell block under `heading` in the README.
fn block_under(heading: &str) -> String {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let after = readme
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading:?} in the README"));
    let block = after
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block");
    block.to_string()
}

#[test]
fn try_it_without_a_gpu_works_as_written() {
    let block = block_under("### Try it without a GPU");
    // The fake's states in a directory this test removes, not mktemp's.
    let states = tempfile::tempdir().expect("tempdir");
    let script: String = block
        .lines()
        .filter(|line| !line.starts_with("cargo build"))
        .map(|line| {
            line.replace(
                "./target/release/cudackpt",
                &cudackpt_bin().display().to_string(),
            )
            .replace(
                "$PWD/target/debug/libfake_libcuda.so",
                &fake_libcuda().display().to_string(),
            )
            .replace("$(mktemp -d)", &states.path().display().to_string())
        })
        .collect::<Vec<_>>()
        .join("\n");
    // Whatever happens, the `sleep` it starts does not outlive the test.
    // The trap cannot fail the script: under `bash -e` a `kill` of a job
    // the block's own `kill $!` ended (and bash reaped) exits 1, and that
    // became the script's status when bash ran the trap after the reaping.
    let script = format!("trap 'kill %1 2>/dev/null || true' EXIT\n{script}");
    assert!(
        script.contains("suspend") && script.contains("demo"),
        "{script}"
    );
    let output = Command::new("bash")
        .args(["-e", "-x", "-c", &script])
        .current_dir(workspace())
        .env_remove("CUDACKPT_LIBCUDA")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script}\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("running → checkpointed"), "{stdout}");
    assert!(stdout.contains("\"state\":\"checkpointed\""), "{stdout}");
    assert!(stdout.contains("checkpointed → running"), "{stdout}");
    assert!(stdout.contains("PASS: "), "{stdout}");
}

/// `cargo test` runs every test binary through `tests/run-telling-skips`
/// (`.cargo/config.toml`): a test whose prerequisite is missing here
/// passes, and once its binary ends the runner says which and why, once
/// per reason, with the binary's own exit status kept.
#[test]
fn the_test_runner_says_at_a_binary_s_end_which_tests_did_not_do_their_work() {
    let runner = workspace().join("tests/run-telling-skips");
    let config = std::fs::read_to_string(workspace().join(".cargo/config.toml"))
        .expect(".cargo/config.toml");
    assert!(
        config.contains("runner = \"tests/run-telling-skips\""),
        "{config}"
    );
    // A stand-in test binary: two tests skip for one reason, one for
    // another, then it fails.
    let program = "for why in 'no CRIU here' 'no CRIU here' 'not root'; do \
                   echo \"$why\" >> \"$CUDACKPT_TEST_SKIPS\"; done; echo ran; exit 3";
    let out = Command::new(&runner)
        .args(["sh", "-c", program])
        .output()
        .expect("the runner runs");
    assert_eq!(out.status.code(), Some(3), "the program's status is kept");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("skipped: tests of sh that passed here without doing their work"),
        "{said}"
    );
    assert!(said.contains("  no CRIU here (2 tests)\n"), "{said}");
    assert!(said.contains("  not root (1 test)\n"), "{said}");
    // Nothing skipped: nothing said, and no file left behind.
    let out = Command::new(&runner)
        .args(["sh", "-c", "echo \"$CUDACKPT_TEST_SKIPS\""])
        .output()
        .expect("the runner runs");
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let file = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !file.is_empty() && !std::path::Path::new(&file).exists(),
        "{file}"
    );
}
