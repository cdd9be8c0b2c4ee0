//! Rolling a group back: every completed step of every process undone,
//! newest first, each process in its own worker; and what each report then
//! says, by why the group was rolled back.

use std::time::Duration;

use super::executor::Executor;
use super::interrupt;
use super::pool::concurrently;
use crate::driver::ProcessState;
use crate::ops::diagnose::{self, Attempt};
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::{self, Step};
use crate::vocabulary::report::{CallRecord, TargetReport};
use crate::vocabulary::timeout::Timeout;

/// How long a rollback waits to re-lock a process it had already unlocked.
/// Bounded so a rollback can never hang on a busy process.
pub const ROLLBACK_LOCK_TIMEOUT: Timeout = Timeout::from_millis(30_000);

impl Executor<'_> {
    /// Undoes every completed step of every process, newest first, each
    /// process in its own worker, and says in each report why and how far.
    pub(super) fn roll_back(
        &self,
        targets: &[Target],
        reports: &mut [TargetReport],
        done: &[Vec<Step>],
        cause: RollbackCause,
    ) {
        let outcomes = self.undo_all(targets, reports, done);
        let because = cause.because(targets);
        let cause = &cause;
        for ((report, steps_done), (records, outcome)) in reports.iter_mut().zip(done).zip(outcomes)
        {
            report.duration += records.iter().map(|r| r.duration).sum::<Duration>();
            report.steps.extend(records);
            match outcome {
                Ok(Some(state)) => {
                    report.rolled_back = true;
                    report.state = Some(state);
                }
                Ok(None) => {}
                Err((failure, state_now)) => {
                    report.rollback_failure = Some(failure);
                    report.state = state_now;
                }
            }
            if let Some(failure) = group_failure(report, cause, &because, steps_done.is_empty()) {
                report.note = None;
                report.failure = Some(failure);
            }
        }
    }

    /// Runs every process's undo steps, concurrently: what each ran, and the
    /// state it ended in (or why its rollback failed).
    fn undo_all(
        &self,
        targets: &[Target],
        reports: &[TargetReport],
        done: &[Vec<Step>],
    ) -> Vec<(Vec<CallRecord>, Undone)> {
        let indexes: Vec<usize> = (0..targets.len()).collect();
        concurrently(&indexes, |&i| {
            // A process that is gone has nothing left to roll back.
            let gone = reports[i]
                .failure
                .as_ref()
                .is_some_and(|f| f.kind == FaultKind::NoSuchProcess);
            let mut records = Vec::new();
            let mut last_state = None;
            if gone {
                return (records, Ok(last_state));
            }
            for step in plan::rollback_steps(&done[i], ROLLBACK_LOCK_TIMEOUT) {
                self.tell_started(&targets[i], &step, true);
                let outcome = self.step(targets[i].pid, &step);
                self.tell(&targets[i], &step, &outcome, true);
                let (result, took) = outcome;
                records.push(CallRecord {
                    step: step.kind(),
                    duration: took,
                    ok: result.is_ok(),
                    rollback: true,
                });
                match result {
                    Ok(()) => last_state = Some(step.resulting_state()),
                    Err(error) => {
                        let (failure, state_now) =
                            self.explain(Attempt::Step(&step), &targets[i], &error);
                        return (records, Err((failure, state_now)));
                    }
                }
            }
            (records, Ok(last_state))
        })
    }
}

/// How one process's rollback ended: the state it reached (`None`: it had
/// nothing to undo), or the failure and the state it was left in.
type Undone = Result<Option<ProcessState>, (Fault, Option<ProcessState>)>;

/// What a rolled-back group says of one process that has no failure of its
/// own (`None`: its own failure says it all, or it needed nothing).
pub(super) fn group_failure(
    report: &TargetReport,
    cause: &RollbackCause,
    because: &str,
    nothing_done: bool,
) -> Option<Fault> {
    if report.failure.is_some() {
        // Its own failure says it all (a failed rollback of it is in
        // rollback_error).
        return None;
    }
    let now = report
        .state
        .map_or("an unknown state".to_string(), |s| s.to_string());
    if report.rollback_failure.is_some() {
        return Some(Fault::new(
            FaultKind::RollbackFailed,
            format!("{because}, and this process could not be rolled back: it is left {now}"),
            format!(
                "bring it back by hand (`cudackpt resume {}` or `unlock`); see rollback_error",
                report.pid
            ),
        ));
    }
    let stopped = match cause {
        RollbackCause::Failed(_) => None,
        RollbackCause::Interrupted(_) => Some((
            FaultKind::Interrupted,
            "run the command again when it may finish",
        )),
        RollbackCause::Deadline { .. } => Some((
            FaultKind::DeadlineExceeded,
            "give it a longer --deadline; `cudackpt -v` shows how long each step took",
        )),
        RollbackCause::LockLost(_) => Some((
            FaultKind::LockUnavailable,
            "something removed cudackpt's lock directory mid-run (a tmpfiles cleaner?); keep it (/run/cudackpt/locks) and run the command again",
        )),
    };
    Some(match stopped {
        // It needed nothing.
        None if report.note.is_some() => return None,
        Some((kind, hint)) => {
            let what = if report.rolled_back {
                format!("rolled back to {now}")
            } else {
                format!("left {now}")
            };
            let fault = Fault::new(kind, format!("{because}; {what}"), hint);
            match cause {
                RollbackCause::Interrupted(signal) => Fault {
                    signal: Some(*signal),
                    ..fault
                },
                _ => fault,
            }
        }
        None if nothing_done => Fault::new(
            FaultKind::NotAttempted,
            format!("not attempted: {because} first"),
            "see the failure of the other process",
        ),
        None => Fault::new(
            FaultKind::RolledBack,
            format!("rolled back to {now} because {because}"),
            "see the failure of the other process",
        ),
    })
}

/// Why a group is being rolled back.
#[derive(Debug, Clone)]
pub(super) enum RollbackCause {
    /// The process at this index failed a step.
    Failed(usize),
    /// A signal arrived.
    Interrupted(i32),
    /// The deadline passed; the slowest step of the last phase, if one ran.
    Deadline { slowest: Option<(usize, Duration)> },
    /// The per-PID locks stopped keeping others out (why, in words).
    LockLost(String),
}

impl RollbackCause {
    /// The cause in words, for every process's report.
    fn because(&self, targets: &[Target]) -> String {
        let who = |i: usize| diagnose::describe_process(targets[i].pid, Some(&targets[i].name));
        match *self {
            RollbackCause::LockLost(ref why) => format!("cudackpt lost its locks: {why}"),
            RollbackCause::Failed(i) => format!("{} failed", who(i)),
            RollbackCause::Interrupted(signal) => {
                format!("interrupted by {}", interrupt::signal_name(signal))
            }
            RollbackCause::Deadline {
                slowest: Some((i, took)),
            } => format!(
                "the deadline passed; the slowest step was {}'s ({})",
                who(i),
                crate::vocabulary::timeout::format_duration(took)
            ),
            RollbackCause::Deadline { slowest: None } => "the deadline passed".to_string(),
        }
    }
}
