//! Which PIDs are targets: a live thread-group leader the caller may act on,
//! that uses CUDA. Everything else exits 5 (or 6 for permission), checked
//! before the driver is asked when /proc can tell.

use std::os::unix::process::CommandExt;

use crate::support::{check_document, running_as_root, shorts, Fixture};
use crate::wire::{Kind, ProcessCommandDoc, State};

#[test]
fn pids_are_taken_positionally_and_with_p_and_pid() {
    let fx = Fixture::new();
    let (a, b, c) = (fx.cuda_target(), fx.cuda_target(), fx.cuda_target());
    // Positional PIDs first, then the flags, in order.
    let doc: ProcessCommandDoc = fx.json(
        &[
            "state",
            "-p",
            &b.arg(),
            &a.arg(),
            &format!("--pid={}", c.pid),
        ],
        0,
    );
    assert_eq!(doc.pids(), [a.pid, b.pid, c.pid]);
    assert!(doc.processes.iter().all(|p| p.state == State::Running));
}

#[test]
fn no_such_process_exits_5_without_a_driver_call() {
    let fx = Fixture::new();
    let dead = fx.cuda_target().kill_and_reap();
    for command in ["state", "lock", "suspend"] {
        let doc: ProcessCommandDoc = fx.json(&[command, &dead.to_string()], 5);
        let p = doc.only(dead);
        assert_eq!(p.kind(), Kind::NoSuchProcess);
        assert_eq!(p.error().message, format!("no process has PID {dead}"));
        assert!(p.error().hint.is_some());
        assert_eq!(p.state, State::Unknown);
        fx.assert_no_calls(command);
    }
}

#[test]
fn a_zombie_is_no_process() {
    let fx = Fixture::new();
    let mut zombie = fx.cuda_target();
    zombie.kill_leaving_zombie();
    let doc: ProcessCommandDoc = fx.json(&["lock", &zombie.arg()], 5);
    let p = doc.only(zombie.pid);
    assert_eq!(p.kind(), Kind::NoSuchProcess);
    assert!(p.error().message.contains("zombie"), "{p:?}");
    fx.assert_no_calls("lock on a zombie");
}

/// The driver would act on the whole process; cudackpt refuses and names
/// the process the thread belongs to.
#[test]
fn a_thread_id_is_refused_naming_its_process() {
    let fx = Fixture::new();
    let target = fx.threaded_cuda_target();
    let tid = target.threads()[2];
    assert_ne!(tid, target.pid);
    for command in ["state", "suspend"] {
        let doc: ProcessCommandDoc = fx.json(&[command, &tid.to_string()], 5);
        let p = doc.only(tid);
        let error = p.error();
        assert_eq!(error.kind, Kind::ThreadNotProcess);
        assert_eq!(
            error.message,
            format!(
                "{tid} is a thread of process {} (threads), not a process",
                target.pid
            )
        );
        assert!(
            error
                .hint
                .as_deref()
                .is_some_and(|h| h.contains(&format!("PID {}", target.pid))),
            "{error:?}"
        );
        fx.assert_no_calls(command);
    }
    assert_eq!(fx.state_of(&target), "running");
}

#[test]
fn a_live_process_without_cuda_is_not_a_cuda_process() {
    let fx = Fixture::new();
    let plain = fx.plain_target();
    for (command, call) in [("state", "get_state 3"), ("lock", "lock 3")] {
        let doc: ProcessCommandDoc = fx.json(&[command, &plain.arg()], 5);
        let p = doc.only(plain.pid);
        let error = p.error();
        assert_eq!(error.kind, Kind::NotCudaProcess);
        assert_eq!(
            error.cuda_error.as_deref(),
            Some("CUDA_ERROR_NOT_INITIALIZED")
        );
        assert_eq!(error.code, Some(3));
        assert!(
            error
                .message
                .contains(&format!("PID {} (sleep) is not a CUDA process", plain.pid)),
            "{error:?}"
        );
        assert_eq!(shorts(&fx.take_calls())[0], call);
    }
}

/// Exit 6, refused from /proc before the driver is asked: as root, run
/// cudackpt as nobody against a root-owned CUDA process; otherwise target
/// PID 1.
#[test]
fn another_users_process_is_permission_denied() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let (mut command, pid) = if running_as_root() {
        let bin = fx.world_runnable_cudackpt();
        let mut nobody = fx.command_for(&bin, &["--json", "lock", &target.arg()]);
        nobody.uid(65534).gid(65534).current_dir("/");
        (assert_cmd::Command::from_std(nobody), target.pid)
    } else {
        (fx.cudackpt(&["--json", "lock", "1"]), 1)
    };
    let doc: ProcessCommandDoc = check_document(&mut command, 6);
    let p = doc.only(pid);
    let error = p.error();
    assert_eq!(error.kind, Kind::PermissionDenied);
    assert!(
        error.message.contains(&format!("PID {pid}"))
            && error.message.contains("belongs to user 0"),
        "{error:?}"
    );
    assert!(error
        .hint
        .as_deref()
        .is_some_and(|h| h.contains("CAP_SYS_PTRACE")));
    fx.assert_no_calls("a refused target");
    assert_eq!(fx.fake_state(target.pid), "running");
}

/// Exit 6 from the driver: CUDA_ERROR_NOT_PERMITTED.
#[test]
fn a_driver_refusal_is_permission_denied() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let doc: ProcessCommandDoc = fx.json_with_inject(&["lock", &target.arg()], "lock=error:800", 6);
    let error = doc.only(target.pid).error();
    assert_eq!(error.kind, Kind::PermissionDenied);
    assert_eq!(
        error.cuda_error.as_deref(),
        Some("CUDA_ERROR_NOT_PERMITTED")
    );
    assert_eq!(error.code, Some(800));
    assert_eq!(fx.state_of(&target), "running");
}
