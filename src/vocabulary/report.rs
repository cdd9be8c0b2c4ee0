//! The result of a command, as data: what happened to each process, how long
//! it took, and what went wrong. Commands build a report; renderers
//! ([`crate::output`]) turn it into text or JSON; nothing here prints.

use std::time::Duration;

use crate::drain::report::DrainRecord;
use crate::driver::GpuPair;
use crate::driver::ProcessState;
use crate::exit::ExitStatus;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::{DriverCall, Operation};

/// How a report is laid out for people: which columns its rows have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// State, restore thread and name (`state`).
    State,
    /// Restore thread and name (`restore-tid`).
    RestoreTid,
    /// State and time waited (`wait`).
    Wait,
    /// The listing of `ps`: state, restore thread, GPU memory, NCCL.
    Listing,
    /// What each process went through (commands that change state).
    Change,
}

impl Layout {
    pub fn of(operation: &Operation) -> Layout {
        match operation {
            Operation::State { .. } => Layout::State,
            Operation::RestoreTid => Layout::RestoreTid,
            Operation::Wait { .. } => Layout::Wait,
            _ => Layout::Change,
        }
    }
}

/// One command over its targets.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CommandReport {
    /// The command's name in JSON.
    pub command: &'static str,
    pub(crate) layout: Layout,
    /// Each process, in the order named or found.
    pub processes: Vec<TargetReport>,
    /// How long the command took.
    pub duration: Duration,
    /// A failure of the command itself, before any process was examined
    /// (a cgroup that does not exist, `--all` without `--yes`).
    pub failure: Option<Fault>,
    /// Remarks about the whole command (e.g. no CUDA process found).
    pub warnings: Vec<String>,
    /// The GPU map passed to the driver, after completion (restores only).
    pub map: Option<Vec<GpuPair>>,
    /// What would happen, not what happened (`check`, `--dry-run`): the
    /// text says "would", where a real run says what it did.
    pub prediction: bool,
}

/// What happened to one target.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TargetReport {
    /// Its PID.
    pub pid: i32,
    /// The command name, when the process could be read.
    pub name: Option<String>,
    /// The state before the command, when it was queried.
    pub state_before: Option<ProcessState>,
    /// The state after the command; `None` when it could not be known.
    pub state: Option<ProcessState>,
    /// Its restore thread, when asked for.
    pub restore_tid: Option<i32>,
    /// The driver steps run, rollback steps included, in order.
    pub steps: Vec<CallRecord>,
    /// How long its steps took.
    pub duration: Duration,
    /// A remark on success, e.g. that nothing needed doing.
    pub note: Option<String>,
    /// Why it failed, or was not attempted.
    pub failure: Option<Fault>,
    /// Set when this process was moved back to where it started.
    pub rolled_back: bool,
    /// Set when a rollback was needed but did not complete.
    pub rollback_failure: Option<Fault>,
    /// Whether NCCL is mapped in the process, when it was looked at.
    pub nccl: Option<bool>,
    /// Its restore thread is stopped, so the driver could not be asked.
    pub stopped: bool,
    /// GPU memory figures (NVML), when they could be known.
    pub gpu_memory: Option<GpuBytes>,
    /// The checkpoint record written for it.
    pub record: Option<String>,
    /// The PID of a cudackpt that died while changing it (`ps`).
    pub abandoned_by: Option<i32>,
    /// Remarks that do not make the command fail (e.g. NCCL loaded).
    pub warnings: Vec<String>,
    /// What the drain handshake did with it (`--drain`, a rebuild).
    pub drain: Option<DrainRecord>,
}

impl TargetReport {
    pub(crate) fn new(pid: i32, name: Option<String>) -> TargetReport {
        TargetReport {
            pid,
            name,
            ..TargetReport::default()
        }
    }

    /// Whether nothing failed for it, its rollback included.
    pub fn ok(&self) -> bool {
        self.failure.is_none() && self.rollback_failure.is_none()
    }

    /// Whether the command itself (not a rollback) ran this step on it.
    pub fn did(&self, kind: DriverCall) -> bool {
        self.steps.iter().any(|s| s.did(kind))
    }
}

/// What NVML says of a process's GPU memory, over all GPUs, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuBytes {
    /// What it holds now (`ps`; a restore confirmed by `--verify`).
    Held(u64),
    /// What its checkpoint moved to host memory (held just before it).
    Moved(u64),
}

impl GpuBytes {
    /// The bytes, held or moved.
    pub fn bytes(self) -> u64 {
        match self {
            GpuBytes::Held(bytes) | GpuBytes::Moved(bytes) => bytes,
        }
    }
}

/// One driver call made on a process.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    /// The call.
    pub step: DriverCall,
    /// How long it took.
    pub duration: Duration,
    /// Whether it succeeded.
    pub ok: bool,
    /// True for calls made to undo earlier steps.
    pub rollback: bool,
}

impl CallRecord {
    /// Whether this is a step of the command itself that worked, not one
    /// undoing it.
    pub fn did(&self, kind: DriverCall) -> bool {
        self.step == kind && self.ok && !self.rollback
    }
}

impl CommandReport {
    /// A report laid out as changes; set `layout` for the others.
    pub(crate) fn new(command: &'static str, duration: Duration) -> CommandReport {
        CommandReport {
            command,
            layout: Layout::Change,
            processes: Vec::new(),
            duration,
            failure: None,
            warnings: Vec::new(),
            map: None,
            prediction: false,
        }
    }

    /// True only if the command itself and every process succeeded.
    pub fn ok(&self) -> bool {
        self.failure.is_none() && self.processes.iter().all(TargetReport::ok)
    }

    /// The status of the first real failure, in target order: a process
    /// that was only skipped or rolled back because another failed does not
    /// decide the status. A failed rollback is reported as a failure.
    pub fn exit_status(&self) -> ExitStatus {
        if let Some(failure) = &self.failure {
            return failure.exit_status();
        }
        // A group that could not be put back is the news, whatever started
        // it: not all-or-nothing any more.
        if self.processes.iter().any(|p| p.rollback_failure.is_some()) {
            return ExitStatus::RollbackFailed;
        }
        let primary = self.processes.iter().find_map(|p| {
            p.failure.as_ref().filter(|f| {
                !matches!(
                    f.kind,
                    FaultKind::NotAttempted | FaultKind::RolledBack | FaultKind::RollbackFailed
                )
            })
        });
        if let Some(failure) = primary {
            return failure.exit_status();
        }
        self.processes
            .iter()
            .find_map(|p| p.failure.as_ref().or(p.rollback_failure.as_ref()))
            .map_or(ExitStatus::Success, |f| f.exit_status())
    }
}

/// What the last stages hand to the report.
pub struct Finished {
    pub reports: Vec<TargetReport>,
    pub remarks: Vec<String>,
    pub map: Option<Vec<GpuPair>>,
}
