//! Several targets at once: phased (all locks before any checkpoint), one
//! report per process, and all-or-nothing: a failure on one process rolls
//! the others back, and a bad target stops the group before any driver call.

use crate::support::{Call, Fixture, SpawnGuarded, Target};
use crate::wire::{Kind, ProcessCommandDoc, State};

fn args<'a>(command: &'a str, pids: &'a [String]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend(pids.iter().map(String::as_str));
    args
}

fn pids(targets: &[&Target]) -> Vec<String> {
    targets.iter().map(|t| t.arg()).collect()
}

/// Asserts that every `first` call comes before any `then` call.
fn phased(calls: &[Call], first: &str, then: &str, count: usize) {
    let positions = |op: &str| -> Vec<usize> {
        calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.op == op && c.code == 0)
            .map(|(i, _)| i)
            .collect()
    };
    let (firsts, thens) = (positions(first), positions(then));
    assert_eq!(firsts.len(), count, "{calls:?}");
    assert_eq!(thens.len(), count, "{calls:?}");
    assert!(
        firsts.iter().max() < thens.iter().min(),
        "every {first} must come before any {then}: {calls:?}"
    );
}

#[test]
fn a_group_is_suspended_and_resumed_together() {
    let fx = Fixture::new();
    let (a, b, c) = (fx.cuda_target(), fx.cuda_target(), fx.cuda_target());
    let all = pids(&[&a, &b, &c]);

    let doc: ProcessCommandDoc = fx.json(&args("suspend", &all), 0);
    assert_eq!(
        doc.pids(),
        [a.pid, b.pid, c.pid],
        "one report per target, in order"
    );
    for p in &doc.processes {
        assert_eq!(p.state_before, Some(State::Running));
        assert_eq!(p.state, State::Checkpointed);
        assert_eq!(p.step_names(), ["lock", "checkpoint"]);
    }
    phased(&fx.take_calls(), "lock", "checkpoint", 3);
    for t in [&a, &b, &c] {
        assert_eq!(fx.fake_state(t.pid), "checkpointed");
    }

    let doc: ProcessCommandDoc = fx.json(&args("resume", &all), 0);
    for p in &doc.processes {
        assert_eq!(p.state_before, Some(State::Checkpointed));
        assert_eq!(p.state, State::Running);
        assert_eq!(p.step_names(), ["restore", "unlock"]);
    }
    phased(&fx.take_calls(), "restore", "unlock", 3);
    for t in [&a, &b, &c] {
        assert_eq!(fx.state_of(t), "running");
    }
}

#[test]
fn a_failed_checkpoint_rolls_the_whole_group_back() {
    let fx = Fixture::new();
    let (a, b, c) = (fx.cuda_target(), fx.cuda_target(), fx.cuda_target());
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &args("suspend", &pids(&[&a, &b, &c])),
        &format!("checkpoint@{}=error:999", b.pid),
        1,
    );
    let culprit = doc.process(b.pid);
    assert_eq!(culprit.kind(), Kind::DriverError);
    assert_eq!(culprit.error().code, Some(999));
    assert_eq!(
        culprit.step_names(),
        ["lock", "checkpoint!", "unlock(rollback)"]
    );
    for other in [&a, &c] {
        let p = doc.process(other.pid);
        assert_eq!(p.kind(), Kind::RolledBack, "{p:?}");
        assert!(p.error().message.contains(&b.pid.to_string()), "{p:?}");
        assert!(p.rolled_back);
        assert_eq!(
            p.step_names(),
            [
                "lock",
                "checkpoint",
                "restore(rollback)",
                "unlock(rollback)"
            ]
        );
    }
    for t in [&a, &b, &c] {
        assert_eq!(doc.process(t.pid).state, State::Running);
        assert_eq!(fx.state_of(t), "running", "PID {} is back", t.pid);
    }
}

/// The exit status is that of the process that failed, not of those rolled
/// back because of it.
#[test]
fn the_group_exits_with_the_failing_process_status() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &args("suspend", &pids(&[&a, &b])),
        &format!("lock@{}=error:800", b.pid),
        6,
    );
    assert_eq!(doc.process(b.pid).kind(), Kind::PermissionDenied);
    let other = doc.process(a.pid);
    assert_eq!(other.kind(), Kind::RolledBack);
    assert_eq!(other.step_names(), ["lock", "unlock(rollback)"]);
    for t in [&a, &b] {
        assert_eq!(fx.state_of(t), "running");
    }
}

#[test]
fn a_failed_unlock_rolls_a_resumed_group_back_to_checkpointed() {
    let fx = Fixture::new();
    let (a, b, c) = (fx.cuda_target(), fx.cuda_target(), fx.cuda_target());
    for t in [&a, &b, &c] {
        fx.put_in(t, "checkpointed");
    }
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &args("resume", &pids(&[&a, &b, &c])),
        &format!("unlock@{}=error:999", c.pid),
        1,
    );
    assert_eq!(doc.process(c.pid).kind(), Kind::DriverError);
    for t in [&a, &b] {
        assert_eq!(doc.process(t.pid).kind(), Kind::RolledBack);
    }
    for t in [&a, &b, &c] {
        assert_eq!(doc.process(t.pid).state, State::Checkpointed);
        assert_eq!(fx.state_of(t), "checkpointed");
    }
}

#[test]
fn a_dead_target_stops_the_group_before_any_driver_call() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let dead = fx.cuda_target().kill_and_reap();
    let all = vec![a.arg(), dead.to_string(), b.arg()];
    for command in ["suspend", "lock", "toggle"] {
        let doc: ProcessCommandDoc = fx.json(&args(command, &all), 5);
        assert_eq!(doc.pids(), [a.pid, dead, b.pid]);
        assert_eq!(doc.process(dead).kind(), Kind::NoSuchProcess);
        for t in [&a, &b] {
            let p = doc.process(t.pid);
            assert_eq!(p.kind(), Kind::NotAttempted, "{command}: {p:?}");
            assert!(p.error().message.contains(&dead.to_string()), "{p:?}");
            assert!(p.steps.is_empty());
        }
        fx.assert_no_calls(command);
    }
    for t in [&a, &b] {
        assert_eq!(fx.fake_state(t.pid), "running");
    }
}

#[test]
fn state_reports_the_good_targets_among_bad_ones() {
    let fx = Fixture::new();
    let good = fx.cuda_target();
    let plain = fx.plain_target();
    let dead = fx.cuda_target().kill_and_reap();
    let all = vec![dead.to_string(), good.arg(), plain.arg()];
    let doc: ProcessCommandDoc = fx.json(&args("state", &all), 5);
    assert_eq!(doc.pids(), [dead, good.pid, plain.pid]);
    assert_eq!(doc.process(dead).kind(), Kind::NoSuchProcess);
    assert_eq!(doc.process(plain.pid).kind(), Kind::NotCudaProcess);
    let p = doc.process(good.pid);
    assert!(p.ok);
    assert_eq!(p.state, State::Running);
    assert_eq!(p.restore_tid, Some(good.pid));
}

#[test]
fn toggle_refuses_a_group_in_mixed_states() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    fx.put_in(&b, "checkpointed");
    let doc: ProcessCommandDoc = fx.json(&args("toggle", &pids(&[&a, &b])), 4);
    for t in [&a, &b] {
        let p = doc.process(t.pid);
        assert_eq!(p.kind(), Kind::WrongState);
        assert!(p.steps.is_empty());
    }
    assert!(fx.take_calls().iter().all(|c| c.op == "get_state"));
    assert_eq!(fx.fake_state(a.pid), "running");
    assert_eq!(fx.fake_state(b.pid), "checkpointed");
}

#[test]
fn pids_given_twice_are_acted_on_once() {
    let fx = Fixture::new();
    let t = fx.cuda_target();
    let pid = t.arg();
    let doc: ProcessCommandDoc = fx.json(&["suspend", &pid, "-p", &pid, "--pid", &pid], 0);
    assert_eq!(doc.pids(), [t.pid]);
    assert_eq!(fx.state_of(&t), "checkpointed");
}

/// A process whose rollback fails is reported as such: where it was left,
/// the rollback's own error, and no claim that it was rolled back.
#[test]
fn a_rollback_that_fails_is_reported_as_such() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let doc: ProcessCommandDoc = fx.json_with_inject(
        &args("suspend", &pids(&[&a, &b])),
        &format!("checkpoint@{}=error:999;restore@{}=error:999", b.pid, a.pid),
        9,
    );
    let culprit = doc.process(b.pid);
    assert_eq!(culprit.kind(), Kind::DriverError);
    assert!(culprit.rolled_back);
    assert_eq!(fx.fake_state(b.pid), "running");

    let stuck = doc.process(a.pid);
    assert!(!stuck.rolled_back, "{stuck:?}");
    assert_eq!(stuck.state, State::Checkpointed);
    assert_eq!(fx.fake_state(a.pid), "checkpointed");
    assert_eq!(
        stuck.step_names(),
        ["lock", "checkpoint", "restore(rollback)!"]
    );
    let rollback_error = stuck.rollback_error.as_ref().expect("the rollback's error");
    assert_eq!(rollback_error.code, Some(999));
    let message = &stuck.error().message;
    assert!(
        !message.contains("rolled back to"),
        "PID {} was not rolled back, yet its error says so: {message:?}",
        a.pid
    );
}

/// `suspend` of `a` and `b` (with `global` options first) with slow
/// checkpoints, once both locks are done: the checkpoints are in flight.
fn suspend_in_flight(
    fx: &Fixture,
    global: &[&str],
    a: &Target,
    b: &Target,
) -> crate::support::Guard {
    let (a, b) = (a.arg(), b.arg());
    let mut args = global.to_vec();
    args.extend(["suspend", &a, &b]);
    let child = fx
        .std_command(&args)
        .env("FAKE_CUDA_INJECT", "checkpoint=delay:800")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn_guarded();
    crate::support::wait_until("both locks", || {
        fx.calls().iter().filter(|c| c.short() == "lock 0").count() == 2
    });
    child
}

/// docs/guide/commands.md, "Several processes": SIGINT/SIGTERM during a group operation lets the driver
/// call in flight finish, then rolls back; a process is never left locked
/// by an interrupted cudackpt, which exits 128 + the signal's number as a
/// shell would report it (the JSON says the same).
#[test]
fn an_interrupted_suspend_rolls_the_group_back() {
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        let fx = Fixture::new();
        let (a, b) = (fx.cuda_target(), fx.cuda_target());
        let child = suspend_in_flight(&fx, &["--json"], &a, &b);
        std::thread::sleep(std::time::Duration::from_millis(100));
        let status = std::process::Command::new("sh")
            .args(["-c", &format!("kill -{signal} {}", child.id())])
            .status()
            .expect("run kill");
        assert!(status.success());
        let output = child.wait_with_output().expect("suspend exits");
        assert_eq!(
            output.status.code(),
            Some(code),
            "SIG{signal}: cudackpt must exit 128 + the signal, not die: {:?}",
            output.status
        );
        for t in [&a, &b] {
            assert_eq!(
                fx.fake_state(t.pid),
                "running",
                "SIG{signal}: PID {} must be rolled back",
                t.pid
            );
        }
        let doc: ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
        assert!(doc.processes.iter().all(|p| p.rolled_back), "{doc:?}");
        assert_eq!(doc.exit_code, code, "{doc:?}");
    }
}

/// A signal that rolls a group back is one failure, said once for the
/// whole group in words (`PIDs 7 and 9: interrupted by SIGINT; rolled back
/// to running`), not once a process (issue 36).
#[test]
fn an_interrupted_group_is_said_once_naming_every_process() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let child = suspend_in_flight(&fx, &[], &a, &b);
    crate::support::send_signal(i32::try_from(child.id()).expect("pid"), "INT");
    let output = child.wait_with_output().expect("suspend exits");
    assert_eq!(output.status.code(), Some(130));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("interrupted by SIGINT"))
        .collect();
    // In the order named.
    let (first, second) = (a.pid, b.pid);
    assert_eq!(
        said,
        [format!(
            "cudackpt: PIDs {first} and {second}: interrupted by SIGINT; rolled back to running"
        )],
        "{stderr}"
    );
}
