//! The executor against a model of the driver: phasing, concurrency,
//! rollback and reporting, without processes or a GPU.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::pool::in_pool;
use super::rollback::group_failure;
use super::*;
use crate::driver::model::Model;
use crate::ops::execute::interrupt::Interrupt;
use crate::vocabulary::plan::DriverCall;

use ProcessState::*;

fn targets(pids: &[i32]) -> Vec<Target> {
    pids.iter()
        .map(|&pid| Target {
            pid,
            name: format!("worker{pid}"),
            stopped: false,
            parent: 1,
            identity: Default::default(),
        })
        .collect()
}

fn run(model: &Model, operation: Operation, pids: &[i32]) -> Vec<TargetReport> {
    run_with(model, operation, pids, Interrupt::never())
}

fn run_with(
    model: &Model,
    operation: Operation,
    pids: &[i32],
    interrupt: Interrupt,
) -> Vec<TargetReport> {
    run_full(model, operation, pids, interrupt, None)
}

fn run_full(
    model: &Model,
    operation: Operation,
    pids: &[i32],
    interrupt: Interrupt,
    deadline: Option<Instant>,
) -> Vec<TargetReport> {
    let executor = Executor {
        api: model,
        caller_privileged: true,
        is_alive: |_| true,
        interrupt,
        deadline,
        progress: None,
        locks_lost: None,
        before_change: None,
        already_there_ok: true,
        journal_every_change: false,
    };
    executor.run(&operation, &targets(pids), &[])
}

fn suspend() -> Operation {
    Operation::Suspend {
        timeout: Timeout::from_millis(500),
    }
}

#[test]
fn a_group_suspends_phase_by_phase() {
    let model = Model::with(&[(1, Running), (2, Running), (3, Running)]);
    let reports = run(&model, suspend(), &[1, 2, 3]);
    assert!(reports.iter().all(TargetReport::ok));
    assert!(reports
        .iter()
        .all(|r| r.state == Some(Checkpointed) && r.state_before == Some(Running)));
    let calls = model.calls();
    let last_lock = calls
        .iter()
        .rposition(|c| c.starts_with("lock"))
        .expect("locks");
    let first_checkpoint = calls
        .iter()
        .position(|c| c.starts_with("checkpoint"))
        .expect("checkpoints");
    assert!(
        last_lock < first_checkpoint,
        "every lock before any checkpoint: {calls:?}"
    );
    assert_eq!(
        reports[0].steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        [DriverCall::Lock, DriverCall::Checkpoint]
    );
}

#[test]
fn group_calls_overlap_instead_of_adding_up() {
    let model = Model {
        delay: Duration::from_millis(200),
        ..Model::with(&[(1, Running), (2, Running), (3, Running), (4, Running)])
    };
    let started = Instant::now();
    let reports = run(&model, suspend(), &[1, 2, 3, 4]);
    assert!(reports.iter().all(TargetReport::ok));
    // Two phases of 200 ms each; one by one it would be eight.
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_failed_checkpoint_rolls_the_whole_group_back() {
    let model =
        Model::with(&[(1, Running), (2, Running), (3, Running)]).failing(2, "checkpoint", 999);
    let reports = run(&model, suspend(), &[1, 2, 3]);
    for pid in [1, 2, 3] {
        assert_eq!(model.state(pid), Running, "pid {pid} back where it started");
    }
    assert_eq!(
        reports[1].failure.as_ref().map(|f| f.kind),
        Some(FaultKind::DriverError)
    );
    assert_eq!(
        reports[0].failure.as_ref().map(|f| f.kind),
        Some(FaultKind::RolledBack)
    );
    assert!(reports
        .iter()
        .all(|r| r.rolled_back && r.state == Some(Running)));
    assert!(reports[0]
        .failure
        .as_ref()
        .is_some_and(|f| f.message.contains("PID 2 (worker2)")));
    let report = crate::vocabulary::report::CommandReport {
        processes: reports,
        ..crate::vocabulary::report::CommandReport::new("suspend", Duration::ZERO)
    };
    assert_eq!(report.exit_status(), crate::exit::ExitStatus::Failed);
}

#[test]
fn a_lock_timeout_unlocks_the_others_and_exits_3() {
    let model = Model::with(&[(1, Running), (2, Running)]).failing(1, "lock", 600);
    let reports = run(&model, suspend(), &[1, 2]);
    assert_eq!(model.state(1), Running);
    assert_eq!(model.state(2), Running);
    assert!(
        !model.calls().iter().any(|c| c.starts_with("checkpoint")),
        "no checkpoint after a failed phase"
    );
    let report = crate::vocabulary::report::CommandReport {
        processes: reports,
        ..crate::vocabulary::report::CommandReport::new("suspend", Duration::ZERO)
    };
    assert_eq!(report.exit_status(), crate::exit::ExitStatus::LockTimeout);
    assert!(
        !report.processes[0].rolled_back,
        "nothing to undo for the one that never locked"
    );
    assert!(report.processes[1].rolled_back);
}

#[test]
fn resume_failures_put_restored_processes_back_to_checkpointed() {
    let model = Model::with(&[(1, Checkpointed), (2, Checkpointed)]).failing(2, "restore", 2);
    let reports = run(&model, Operation::Resume, &[1, 2]);
    assert_eq!(model.state(1), Checkpointed);
    assert_eq!(model.state(2), Checkpointed);
    assert_eq!(
        reports[1].failure.as_ref().map(|f| f.kind),
        Some(FaultKind::OutOfMemory)
    );
}

#[test]
fn a_failed_rollback_is_reported_not_hidden() {
    let model = Model::with(&[(1, Running), (2, Running)])
        .failing(2, "checkpoint", 999)
        .failing(1, "restore", 999);
    let reports = run(&model, suspend(), &[1, 2]);
    assert!(reports[0].rollback_failure.is_some());
    assert_eq!(
        reports[0].state,
        Some(Checkpointed),
        "the state it is really in"
    );
    assert!(reports[1].rolled_back);
}

#[test]
fn compound_commands_are_idempotent() {
    let model = Model::with(&[(1, Checkpointed), (2, Running)]);
    let reports = run(&model, suspend(), &[1, 2]);
    assert!(reports.iter().all(TargetReport::ok));
    assert_eq!(reports[0].note.as_deref(), Some("already checkpointed"));
    assert!(reports[0].steps.is_empty());
    assert_eq!(model.state(2), Checkpointed);
}

#[test]
fn mixed_toggles_are_refused_before_any_call() {
    let model = Model::with(&[(1, Checkpointed), (2, Running)]);
    let reports = run(
        &model,
        Operation::Toggle {
            timeout: Timeout::NONE,
        },
        &[1, 2],
    );
    assert!(model.calls().is_empty());
    assert!(reports.iter().all(|r| r
        .failure
        .as_ref()
        .is_some_and(|f| f.kind == FaultKind::WrongState)));
}

#[test]
fn a_refused_plan_stops_the_group_before_any_call() {
    let model = Model::with(&[(1, Running), (2, Failed)]);
    let reports = run(&model, suspend(), &[1, 2]);
    assert!(model.calls().is_empty());
    assert_eq!(
        reports[0].failure.as_ref().map(|f| f.kind),
        Some(FaultKind::NotAttempted)
    );
    assert_eq!(
        reports[1].failure.as_ref().map(|f| f.kind),
        Some(FaultKind::WrongState)
    );
}

#[test]
fn a_single_step_where_the_process_already_is_succeeds_already_there() {
    let model = Model::with(&[(1, Running)]);
    let reports = run(&model, Operation::Unlock, &[1]);
    assert!(reports[0].failure.is_none(), "{:?}", reports[0].failure);
    assert_eq!(reports[0].note.as_deref(), Some("already running"));
    assert_eq!(reports[0].state, Some(Running));
}

#[test]
fn single_steps_explain_a_wrong_state() {
    let model = Model::with(&[(1, Checkpointed)]);
    let reports = run(&model, Operation::Unlock, &[1]);
    let failure = reports[0].failure.as_ref().expect("fails");
    assert_eq!(failure.kind, FaultKind::WrongState);
    assert_eq!(reports[0].state, Some(Checkpointed));
    assert!(
        failure.message.contains("it is checkpointed"),
        "{}",
        failure.message
    );
}

#[test]
fn state_reports_the_restore_thread() {
    let model = Model::with(&[(7, Locked)]);
    let reports = run(&model, Operation::State { restore_tid: true }, &[7]);
    assert_eq!(
        (reports[0].state, reports[0].restore_tid),
        (Some(Locked), Some(8))
    );
}

#[test]
fn wait_returns_once_the_state_is_reached_and_times_out_otherwise() {
    let model = Model::with(&[(1, Locked)]);
    let reports = run(
        &model,
        Operation::Wait {
            state: Locked,
            timeout: Timeout::from_millis(1000),
        },
        &[1],
    );
    assert!(reports[0].ok());
    let started = Instant::now();
    let reports = run(
        &model,
        Operation::Wait {
            state: Running,
            timeout: Timeout::from_millis(50),
        },
        &[1],
    );
    assert_eq!(
        reports[0].failure.as_ref().map(|f| f.kind),
        Some(FaultKind::WaitTimeout)
    );
    assert!(started.elapsed() >= Duration::from_millis(50));
}

#[test]
fn a_signal_stops_the_group_after_the_phase_in_flight_and_rolls_it_back() {
    let model = Model::with(&[(1, Running), (2, Running)]);
    let interrupt = Interrupt::never();
    interrupt.raise(15);
    let reports = run_with(&model, suspend(), &[1, 2], interrupt);
    // The lock phase in flight finishes, no checkpoint starts, the locks
    // are undone.
    let mut calls = model.calls();
    calls.sort();
    assert_eq!(calls, ["lock 1", "lock 2", "unlock 1", "unlock 2"]);
    for report in &reports {
        assert!(
            report.rolled_back && report.state == Some(Running),
            "{report:?}"
        );
        let failure = report.failure.as_ref().expect("interrupted");
        assert_eq!(failure.kind, FaultKind::Interrupted);
        assert!(failure.message.contains("SIGTERM"), "{}", failure.message);
    }
    let report = crate::vocabulary::report::CommandReport {
        processes: reports,
        ..crate::vocabulary::report::CommandReport::new("suspend", Duration::ZERO)
    };
    assert_eq!(report.exit_status(), crate::exit::ExitStatus::Terminated);
    assert_eq!(report.exit_status().code(), 143, "SIGTERM: 128 + 15");
}

#[test]
fn a_wait_ends_when_interrupted() {
    let model = Model::with(&[(1, Running)]);
    let interrupt = Interrupt::never();
    interrupt.raise(2);
    let reports = run_with(
        &model,
        Operation::Wait {
            state: Checkpointed,
            timeout: Timeout::NONE,
        },
        &[1],
        interrupt,
    );
    assert_eq!(
        reports[0].failure.as_ref().map(|f| f.kind),
        Some(FaultKind::Interrupted)
    );
}

#[test]
fn a_deadline_that_passes_mid_group_rolls_it_back_and_names_the_slowest() {
    let model = Model {
        delay: Duration::from_millis(150),
        ..Model::with(&[(1, Running), (2, Running)])
    };
    let deadline = Instant::now() + Duration::from_millis(200);
    let reports = run_full(
        &model,
        suspend(),
        &[1, 2],
        Interrupt::never(),
        Some(deadline),
    );
    for (pid, report) in [1, 2].into_iter().zip(&reports) {
        assert_eq!(model.state(pid), Running);
        let failure = report.failure.as_ref().expect("deadline");
        assert_eq!(failure.kind, FaultKind::DeadlineExceeded);
        assert!(
            failure.message.contains("slowest step was PID"),
            "{}",
            failure.message
        );
    }
    let report = crate::vocabulary::report::CommandReport {
        processes: reports,
        ..crate::vocabulary::report::CommandReport::new("suspend", Duration::ZERO)
    };
    assert_eq!(report.exit_status(), crate::exit::ExitStatus::Failed);
}

#[test]
fn a_deadline_shortens_lock_timeouts_and_stops_before_a_phase_past_it() {
    let model = Model::with(&[(1, Running)]);
    let deadline = Instant::now() + Duration::from_millis(5_000);
    let reports = run_full(
        &model,
        Operation::Suspend {
            timeout: Timeout::NONE,
        },
        &[1],
        Interrupt::never(),
        Some(deadline),
    );
    assert!(reports[0].ok());
    let timeouts = model.lock_timeouts.lock().expect("model lock").clone();
    assert!(
        timeouts.len() == 1 && timeouts[0] > 0 && timeouts[0] <= 5_000,
        "no timeout became the time left: {timeouts:?}"
    );

    let model = Model::with(&[(1, Running)]);
    let passed = Instant::now() - Duration::from_millis(1);
    let reports = run_full(&model, suspend(), &[1], Interrupt::never(), Some(passed));
    assert!(model.calls().is_empty(), "nothing starts past the deadline");
    assert_eq!(
        reports[0].failure.as_ref().map(|f| f.kind),
        Some(FaultKind::DeadlineExceeded)
    );
}

#[test]
fn a_rolled_back_group_says_of_each_process_what_happened_to_it() {
    let report = |failure: Option<FaultKind>, note: bool, rolled_back: bool| TargetReport {
        failure: failure.map(|kind| Fault::new(kind, "own", "")),
        note: note.then(|| "already running".to_string()),
        rolled_back,
        state: Some(Running),
        ..TargetReport::new(1, None)
    };
    let failed = &RollbackCause::Failed(0);
    let because = "PID 2 failed";
    assert!(
        group_failure(
            &report(Some(FaultKind::LockTimeout), false, false),
            failed,
            because,
            false
        )
        .is_none(),
        "its own failure stands"
    );
    assert!(
        group_failure(&report(None, true, false), failed, because, true).is_none(),
        "it needed nothing"
    );
    let kind = |r: &TargetReport, cause: &RollbackCause, nothing_done| {
        group_failure(r, cause, because, nothing_done).map(|f| f.kind)
    };
    assert_eq!(
        kind(&report(None, false, false), failed, true),
        Some(FaultKind::NotAttempted)
    );
    assert_eq!(
        kind(&report(None, false, true), failed, false),
        Some(FaultKind::RolledBack)
    );
    assert_eq!(
        kind(
            &report(None, true, false),
            &RollbackCause::Interrupted(15),
            true
        ),
        Some(FaultKind::Interrupted),
        "an interrupted group explains even the processes that needed nothing"
    );
    let mut unrolled = report(None, false, false);
    unrolled.rollback_failure = Some(Fault::new(FaultKind::DriverError, "x", ""));
    let failure = group_failure(&unrolled, failed, because, false).expect("a failure");
    assert_eq!(failure.kind, FaultKind::RollbackFailed);
    assert!(
        failure.message.contains("it is left running"),
        "{failure:?}"
    );
}

#[test]
fn a_pool_that_cannot_start_its_threads_still_does_all_the_work_in_order() {
    let items: Vec<usize> = (0..200).collect();
    let square = |i: &usize| i * i;
    let expected: Vec<usize> = items.iter().map(square).collect();
    // All workers start; a few start, then the OS says no; none at all.
    for may_start in [
        &(|_| true) as &(dyn Fn(usize) -> bool + Sync),
        &|n| n < 3,
        &|_| false,
    ] {
        assert_eq!(in_pool(&items, square, 16, may_start), expected);
    }
    assert_eq!(in_pool(&items[..1], square, 16, &|_| false), [0]);
    assert!(in_pool(&items[..0], square, 16, &|_| true).is_empty());
}

#[test]
fn the_pool_runs_its_workers_at_once_but_never_more_than_its_size() {
    let running = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let items: Vec<usize> = (0..40).collect();
    in_pool(
        &items,
        |_| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            running.fetch_sub(1, Ordering::SeqCst);
        },
        8,
        &|_| true,
    );
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak > 1 && peak <= 8, "peak {peak}");
}

#[test]
fn a_lock_timeout_within_one_slice_is_one_call_of_exactly_that_timeout() {
    let model = Model::with(&[(1, Running)]);
    run(
        &model,
        Operation::Lock {
            timeout: Timeout::from_millis(200),
        },
        &[1],
    );
    assert_eq!(*model.lock_timeouts.lock().expect("model lock"), [200]);
}

#[test]
fn one_driver_call_on_one_process_writes_no_intent_and_more_calls_do() {
    let lock = Operation::Lock {
        timeout: Timeout::from_millis(500),
    };
    for (pids, operation, records) in [
        (&[1][..], lock.clone(), 0),
        (&[1, 2][..], lock, 1),
        (&[1][..], suspend(), 1),
    ] {
        let model = Model::with(&[(1, Running), (2, Running)]);
        let written = AtomicUsize::new(0);
        let record = |_: &[Place]| {
            written.fetch_add(1, Ordering::SeqCst);
        };
        let executor = Executor {
            api: &model,
            caller_privileged: true,
            is_alive: |_| true,
            interrupt: Interrupt::never(),
            deadline: None,
            progress: None,
            locks_lost: None,
            before_change: Some(&record),
            already_there_ok: true,
            journal_every_change: false,
        };
        let reports = executor.run(&operation, &targets(pids), &[]);
        assert!(reports.iter().all(|r| r.ok()), "{reports:?}");
        assert_eq!(
            written.load(Ordering::SeqCst),
            records,
            "{} on {pids:?}",
            operation.name()
        );
    }
}
