//! Groups run concurrently (docs/guide/commands.md, "Several processes"): one worker per process, so a
//! group of slow checkpoints takes about as long as one, and a failure on
//! one process of a larger group still rolls every other one back.

use std::time::{Duration, Instant};

use crate::support::{Fixture, Target};
use crate::wire::{Kind, ProcessCommandDoc, State, StepName};

fn args<'a>(command: &'a str, pids: &'a [String]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend(pids.iter().map(String::as_str));
    args
}

#[test]
fn slow_checkpoints_of_a_group_overlap() {
    let fx = Fixture::new();
    let targets: Vec<Target> = (0..4).map(|_| fx.cuda_target()).collect();
    let pids: Vec<String> = targets.iter().map(Target::arg).collect();

    let started = Instant::now();
    let doc: ProcessCommandDoc =
        fx.json_with_inject(&args("suspend", &pids), "checkpoint=delay:1000", 0);
    let took = started.elapsed();
    // One after another would take 4 s; a generous bound for concurrency.
    assert!(
        took < Duration::from_millis(2500),
        "4 checkpoints of 1 s each took {took:?}: they did not run concurrently"
    );
    for t in &targets {
        let p = doc.process(t.pid);
        assert_eq!(p.state, State::Checkpointed, "{p:?}");
        let checkpoint = p
            .steps
            .iter()
            .find(|s| s.step == StepName::Checkpoint)
            .expect("a checkpoint step");
        assert!(checkpoint.duration_ms >= 1000.0, "{p:?}");
        assert_eq!(fx.fake_state(t.pid), "checkpointed");
    }
}

#[test]
fn a_failure_on_one_of_five_leaves_all_five_running() {
    let fx = Fixture::new();
    let targets: Vec<Target> = (0..5).map(|_| fx.cuda_target()).collect();
    let pids: Vec<String> = targets.iter().map(Target::arg).collect();
    let culprit = targets[2].pid;

    let doc: ProcessCommandDoc = fx.json_with_inject(
        &args("suspend", &pids),
        &format!("checkpoint@{culprit}=error:999"),
        1,
    );
    assert_eq!(
        doc.pids(),
        targets.iter().map(|t| t.pid).collect::<Vec<_>>()
    );
    for t in &targets {
        let p = doc.process(t.pid);
        let expected = if t.pid == culprit {
            Kind::DriverError
        } else {
            Kind::RolledBack
        };
        assert_eq!(p.kind(), expected, "{p:?}");
        assert!(p.rolled_back, "{p:?}");
        assert_eq!(p.state, State::Running, "{p:?}");
        assert_eq!(fx.state_of(t), "running", "PID {} is back", t.pid);
    }
    let culprit_report = doc.process(culprit);
    assert_eq!(culprit_report.error().code, Some(999));
    assert_eq!(
        culprit_report.step_names(),
        ["lock", "checkpoint!", "unlock(rollback)"]
    );
}
