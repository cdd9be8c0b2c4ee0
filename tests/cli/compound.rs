//! The compound commands: `suspend`, `resume` and `toggle`, planned from the
//! current state, idempotent, and rolled back when a step fails.

use crate::support::{shorts, Fixture};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// Runs a compound command from `from` and checks the report, the driver
/// calls and the state reached.
fn compound(command: &str, from: &str, to: State, steps: &[&str]) {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    fx.put_in(&target, from);
    let doc: ProcessCommandDoc = fx.json(&[command, &target.arg()], 0);
    assert_eq!(doc.command, command);
    let p = doc.only(target.pid);
    assert_eq!(p.state_before.map(State::as_str), Some(from));
    assert_eq!(p.state, to);
    assert_eq!(p.step_names(), steps);
    assert!(p.note.is_none() && !p.rolled_back);
    let mut expected = vec!["get_state 0".to_string()];
    expected.extend(steps.iter().map(|s| format!("{s} 0")));
    assert_eq!(shorts(&fx.take_calls()), expected, "{command} from {from}");
    assert_eq!(fx.state_of(&target), to.as_str());
}

#[test]
fn suspend_locks_then_checkpoints() {
    compound(
        "suspend",
        "running",
        State::Checkpointed,
        &["lock", "checkpoint"],
    );
}

#[test]
fn suspend_finishes_a_locked_process() {
    compound("suspend", "locked", State::Checkpointed, &["checkpoint"]);
}

#[test]
fn resume_restores_then_unlocks() {
    compound(
        "resume",
        "checkpointed",
        State::Running,
        &["restore", "unlock"],
    );
}

#[test]
fn resume_finishes_a_restored_process() {
    compound("resume", "locked", State::Running, &["unlock"]);
}

#[test]
fn toggle_suspends_a_running_process() {
    compound(
        "toggle",
        "running",
        State::Checkpointed,
        &["lock", "checkpoint"],
    );
}

#[test]
fn toggle_resumes_a_checkpointed_process() {
    compound(
        "toggle",
        "checkpointed",
        State::Running,
        &["restore", "unlock"],
    );
}

#[test]
fn toggle_twice_comes_back_to_running() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    fx.cudackpt(&["toggle", &target.arg()]).assert().success();
    assert_eq!(fx.state_of(&target), "checkpointed");
    fx.cudackpt(&["toggle", &target.arg()]).assert().success();
    assert_eq!(fx.state_of(&target), "running");
}

#[test]
fn suspend_takes_a_timeout() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    fx.cudackpt(&["suspend", "--timeout", "5s", &target.arg()])
        .env("FAKE_CUDA_INJECT", "lock=busy:200")
        .assert()
        .success();
    assert_eq!(fx.state_of(&target), "checkpointed");
}

/// Already there is success, with a note and no step.
#[test]
fn suspend_and_resume_are_idempotent() {
    for (command, state) in [("suspend", "checkpointed"), ("resume", "running")] {
        let fx = Fixture::new().with_nvml();
        let target = fx.cuda_target();
        fx.put_in(&target, state);
        let doc: ProcessCommandDoc = fx.json(&[command, &target.arg()], 0);
        let p = doc.only(target.pid);
        assert_eq!(p.note.as_deref(), Some(format!("already {state}").as_str()));
        assert!(p.steps.is_empty(), "{p:?}");
        assert_eq!(p.state.as_str(), state);
        assert_eq!(shorts(&fx.take_calls()), ["get_state 0"], "{command}");

        let output = fx
            .cudackpt(&[command, &target.arg()])
            .assert()
            .success()
            .stderr("")
            .get_output()
            .clone();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains(&format!("already {state}")), "{stdout}");
        assert_eq!(fx.state_of(&target), state);
    }
}

#[test]
fn toggle_refuses_a_locked_process() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    fx.put_in(&target, "locked");
    let doc: ProcessCommandDoc = fx.json(&["toggle", &target.arg()], 4);
    let p = doc.only(target.pid);
    let error = p.error();
    assert_eq!(error.kind, Kind::WrongState);
    assert!(error.message.contains("it is locked"), "{}", error.message);
    let hint = error.hint.as_deref().expect("hint");
    assert!(
        hint.contains("unlock") && hint.contains("checkpoint"),
        "{hint}"
    );
    assert_eq!(shorts(&fx.take_calls()), ["get_state 0"]);
    assert_eq!(fx.state_of(&target), "locked");
}

/// Exit 3: the lock times out and the process keeps running.
#[test]
fn suspend_whose_lock_times_out_leaves_the_process_running() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &["suspend", "--timeout", "200", &target.arg()],
        "lock=busy:2000",
        3,
    );
    let p = doc.only(target.pid);
    let error = p.error();
    assert_eq!(error.kind, Kind::LockTimeout);
    assert_eq!(error.cuda_error.as_deref(), Some("CUDA_ERROR_NOT_READY"));
    assert_eq!(error.code, Some(600));
    assert!(error.message.contains("200 ms"), "{}", error.message);
    assert!(error
        .hint
        .as_deref()
        .is_some_and(|h| h.contains("--timeout")));
    assert_eq!(p.state, State::Running);
    assert_eq!(p.step_names(), ["lock!"]);
    assert_eq!(fx.state_of(&target), "running");
}

/// Exit 1: a checkpoint the driver fails is rolled back to running.
#[test]
fn a_failed_checkpoint_is_rolled_back() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let doc: ProcessCommandDoc =
        fx.json_with_inject(&["suspend", &target.arg()], "checkpoint=error:999", 1);
    let p = doc.only(target.pid);
    let error = p.error();
    assert_eq!(error.kind, Kind::DriverError);
    assert_eq!(error.cuda_error.as_deref(), Some("CUDA_ERROR_UNKNOWN"));
    assert_eq!(error.code, Some(999));
    assert!(
        error.message.contains("could not checkpoint"),
        "{}",
        error.message
    );
    assert!(p.rolled_back);
    assert_eq!(p.state, State::Running);
    assert_eq!(p.step_names(), ["lock", "checkpoint!", "unlock(rollback)"]);
    assert_eq!(
        shorts(&fx.take_calls()),
        [
            "get_state 0",
            "lock 0",
            "checkpoint 999",
            "get_state 0",
            "unlock 0"
        ]
    );
    assert_eq!(fx.state_of(&target), "running");
}
