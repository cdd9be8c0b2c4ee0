//! Read-only commands: `state`, `restore-tid` and `wait`.

use std::process::Stdio;

use crate::support::{
    assert_aligned, parse_one_document, shorts, table_snapshot_settings, texts, Fixture,
    SpawnGuarded,
};
use crate::wire::{Document, Kind, ProcessCommandDoc, State};

#[test]
fn state_reports_state_restore_tid_and_name() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let doc: ProcessCommandDoc = fx.json(&["state", &target.arg()], 0);
    assert_eq!(doc.command, "state");
    let p = doc.only(target.pid);
    assert_eq!(p.state, State::Running);
    assert_eq!(p.name.as_deref(), Some("sleep"));
    // One thread: the fake's restore thread is the process itself.
    assert_eq!(p.restore_tid, Some(target.pid));
    assert!(p.steps.is_empty() && !p.rolled_back && p.error.is_none());
    assert_eq!(shorts(&fx.take_calls()), ["get_state 0", "restore_tid 0"]);
}

#[test]
fn state_follows_the_process_through_every_state() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    for state in ["locked", "checkpointed"] {
        let other = fx.cuda_target();
        fx.put_in(&other, state);
        let doc: ProcessCommandDoc = fx.json(&["state", &other.arg()], 0);
        assert_eq!(doc.only(other.pid).state.as_str(), state);
        assert_eq!(fx.fake_state(other.pid), state);
    }
    assert_eq!(fx.state_of(&target), "running");
}

#[test]
fn state_of_a_threaded_process_names_its_restore_thread() {
    let fx = Fixture::new();
    let target = fx.threaded_cuda_target();
    let lowest_other = *target
        .threads()
        .iter()
        .find(|&&tid| tid != target.pid)
        .expect("a second thread");
    let doc: ProcessCommandDoc = fx.json(&["state", &target.arg()], 0);
    let p = doc.only(target.pid);
    assert_eq!(p.restore_tid, Some(lowest_other));
    assert_eq!(p.name.as_deref(), Some("threads"));
}

#[test]
fn human_state_is_one_aligned_line_per_process() {
    let fx = Fixture::new();
    let running = fx.cuda_target();
    let checkpointed = fx.cuda_target();
    fx.put_in(&checkpointed, "checkpointed");
    let output = fx
        .cudackpt(&["state", &running.arg(), &checkpointed.arg()])
        .assert()
        .success()
        .stderr("")
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    assert!(!stdout.contains('\x1b'), "no colour when not a terminal");
    assert_aligned(&stdout);
    table_snapshot_settings(&fx, &[running.pid, checkpointed.pid])
        .bind(|| insta::assert_snapshot!("state_human", stdout));
}

#[test]
fn restore_tid_prints_the_thread_and_calls_only_that() {
    let fx = Fixture::new();
    let target = fx.threaded_cuda_target();
    let tid = target.threads()[1];
    let doc: ProcessCommandDoc = fx.json(&["restore-tid", &target.arg()], 0);
    assert_eq!(doc.command, "restore-tid");
    assert_eq!(doc.only(target.pid).restore_tid, Some(tid));
    assert_eq!(shorts(&fx.take_calls()), ["restore_tid 0"]);

    let output = fx
        .cudackpt(&["restore-tid", &target.arg()])
        .assert()
        .success()
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    let row: Vec<&str> = stdout
        .lines()
        .nth(1)
        .expect("a row")
        .split_whitespace()
        .collect();
    assert_eq!(row, [target.arg(), tid.to_string(), "threads".to_string()]);
}

#[test]
fn wait_returns_at_once_when_the_state_is_already_reached() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let doc: ProcessCommandDoc = fx.json(&["wait", "--state", "running", &target.arg()], 0);
    assert_eq!(doc.only(target.pid).state, State::Running);
    assert_eq!(shorts(&fx.take_calls()), ["get_state 0"]);
}

#[test]
fn wait_returns_once_another_command_moves_the_process() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let waiter = fx
        .std_command(&[
            "--json",
            "wait",
            "--state",
            "checkpointed",
            "--timeout",
            "20s",
            &target.arg(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    // Let the waiter see the process running at least once.
    crate::support::wait_until("wait to poll", || {
        fx.calls().iter().any(|c| c.op == "get_state")
    });
    fx.cudackpt(&["suspend", &target.arg()]).assert().success();
    let output = waiter.wait_with_output().expect("wait exits");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    doc.check(0);
    let p = doc.only(target.pid);
    assert_eq!(p.state_before, Some(State::Running));
    assert_eq!(p.state, State::Checkpointed);
}

#[test]
fn wait_gives_up_after_its_timeout_with_exit_1() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let doc: ProcessCommandDoc = fx.json(
        &[
            "wait",
            "--state",
            "locked",
            "--timeout",
            "150ms",
            &target.arg(),
        ],
        14,
    );
    let p = doc.only(target.pid);
    assert_eq!(p.kind(), Kind::WaitTimeout);
    assert_eq!(p.state, State::Running);
    let message = &p.error().message;
    assert!(
        message.contains("still running")
            && message.contains("locked")
            && message.contains("150 ms"),
        "{message}"
    );
    let calls = fx.take_calls();
    assert!(calls.len() > 1, "wait polls: {calls:?}");
    assert!(
        calls.iter().all(|c| c.short() == "get_state 0"),
        "{calls:?}"
    );
    assert_eq!(fx.fake_state(target.pid), "running");
}
