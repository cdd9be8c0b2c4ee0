//! Runs a validated operation on validated targets through a
//! [`CheckpointApi`]: the processes in a bounded pool of worker threads
//! (`pool`), state-changing commands phased so a group moves together (all
//! locks, then all checkpoints), and all-or-nothing: when any step fails,
//! every process already moved is rolled back to where it started
//! (`rollback`). Returns per-process reports; never prints.
//!
//! Also here, what governs a run in time: the signals that interrupt it
//! (`interrupt`), timeouts and deadlines (`timeout`), and a debug build's
//! failpoint (`failpoint`).

use std::thread;
use std::time::{Duration, Instant};

use crate::driver::GpuPair;
use crate::driver::{code, CallError, CheckpointApi, ProcessState};
use crate::ops::diagnose::{self, Attempt, Facts};
use crate::ops::vocabulary::failure::{Failure, FailureKind};
use crate::ops::vocabulary::place::Place;
use crate::ops::vocabulary::plan::{self, Operation, Plan, Step};
use crate::ops::vocabulary::report::{ProcessReport, StepRecord};
use crate::ops::vocabulary::request::StepDone;
use crate::ops::vocabulary::timeout::Timeout;
use crate::targets::process::Target;
use interrupt::Interrupt;

/// The longest single lock call: how long a signal may wait to be noticed
/// while a process drains its work.
const LOCK_SLICE: Duration = Duration::from_millis(1000);

/// How often `wait` polls, at most.
const WAIT_POLL_MAX: Duration = Duration::from_millis(100);

/// What the executor needs besides the operation and its targets.
pub struct Executor<'a> {
    pub api: &'a dyn CheckpointApi,
    /// Root or CAP_SYS_PTRACE; used to explain driver refusals.
    pub caller_privileged: bool,
    /// Whether a PID is a live process (`process::is_alive` outside tests).
    pub is_alive: fn(i32) -> bool,
    /// Checked between phases: a signal stops the group and rolls it back.
    pub interrupt: Interrupt,
    /// Past this instant no new step starts and the group is rolled back;
    /// lock timeouts are clamped to it.
    pub deadline: Option<Instant>,
    /// Told about every step as it finishes (progress on a terminal).
    pub progress: Option<&'a (dyn Fn(&StepDone<'_>) + Sync)>,
    /// Asked between phases whether the per-PID locks still keep other
    /// cudackpt out (`Some(why)` when not): a lost lock rolls back.
    pub locks_lost: Option<&'a (dyn Fn() -> Option<String> + Sync)>,
    /// Told, just before the first state change, where every process
    /// starts (the crash journal writes its intent record then).
    pub before_change: Option<BeforeChange<'a>>,
    /// A single step refused because the process is already where the
    /// step leads (unlock of a running process) is a success, "already
    /// there", as `suspend` and `resume` say; NVIDIA's grammar keeps its
    /// error.
    pub already_there_ok: bool,
}

/// Told where every process starts, before the first state change.
pub type BeforeChange<'a> = &'a (dyn Fn(&[Place]) + Sync);

/// Whether the driver would wait instead of answering for `pid`: its main
/// thread and its restore thread are stopped (measured on driver 580:
/// GetState blocks on a SIGSTOPped process; GetRestoreThreadId does not).
pub fn cannot_answer(driver: &dyn CheckpointApi, pid: i32) -> bool {
    crate::targets::process::is_stopped(pid) && restore_thread_stopped(driver, pid)
}

/// Whether the restore thread of a process is stopped (or cannot be told).
pub fn restore_thread_stopped(driver: &dyn CheckpointApi, pid: i32) -> bool {
    driver.restore_thread_id(pid).map_or(true, |tid| {
        crate::targets::process::thread_stopped(pid, tid) != Some(false)
    })
}

/// The one driver call a step is.
pub fn call(api: &dyn CheckpointApi, pid: i32, step: &Step) -> Result<(), CallError> {
    match step {
        Step::Lock { timeout } => api.lock(pid, timeout.as_millis()),
        Step::Checkpoint => api.checkpoint(pid),
        Step::Restore { map } => api.restore(pid, map),
        Step::Unlock => api.unlock(pid),
    }
}

impl Executor<'_> {
    /// Runs `operation` on every target; a restore goes through `map`
    /// (empty: in place).
    pub fn run(
        &self,
        operation: &Operation,
        targets: &[Target],
        map: &[GpuPair],
    ) -> Vec<ProcessReport> {
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

    /// Explains a failed call, gathering what is known about the process now.
    fn explain(
        &self,
        attempt: Attempt<'_>,
        target: &Target,
        error: &CallError,
    ) -> (Failure, Option<ProcessState>) {
        let who = Caller {
            api: self.api,
            alive: (self.is_alive)(target.pid),
            privileged: self.caller_privileged,
        };
        explain(&who, attempt, target, error)
    }

    /// `state` (the state, and the restore thread id when `with_tid`), or
    /// `restore-tid` alone (`with_state` false).
    fn query(&self, target: &Target, with_state: bool, with_tid: bool) -> ProcessReport {
        let started = Instant::now();
        let mut report = ProcessReport::new(target.pid, Some(target.name.clone()));
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
    fn wait(&self, target: &Target, wanted: ProcessState, timeout: Timeout) -> ProcessReport {
        let started = Instant::now();
        let deadline = timeout.as_duration().map(|limit| started + limit);
        let mut report = ProcessReport::new(target.pid, Some(target.name.clone()));
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
                report.failure = Some(Failure::new(
                    FailureKind::Interrupted,
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
                report.failure = Some(Failure::new(
                    FailureKind::WaitTimeout,
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

    /// Runs one step, timing it.
    fn step(&self, pid: i32, step: &Step) -> (Result<(), CallError>, Duration) {
        tracing::debug!(pid, step = %step.kind(), "driver call");
        self.interrupt.note(pid, Some(step.kind()), None);
        let started = Instant::now();
        let result = match step {
            Step::Lock { timeout } => self.lock_in_slices(pid, *timeout),
            _ => call(self.api, pid, step),
        };
        let took = started.elapsed();
        match &result {
            Ok(()) => tracing::debug!(pid, step = %step.kind(), ?took, "done"),
            Err(error) => tracing::debug!(pid, step = %step.kind(), ?took, %error, "failed"),
        }
        let now = result.is_ok().then(|| step.resulting_state());
        self.interrupt.note(pid, None, now);
        if result.is_ok() {
            crate::ops::execute::failpoint::after(step.kind());
        }
        (result, took)
    }

    /// A lock taken in slices of at most [`LOCK_SLICE`]: a lock that times
    /// out leaves the process running (docs/driver-facts.md, F2), so it is simply asked again
    /// until the whole timeout has passed (0: for as long as it takes), or
    /// a signal came in between. A signal is thus acted on within a slice,
    /// even under a lock with no timeout (the default, and CRIU's pre-dump).
    /// A timeout shorter than a slice is one call, as before.
    fn lock_in_slices(&self, pid: i32, timeout: Timeout) -> Result<(), CallError> {
        let slice_ms = u32::try_from(LOCK_SLICE.as_millis()).unwrap_or(u32::MAX);
        if (1..=slice_ms).contains(&timeout.as_millis()) {
            return self.api.lock(pid, timeout.as_millis());
        }
        let started = Instant::now();
        let total = timeout.as_duration();
        loop {
            // What is left, in whole milliseconds rounded up (0: none).
            let left_ms = total.map(|total| {
                let left = total.saturating_sub(started.elapsed());
                let ms = left.as_millis() + u128::from(left.subsec_nanos() % 1_000_000 != 0);
                u32::try_from(ms).unwrap_or(u32::MAX)
            });
            let this_slice = left_ms.map_or(slice_ms, |left| left.min(slice_ms));
            let result = self.api.lock(pid, this_slice.max(1));
            let drained_too_slowly = matches!(
                &result,
                Err(CallError::Cuda { error, .. }) if error.is(code::NOT_READY)
            );
            let time_left = total.is_none_or(|total| started.elapsed() < total);
            if !drained_too_slowly || !time_left || self.interrupt.signal().is_some() {
                return result;
            }
        }
    }

    /// A lock that may not outlast the deadline: its timeout is clamped to
    /// the time left (0, "no timeout", becomes the time left too).
    fn within_deadline(&self, step: &Step) -> Step {
        match (step, self.deadline) {
            (Step::Lock { timeout }, Some(deadline)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let left_ms = u32::try_from(left.as_millis()).unwrap_or(u32::MAX).max(1);
                let clamped = match timeout.as_millis() {
                    0 => left_ms,
                    ms => ms.min(left_ms),
                };
                Step::Lock {
                    timeout: Timeout::from_millis(clamped),
                }
            }
            _ => step.clone(),
        }
    }

    /// Reports a finished step to the progress callback, if any.
    fn tell(
        &self,
        target: &Target,
        step: &Step,
        outcome: &(Result<(), CallError>, Duration),
        rollback: bool,
    ) {
        if let Some(progress) = self.progress {
            progress(&StepDone {
                target,
                step: step.kind(),
                ok: outcome.0.is_ok(),
                took: outcome.1,
                rollback,
            });
        }
    }

    /// Every state-changing command: plan each process, run the plan phase
    /// by phase across the group, and roll everyone back if a step fails.
    fn change_state(
        &self,
        operation: &Operation,
        targets: &[Target],
        map: &[GpuPair],
    ) -> Vec<ProcessReport> {
        let mut reports: Vec<ProcessReport> = targets
            .iter()
            .map(|t| ProcessReport::new(t.pid, Some(t.name.clone())))
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
        // no intent record (and saves a single step the record's cost).
        let calls: usize = plans
            .iter()
            .map(|plan| match plan {
                Plan::Steps(steps) => steps.len(),
                Plan::AlreadyThere | Plan::Refused(_) => 0,
            })
            .sum();
        if let (Some(before_change), true) = (self.before_change, calls > 1) {
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
        reports: &mut [ProcessReport],
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
        reports: &mut [ProcessReport],
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
        reports: &mut [ProcessReport],
        done: &mut [Vec<Step>],
    ) -> (Option<RollbackCause>, Option<(usize, Duration)>) {
        let results = concurrently(work, |(i, step)| {
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
            report.steps.push(StepRecord {
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
                            Failure::new(
                                FailureKind::Interrupted,
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
fn refuse_mixed_toggle(current: &[Option<ProcessState>], reports: &mut [ProcessReport]) -> bool {
    let known: Vec<ProcessState> = current.iter().flatten().copied().collect();
    let Some((first, other)) = plan::mixed_toggle(&known) else {
        return false;
    };
    for report in reports {
        report.failure = Some(Failure::new(
            FailureKind::WrongState,
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
    reports: &mut [ProcessReport],
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

/// What [`explain`] needs to know besides the failed call.
pub struct Caller<'a> {
    pub api: &'a dyn CheckpointApi,
    /// Whether the target is still a live process.
    pub alive: bool,
    /// Root or CAP_SYS_PTRACE.
    pub privileged: bool,
}

/// Explains a failed call on `target`, gathering what is known about the
/// process now; after a failed step, also the state it was left in.
pub fn explain(
    caller: &Caller<'_>,
    attempt: Attempt<'_>,
    target: &Target,
    error: &CallError,
) -> (Failure, Option<ProcessState>) {
    // After a failed step the state tells where the process was left; a
    // failed query would only fail again.
    let is_step = matches!(attempt, Attempt::Step(_));
    let state_now = if caller.alive && is_step {
        caller.api.get_state(target.pid).ok()
    } else {
        None
    };
    let driver_says = match error {
        CallError::Cuda { error, .. } => caller.api.describe_error(*error),
        CallError::Missing(_) => None,
    };
    let facts = Facts {
        alive: caller.alive,
        caller_privileged: caller.privileged,
        state_now,
        driver_says: driver_says.as_deref(),
    };
    let failure = diagnose::from_call(attempt, target.pid, Some(&target.name), error, facts);
    (failure, state_now)
}

/// Why `operation` cannot start from where `target` is.
pub fn wrong_state(operation: &Operation, target: &Target, wrong: &plan::WrongState) -> Failure {
    Failure::new(
        FailureKind::WrongState,
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
pub fn mark_not_attempted(reports: &mut [ProcessReport], why: &str) {
    for report in reports.iter_mut().filter(|r| r.failure.is_none()) {
        report.note = None;
        report.failure = Some(Failure::new(
            FailureKind::NotAttempted,
            format!("not attempted: {why}"),
            "see the failure of the other process",
        ));
    }
}

pub mod failpoint;
pub mod interrupt;
mod pool;
mod rollback;
#[cfg(test)]
mod tests;

pub use pool::concurrently;
use rollback::RollbackCause;
