//! Two cudackpt at once on one process, and a process that exits in the
//! middle of a group operation: clear answers, no corruption, and the rest
//! of the group put back.

use std::process::Stdio;

use crate::support::{parse_one_document, wait_until, Fixture, SpawnGuarded};
use crate::wire::{Kind, ProcessCommandDoc};

#[test]
fn a_second_cudackpt_on_the_same_process_is_told_and_changes_nothing() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let first = fx
        .std_command(&["--json", "suspend", &target.arg()])
        .env("FAKE_CUDA_INJECT", "checkpoint=delay:1500")
        .stdout(Stdio::piped())
        .spawn_guarded();
    wait_until("the first to lock", || {
        fx.calls().iter().any(|c| c.op == "lock")
    });
    let second: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 10);
    let error = second.process(target.pid).error();
    assert_eq!(error.kind, Kind::InUse);
    assert!(
        error.message.contains(&first.id().to_string()),
        "names the holder: {error:?}"
    );
    let output = first.wait_with_output().expect("first finishes");
    assert_eq!(output.status.code(), Some(0));
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    assert!(doc.ok, "{doc:?}");
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
    let ops: Vec<String> = fx
        .calls()
        .iter()
        .filter(|c| c.op != "get_state" && c.op != "restore_tid")
        .map(|c| c.short())
        .collect();
    assert_eq!(
        ops,
        ["lock 0", "checkpoint 0"],
        "only the first one's steps"
    );
    // Once it is done, the process is free again.
    fx.cudackpt(&["resume", &target.arg()]).assert().success();
}

#[test]
fn a_process_that_exits_mid_group_is_reported_and_the_rest_rolled_back() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let run = fx
        .std_command(&["--json", "suspend", &a.arg(), &b.arg()])
        .env("FAKE_CUDA_INJECT", "checkpoint=delay:800")
        .stdout(Stdio::piped())
        .spawn_guarded();
    wait_until("both locked", || {
        fx.calls().iter().filter(|c| c.short() == "lock 0").count() == 2
    });
    let b_pid = b.pid;
    b.kill_and_reap();
    let output = run.wait_with_output().expect("suspend finishes");
    assert_eq!(
        output.status.code(),
        Some(5),
        "the exit status of the process that vanished"
    );
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    assert_eq!(doc.process(b_pid).error().kind, Kind::NoSuchProcess);
    let survivor = doc.process(a.pid);
    assert!(survivor.rolled_back, "{survivor:?}");
    assert_eq!(fx.fake_state(a.pid), "running");
}
