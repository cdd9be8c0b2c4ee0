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
    let program =
        "for why in 'no CRIU here' 'no CRIU here' 'not root' '18 of the client'\\''s tests'; do \
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
    // A reason that begins with a number keeps it, and its count is said
    // once (it read "of the client's tests (1 test) (18 tests)").
    assert!(
        said.contains("  18 of the client's tests (1 test)\n"),
        "{said}"
    );
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

/// The `$ COMMAND` lines of the `console` blocks in `markdown` under
/// `heading` (up to the next heading of its level), each with the output
/// shown after it (pure).
fn console_cases(markdown: &str, heading: &str) -> Vec<(String, Vec<String>)> {
    let level = heading.split(' ').next().unwrap_or("##");
    let section: Vec<&str> = markdown
        .lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| !(l.starts_with(level) && l[level.len()..].starts_with(' ')))
        .collect();
    let mut cases: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_console = false;
    for line in section {
        if line.starts_with("```") {
            in_console = line == "```console";
            continue;
        }
        if !in_console {
            continue;
        }
        match line.strip_prefix("$ ") {
            Some(command) => cases.push((command.to_string(), Vec::new())),
            None => {
                if let Some((_, shown)) = cases.last_mut() {
                    shown.push(line.to_string());
                }
            }
        }
    }
    cases
}

/// A line as it is compared: the target's PID, times and durations made
/// words, runs of spaces one (column widths follow the PID's digits).
fn comparable(line: &str, pid: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    for word in line.split_whitespace() {
        let bare = word.trim_end_matches(',');
        words.push(if bare.parse::<f64>().is_ok() && bare.contains('.') {
            "TIME".to_string()
        } else {
            word.to_string()
        });
    }
    let mut text = words.join(" ");
    text = text.replace(pid, "PID");
    // JSON: a number after a duration's key, and PIDs in fields.
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("_ms\":") {
        out.push_str(&rest[..at + 5]);
        rest = &rest[at + 5..];
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        out.push_str("TIME");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The tutorial's part 1 as it is written: each command it shows runs, in
/// order, against the fake driver and one `sleep` that loaded it, and
/// prints what the page shows, PIDs, times and column widths aside (a
/// `ps` may list other CUDA processes of the host too, as the page says).
#[test]
fn the_tutorial_s_commands_print_what_it_shows() {
    let page =
        std::fs::read_to_string(workspace().join("docs/guide/tutorial.md")).expect("the tutorial");
    let cases = console_cases(&page, "## 1. One process");
    assert!(cases.len() >= 5, "{cases:?}");
    let states = tempfile::tempdir().expect("tempdir");
    let mut sleep = Command::new("sleep")
        .arg("600")
        .env("LD_PRELOAD", fake_libcuda())
        .env("FAKE_CUDA_STATE_DIR", states.path())
        .spawn()
        .expect("sleep starts");
    let pid = sleep.id().to_string();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut wrong = Vec::new();
    for (command, shown) in &cases {
        let line = command
            .replace(
                "./target/release/cudackpt",
                &cudackpt_bin().display().to_string(),
            )
            .replace("$!", &pid);
        let output = Command::new("sh")
            .args(["-c", &line])
            .env("CUDACKPT_LIBCUDA", fake_libcuda())
            .env("FAKE_CUDA_STATE_DIR", states.path())
            .env_remove("FAKE_CUDA_AS_DRIVER")
            .env("COLUMNS", "200")
            .output()
            .expect("sh runs");
        let printed: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| comparable(l, &pid))
            .collect();
        let shown: Vec<String> = shown.iter().map(|l| comparable(l, "24680")).collect();
        let fits = if command.ends_with("cudackpt ps") {
            // The header, then the target's line among the host's.
            printed.first() == shown.first() && shown[1..].iter().all(|l| printed.contains(l))
        } else {
            printed == shown
        };
        if !output.status.success() || !fits {
            wrong.push(format!(
                "$ {command}\n  shown:   {shown:?}\n  printed: {printed:?}\n  stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every command line of the README's `sh` blocks (comments and blank
/// lines left out).
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if in_sh {
            let command = line.split("  #").next().unwrap_or("").trim();
            if !command.is_empty() && !command.starts_with('#') {
                commands.push(command.to_string());
            }
        }
    }
    commands
}

/// Every command the README shows is run by a test: the block "Try it
/// without a GPU" line for line (above), the quick start's test command
/// by CI (`.ci/run` runs exactly it), and the rest here: the quick start's
/// `doctor` and the install's copy of the binary. A command added to the
/// README and run by no test fails here until one runs it.
#[test]
fn every_command_the_readme_shows_is_run_by_a_test() {
    let ci = std::fs::read_to_string(workspace().join(".ci/run")).expect(".ci/run");
    let try_it = block_under("### Try it without a GPU");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut unrun = Vec::new();
    for command in readme_commands() {
        let ran = if try_it.lines().any(|l| l.contains(&command)) {
            true // try_it_without_a_gpu_works_as_written
        } else if command == "cargo test --workspace --locked" {
            ci.contains("cargo test --workspace --locked)")
        } else if command == "cargo build --release && ./target/release/cudackpt doctor" {
            // The build is cargo's; its doctor runs here, on the fake,
            // and says what is missing rather than fail to run.
            let output = Command::new(cudackpt_bin())
                .arg("doctor")
                .env("CUDACKPT_LIBCUDA", fake_libcuda())
                .output()
                .expect("doctor runs");
            output.status.code().is_some_and(|c| c == 0 || c == 7)
        } else if command == "cargo build --release --locked" {
            // The quick start's build, with the lock file CI holds it to.
            ci.contains("--locked")
        } else if command == "sudo install -m 755 target/release/cudackpt /usr/local/bin/" {
            let installed = Command::new("install")
                .args(["-m", "755"])
                .arg(cudackpt_bin())
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            installed
                && Command::new(dir.path().join("cudackpt"))
                    .arg("--version")
                    .status()
                    .is_ok_and(|s| s.success())
        } else if command == "sudo /usr/local/bin/cudackpt install-compat /usr/local/bin" {
            // Linking into a root-only directory is shown, refusals and
            // all, by attacks::install_compat_links_only_what_only_root_can_change.
            true
        } else {
            false
        };
        if !ran {
            unrun.push(command);
        }
    }
    assert!(unrun.is_empty(), "README commands no test runs: {unrun:?}");
}

/// Every Rust source under tests/: (its path, its text).
fn test_sources() -> Vec<(std::path::PathBuf, String)> {
    let mut files = vec![workspace().join("tests")];
    let mut sources = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .expect("a folder")
                    .flatten()
                    .map(|e| e.path()),
            );
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a test source");
            sources.push((path, text));
        }
    }
    sources
}

/// Every reason a test gives for not doing its work reads as what it
/// could not do: the runner says "cannot " and the reason (it once said
/// "cannot a Python with torch"), so each begins with a verb.
#[test]
fn every_skip_reason_reads_as_what_could_not_be_done() {
    const VERBS: [&str; 17] = [
        "act", "build", "chown", "drop", "find", "give", "make", "mount", "panic", "reuse", "run",
        "set", "strip", "write", "use", "start", "read",
    ];
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (path, text) in test_sources() {
        // Spelled in two, so that this scan does not find itself.
        let needle = ["prereq", "uisite("].concat();
        for call in text.split(needle.as_str()).skip(1) {
            let call = call
                .trim_start()
                .trim_start_matches("&format!(")
                .trim_start();
            let Some(reason) = call.strip_prefix('"').and_then(|r| r.split('"').next()) else {
                continue;
            };
            seen += 1;
            let first = reason.split_whitespace().next().unwrap_or_default();
            if !first.starts_with('{') && !VERBS.contains(&first) {
                wrong.push(format!("{}: \"cannot {reason}\"", path.display()));
            }
        }
    }
    assert!(seen > 30, "the scan finds the reasons ({seen})");
    assert!(
        wrong.is_empty(),
        "reasons that do not read after \"cannot\":\n{}",
        wrong.join("\n")
    );
}

/// `undump` of a directory that is not there says it was the images
/// directory, and which; `recover` with nothing to do says so (it printed
/// nothing), in words and in JSON.
#[test]
fn a_missing_images_directory_and_nothing_to_recover_are_said() {
    let fx = crate::support::Fixture::new();
    let missing = fx.dir().join("no-such-images");
    let output = fx
        .cudackpt(&["undump", missing.to_str().expect("utf-8")])
        .output()
        .expect("undump");
    assert_ne!(output.status.code(), Some(0));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains(&format!("the images directory {}", missing.display()))
            && said.contains("dump --to DIR"),
        "{said}"
    );
    let output = fx.cudackpt(&["recover"]).output().expect("recover");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("nothing to recover"), "{said}");
    let output = fx
        .cudackpt(&["--json", "recover"])
        .output()
        .expect("recover --json");
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one document");
    assert_eq!(doc["ok"], true);
    assert!(
        doc["warnings"][0]
            .as_str()
            .is_some_and(|w| w.starts_with("nothing to recover")),
        "{doc}"
    );
}

/// The part of the tutorial with torch: from PyPI alone (it installed
/// torch from another index, which not every machine reaches), saying how
/// much it takes; and where the venv has no torch, the client's example
/// says what is missing and how to get it (it failed with a bare
/// `ModuleNotFoundError`).
#[test]
fn the_tutorial_s_torch_step_is_pypi_s_and_the_client_says_what_is_missing() {
    let tutorial =
        std::fs::read_to_string(workspace().join("docs/guide/tutorial.md")).expect("tutorial");
    let part = tutorial
        .split("## 2. A two-rank PyTorch job, drained and resumed")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the tutorial's part 2");
    let commands = part
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its commands");
    assert!(
        commands.contains("pip install torch ./clients/python"),
        "{commands}"
    );
    assert!(
        !commands.contains("--index-url") && !commands.contains("--extra-index-url"),
        "{commands}"
    );
    assert!(
        commands.contains("4.7 GB") && part.contains("4.7 GB"),
        "the step says its size: {part}"
    );

    // -S: a Python without site-packages, so without torch whatever the
    // machine has installed; the client comes from the checkout.
    let output = Command::new("python3")
        .args(["-S", "clients/python/examples/train_cpu.py"])
        .current_dir(workspace())
        .env("PYTHONPATH", workspace().join("clients/python/src"))
        .output()
        .expect("python3");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("TorchMissing")
            && said.contains("has no torch")
            && said.contains("pip install torch"),
        "{said}"
    );
}

/// A test's `kill` of a process that may be gone already says nothing on
/// the test run's output (stray "kill: (N): No such process" lines came
/// from kills whose stderr the tests inherited): each one silences its
/// stderr, or asserts that it succeeded, when a complaint is a failure.
#[test]
fn a_test_s_kill_says_nothing_on_the_run_s_output() {
    let needle = ["Command::new(\"", "kill\")"].concat();
    let mut loud = Vec::new();
    let mut seen = 0;
    for (path, text) in test_sources() {
        for (at, _) in text.match_indices(needle.as_str()) {
            seen += 1;
            let statement = &text[at..at + text[at..].find(';').unwrap_or(text.len() - at)];
            let before = &text[text[..at].rfind('\n').unwrap_or(0)..at];
            let bound = before
                .split("let ")
                .nth(1)
                .and_then(|b| b.split(' ').next())
                .filter(|b| *b != "_");
            let asserted = bound.is_some_and(|name| {
                text[at..]
                    .chars()
                    .take(400)
                    .collect::<String>()
                    .contains(&format!("{name}.success()"))
            });
            if !statement.contains(".stderr(") && !asserted {
                loud.push(format!(
                    "{}: {}",
                    path.display(),
                    statement.lines().next().unwrap_or_default()
                ));
            }
        }
    }
    assert!(seen > 5, "the scan finds the tests' kills ({seen})");
    assert!(
        loud.is_empty(),
        "kills whose complaint reaches the run's output:\n{}",
        loud.join("\n")
    );
}
