//! `--deadline` on compound commands: past it no new step starts, the group
//! is rolled back and the report names the slowest process; lock timeouts
//! are clamped to the time left. A deadline that is not reached changes
//! nothing.

use std::time::{Duration, Instant};

use crate::support::{texts, Fixture, Target};
use crate::wire::{Kind, ProcessCommandDoc, State};

fn args<'a>(command: &'a str, pids: &'a [String], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend(pids.iter().map(String::as_str));
    args.extend_from_slice(extra);
    args
}

/// Asserts that every process of `doc` missed the deadline, was rolled
/// back to `state`, and that each message names one of `targets` as the
/// slowest.
fn all_missed_the_deadline(
    fx: &Fixture,
    doc: &ProcessCommandDoc,
    targets: &[&Target],
    state: State,
) {
    for t in targets {
        let p = doc.process(t.pid);
        assert_eq!(p.kind(), Kind::DeadlineExceeded, "{p:?}");
        assert!(p.rolled_back, "{p:?}");
        assert_eq!(p.state, state, "{p:?}");
        assert_eq!(fx.fake_state(t.pid), state.as_str());
        let message = &p.error().message;
        assert!(message.contains("slowest"), "{message}");
        assert!(
            targets
                .iter()
                .any(|s| message.contains(&format!("PID {}", s.pid))),
            "the slowest process is named: {message}"
        );
        assert!(p.error().hint.is_some(), "{p:?}");
    }
}

#[test]
fn a_deadline_passed_during_the_checkpoints_rolls_the_group_back() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let pids = [a.arg(), b.arg()];
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &args("suspend", &pids, &["--deadline", "300ms"]),
        "checkpoint=delay:1000",
        1,
    );
    all_missed_the_deadline(&fx, &doc, &[&a, &b], State::Running);
    for t in [&a, &b] {
        assert_eq!(
            doc.process(t.pid).step_names(),
            [
                "lock",
                "checkpoint",
                "restore(rollback)",
                "unlock(rollback)"
            ]
        );
    }

    // For people: the reason on stderr.
    let output = fx
        .cudackpt(&args("suspend", &pids, &["--deadline", "100ms"]))
        .env("FAKE_CUDA_INJECT", "checkpoint=delay:400")
        .assert()
        .code(1)
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert!(
        stderr.contains("deadline") && stderr.contains("slowest"),
        "{stderr}"
    );
    assert!(stdout.contains("deadline"), "{stdout}");
    for t in [&a, &b] {
        assert_eq!(fx.state_of(t), "running");
    }
}

/// A deadline that passes during the first phase stops the group before the
/// second: no checkpoint is attempted.
#[test]
fn a_deadline_passed_during_the_locks_starts_no_checkpoint() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let pids = [a.arg(), b.arg()];
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &args("suspend", &pids, &["--deadline", "300ms"]),
        "lock=delay:700",
        1,
    );
    all_missed_the_deadline(&fx, &doc, &[&a, &b], State::Running);
    let calls = fx.take_calls();
    assert!(
        calls.iter().all(|c| c.op != "checkpoint"),
        "a checkpoint started past the deadline: {calls:?}"
    );
    assert_eq!(calls.iter().filter(|c| c.short() == "unlock 0").count(), 2);
}

#[test]
fn a_resume_past_its_deadline_goes_back_to_checkpointed() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    for t in [&a, &b] {
        fx.put_in(t, "checkpointed");
    }
    let pids = [a.arg(), b.arg()];
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &args("resume", &pids, &["--deadline", "300ms"]),
        "restore=delay:800",
        1,
    );
    all_missed_the_deadline(&fx, &doc, &[&a, &b], State::Checkpointed);
    assert!(fx.take_calls().iter().all(|c| c.op != "unlock"));
}

/// The lock's timeout is clamped to the deadline: with no --timeout (wait
/// as long as it takes) or a longer one, a busy process's lock gives up
/// after about the deadline, as a lock timeout.
#[test]
fn a_deadline_clamps_the_lock_timeout() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    for extra in [
        vec!["--deadline", "500ms"],
        vec!["--deadline", "500ms", "--timeout", "10s"],
        vec!["--deadline", "500ms", "--timeout", "0"],
    ] {
        let started = Instant::now();
        let doc: ProcessCommandDoc =
            fx.json_with_inject(&args("suspend", &[a.arg()], &extra), "lock=busy:5000", 3);
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "{extra:?}: the lock waited {took:?}, past the deadline"
        );
        let p = doc.only(a.pid);
        assert_eq!(p.kind(), Kind::LockTimeout, "{extra:?}: {p:?}");
        assert_eq!(p.error().code, Some(600), "{p:?}");
        assert_eq!(p.state, State::Running, "{p:?}");
        assert_eq!(fx.state_of(&a), "running");
        let calls = fx.take_calls();
        assert_eq!(
            calls.iter().filter(|c| c.op == "lock").count(),
            1,
            "{calls:?}"
        );
    }
}

/// A lock timeout shorter than the deadline is kept.
#[test]
fn a_shorter_lock_timeout_is_kept() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let started = Instant::now();
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &[
            "suspend",
            &a.arg(),
            "--deadline",
            "5s",
            "--timeout",
            "200ms",
        ],
        "lock=busy:3000",
        3,
    );
    assert!(started.elapsed() < Duration::from_millis(2500));
    assert_eq!(doc.only(a.pid).kind(), Kind::LockTimeout);
    assert_eq!(fx.state_of(&a), "running");
}

#[test]
fn a_deadline_not_reached_changes_nothing() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let pids = [a.arg(), b.arg()];
    for (command, state, steps) in [
        ("suspend", State::Checkpointed, ["lock", "checkpoint"]),
        ("resume", State::Running, ["restore", "unlock"]),
        ("toggle", State::Checkpointed, ["lock", "checkpoint"]),
        ("toggle", State::Running, ["restore", "unlock"]),
    ] {
        let doc: ProcessCommandDoc = fx.json(&args(command, &pids, &["--deadline", "30s"]), 0);
        for t in [&a, &b] {
            let p = doc.process(t.pid);
            assert!(p.ok && !p.rolled_back, "{command}: {p:?}");
            assert_eq!(p.state, state, "{command}: {p:?}");
            assert_eq!(p.step_names(), steps, "{command}: {p:?}");
            assert_eq!(fx.fake_state(t.pid), state.as_str());
        }
    }
    // Already there: nothing to do, whatever the deadline.
    let doc: ProcessCommandDoc = fx.json(&args("resume", &pids, &["--deadline", "1ms"]), 0);
    assert!(doc.processes.iter().all(|p| p.steps.is_empty()));
}

/// `--deadline` and `wait --timeout` are new flags and take no bare number:
/// `--deadline 30` would be 30 ms in NVIDIA's unit, surely not what was
/// meant. The refusal is a usage error that says how to write it, before
/// any driver call; `0` (none) and `--timeout` in milliseconds still work.
#[test]
fn a_bare_number_is_no_deadline() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let pid = a.arg();
    for args in [
        vec!["suspend", "--deadline", "30", &pid],
        vec!["wait", "--state", "running", "--timeout", "200", &pid],
    ] {
        let output = fx.std_command(&args).output().expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("has no unit: write"), "{args:?}: {stderr}");
    }
    fx.assert_no_calls("a deadline without a unit");
    fx.json::<ProcessCommandDoc>(&["suspend", "--deadline", "0", "--timeout", "500", &pid], 0);
    fx.json::<ProcessCommandDoc>(
        &["wait", "--state", "checkpointed", "--timeout", "2s", &pid],
        0,
    );
}
