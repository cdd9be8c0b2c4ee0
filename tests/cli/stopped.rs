//! Stopped processes (SIGSTOP, a debugger, CRIU's freeze). On the real
//! driver GetState waits for as long as the process is stopped, so cudackpt
//! must not ask: it refuses (exit 4) or, in a listing, shows it as stopped.
//! The fake never blocks, so these tests assert that no such call is made.
//! Also: a signal while nothing has moved ends cudackpt at once.

use std::time::{Duration, Instant};

use crate::support::{proc_state, send_signal, shorts, wait_until, Fixture, SpawnGuarded};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// Stops a process and waits until the kernel shows it stopped (`kill`
/// returns before the signal has taken effect).
fn stop(pid: i32) {
    send_signal(pid, "STOP");
    wait_until("the process to stop", || proc_state(pid) == Some('T'));
}

/// The calls the fake saw for one PID.
fn calls_for(fx: &Fixture, pid: i32) -> Vec<String> {
    shorts(
        &fx.calls()
            .into_iter()
            .filter(|c| c.pid == pid)
            .collect::<Vec<_>>(),
    )
}

#[test]
fn state_of_a_stopped_process_is_refused_without_asking_the_driver() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    stop(target.pid);
    let doc: ProcessCommandDoc = fx.json(&["state", &target.arg()], 4);
    let process = doc.process(target.pid);
    assert_eq!(process.kind(), Kind::ProcessStopped);
    assert!(process.stopped);
    assert!(process.error().message.contains("stopped"), "{process:?}");
    assert!(process
        .error()
        .hint
        .as_deref()
        .is_some_and(|h| h.contains("kill -CONT")));
    assert_eq!(
        calls_for(&fx, target.pid),
        ["restore_tid 0"],
        "only the restore thread may be asked"
    );
    send_signal(target.pid, "CONT");
    let doc: ProcessCommandDoc = fx.json(&["state", &target.arg()], 0);
    assert_eq!(doc.process(target.pid).state, State::Running);
}

#[test]
fn the_restore_thread_of_a_stopped_process_is_still_answered() {
    // That query never waits; CRIU's plugin asks it of a frozen tree.
    let fx = Fixture::new();
    let target = fx.cuda_target();
    stop(target.pid);
    let doc: ProcessCommandDoc = fx.json(&["restore-tid", &target.arg()], 0);
    assert_eq!(doc.process(target.pid).restore_tid, Some(target.pid));
    let output = fx
        .cudackpt(&["--get-restore-tid", "--pid", &target.arg()])
        .assert()
        .success()
        .get_output()
        .clone();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{}\n", target.pid)
    );
    send_signal(target.pid, "CONT");
}

#[test]
fn ps_lists_a_stopped_process_as_stopped_and_succeeds() {
    let fx = Fixture::new();
    let (stopped, running) = (fx.cuda_target(), fx.cuda_target());
    stop(stopped.pid);
    let doc: ProcessCommandDoc = fx.json(&["ps"], 0);
    let row = doc.process(stopped.pid);
    assert!(
        row.ok && row.stopped && row.state == State::Unknown,
        "{row:?}"
    );
    assert_eq!(doc.process(running.pid).state, State::Running);
    assert!(!calls_for(&fx, stopped.pid)
        .iter()
        .any(|c| c.starts_with("get_state")));
    let output = fx
        .cudackpt(&["ps", "--tree", &stopped.arg()])
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(String::from_utf8_lossy(&output.stdout).contains("stopped"));
    send_signal(stopped.pid, "CONT");
}

#[test]
fn a_group_with_a_stopped_member_is_refused_before_any_change() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    stop(b.pid);
    let doc: ProcessCommandDoc = fx.json(&["suspend", &a.arg(), &b.arg()], 4);
    assert_eq!(doc.process(b.pid).kind(), Kind::ProcessStopped);
    assert_eq!(doc.process(a.pid).kind(), Kind::NotAttempted);
    assert!(
        fx.calls().iter().all(|c| c.op == "restore_tid"),
        "nothing but restore-thread queries: {:?}",
        shorts(&fx.calls())
    );
    send_signal(b.pid, "CONT");
    assert_eq!(fx.fake_state(a.pid), "running");
}

#[test]
fn the_compatible_grammar_refuses_a_stopped_process_with_exit_1() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    stop(target.pid);
    let output = fx
        .cudackpt(&["--get-state", "--pid", &target.arg()])
        .assert()
        .code(1)
        .get_output()
        .clone();
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is stopped"));
    send_signal(target.pid, "CONT");
}

#[test]
fn a_signal_while_nothing_has_moved_ends_cudackpt_at_once() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    // `wait` only queries, so a signal must end it now, not be deferred.
    let mut child = fx
        .std_command(&["wait", "--state", "checkpointed", &target.arg()])
        .spawn_guarded();
    wait_until("a few polls", || calls_for(&fx, target.pid).len() >= 2);
    let signalled = Instant::now();
    send_signal(child.id() as i32, "TERM");
    let status = child.wait().expect("wait exits");
    assert!(
        signalled.elapsed() < Duration::from_secs(2),
        "took {:?}",
        signalled.elapsed()
    );
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    assert_eq!(fx.fake_state(target.pid), "running");
}
