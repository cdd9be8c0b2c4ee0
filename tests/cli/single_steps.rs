//! The single-step commands: `lock`, `checkpoint`, `restore`, `unlock`. Each
//! makes exactly its one driver call, and explains a wrong state.

use crate::support::{shorts, Fixture};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// Runs one single-step command from `from` and checks the result, the one
/// driver call it made, and the state afterwards (reported and recorded).
fn step(command: &str, from: &str, to: State, extra: &[&str]) {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    fx.put_in(&target, from);
    let pid = target.arg();
    let mut args = vec![command];
    args.extend_from_slice(extra);
    args.push(&pid);
    let doc: ProcessCommandDoc = fx.json(&args, 0);
    assert_eq!(doc.command, command);
    let p = doc.only(target.pid);
    assert_eq!(p.state, to, "{command} from {from}");
    assert_eq!(p.step_names(), [command]);
    assert_eq!(shorts(&fx.take_calls()), [format!("{command} 0")]);
    assert_eq!(fx.state_of(&target), to.as_str());
}

#[test]
fn lock_moves_running_to_locked() {
    step("lock", "running", State::Locked, &[]);
}

#[test]
fn lock_takes_a_timeout_in_milliseconds_or_with_a_unit() {
    for timeout in ["500", "5s", "250ms", "2m", "0"] {
        step("lock", "running", State::Locked, &["--timeout", timeout]);
    }
    step("lock", "running", State::Locked, &["-t", "5s"]);
}

#[test]
fn lock_waits_for_work_that_drains_within_the_timeout() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    // The process needs 300 ms to drain: 5s is 5000 ms, not 5.
    fx.cudackpt(&["lock", "--timeout", "5s", &target.arg()])
        .env("FAKE_CUDA_INJECT", "lock=busy:300")
        .assert()
        .success();
    assert_eq!(fx.state_of(&target), "locked");
}

#[test]
fn lock_timeout_with_a_unit_reaches_the_driver_in_milliseconds() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let output = fx
        .cudackpt(&["lock", "--timeout", "200ms", &target.arg()])
        .env("FAKE_CUDA_INJECT", "lock=busy:3000")
        .assert()
        .code(3)
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("within 200 ms") && stderr.contains("still running"),
        "{stderr}"
    );
    assert_eq!(shorts(&fx.take_calls()), ["lock 600", "get_state 0"]);
    assert_eq!(fx.state_of(&target), "running");
}

#[test]
fn checkpoint_moves_locked_to_checkpointed() {
    step("checkpoint", "locked", State::Checkpointed, &[]);
}

#[test]
fn restore_moves_checkpointed_to_locked() {
    step("restore", "checkpointed", State::Locked, &[]);
}

#[test]
fn unlock_moves_locked_to_running() {
    step("unlock", "locked", State::Running, &[]);
}

#[test]
fn the_four_steps_make_a_round_trip() {
    let fx = Fixture::new().with_nvml();
    let target = fx.cuda_target();
    let pid = target.arg();
    for (command, after) in [
        ("lock", "locked"),
        ("checkpoint", "checkpointed"),
        ("restore", "locked"),
        ("unlock", "running"),
    ] {
        let output = fx
            .cudackpt(&[command, &pid])
            .assert()
            .success()
            .get_output()
            .clone();
        let stderr = String::from_utf8_lossy(&output.stderr);
        // With NVML every pre-flight could weigh memory: nothing to remark.
        assert_eq!(stderr, "", "{command}");
        assert_eq!(fx.state_of(&target), after, "after {command}");
    }
    assert_eq!(
        shorts(&fx.take_calls()),
        ["lock 0", "checkpoint 0", "restore 0", "unlock 0"]
    );
}

/// A step in the wrong state: exit 4, the message names the state, the hint
/// the way out, and nothing changes.
#[test]
fn a_step_in_the_wrong_state_names_the_state_and_the_way_out() {
    let cases = [
        ("checkpoint", "running", "suspend"),
        ("restore", "running", "nothing to restore"),
        ("unlock", "checkpointed", "resume"),
        ("lock", "checkpointed", "resume"),
    ];
    let fx = Fixture::new();
    for (command, from, way_out) in cases {
        let target = fx.cuda_target();
        fx.put_in(&target, from);
        let doc: ProcessCommandDoc = fx.json(&[command, &target.arg()], 4);
        let p = doc.only(target.pid);
        let error = p.error();
        assert_eq!(error.kind, Kind::WrongState, "{command} on {from}");
        assert_eq!(
            error.cuda_error.as_deref(),
            Some("CUDA_ERROR_ILLEGAL_STATE")
        );
        assert_eq!(error.code, Some(401));
        assert_eq!(
            error.message,
            format!(
                "could not {command} PID {} (sleep): it is {from}, and {command} needs a {} process",
                target.pid,
                match command {
                    "lock" => "running",
                    "restore" => "checkpointed",
                    _ => "locked",
                }
            )
        );
        let hint = error.hint.as_deref().expect("a hint");
        assert!(hint.contains(way_out), "{command} on {from}: {hint}");
        assert_eq!(p.state.as_str(), from);
        assert_eq!(fx.fake_state(target.pid), from, "{command} changed nothing");
        let calls = shorts(&fx.take_calls());
        assert_eq!(calls, [format!("{command} 401"), "get_state 0".to_string()]);
    }
}

/// A step on a process already where it leads (unlock of a running one) is
/// "already there": exit 0 and a note, as `suspend` and `resume` say; the
/// one driver call it made (refused, 401) and the state query are all.
#[test]
fn a_step_on_a_process_already_where_it_leads_is_already_there() {
    let fx = Fixture::new();
    for (command, state) in [
        ("unlock", "running"),
        ("lock", "locked"),
        ("checkpoint", "checkpointed"),
        ("restore", "locked"),
    ] {
        let target = fx.cuda_target();
        fx.put_in(&target, state);
        let doc: ProcessCommandDoc = fx.json(&[command, &target.arg()], 0);
        let p = doc.only(target.pid);
        assert!(p.ok, "{command} on {state}: {p:?}");
        assert_eq!(p.state.as_str(), state);
        assert_eq!(p.note.as_deref(), Some(format!("already {state}").as_str()));
        assert_eq!(
            fx.fake_state(target.pid),
            state,
            "{command} changed nothing"
        );
        let calls = shorts(&fx.take_calls());
        assert_eq!(calls, [format!("{command} 401"), "get_state 0".to_string()]);
    }
}

/// The case of issue 18: `unlock A B` with A running and B locked unlocks B
/// and keeps it unlocked (it used to fail A and lock B again).
#[test]
fn a_group_step_where_one_is_already_there_moves_the_others_and_keeps_them() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    fx.put_in(&b, "locked");
    let doc: ProcessCommandDoc = fx.json(&["unlock", &a.arg(), &b.arg()], 0);
    assert_eq!(doc.process(a.pid).note.as_deref(), Some("already running"));
    assert!(doc.process(b.pid).ok && !doc.process(b.pid).rolled_back);
    for target in [&a, &b] {
        assert_eq!(fx.fake_state(target.pid), "running");
    }
}

/// NVIDIA's grammar keeps NVIDIA's error for the same step: exit 1.
#[test]
fn nvidias_grammar_keeps_its_error_for_a_process_already_there() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let output = fx
        .cudackpt(&["--action", "unlock", "--pid", &target.arg()])
        .assert()
        .code(1)
        .get_output()
        .clone();
    assert!(String::from_utf8_lossy(&output.stderr).contains("already running"));
}
