//! Output hygiene: `-q` is silent but keeps the status, colour only when
//! asked for or on a terminal, and a reader that goes away is not an error.

use std::process::Stdio;

use crate::support::{texts, Fixture, SpawnGuarded};

/// `-q` as `grep -q`: no result and no remarks, the exit status, and what
/// went wrong still said on stderr (in words, with --json too).
#[test]
fn quiet_prints_no_result_keeps_the_exit_status_and_the_errors() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let dead = fx.cuda_target().kill_and_reap();
    let pid = target.arg();
    fx.cudackpt(&["-q", "state", &pid])
        .assert()
        .code(0)
        .stdout("")
        .stderr("");
    for (args, code, said) in [
        (vec!["-q", "checkpoint", &pid], 4, "could not checkpoint"),
        (
            vec!["--quiet", "lock", &dead.to_string()],
            5,
            "no process has PID",
        ),
        (
            vec!["-q", "--libcuda", "/nonexistent/libcuda.so", "lock", &pid],
            7,
            "/nonexistent/libcuda.so",
        ),
        (
            vec!["-q", "--json", "checkpoint", &pid],
            4,
            "could not checkpoint",
        ),
        (
            vec!["-q", "doctor", "--libcuda", "/nonexistent/libcuda.so"],
            7,
            "",
        ),
    ] {
        let output = fx
            .cudackpt(&args)
            .assert()
            .code(code)
            .stdout("")
            .get_output()
            .clone();
        let (_, stderr) = texts(&output);
        assert!(stderr.contains(said), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("warning:"),
            "{args:?}: no remarks: {stderr}"
        );
    }
    // Quiet changes the output, not the work; remarks (no NVML) are dropped.
    fx.cudackpt(&["-q", "suspend", &pid])
        .assert()
        .success()
        .stdout("")
        .stderr("");
    assert_eq!(fx.state_of(&target), "checkpointed");
}

#[test]
fn colour_only_when_asked_for_or_on_a_terminal() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let pid = target.arg();
    let stdout = |args: &[&str]| {
        let output = fx.cudackpt(args).assert().success().get_output().clone();
        texts(&output).0
    };
    let coloured = stdout(&["--color", "always", "state", &pid]);
    assert!(coloured.contains("\x1b["), "{coloured:?}");
    let plain = stdout(&["state", &pid]);
    assert!(!plain.contains('\x1b'), "not a terminal: {plain:?}");
    assert_eq!(stdout(&["--color", "never", "state", &pid]), plain);
    assert_eq!(stdout(&["--color=auto", "state", &pid]), plain);
    // Without the escapes, the coloured text is the plain text (columns
    // are aligned on the visible text).
    let stripped = crate::support::strip_colour(&coloured);
    assert_eq!(stripped, plain);
    let json = stdout(&["--color", "always", "--json", "state", &pid]);
    assert!(!json.contains('\x1b'), "never colour in JSON: {json:?}");
    // CLICOLOR_FORCE colours off a terminal; NO_COLOR still wins.
    let forced = |env: &[(&str, &str)]| {
        let mut command = fx.cudackpt(&["state", &pid]);
        for (k, v) in env {
            command.env(k, v);
        }
        texts(&command.assert().success().get_output().clone()).0
    };
    assert_eq!(forced(&[("CLICOLOR_FORCE", "1")]), coloured);
    assert_eq!(forced(&[("CLICOLOR_FORCE", "0")]), plain);
    assert_eq!(forced(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]), plain);
}

/// `cudackpt state PID | head -c0`: the reader is gone before cudackpt
/// writes (the fake delays the state query), which must not turn into a
/// failure or a panic.
#[test]
fn a_closed_stdout_pipe_is_not_an_error() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    for json in [false, true] {
        let mut args = vec!["state", "-p"];
        let pid = target.arg();
        args.push(&pid);
        if json {
            args.insert(0, "--json");
        }
        let mut child = fx
            .std_command(&args)
            .env("FAKE_CUDA_INJECT", "get_state=delay:300")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_guarded();
        drop(child.stdout.take());
        let output = child.wait_with_output().expect("cudackpt exits");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(0),
            "json={json}: {:?}\n{stderr}",
            output.status
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(stderr, "", "json={json}");
    }
}

/// `cudackpt state PID >/dev/full`: a result that cannot be written is a
/// failure, said on stderr (as coreutils does), in every grammar and for
/// the generated artifacts; a command that already failed keeps its status.
#[test]
fn a_result_that_cannot_be_written_fails_and_says_so() {
    let full = std::path::Path::new("/dev/full");
    if !full.exists() {
        crate::support::prerequisite("write to /dev/full (there is none here)", false);
        return;
    }
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let pid = target.arg();
    let cases: [(&[&str], i32); 5] = [
        (&["state", &pid], 1),
        (&["--json", "state", &pid], 1),
        (&["--get-state", "--pid", &pid], 1),
        (&["completions", "bash"], 1),
        // Already a failure (no such process): its own status stays.
        (&["state", "999999999"], 5),
    ];
    for (args, code) in cases {
        let output = fx
            .std_command(args)
            .stdout(std::fs::File::create(full).expect("open /dev/full"))
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        if code == 1 {
            assert!(
                stderr.contains("error writing the result to stdout: No space left on device"),
                "{args:?}: {stderr}"
            );
        }
    }
}

/// `man --dir` names the path it could not write.
#[test]
fn man_pages_that_cannot_be_written_name_the_path() {
    let fx = Fixture::new();
    let output = fx
        .std_command(&["man", "--dir", "/proc/cudackpt-no-such-dir"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write the man pages: /proc/cudackpt-no-such-dir:"),
        "{stderr}"
    );
}

/// A process no driver call reached is "unchanged", not "unknown": refused
/// before the driver, nothing happened to it.
#[test]
fn processes_the_driver_never_saw_are_unchanged_not_unknown() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let output = fx
        .cudackpt(&["suspend", &a.arg(), &b.arg(), "999999999"])
        .assert()
        .code(5)
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    assert!(!stdout.contains("unknown"), "{stdout}");
    assert_eq!(
        stdout.matches("not attempted (unchanged)").count(),
        2,
        "{stdout}"
    );
    assert!(stdout.contains("FAILED (no such process)"), "{stdout}");
    assert!(
        !stdout.contains("0.000 ms"),
        "no time was spent on them: {stdout}"
    );
    fx.assert_no_calls("a group refused before the driver");
}

/// The table says of a process whose state is not known what the JSON
/// says, `unknown` (it said `error`; the failure itself is on stderr).
#[test]
fn an_unknown_state_reads_the_same_in_the_table_and_the_json() {
    let fx = Fixture::new();
    let plain = fx.plain_target();
    let output = fx
        .cudackpt(&["state", &plain.arg()])
        .assert()
        .code(5)
        .get_output()
        .clone();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let row = stdout
        .lines()
        .find(|l| l.starts_with(&plain.pid.to_string()))
        .unwrap_or_else(|| panic!("no row: {stdout}"));
    assert_eq!(row.split_whitespace().nth(1), Some("unknown"), "{stdout}");
    let doc: crate::wire::ProcessCommandDoc = fx.json(&["state", &plain.arg()], 5);
    assert_eq!(doc.only(plain.pid).state.as_str(), "unknown");
}
