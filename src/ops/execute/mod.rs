//! Runs a validated operation on validated targets through a
//! `CheckpointApi`: the processes in a bounded pool of worker threads
//! (`pool`), state-changing commands phased so a group moves together (all
//! locks, then all checkpoints), and all-or-nothing: when any step fails,
//! every process already moved is rolled back to where it started
//! (`rollback`). Both are built on the executor's one-step primitives
//! (`executor`: a driver call timed and told, a lock in slices, a failed
//! call explained). Returns per-process reports; never prints.
//!
//! Also here: the signals that interrupt a run (`interrupt`) and a debug
//! build's failpoint (`failpoint`). Timeouts and the deadline's arithmetic
//! are the vocabulary's (`vocabulary::timeout`).

use std::thread;
use std::time::{Duration, Instant};

use crate::driver::GpuPair;
use crate::driver::{code, CallError, ProcessState};
use crate::ops::diagnose::{self, Attempt};
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::place::Place;
use crate::vocabulary::plan::{self, Operation, Plan, Step};
use crate::vocabulary::report::{CallRecord, TargetReport};
use crate::vocabulary::timeout::Timeout;

/// How often `wait` polls, at most.
const WAIT_POLL_MAX: Duration = Duration::from_millis(100);

impl Executor<'_> {
    /// Runs `operation` on every target; a restore goes through `map`
    /// (empty: in place).
    pub fn run(
        &self,
        operation: &Operation,
        targets: &[Target],
        map: &[GpuPair],
    ) -> Vec<TargetReport> {
        match operation {
            Operation::State { restore_tid } => {
                concurrently(targets, |t| self.query(t, true, *restore_tid))
            }
            Operation::RestoreTid => concurrently(targets, |t| self.query(t, false, true)),
            Operation::Wait { state, timeout } => {
                concurrently(targets, |t| self.wait(t, *state, *timeout))
            }
            _ => self.change_state(operation, targets, map),
        }
    }

    /// `state` (the state, and the restore thread id when `with_tid`), or
    /// `restore-tid` alone (`with_state` false).
    fn query(&self, target: &Target, with_state: bool, with_tid: bool) -> TargetReport {
        let started = Instant::now();
        let mut report = TargetReport::new(target.pid, Some(target.name.clone()));
        if with_state {
            match self.api.get_state(target.pid) {
                Ok(state) => report.state = Some(state),
                Err(error) => {
                    report.failure = Some(self.explain(Attempt::GetState, target, &error).0);
                    report.duration = started.elapsed();
                    return report;
                }
            }
            if with_tid {
                // Best effort: the state is the answer; the thread id is extra.
                report.restore_tid = self.api.restore_thread_id(target.pid).ok();
            }
        } else {
            match self.api.restore_thread_id(target.pid) {
                Ok(tid) => report.restore_tid = Some(tid),
                Err(error) => {
                    report.failure = Some(self.explain(Attempt::GetRestoreTid, target, &error).0)
                }
            }
        }
        report.duration = started.elapsed();
        report
    }

    /// Polls until the process reaches `wanted`, or the timeout passes.
    fn wait(&self, target: &Target, wanted: ProcessState, timeout: Timeout) -> TargetReport {
        let started = Instant::now();
        let deadline = timeout.as_duration().map(|limit| started + limit);
        let mut report = TargetReport::new(target.pid, Some(target.name.clone()));
        let mut interval = Duration::from_millis(2);
        loop {
            match self.api.get_state(target.pid) {
                Ok(state) => {
                    report.state_before.get_or_insert(state);
                    report.state = Some(state);
                    if state == wanted {
                        break;
                    }
                }
                Err(error) => {
                    report.failure = Some(self.explain(Attempt::GetState, target, &error).0);
                    break;
                }
            }
            if let Some(signal) = self.interrupt.signal() {
                report.failure = Some(Fault::interrupted(
                    signal,
                    format!(
                        "stopped waiting: interrupted by {}",
                        interrupt::signal_name(signal)
                    ),
                    "",
                ));
                break;
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                let still = report
                    .state
                    .map_or("unknown".to_string(), |s| s.to_string());
                report.failure = Some(Fault::new(
                    FaultKind::WaitTimeout,
                    format!(
                        "{} is still {still} after {timeout}; it did not become {wanted}",
                        diagnose::describe_process(target.pid, Some(&target.name))
                    ),
                    "wait longer with a larger --timeout (0 waits as long as it takes)",
                ));
                break;
            }
            let sleep = deadline.map_or(interval, |deadline| interval.min(deadline - now));
            thread::sleep(sleep);
            interval = (interval * 2).min(WAIT_POLL_MAX);
        }
        report.duration = started.elapsed();
        report
    }

    /// Every state-changing command: plan each process, run the plan phase
    /// by phase across the group, and roll everyone back if a step fails.
    fn change_state(
        &self,
        operation: &Operation,
        targets: &[Target],
        map: &[GpuPair],
    ) -> Vec<TargetReport> {
        let mut reports: Vec<TargetReport> = targets
            .iter()
            .map(|t| TargetReport::new(t.pid, Some(t.name.clone())))
            .collect();
        let current = if operation.needs_current_state() {
            match self.current_states(targets, &mut reports) {
                Some(states) => states,
                None => return reports,
            }
        } else {
            vec![None; targets.len()]
        };
        if let Operation::Toggle { .. } = operation {
            if refuse_mixed_toggle(&current, &mut reports) {
                return reports;
            }
        }
        let plans: Vec<Plan> = current
            .iter()
            .map(|state| plan::plan(operation, *state, map))
            .collect();
        if refuse_wrong_states(operation, targets, &plans, &mut reports) {
            return reports;
        }
        let mut done: Vec<Vec<Step>> = vec![Vec::new(); targets.len()];
        self.interrupt.track(
            targets
                .iter()
                .zip(reports.iter())
                .map(|(t, r)| Place {
                    pid: t.pid,
                    name: t.name.clone(),
                    state: r.state,
                    in_flight: None,
                })
                .collect(),
        );
        // One driver call on one process cannot be left half-done: it needs
        // no intent record (and saves a single step the record's cost),
        // unless the record must outlive the command (handed to CRIU).
        let calls: usize = plans
            .iter()
            .map(|plan| match plan {
                Plan::Steps(steps) => steps.len(),
                Plan::AlreadyThere | Plan::Refused(_) => 0,
            })
            .sum();
        let journaled = calls > 1 || (calls == 1 && self.journal_every_change);
        if let (Some(before_change), true) = (self.before_change, journaled) {
            before_change(&self.interrupt.places());
            self.interrupt.journaled();
        }
        // From here on processes move: a signal must roll back, not kill.
        // One short call (a lock, in slices of a second, or an unlock) reads
        // its signals between calls; anything longer has them watched.
        if calls == 1 && plans.iter().all(is_short_or_none) {
            self.interrupt.arm_polled();
        } else {
            self.interrupt.arm();
        }
        if let Some(cause) = self.run_phases(targets, &plans, &mut reports, &mut done) {
            self.roll_back(targets, &mut reports, &done, cause);
        }
        reports
    }

    /// Asks every process its state, before anything moves. `None` when one
    /// could not be asked: the group is then reported and goes no further.
    fn current_states(
        &self,
        targets: &[Target],
        reports: &mut [TargetReport],
    ) -> Option<Vec<Option<ProcessState>>> {
        let answers = concurrently(targets, |t| {
            let started = Instant::now();
            (self.api.get_state(t.pid), started.elapsed())
        });
        let mut states = Vec::with_capacity(targets.len());
        for ((report, target), (answer, took)) in reports.iter_mut().zip(targets).zip(answers) {
            report.duration += took;
            match answer {
                Ok(state) => {
                    report.state_before = Some(state);
                    report.state = Some(state);
                    states.push(Some(state));
                }
                Err(error) => {
                    let (failure, state_now) = self.explain(Attempt::GetState, target, &error);
                    report.failure = Some(failure);
                    report.state = state_now;
                    states.push(None);
                }
            }
        }
        if reports.iter().any(|r| r.failure.is_some()) {
            mark_not_attempted(reports, "another process could not be queried");
            return None;
        }
        Some(states)
    }

    /// Runs the plans phase by phase (all first steps, then all second
    /// steps). Returns why the group must be rolled back, if it must.
    fn run_phases(
        &self,
        targets: &[Target],
        plans: &[Plan],
        reports: &mut [TargetReport],
        done: &mut [Vec<Step>],
    ) -> Option<RollbackCause> {
        for phase in 0..=1 {
            let work: Vec<(usize, Step)> = plans
                .iter()
                .enumerate()
                .filter_map(|(i, plan)| match plan {
                    Plan::Steps(steps) => steps.iter().find(|s| s.phase() == phase).map(|s| (i, s)),
                    _ => None,
                })
                .map(|(i, step)| (i, self.within_deadline(step)))
                .collect();
            if work.is_empty() {
                continue;
            }
            if self.past_deadline() {
                return Some(RollbackCause::Deadline { slowest: None });
            }
            let (mut cause, slowest) = self.run_phase(targets, &work, reports, done);
            // A signal stops the group between phases, even after the last:
            // whoever interrupted us expects the processes as they were. So
            // does a deadline that passed while this phase ran.
            if let (None, Some(signal)) = (&cause, self.interrupt.signal()) {
                cause = Some(RollbackCause::Interrupted(signal));
            }
            let overran = self
                .deadline
                .is_some_and(|deadline| Instant::now() > deadline);
            if cause.is_none() && overran {
                cause = Some(RollbackCause::Deadline { slowest });
            }
            if cause.is_none() {
                if let Some(why) = self.locks_lost.and_then(|lost| lost()) {
                    cause = Some(RollbackCause::LockLost(why));
                }
            }
            if cause.is_some() {
                return cause;
            }
        }
        None
    }

    fn past_deadline(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
    }

    /// Runs one phase's steps concurrently and records them. Returns the
    /// first failure's cause, and the slowest step (for a deadline).
    fn run_phase(
        &self,
        targets: &[Target],
        work: &[(usize, Step)],
        reports: &mut [TargetReport],
        done: &mut [Vec<Step>],
    ) -> (Option<RollbackCause>, Option<(usize, Duration)>) {
        let results = concurrently(work, |(i, step)| {
            self.tell_started(&targets[*i], step, false);
            let outcome = self.step(targets[*i].pid, step);
            self.tell(&targets[*i], step, &outcome, false);
            outcome
        });
        let slowest = work
            .iter()
            .zip(&results)
            .max_by_key(|(_, (_, took))| *took)
            .map(|((i, _), (_, took))| (*i, *took));
        let mut cause = None;
        for ((i, step), (result, took)) in work.iter().zip(results) {
            let report = &mut reports[*i];
            report.duration += took;
            report.steps.push(CallRecord {
                step: step.kind(),
                duration: took,
                ok: result.is_ok(),
                rollback: false,
            });
            match result {
                Ok(()) => {
                    done[*i].push(step.clone());
                    report.state = Some(step.resulting_state());
                }
                Err(error) => {
                    let (failure, state_now, why) = match self.interrupted_lock(step, &error) {
                        Some(signal) => (
                            Fault::interrupted(
                                signal,
                                format!(
                                    "stopped locking {}: interrupted by {}",
                                    diagnose::describe_process(
                                        targets[*i].pid,
                                        Some(&targets[*i].name)
                                    ),
                                    interrupt::signal_name(signal)
                                ),
                                "run the command again when it may finish",
                            ),
                            Some(ProcessState::Running),
                            RollbackCause::Interrupted(signal),
                        ),
                        None => {
                            let (failure, state_now) =
                                self.explain(Attempt::Step(step), &targets[*i], &error);
                            if self.already_there(step, &error, state_now) {
                                report.state = state_now;
                                report.note = state_now.map(|state| format!("already {state}"));
                                continue;
                            }
                            (failure, state_now, RollbackCause::Failed(*i))
                        }
                    };
                    report.failure = Some(failure);
                    report.state = state_now;
                    cause.get_or_insert(why);
                }
            }
        }
        (cause, slowest)
    }

    /// Whether a failed step only met a process already where it leads: the
    /// driver said the state was wrong, and the state now is the step's
    /// own destination.
    fn already_there(
        &self,
        step: &Step,
        error: &CallError,
        state_now: Option<ProcessState>,
    ) -> bool {
        self.already_there_ok
            && matches!(error, CallError::Cuda { error, .. } if error.is(code::ILLEGAL_STATE))
            && state_now == Some(step.resulting_state())
    }

    /// The signal that cut a lock short (its last slice timed out because a
    /// signal stopped the slicing, not because its timeout passed).
    fn interrupted_lock(&self, step: &Step, error: &CallError) -> Option<i32> {
        let timed_out = matches!(error, CallError::Cuda { error, .. } if error.is(code::NOT_READY));
        match step {
            Step::Lock { .. } if timed_out => self.interrupt.signal(),
            _ => None,
        }
    }
}

/// Whether a plan's steps are only short ones: a lock (taken in slices of a
/// second) or an unlock.
fn is_short_or_none(plan: &Plan) -> bool {
    match plan {
        Plan::Steps(steps) => steps
            .iter()
            .all(|step| matches!(step, Step::Lock { .. } | Step::Unlock)),
        Plan::AlreadyThere | Plan::Refused(_) => true,
    }
}

/// Refuses a toggle over processes in different states (it would move them
/// in opposite directions). Returns whether it did.
fn refuse_mixed_toggle(current: &[Option<ProcessState>], reports: &mut [TargetReport]) -> bool {
    let known: Vec<ProcessState> = current.iter().flatten().copied().collect();
    let Some((first, other)) = plan::mixed_toggle(&known) else {
        return false;
    };
    for report in reports {
        report.failure = Some(Fault::new(
            FaultKind::WrongState,
            format!(
                "toggle refused for the whole group: some processes are {first} and some {other}, so toggle would move them in opposite directions"
            ),
            "use `suspend` or `resume` to move the group one way",
        ));
    }
    true
}

/// Reports the plans that cannot start (and notes the processes already
/// there). Returns whether any was refused: the group then does nothing.
fn refuse_wrong_states(
    operation: &Operation,
    targets: &[Target],
    plans: &[Plan],
    reports: &mut [TargetReport],
) -> bool {
    let mut refused = false;
    for ((report, target), plan) in reports.iter_mut().zip(targets).zip(plans) {
        match plan {
            Plan::Refused(wrong) => {
                refused = true;
                report.failure = Some(wrong_state(operation, target, wrong));
            }
            Plan::AlreadyThere => {
                report.note = report.state.map(|state| format!("already {state}"));
            }
            Plan::Steps(_) => {}
        }
    }
    if refused {
        mark_not_attempted(reports, "another process is in the wrong state");
    }
    refused
}

/// Why `operation` cannot start from where `target` is.
pub fn wrong_state(operation: &Operation, target: &Target, wrong: &plan::WrongState) -> Fault {
    Fault::new(
        FaultKind::WrongState,
        format!(
            "cannot {} {}: it is {}",
            operation.name(),
            diagnose::describe_process(target.pid, Some(&target.name)),
            wrong.state
        ),
        wrong.hint.clone(),
    )
}

/// Marks every process without a failure of its own as not attempted.
pub fn mark_not_attempted(reports: &mut [TargetReport], why: &str) {
    for report in reports.iter_mut().filter(|r| r.failure.is_none()) {
        report.note = None;
        report.failure = Some(Fault::new(
            FaultKind::NotAttempted,
            format!("not attempted: {why}"),
            "see the failure of the other process",
        ));
    }
}

mod executor;
pub mod failpoint;
pub mod interrupt;
mod pool;
mod rollback;
#[cfg(test)]
mod tests;

pub use executor::{
    call, cannot_answer, explain, restore_thread_stopped, BeforeChange, Caller, Executor,
};
pub use pool::concurrently;
use rollback::RollbackCause;
