//! The result of a command, as data: what happened to each process, how long
//! it took, and what went wrong. Commands build a report; renderers
//! (`output/`) turn it into text or JSON; nothing here prints.

use std::time::Duration;

use crate::driver::ProcessState;
use crate::exit::ExitStatus;
use crate::gpu::map::GpuPair;
use crate::ops::diagnose::{Failure, FailureKind};

/// One command over its targets.
#[derive(Debug, Clone)]
pub struct Report {
    pub command: &'static str,
    pub processes: Vec<ProcessReport>,
    pub duration: Duration,
    /// A failure of the command itself, before any process was examined
    /// (a cgroup that does not exist, `--all` without `--yes`).
    pub failure: Option<Failure>,
    /// Remarks about the whole command (e.g. no CUDA process found).
    pub warnings: Vec<String>,
    /// The GPU map passed to the driver, after completion (restores only).
    pub map: Option<Vec<GpuPair>>,
}

/// What happened to one target.
#[derive(Debug, Clone, Default)]
pub struct ProcessReport {
    pub pid: i32,
    /// The command name, when the process could be read.
    pub name: Option<String>,
    /// The state before the command, when it was queried.
    pub state_before: Option<ProcessState>,
    /// The state after the command; `None` when it could not be known.
    pub state: Option<ProcessState>,
    pub restore_tid: Option<i32>,
    /// The driver steps run, rollback steps included, in order.
    pub steps: Vec<StepRecord>,
    pub duration: Duration,
    /// A remark on success, e.g. that nothing needed doing.
    pub note: Option<String>,
    pub failure: Option<Failure>,
    /// Set when this process was moved back to where it started.
    pub rolled_back: bool,
    /// Set when a rollback was needed but did not complete.
    pub rollback_failure: Option<Failure>,
    /// Whether NCCL is mapped in the process, when it was looked at.
    pub nccl: Option<bool>,
    /// Its restore thread is stopped, so the driver could not be asked.
    pub stopped: bool,
    /// GPU memory it holds over all GPUs (NVML), when that could be known.
    pub gpu_memory_bytes: Option<u64>,
    /// The checkpoint record written for it.
    pub record: Option<String>,
    /// Remarks that do not make the command fail (e.g. NCCL loaded).
    pub warnings: Vec<String>,
}

impl ProcessReport {
    pub fn new(pid: i32, name: Option<String>) -> ProcessReport {
        ProcessReport {
            pid,
            name,
            ..ProcessReport::default()
        }
    }

    pub fn ok(&self) -> bool {
        self.failure.is_none() && self.rollback_failure.is_none()
    }
}

/// One driver call made on a process.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub step: &'static str,
    pub duration: Duration,
    pub ok: bool,
    /// True for calls made to undo earlier steps.
    pub rollback: bool,
}

impl Report {
    pub fn new(command: &'static str, duration: Duration) -> Report {
        Report {
            command,
            processes: Vec::new(),
            duration,
            failure: None,
            warnings: Vec::new(),
            map: None,
        }
    }

    /// True only if the command itself and every process succeeded.
    pub fn ok(&self) -> bool {
        self.failure.is_none() && self.processes.iter().all(ProcessReport::ok)
    }

    /// The status of the first real failure, in target order: a process
    /// that was only skipped or rolled back because another failed does not
    /// decide the status. A failed rollback is reported as a failure.
    pub fn exit_status(&self) -> ExitStatus {
        if let Some(failure) = &self.failure {
            return failure.kind.exit_status();
        }
        let primary = self.processes.iter().find_map(|p| {
            p.failure.as_ref().filter(|f| {
                !matches!(
                    f.kind,
                    FailureKind::NotAttempted
                        | FailureKind::RolledBack
                        | FailureKind::RollbackFailed
                )
            })
        });
        if let Some(failure) = primary {
            return failure.kind.exit_status();
        }
        self.processes
            .iter()
            .find_map(|p| p.failure.as_ref().or(p.rollback_failure.as_ref()))
            .map_or(ExitStatus::Success, |f| f.kind.exit_status())
    }
}
