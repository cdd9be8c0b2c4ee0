//! The JSON contract: exactly one document on stdout for every command, in
//! success and failure, usage errors included; its shape is parsed into the
//! structs of `wire` and checked against the exit status.

use crate::support::{parse_one_document, pretty_json, snapshot_settings, texts, Fixture};
use crate::wire::{Document, Kind, ProcessCommandDoc, UsageDoc};

#[test]
fn every_process_command_prints_one_document() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let pid = target.arg();
    // A walk through every command, each from a state it accepts.
    let walk: [&[&str]; 12] = [
        &["state", &pid],
        &["restore-tid", &pid],
        &["wait", "--state", "running", &pid],
        &["lock", &pid],
        &["checkpoint", &pid],
        &["restore", &pid],
        &["unlock", &pid],
        &["suspend", &pid],
        &["resume", &pid],
        &["toggle", &pid],
        &["toggle", &pid],
        &["resume", &pid],
    ];
    for args in walk {
        let output = fx
            .cudackpt(&[&["--json"], args].concat())
            .assert()
            .success()
            .stderr("")
            .get_output()
            .clone();
        let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
        doc.check(0);
        assert_eq!(doc.command, args[0]);
        assert_eq!(doc.only(target.pid).name.as_deref(), Some("sleep"));
    }
}

#[test]
fn a_failure_is_still_one_document_and_nothing_on_stderr() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let pid = target.arg();
    for (args, code) in [
        (vec!["checkpoint", &pid], 4),
        (vec!["lock", "--timeout", "50", &pid], 3),
        (vec!["state", "4194304999"], 2),
    ] {
        let output = fx
            .cudackpt(&[&["--json"], args.as_slice()].concat())
            .env("FAKE_CUDA_INJECT", "lock=busy:1000")
            .assert()
            .code(code)
            .get_output()
            .clone();
        let value: serde_json::Value = parse_one_document(&output.stdout);
        assert_eq!(value["exit_code"], code, "{args:?}");
        assert_eq!(value["ok"], false);
        if code != 2 {
            let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
            doc.check(code);
            assert_eq!(texts(&output).1, "", "{args:?}: human text with --json");
        }
    }
}

#[test]
fn a_usage_error_with_json_is_a_document_with_exit_code_2() {
    let fx = Fixture::new();
    for (args, command) in [
        (&["--json", "state", "abc"][..], Some("state")),
        (&["state", "--json", "0"], Some("state")),
        (&["--json", "frobnicate", "1"], None),
        (&["--json", "lock"], Some("lock")),
        (&["--json", "wait", "--state", "paused", "1"], Some("wait")),
    ] {
        let output = fx.cudackpt(args).assert().code(2).get_output().clone();
        let doc: UsageDoc = parse_one_document(&output.stdout);
        doc.check(2);
        assert_eq!(
            doc.command.as_deref(),
            command,
            "{args:?}: names its command"
        );
        assert!(!doc.error.message.is_empty(), "{args:?}");
        fx.assert_no_calls(&format!("{args:?}"));
    }
    let output = fx
        .cudackpt(&["--json", "state", "abc"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let doc: UsageDoc = parse_one_document(&output.stdout);
    assert!(doc.error.message.contains("\"abc\""), "{doc:?}");
}

#[test]
fn logs_go_to_stderr_and_leave_the_document_alone() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let output = fx
        .cudackpt(&["-v", "--json", "state", &target.arg()])
        .assert()
        .success()
        .get_output()
        .clone();
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    doc.check(0);
    assert!(
        texts(&output).1.contains("loaded the CUDA driver"),
        "-v logs to stderr"
    );
    let output = fx
        .cudackpt(&["--json", "state", &target.arg()])
        .env("RUST_LOG", "trace")
        .assert()
        .success()
        .get_output()
        .clone();
    let _: ProcessCommandDoc = parse_one_document(&output.stdout);
    assert!(!output.stderr.is_empty(), "RUST_LOG logs to stderr");
}

/// The shape of a group failure: rolled back, its error, its steps.
#[test]
fn group_failure_document() {
    let fx = Fixture::new().with_nvml();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let output = fx
        .cudackpt(&["--json", "suspend", &a.arg(), &b.arg()])
        .env(
            "FAKE_CUDA_INJECT",
            format!("checkpoint@{}=error:999", b.pid),
        )
        .assert()
        .code(1)
        .get_output()
        .clone();
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    doc.check(1);
    assert_eq!(doc.process(a.pid).kind(), Kind::RolledBack);
    let pretty = pretty_json(&texts(&output).0);
    let reparsed: serde_json::Value = serde_json::from_str(&pretty).expect("still JSON");
    assert_eq!(
        reparsed,
        parse_one_document::<serde_json::Value>(&output.stdout)
    );
    snapshot_settings(&fx, &[a.pid, b.pid])
        .bind(|| insta::assert_snapshot!("json_group_failure", pretty));
}
