//! The executor and its one-step primitives: what a run needs besides the
//! operation and its targets ([`Executor`]), one driver call timed and
//! told ([`Executor::step`]), a lock taken in slices, a step clamped to
//! the deadline, and a failed call explained. The phases ([`super`]) and
//! the rollback ([`super::rollback`]) are built on these; nothing here
//! uses either.

use std::time::{Duration, Instant};

use crate::driver::{code, CallError, CheckpointApi, ProcessState};
use crate::ops::diagnose::{self, Attempt, Facts};
use crate::targets::process::Target;
use crate::vocabulary::failure::Fault;
use crate::vocabulary::place::Place;
use crate::vocabulary::plan::Step;
use crate::vocabulary::request::{Progress, ProgressSink, StepDone};
use crate::vocabulary::timeout::Timeout;

use super::interrupt::Interrupt;

/// The longest single lock call: how long a signal may wait to be noticed
/// while a process drains its work.
const LOCK_SLICE: Duration = Duration::from_millis(1000);

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
    /// Told about every step as it starts and finishes (progress on a
    /// terminal, a scheduler's events).
    pub progress: Option<ProgressSink<'a>>,
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
    /// Journal even one call on one process: its record must outlive the
    /// command (a CRIU dump's group, handed to CRIU).
    pub journal_every_change: bool,
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
    /// Explains a failed call, gathering what is known about the process now.
    pub(super) fn explain(
        &self,
        attempt: Attempt<'_>,
        target: &Target,
        error: &CallError,
    ) -> (Fault, Option<ProcessState>) {
        let who = Caller {
            api: self.api,
            alive: (self.is_alive)(target.pid),
            privileged: self.caller_privileged,
        };
        explain(&who, attempt, target, error)
    }

    /// Runs one step, timing it.
    pub(super) fn step(&self, pid: i32, step: &Step) -> (Result<(), CallError>, Duration) {
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
    pub(super) fn lock_in_slices(&self, pid: i32, timeout: Timeout) -> Result<(), CallError> {
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
    pub(super) fn within_deadline(&self, step: &Step) -> Step {
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

    /// Reports a step about to start to the progress callback, if any.
    pub(super) fn tell_started(&self, target: &Target, step: &Step, rollback: bool) {
        if let Some(progress) = self.progress {
            progress(&Progress::Started {
                target,
                step: step.kind(),
                rollback,
            });
        }
    }

    /// Reports a finished step to the progress callback, if any.
    pub(super) fn tell(
        &self,
        target: &Target,
        step: &Step,
        outcome: &(Result<(), CallError>, Duration),
        rollback: bool,
    ) {
        if let Some(progress) = self.progress {
            progress(&Progress::Done(StepDone {
                target,
                step: step.kind(),
                ok: outcome.0.is_ok(),
                took: outcome.1,
                rollback,
            }));
        }
    }
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
) -> (Fault, Option<ProcessState>) {
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
