//! Progress (docs/guide/commands.md, "Commands"): a line on stderr per finished step when stderr
//! is a terminal and neither --json nor -q was asked for; nothing
//! otherwise. The terminal is a pseudo-terminal from util-linux `script`.

use std::path::Path;

use crate::support::{cudackpt_bin, texts, Fixture};

/// Runs `sh -c SHELL_COMMAND` under a pseudo-terminal (`script`), with the
/// fixture's environment, and returns everything written to the terminal
/// and the exit status. `{bin}` in the command is the cudackpt binary.
fn on_terminal(fx: &Fixture, shell_command: &str, inject: Option<&str>) -> (String, i32) {
    let bin = cudackpt_bin();
    let command = shell_command.replace("{bin}", &format!("'{}'", bin.display()));
    let mut script = fx.command_for(Path::new("script"), &["-qec", &command, "/dev/null"]);
    if let Some(rules) = inject {
        script.env("FAKE_CUDA_INJECT", rules);
    }
    let output = script.output().expect("run script (util-linux)");
    let (stdout, stderr) = texts(&output);
    assert!(stderr.is_empty(), "script: {stderr}");
    (
        stdout.replace("\r\n", "\n"),
        output.status.code().expect("an exit status"),
    )
}

/// The progress lines in `text`.
fn progress_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains(" done in ") || l.contains(" FAILED in "))
        .collect()
}

fn line_for<'a>(lines: &[&'a str], pid: i32, what: &str) -> Option<&'a str> {
    lines
        .iter()
        .find(|l| l.contains(&format!("PID {pid} ")) && l.contains(&format!(": {what} ")))
        .copied()
}

#[test]
fn a_terminal_shows_a_line_per_step() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let (text, code) = on_terminal(&fx, &format!("{{bin}} suspend {} {}", a.pid, b.pid), None);
    assert_eq!(code, 0, "{text}");
    let lines = progress_lines(&text);
    assert_eq!(lines.len(), 4, "two steps each:\n{text}");
    for t in [&a, &b] {
        for step in ["lock", "checkpoint"] {
            let line = line_for(&lines, t.pid, step)
                .unwrap_or_else(|| panic!("no {step} line for PID {}:\n{text}", t.pid));
            assert!(line.starts_with("cudackpt: "), "{line}");
            assert!(line.contains(&format!("{step} done in ")), "{line}");
            assert!(line.ends_with(" ms") || line.ends_with(" s"), "{line}");
        }
    }
    assert_eq!(fx.state_of(&a), "checkpointed");

    // The lines go to stderr, and it is stderr being a terminal that counts:
    // with stdout away, they are still there, and the table is not.
    let (text, code) = on_terminal(
        &fx,
        &format!("{{bin}} resume {} {} 2>&1 >/dev/null", a.pid, b.pid),
        None,
    );
    assert_eq!(code, 0, "{text}");
    assert_eq!(progress_lines(&text).len(), 4, "{text}");
    for t in [&a, &b] {
        assert!(line_for(&progress_lines(&text), t.pid, "restore").is_some());
        assert!(line_for(&progress_lines(&text), t.pid, "unlock").is_some());
    }
    assert!(
        !text.contains("RESULT"),
        "the table went to stdout:\n{text}"
    );
    assert_eq!(fx.state_of(&b), "running");
}

#[test]
fn a_terminal_shows_failures_and_rollbacks() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let (text, code) = on_terminal(
        &fx,
        &format!("{{bin}} --color never suspend {} {}", a.pid, b.pid),
        Some(&format!("checkpoint@{}=error:999", b.pid)),
    );
    assert_eq!(code, 1, "{text}");
    let lines = progress_lines(&text);
    let failed = line_for(&lines, b.pid, "checkpoint").expect("the failed checkpoint");
    assert!(failed.contains("checkpoint FAILED in "), "{failed}");
    assert!(
        line_for(&lines, a.pid, "rollback restore").is_some(),
        "{text}"
    );
    assert!(
        line_for(&lines, a.pid, "rollback unlock").is_some(),
        "{text}"
    );
    for t in [&a, &b] {
        assert_eq!(fx.state_of(t), "running");
    }
}

#[test]
fn no_progress_without_a_terminal_or_with_json_or_quiet() {
    let fx = Fixture::new().with_nvml();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let pids = [a.arg(), b.arg()];

    // The test harness's stderr is a pipe.
    let output = fx
        .cudackpt(&["suspend", &pids[0], &pids[1]])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(progress_lines(&stderr).is_empty(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");

    for (flag, command) in [
        ("--json", "resume"),
        ("--json", "suspend"),
        ("-q", "resume"),
        ("-q", "suspend"),
    ] {
        let (text, code) = on_terminal(
            &fx,
            &format!("{{bin}} {flag} {command} {} {}", pids[0], pids[1]),
            None,
        );
        assert_eq!(code, 0, "{flag} {command}: {text}");
        assert!(
            progress_lines(&text).is_empty(),
            "{flag} {command} printed progress:\n{text}"
        );
        if flag == "-q" {
            assert!(text.is_empty(), "-q prints nothing: {text:?}");
        }
    }
    // Queries never show progress.
    let (text, _) = on_terminal(&fx, &format!("{{bin}} state {}", pids[0]), None);
    assert!(progress_lines(&text).is_empty(), "{text}");
    assert_eq!(fx.state_of(&a), "checkpointed");
}

/// A call that runs long is said to be running, with how long so far,
/// before it is said to be done (issue 36: a 3 s checkpoint used to be 3 s
/// of silence after the lock's line).
#[test]
fn a_long_call_is_said_while_it_runs() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let (text, code) = on_terminal(
        &fx,
        &format!("{{bin}} suspend {}", a.pid),
        Some("checkpoint=delay:2600"),
    );
    assert_eq!(code, 0, "{text}");
    let running: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(": checkpoint running for "))
        .collect();
    assert!(
        (1..=2).contains(&running.len()),
        "said after a second, then every two:\n{text}"
    );
    let first = text.find(": checkpoint running for ").expect("said");
    let done = text.find(": checkpoint done in ").expect("done");
    assert!(first < done, "{text}");
    assert!(running[0].starts_with("cudackpt: "), "{}", running[0]);
}

/// A pre-flight's remark is said before the work on a terminal, and not
/// again after it (the fake driver has no NVML, so the host-memory
/// pre-flight says it could not weigh the GPU memory).
#[test]
fn a_remark_is_said_before_the_work_and_once() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let (text, code) = on_terminal(&fx, &format!("{{bin}} suspend {}", a.pid), None);
    assert_eq!(code, 0, "{text}");
    let remark = text.find("not weighed").expect("the remark");
    let lock = text.find(": lock done in ").expect("the lock's line");
    assert!(remark < lock, "said before the work:\n{text}");
    assert_eq!(text.matches("not weighed").count(), 1, "{text}");
}

/// Runs `cudackpt --json --progress-fd 3 ARGS` with descriptor 3 open on a
/// file: the command's stdout, and the events written there, each
/// validated against its schema (with their text, for messages).
fn with_events(fx: &Fixture, args: &str) -> (std::process::Output, Vec<serde_json::Value>, String) {
    let file = fx.dir().join(format!("events-{}.jsonl", args.len()));
    let line = format!(
        "exec '{}' --json --progress-fd 3 {args} 3>'{}'",
        cudackpt_bin().display(),
        file.display()
    );
    let output = fx
        .command_for(Path::new("/bin/sh"), &["-c", &line])
        .output()
        .expect("sh runs");
    let text = std::fs::read_to_string(&file).expect("the events");
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    for event in &events {
        crate::schema_check::validate(event);
    }
    (output, events, text)
}

/// A scheduler's events: JSON Lines on the descriptor it names, each valid
/// against schema/progress-event.schema.json, every call started before it
/// ended, the remark before the calls; stdout keeps its one document.
#[test]
fn progress_events_go_to_the_descriptor_named() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let (output, events, text) = with_events(&fx, &format!("suspend {} {}", a.pid, b.pid));
    assert!(output.status.success(), "{output:?}");
    let doc: crate::wire::ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
    assert!(doc.ok, "{doc:?}");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "step_started").count(),
        4,
        "{text}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "step_done").count(),
        4,
        "{text}"
    );
    assert_eq!(
        kinds.first(),
        Some(&"remark"),
        "the remark comes first: {text}"
    );
    for t in [&a, &b] {
        for step in ["lock", "checkpoint"] {
            let at = |kind: &str| {
                events
                    .iter()
                    .position(|e| e["event"] == kind && e["pid"] == t.pid && e["step"] == step)
                    .unwrap_or_else(|| panic!("no {kind} of {step} for {}: {text}", t.pid))
            };
            assert!(at("step_started") < at("step_done"), "{text}");
        }
    }
}

/// A descriptor that is not open is a usage error, before any process.
#[test]
fn a_closed_progress_descriptor_is_a_usage_error() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let output = fx
        .cudackpt(&["--progress-fd", "97", "suspend", &a.arg()])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(stderr.contains("descriptor 97"), "{stderr}");
    fx.assert_no_calls("a closed progress descriptor");
    // A global option's usage error: the one exit-2 document, naming no
    // command.
    let doc: crate::wire::UsageDoc = fx.json(&["--progress-fd", "97", "suspend", &a.arg()], 2);
    assert_eq!(doc.command, None, "{doc:?}");
    assert!(doc.error.message.contains("descriptor 97"), "{doc:?}");
    assert_eq!(fx.state_of(&a), "running");
}

/// On a terminal, a table fits it: `check`'s long note wraps to the
/// terminal's width, its continuation indented under the column (it ran
/// on to about 95 characters whatever the terminal).
#[test]
fn a_table_fits_a_narrow_terminal() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let (text, code) = on_terminal(&fx, &format!("stty cols 60; {{bin}} check {}", a.pid), None);
    assert_eq!(code, 0, "{text}");
    // The header is dimmed on a terminal: compare what shows.
    let shown = crate::support::strip_colour(&text);
    let table: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("PID"))
        .take_while(|l| !l.starts_with("cudackpt: "))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(table.len() > 2, "the note wrapped onto more lines:\n{text}");
    for line in &table {
        assert!(
            line.chars().count() <= 60,
            "{line:?} is wider than 60:\n{text}"
        );
    }
    let column = table[1].find("suspend").expect("the note");
    assert!(
        table[2].starts_with(&" ".repeat(column)) && !table[2][column..].starts_with(' '),
        "indented under its column:\n{text}"
    );
}

/// The attacker's way in: a descriptor open only for reading, on a file
/// its user may read and not write. cudackpt opens the descriptor again
/// through /proc with its own credentials, so as root it could write
/// there; it refuses (exit 2) before any process is looked at, and the
/// file is as it was.
#[test]
fn a_descriptor_open_only_for_reading_is_refused() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    // The harm first: opening a read-only descriptor again through /proc,
    // for appending, writes to its file (as root, whoever opened it).
    let shown = fx.dir().join("the-harm");
    std::fs::write(&shown, "root's file\n").expect("write");
    let harm = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3<'{}'; echo written >> /proc/self/fd/3",
            shown.display()
        ))
        .status()
        .expect("sh runs");
    if crate::support::running_as_root() {
        assert!(harm.success());
        assert_eq!(
            std::fs::read_to_string(&shown).expect("read"),
            "root's file\nwritten\n",
            "the harm: a read-only descriptor reopened for writing"
        );
    }
    let victim = fx.dir().join("readable-only");
    std::fs::write(&victim, "root's file\n").expect("write");
    let line = format!(
        "exec '{}' --progress-fd 3 suspend {} 3<'{}'",
        cudackpt_bin().display(),
        a.pid,
        victim.display()
    );
    let output = fx
        .command_for(Path::new("/bin/sh"), &["-c", &line])
        .output()
        .expect("sh runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let (_, stderr) = texts(&output);
    assert!(stderr.contains("not open for writing"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("read"),
        "root's file\n"
    );
    fx.assert_no_calls("a read-only progress descriptor");
    assert_eq!(fx.state_of(&a), "running");
}

/// A drain is followed as it goes (issue 36, "long work is silent"): the
/// events say each rank asked and when it acknowledged, before its lock;
/// on a terminal each acknowledgement is a line.
#[test]
fn a_drain_is_followed_rank_by_rank() {
    let fx = Fixture::new();
    // A rank is ready once its watchdog thread is named (as drain.rs's).
    let ready = |mode: &str| {
        let (rank, _) = fx.drain_target(mode, &[("WORLD_SIZE", "2")]);
        crate::support::wait_until("the rank's watchdog thread", || {
            crate::drain::shows(rank.pid, "pt_nccl_watchdg")
        });
        rank
    };
    let rank = ready("late");
    let (output, events, text) = with_events(&fx, &format!("suspend --drain {}", rank.pid));
    assert!(output.status.success(), "{output:?}");
    let at = |kind: &str| {
        events
            .iter()
            .position(|e| e["event"] == kind && e["pid"] == rank.pid)
            .unwrap_or_else(|| panic!("no {kind}: {text}"))
    };
    assert!(at("drain_asked") < at("drain_answered"), "{text}");
    assert!(at("drain_answered") < at("step_started"), "{text}");
    let answered = &events[at("drain_answered")];
    assert_eq!(answered["acknowledged"], true, "{text}");
    // The rank waits a second before it acknowledges.
    assert!(
        answered["after_ms"].as_f64().unwrap_or(0.0) >= 900.0,
        "{text}"
    );

    let (terminal, code) = on_terminal(&fx, &format!("{{bin}} resume {}", rank.pid), None);
    assert_eq!(code, 0, "{terminal}");
    let other = ready("ack");
    let (terminal, code) =
        on_terminal(&fx, &format!("{{bin}} suspend --drain {}", other.pid), None);
    assert_eq!(code, 0, "{terminal}");
    assert!(
        terminal.contains(&format!("PID {} ", other.pid))
            && terminal.contains(": drain acknowledged in "),
        "{terminal}"
    );
}
