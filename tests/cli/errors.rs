//! Failures: every exit status, bad input rejected before any driver call
//! with the offending text quoted, and how a failure reads for people.

use crate::support::{assert_aligned, fake_uuid, table_snapshot_settings, texts, Fixture};
use crate::wire::UsageDoc;

/// Exit 1: a driver error not covered by another status.
#[test]
fn a_driver_error_exits_1_and_quotes_the_driver() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    fx.put_in(&target, "locked");
    let output = fx
        .cudackpt(&["checkpoint", &target.arg()])
        .env("FAKE_CUDA_INJECT", "checkpoint=error:999")
        .assert()
        .code(1)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(
        stderr.contains(&format!("could not checkpoint PID {} (sleep)", target.pid))
            && stderr.contains("[CUDA_ERROR_UNKNOWN 999]")
            && stderr.contains("hint: "),
        "{stderr}"
    );
    assert_eq!(fx.state_of(&target), "locked");
}

/// One scenario per exit status; each module tests its own in depth.
#[test]
fn every_exit_status_is_reachable() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:1000");
    let target = fx.cuda_target();
    let pid = target.arg();
    let plain = fx.plain_target();
    let (a, b) = (fx_uuid(0), fx_uuid(1));
    let many_to_one = format!("{a}={b},{b}={b}");
    let cases: [(&[&str], Option<&str>, i32); 9] = [
        (&["state", &pid], None, 0),
        (&["lock", &pid], Some("lock=error:999"), 1),
        (&["lock", "abc"], None, 2),
        (&["lock", "-t", "100", &pid], Some("lock=busy:1000"), 3),
        (&["checkpoint", &pid], None, 4),
        (&["state", &plain.arg()], None, 5),
        (&["lock", &pid], Some("lock=error:800"), 6),
        (
            &["--libcuda", "/nonexistent/libcuda.so", "state", &pid],
            None,
            7,
        ),
        (&["restore", "--map", &many_to_one, &pid], None, 8),
    ];
    for (args, inject, code) in cases {
        let mut command = fx.cudackpt(args);
        if let Some(rules) = inject {
            command.env("FAKE_CUDA_INJECT", rules);
        }
        let output = command.assert().code(code).get_output().clone();
        let (_, stderr) = texts(&output);
        if code == 0 {
            assert_eq!(stderr, "", "{args:?}");
        } else {
            assert!(!stderr.is_empty(), "{args:?} must say what went wrong");
        }
    }
    assert_eq!(fx.state_of(&target), "running");
}

fn fx_uuid(i: u8) -> String {
    format!("GPU-{}", fake_uuid(i))
}

/// Malformed PIDs, timeouts, maps and states: exit 2, the text quoted, and
/// no driver call at all, with a real CUDA process among the arguments.
#[test]
fn bad_input_is_rejected_before_any_driver_call() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let pid = target.arg();
    let a = fx_uuid(0);
    let malformed_uuid = format!("{a}=GPU-1234-zz");
    let cases: [(&[&str], &str); 15] = [
        (&["state", "abc"], "abc"),
        (&["state", "0"], "0"),
        (&["state", "-5"], "-5"),
        (&["state", "--", "-5"], "-5"),
        (&["lock", &pid, "--pid=-5"], "-5"),
        (&["lock", "99999999999", &pid], "99999999999"),
        (&["lock", "12x", &pid], "12x"),
        (&["lock", "--timeout", "5 parsecs", &pid], "5 parsecs"),
        (&["suspend", "--timeout=-1", &pid], "-1"),
        (&["lock", "-t", "-1", &pid], "-1"),
        (&["lock", "-t", "1.5", &pid], "1.5"),
        (&["restore", "--map", "nonsense", &pid], "nonsense"),
        (&["resume", "--map", &malformed_uuid, &pid], "GPU-1234-zz"),
        (&["wait", "--state", "paused", &pid], "paused"),
        (
            &["wait", "--state", "running", "--timeout", "soon", &pid],
            "soon",
        ),
    ];
    for (args, offending) in cases {
        let output = fx.cudackpt(args).assert().code(2).get_output().clone();
        let (_, stderr) = texts(&output);
        assert!(
            stderr.contains(&format!("\"{offending}\""))
                || stderr.contains(&format!("'{offending}'")),
            "{args:?}: the message must quote {offending:?}:\n{stderr}"
        );
        fx.assert_no_calls(&format!("{args:?}"));
    }
    assert_eq!(fx.fake_state(target.pid), "running");
}

#[test]
fn a_bad_map_is_a_usage_error_in_the_json_too() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    fx.put_in(&target, "checkpointed");
    for map in ["nonsense", "0=1,0=2"] {
        let doc: UsageDoc = fx.json(&["restore", "--map", map, &target.arg()], 2);
        // The command's error, not a process's: no row for the target.
        assert_eq!(doc.command.as_deref(), Some("restore"));
        assert!(doc.processes.is_empty(), "{doc:?}");
        assert!(doc.error.message.starts_with("invalid --map: "), "{doc:?}");
        assert!(doc
            .error
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("OLD=NEW")));
        assert!(doc.error.cuda_error.is_none() && doc.error.code.is_none());
    }
    let output = fx
        .cudackpt(&["restore", "--map", "nonsense", &target.arg()])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.starts_with("cudackpt: invalid --map: ") && stderr.contains("\"nonsense\""),
        "{stderr}"
    );
    fx.assert_no_calls("a bad map");
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
}

#[test]
fn a_human_failure_says_what_why_and_what_next() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let output = fx
        .cudackpt(&["checkpoint", &target.arg()])
        .assert()
        .code(4)
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert_aligned(&stdout);
    table_snapshot_settings(&fx, &[target.pid]).bind(|| {
        insta::assert_snapshot!(
            "failure_human",
            format!("--- stdout ---\n{stdout}--- stderr ---\n{stderr}")
        );
    });
}

#[test]
fn a_human_group_failure_shows_what_was_rolled_back() {
    let fx = Fixture::new().with_nvml();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let output = fx
        .cudackpt(&["suspend", &a.arg(), &b.arg()])
        .env(
            "FAKE_CUDA_INJECT",
            format!("checkpoint@{}=error:999", b.pid),
        )
        .assert()
        .code(1)
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert_aligned(&stdout);
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    assert!(rows[1].contains("rolled back to running"), "{stdout}");
    assert!(
        rows[2].contains("FAILED (driver error; rolled back to running)"),
        "{stdout}"
    );
    // Only the process that failed explains itself on stderr.
    assert_eq!(stderr.matches("cudackpt: ").count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("PID {} (sleep)", b.pid)),
        "{stderr}"
    );
}

/// The driver named by `CUDACKPT_LIBCUDA` is not an argument the user gave:
/// a usage message must not show `--libcuda <PATH>` as if it were needed.
#[test]
fn a_usage_message_does_not_show_the_library_from_the_environment() {
    let fx = Fixture::new();
    let output = fx
        .cudackpt(&["state"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    let usage = stderr
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .unwrap_or_else(|| panic!("no usage line: {stderr}"));
    assert!(!usage.contains("--libcuda"), "{usage}");
    // And the variable still names the driver.
    let target = fx.cuda_target();
    fx.cudackpt(&["state", &target.arg()]).assert().success();
}

/// Every line cudackpt writes to stderr begins with its name: clap's usage
/// errors too, which clap begins `error:` (issue 36). The usage line and
/// the tip stay.
#[test]
fn a_parse_error_speaks_as_cudackpt_does() {
    let fx = Fixture::new();
    let output = fx
        .cudackpt(&["state", "--bogus", "1"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(
        stderr.starts_with("cudackpt: unexpected argument '--bogus'"),
        "{stderr}"
    );
    assert!(!stderr.contains("error: "), "{stderr}");
    assert!(stderr.contains("Usage: cudackpt state"), "{stderr}");
}

/// A bad duration is said in cudackpt's words, whatever the flag: a
/// negative one (clap would read `-1` as a flag and suggest `-- -1`, which
/// then reads as a PID), or one with a unit nobody writes (humantime's own
/// message lists units "and few variations").
#[test]
fn a_bad_duration_names_what_to_write() {
    let fx = Fixture::new();
    for (args, says) in [
        (
            vec!["lock", "--timeout", "-1", "1"],
            "a timeout is not negative",
        ),
        (
            vec!["suspend", "--deadline", "-5s", "1"],
            "a timeout is not negative",
        ),
        (vec!["lock", "--timeout", "5x", "1"], "ms, s, m or h"),
        (
            vec![
                "wait",
                "--state",
                "locked",
                "--timeout",
                "2 fortnights",
                "1",
            ],
            "ms, s, m or h",
        ),
    ] {
        let output = fx.cudackpt(&args).assert().code(2).get_output().clone();
        let (_, stderr) = texts(&output);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("-- -1") && !stderr.contains("few variations"),
            "{args:?}: {stderr}"
        );
        fx.assert_no_calls(&format!("{args:?}"));
    }
}

/// A map file that cannot be read is about the file, not about the map's
/// syntax.
#[test]
fn an_unreadable_map_file_hints_at_the_file() {
    let fx = Fixture::new();
    let missing = fx.dir().join("no-such-map.json");
    let output = fx
        .cudackpt(&["restore", "--map-file", &missing.to_string_lossy(), "1"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(
        stderr.contains("cannot read --map-file") && stderr.contains("check the path"),
        "{stderr}"
    );
    assert!(!stderr.contains("OLD=NEW"), "{stderr}");
}
