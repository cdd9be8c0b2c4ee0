//! The library's own report of a command, and its failures: what
//! [`Group`](crate::Group)'s verbs return. Converted from the pipeline's
//! report (`vocabulary`), field by field, so that the pipeline can
//! change without breaking a program that uses the library; the `cudackpt`
//! command renders the pipeline's own. Every enum is `#[non_exhaustive]`:
//! a new kind of failure or drain outcome is not a breaking change.

use std::time::Duration;

use crate::drain::report as drain;
use crate::driver::{CudaError, GpuPair, ProcessState};
use crate::exit::ExitStatus;
use crate::vocabulary::{failure as pipeline_failure, plan, report as pipeline};

/// One command over its targets.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// The command's name, as in the command's JSON (`suspend`).
    pub command: &'static str,
    /// Each process, in the order named or found.
    pub processes: Vec<ProcessReport>,
    /// How long the command took.
    pub duration: Duration,
    /// A failure of the command itself, before any process was examined
    /// (a cgroup that does not exist).
    pub failure: Option<Failure>,
    /// Remarks about the whole command (e.g. no CUDA process found).
    pub warnings: Vec<String>,
    /// The GPU map passed to the driver, after completion (restores only).
    pub map: Option<Vec<GpuPair>>,
    /// What would happen, not what happened (a dry run).
    pub prediction: bool,
    exit_status: ExitStatus,
}

impl Report {
    /// True only if the command itself and every process succeeded.
    pub fn ok(&self) -> bool {
        self.exit_status == ExitStatus::Success
    }

    /// The status the `cudackpt` command would exit with: that of the
    /// first real failure, in target order (a process only rolled back or
    /// not attempted because another failed does not decide it).
    pub fn exit_status(&self) -> ExitStatus {
        self.exit_status
    }
}

/// What happened to one process.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProcessReport {
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
    /// The driver calls made on it, rollback calls included, in order.
    pub steps: Vec<StepRecord>,
    /// How long its calls took.
    pub duration: Duration,
    /// A remark on success, e.g. that nothing needed doing.
    pub note: Option<String>,
    /// Why it failed, or was not attempted.
    pub failure: Option<Failure>,
    /// Set when it was moved back to where it started.
    pub rolled_back: bool,
    /// Set when a rollback was needed but did not complete.
    pub rollback_failure: Option<Failure>,
    /// Whether NCCL is mapped in the process, when it was looked at.
    pub nccl: Option<bool>,
    /// Its restore thread is stopped, so the driver could not be asked.
    pub stopped: bool,
    /// GPU memory figures (NVML), when they could be known.
    pub gpu_memory: Option<GpuMemory>,
    /// The checkpoint record written for it.
    pub record: Option<String>,
    /// The PID of a cudackpt that died while changing it.
    pub abandoned_by: Option<i32>,
    /// Remarks that do not make the command fail.
    pub warnings: Vec<String>,
    /// What the drain handshake did with it.
    pub drain: Option<DrainReport>,
}

impl ProcessReport {
    /// Whether nothing failed for it, its rollback included.
    pub fn ok(&self) -> bool {
        self.failure.is_none() && self.rollback_failure.is_none()
    }

    /// Whether the command itself (not a rollback) made this call on it.
    pub fn did(&self, kind: StepKind) -> bool {
        self.steps
            .iter()
            .any(|s| s.step == kind && s.ok && !s.rollback)
    }
}

/// One driver call made on a process.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StepRecord {
    /// The call.
    pub step: StepKind,
    /// How long it took.
    pub duration: Duration,
    /// Whether it succeeded.
    pub ok: bool,
    /// True for calls made to undo earlier ones.
    pub rollback: bool,
}

/// A driver call of the checkpoint API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepKind {
    /// `cuCheckpointProcessLock`.
    Lock,
    /// `cuCheckpointProcessCheckpoint`.
    Checkpoint,
    /// `cuCheckpointProcessRestore`.
    Restore,
    /// `cuCheckpointProcessUnlock`.
    Unlock,
}

impl std::fmt::Display for StepKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StepKind::Lock => "lock",
            StepKind::Checkpoint => "checkpoint",
            StepKind::Restore => "restore",
            StepKind::Unlock => "unlock",
        })
    }
}

/// What NVML says of a process's GPU memory, over all GPUs, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GpuMemory {
    /// What it holds now (a restore confirmed by `verify`).
    Held(u64),
    /// What its checkpoint moved to host memory.
    Moved(u64),
}

/// What the drain handshake (cudackpt(1), DRAIN PROTOCOL) did with one
/// process.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DrainReport {
    /// The signal number that asked it.
    pub signal: i32,
    /// Where the handshake left it.
    pub outcome: DrainOutcome,
    /// How long it took to acknowledge, when it did.
    pub acknowledged: Option<Duration>,
    /// How long its rebuild took, when it rebuilt.
    pub rebuilt: Option<Duration>,
    /// The evidence not held against it because it acknowledged.
    pub exempted: Option<String>,
    /// The GPU memory it gave back before it acknowledged (NVML).
    pub released_bytes: Option<u64>,
    /// The GPU memory it held once drained: what its checkpoint copies.
    pub footprint_bytes: Option<u64>,
    /// Why its rebuild failed, in its own words.
    pub rebuild_error: Option<String>,
}

/// Where the handshake left a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DrainOutcome {
    /// A dry run: it catches the signal and would be asked.
    WouldDrain,
    /// It does not catch the signal (or is locked without the marker):
    /// nothing was sent to the group.
    CannotDrain,
    /// Asked, it did not acknowledge in time; it was then asked to call
    /// the drain off.
    NotAcknowledged,
    /// It acknowledged and stays drained (checkpointed or locked): the
    /// command that resumes it asks for the rebuild.
    Drained,
    /// Asked to rebuild, it did (its marker is gone).
    Rebuilt,
    /// Asked to rebuild, it still showed the marker at the end of the
    /// wait (it is running; nothing was rolled back).
    NotRebuilt,
    /// Asked to rebuild, it said its rebuild failed (a thread named
    /// `cudackpt-fail1`), or exited during it.
    RebuildFailed,
    /// Asked to rebuild while stopped (CRIU's restore unlocks before it
    /// thaws): it rebuilds once it runs, and nobody waited for it.
    RebuildAsked,
    /// Left out of the handshake: it does not catch the signal and holds
    /// nothing the driver cannot restore (a launcher, such as torchrun's
    /// agent); nothing was sent to it.
    NotNeeded,
}

/// A failure, explained.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Failure {
    /// What kind it is: decides the exit status.
    pub kind: FailureKind,
    /// What was attempted, on which process, and why it failed.
    pub message: String,
    /// What to do next.
    pub hint: Option<String>,
    /// The driver's answer, when the driver answered.
    pub cuda: Option<CudaError>,
}

/// The kinds of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// No process has the PID (or it exited).
    NoSuchProcess,
    /// The PID is a thread of a process, not a process.
    ThreadNotProcess,
    /// The process never initialised CUDA.
    NotCudaProcess,
    /// The caller may not act on the process.
    PermissionDenied,
    /// The lock's timeout passed; the process still runs.
    LockTimeout,
    /// The process is in the wrong state for the step.
    WrongState,
    /// The driver refused the GPU map; the process stays checkpointed.
    MapRejected,
    /// The GPU map cannot be completed or used on this host.
    InvalidMap,
    /// The driver ran out of memory.
    OutOfMemory,
    /// Any other error of the driver.
    DriverError,
    /// No usable CUDA driver.
    DriverUnavailable,
    /// A wait ended before the process reached the state.
    WaitTimeout,
    /// Not tried, because another process of the group failed.
    NotAttempted,
    /// Changed, then put back, because another process failed.
    RolledBack,
    /// Putting it back failed: it is not where it started.
    RollbackFailed,
    /// A signal stopped the command; it was put back.
    Interrupted,
    /// The command's deadline passed; it was put back.
    DeadlineExceeded,
    /// Its threads are stopped, so the driver cannot answer.
    ProcessStopped,
    /// Its GPUs lack the memory for the restore.
    InsufficientGpuMemory,
    /// NVML did not confirm what the command did (`verify`).
    VerifyFailed,
    /// Another cudackpt is changing it.
    InUse,
    /// /proc could not be read for it.
    ProcUnreadable,
    /// A directory or file cudackpt will not trust (owner, mode, a link).
    UnsafePath,
    /// The driver is known not to restore this process after a checkpoint.
    Unrestorable,
    /// CRIU could not dump a process of the tree (a GPU device mapping
    /// without CUDA state, an io_uring ring): refused before CRIU's dump.
    Undumpable,
    /// The host copy of a checkpoint would not fit (host or cgroup memory).
    InsufficientHostMemory,
    /// The kernel's OOM killer ended the process during the command.
    OomKilled,
    /// A cudackpt that died mid-change left this process; `recover` first.
    NeedsRecovery,
    /// The per-PID lock could not be taken (not held elsewhere: broken).
    LockUnavailable,
    /// A helper process cudackpt needed could not be started (a pids
    /// limit, no memory); what it would have done is left to the user.
    SpawnFailed,
    /// It cannot be asked to drain: it does not catch the drain signal, or
    /// is locked without having drained.
    CannotDrain,
    /// It did not acknowledge a drain, or a rebuild, in time.
    DrainTimeout,
    /// Asked to rebuild, it said its rebuild failed, or exited during it.
    RebuildFailed,
    /// The arguments were wrong.
    Usage,
}

impl Report {
    /// The pipeline's, as the library says it.
    pub(crate) fn from_pipeline(report: pipeline::CommandReport) -> Report {
        Report {
            exit_status: report.exit_status(),
            command: report.command,
            processes: report
                .processes
                .into_iter()
                .map(ProcessReport::from_pipeline)
                .collect(),
            duration: report.duration,
            failure: report.failure.map(Failure::from_pipeline),
            warnings: report.warnings,
            map: report.map,
            prediction: report.prediction,
        }
    }
}

impl ProcessReport {
    /// The pipeline's, as the library says it.
    pub(crate) fn from_pipeline(p: pipeline::TargetReport) -> ProcessReport {
        ProcessReport {
            pid: p.pid,
            name: p.name,
            state_before: p.state_before,
            state: p.state,
            restore_tid: p.restore_tid,
            steps: p.steps.into_iter().map(StepRecord::from_pipeline).collect(),
            duration: p.duration,
            note: p.note,
            failure: p.failure.map(Failure::from_pipeline),
            rolled_back: p.rolled_back,
            rollback_failure: p.rollback_failure.map(Failure::from_pipeline),
            nccl: p.nccl,
            stopped: p.stopped,
            gpu_memory: p.gpu_memory.map(|memory| match memory {
                pipeline::GpuBytes::Held(bytes) => GpuMemory::Held(bytes),
                pipeline::GpuBytes::Moved(bytes) => GpuMemory::Moved(bytes),
            }),
            record: p.record,
            abandoned_by: p.abandoned_by,
            warnings: p.warnings,
            drain: p.drain.map(DrainReport::from_pipeline),
        }
    }
}

impl StepRecord {
    /// The pipeline's, as the library says it.
    pub(crate) fn from_pipeline(s: pipeline::CallRecord) -> StepRecord {
        StepRecord {
            step: StepKind::from_pipeline(s.step),
            duration: s.duration,
            ok: s.ok,
            rollback: s.rollback,
        }
    }
}

impl StepKind {
    /// The pipeline's, as the library says it.
    pub(crate) fn from_pipeline(kind: plan::DriverCall) -> StepKind {
        match kind {
            plan::DriverCall::Lock => StepKind::Lock,
            plan::DriverCall::Checkpoint => StepKind::Checkpoint,
            plan::DriverCall::Restore => StepKind::Restore,
            plan::DriverCall::Unlock => StepKind::Unlock,
        }
    }
}

impl DrainReport {
    /// The pipeline's, as the library says it.
    pub(crate) fn from_pipeline(d: drain::DrainRecord) -> DrainReport {
        DrainReport {
            signal: d.signal,
            outcome: DrainOutcome::from_pipeline(d.outcome),
            acknowledged: d.acknowledged,
            rebuilt: d.rebuilt,
            exempted: d.exempted,
            released_bytes: d.released_bytes,
            footprint_bytes: d.footprint_bytes,
            rebuild_error: d.rebuild_error,
        }
    }
}

impl DrainOutcome {
    /// The pipeline's, as the library says it.
    pub(crate) fn from_pipeline(outcome: drain::DrainVerdict) -> DrainOutcome {
        match outcome {
            drain::DrainVerdict::WouldDrain => DrainOutcome::WouldDrain,
            drain::DrainVerdict::CannotDrain => DrainOutcome::CannotDrain,
            drain::DrainVerdict::NotAcknowledged => DrainOutcome::NotAcknowledged,
            drain::DrainVerdict::Drained => DrainOutcome::Drained,
            drain::DrainVerdict::Rebuilt => DrainOutcome::Rebuilt,
            drain::DrainVerdict::NotRebuilt => DrainOutcome::NotRebuilt,
            drain::DrainVerdict::RebuildFailed => DrainOutcome::RebuildFailed,
            drain::DrainVerdict::RebuildAsked => DrainOutcome::RebuildAsked,
            drain::DrainVerdict::NotNeeded => DrainOutcome::NotNeeded,
        }
    }
}

impl Failure {
    /// The pipeline's, as the library says it.
    pub(crate) fn from_pipeline(f: pipeline_failure::Fault) -> Failure {
        Failure {
            kind: FailureKind::from_pipeline(f.kind),
            message: f.message,
            hint: f.hint,
            cuda: f.cuda,
        }
    }
}

impl FailureKind {
    /// The pipeline's, as the library says it.
    pub(crate) fn from_pipeline(kind: pipeline_failure::FaultKind) -> FailureKind {
        match kind {
            pipeline_failure::FaultKind::NoSuchProcess => FailureKind::NoSuchProcess,
            pipeline_failure::FaultKind::ThreadNotProcess => FailureKind::ThreadNotProcess,
            pipeline_failure::FaultKind::NotCudaProcess => FailureKind::NotCudaProcess,
            pipeline_failure::FaultKind::PermissionDenied => FailureKind::PermissionDenied,
            pipeline_failure::FaultKind::LockTimeout => FailureKind::LockTimeout,
            pipeline_failure::FaultKind::WrongState => FailureKind::WrongState,
            pipeline_failure::FaultKind::MapRejected => FailureKind::MapRejected,
            pipeline_failure::FaultKind::InvalidMap => FailureKind::InvalidMap,
            pipeline_failure::FaultKind::OutOfMemory => FailureKind::OutOfMemory,
            pipeline_failure::FaultKind::DriverError => FailureKind::DriverError,
            pipeline_failure::FaultKind::DriverUnavailable => FailureKind::DriverUnavailable,
            pipeline_failure::FaultKind::WaitTimeout => FailureKind::WaitTimeout,
            pipeline_failure::FaultKind::NotAttempted => FailureKind::NotAttempted,
            pipeline_failure::FaultKind::RolledBack => FailureKind::RolledBack,
            pipeline_failure::FaultKind::RollbackFailed => FailureKind::RollbackFailed,
            pipeline_failure::FaultKind::Interrupted => FailureKind::Interrupted,
            pipeline_failure::FaultKind::DeadlineExceeded => FailureKind::DeadlineExceeded,
            pipeline_failure::FaultKind::ProcessStopped => FailureKind::ProcessStopped,
            pipeline_failure::FaultKind::InsufficientGpuMemory => {
                FailureKind::InsufficientGpuMemory
            }
            pipeline_failure::FaultKind::VerifyFailed => FailureKind::VerifyFailed,
            pipeline_failure::FaultKind::InUse => FailureKind::InUse,
            pipeline_failure::FaultKind::ProcUnreadable => FailureKind::ProcUnreadable,
            pipeline_failure::FaultKind::UnsafePath => FailureKind::UnsafePath,
            pipeline_failure::FaultKind::Unrestorable => FailureKind::Unrestorable,
            pipeline_failure::FaultKind::Undumpable => FailureKind::Undumpable,
            pipeline_failure::FaultKind::InsufficientHostMemory => {
                FailureKind::InsufficientHostMemory
            }
            pipeline_failure::FaultKind::OomKilled => FailureKind::OomKilled,
            pipeline_failure::FaultKind::NeedsRecovery => FailureKind::NeedsRecovery,
            pipeline_failure::FaultKind::LockUnavailable => FailureKind::LockUnavailable,
            pipeline_failure::FaultKind::SpawnFailed => FailureKind::SpawnFailed,
            pipeline_failure::FaultKind::CannotDrain => FailureKind::CannotDrain,
            pipeline_failure::FaultKind::DrainTimeout => FailureKind::DrainTimeout,
            pipeline_failure::FaultKind::RebuildFailed => FailureKind::RebuildFailed,
            pipeline_failure::FaultKind::Usage => FailureKind::Usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(kind: pipeline_failure::FaultKind) -> pipeline::TargetReport {
        pipeline::TargetReport {
            failure: Some(pipeline_failure::Fault::new(kind, "it failed", "try again")),
            ..pipeline::TargetReport::new(7, Some("train".to_string()))
        }
    }

    #[test]
    fn the_library_says_what_the_pipeline_decided() {
        let mut report = pipeline::CommandReport::new("suspend", Duration::from_millis(5));
        report.processes = vec![
            failed(pipeline_failure::FaultKind::RolledBack),
            failed(pipeline_failure::FaultKind::LockTimeout),
        ];
        let status = report.exit_status();
        let ours = Report::from_pipeline(report);
        assert_eq!(ours.exit_status(), status);
        assert_eq!(ours.exit_status(), ExitStatus::LockTimeout);
        assert!(!ours.ok());
        let failure = ours.processes[1].failure.as_ref().unwrap();
        assert_eq!(failure.kind, FailureKind::LockTimeout);
        assert_eq!(
            (failure.message.as_str(), failure.hint.as_deref()),
            ("it failed", Some("try again"))
        );
        assert_eq!(ours.processes[0].name.as_deref(), Some("train"));
    }

    #[test]
    fn every_drain_outcome_keeps_its_name() {
        for outcome in drain::DrainVerdict::ALL {
            let ours = DrainOutcome::from_pipeline(outcome);
            assert_eq!(format!("{ours:?}"), format!("{outcome:?}"));
        }
    }

    #[test]
    fn every_failure_kind_keeps_its_name() {
        for kind in pipeline_failure::FaultKind::ALL {
            assert_eq!(
                format!("{:?}", FailureKind::from_pipeline(kind)),
                format!("{kind:?}")
            );
        }
    }
}
