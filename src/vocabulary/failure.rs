//! What went wrong, as data every stage speaks: the kind of a failure
//! (its JSON name and exit status), its message and hint, and the driver's
//! answer when it answered. The words themselves are `diagnose`'s.

use crate::driver::CudaError;
use crate::exit::ExitStatus;

/// The kinds of failure, as stable snake_case names in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
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

impl FaultKind {
    /// Every kind, for the JSON Schema.
    pub(crate) const ALL: [FaultKind; 34] = [
        FaultKind::NoSuchProcess,
        FaultKind::ThreadNotProcess,
        FaultKind::NotCudaProcess,
        FaultKind::PermissionDenied,
        FaultKind::LockTimeout,
        FaultKind::WrongState,
        FaultKind::MapRejected,
        FaultKind::InvalidMap,
        FaultKind::OutOfMemory,
        FaultKind::DriverError,
        FaultKind::DriverUnavailable,
        FaultKind::WaitTimeout,
        FaultKind::NotAttempted,
        FaultKind::RolledBack,
        FaultKind::RollbackFailed,
        FaultKind::Interrupted,
        FaultKind::DeadlineExceeded,
        FaultKind::ProcessStopped,
        FaultKind::InsufficientGpuMemory,
        FaultKind::VerifyFailed,
        FaultKind::InUse,
        FaultKind::ProcUnreadable,
        FaultKind::UnsafePath,
        FaultKind::Unrestorable,
        FaultKind::Undumpable,
        FaultKind::InsufficientHostMemory,
        FaultKind::OomKilled,
        FaultKind::NeedsRecovery,
        FaultKind::LockUnavailable,
        FaultKind::SpawnFailed,
        FaultKind::CannotDrain,
        FaultKind::DrainTimeout,
        FaultKind::RebuildFailed,
        FaultKind::Usage,
    ];

    /// Its name in JSON (`no_such_process`).
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::NoSuchProcess => "no_such_process",
            FaultKind::ThreadNotProcess => "thread_not_process",
            FaultKind::NotCudaProcess => "not_cuda_process",
            FaultKind::PermissionDenied => "permission_denied",
            FaultKind::LockTimeout => "lock_timeout",
            FaultKind::WrongState => "wrong_state",
            FaultKind::MapRejected => "map_rejected",
            FaultKind::InvalidMap => "invalid_map",
            FaultKind::OutOfMemory => "out_of_memory",
            FaultKind::DriverError => "driver_error",
            FaultKind::DriverUnavailable => "driver_unavailable",
            FaultKind::WaitTimeout => "wait_timeout",
            FaultKind::NotAttempted => "not_attempted",
            FaultKind::RolledBack => "rolled_back",
            FaultKind::RollbackFailed => "rollback_failed",
            FaultKind::Interrupted => "interrupted",
            FaultKind::DeadlineExceeded => "deadline_exceeded",
            FaultKind::ProcessStopped => "process_stopped",
            FaultKind::InsufficientGpuMemory => "insufficient_gpu_memory",
            FaultKind::VerifyFailed => "verify_failed",
            FaultKind::InUse => "in_use",
            FaultKind::ProcUnreadable => "proc_unreadable",
            FaultKind::UnsafePath => "unsafe_path",
            FaultKind::Unrestorable => "unrestorable",
            FaultKind::Undumpable => "undumpable",
            FaultKind::InsufficientHostMemory => "insufficient_host_memory",
            FaultKind::OomKilled => "oom_killed",
            FaultKind::NeedsRecovery => "needs_recovery",
            FaultKind::LockUnavailable => "lock_unavailable",
            FaultKind::SpawnFailed => "spawn_failed",
            FaultKind::CannotDrain => "cannot_drain",
            FaultKind::DrainTimeout => "drain_timeout",
            FaultKind::RebuildFailed => "rebuild_failed",
            FaultKind::Usage => "usage",
        }
    }

    /// The status a command that fails this way exits with.
    pub fn exit_status(self) -> ExitStatus {
        match self {
            FaultKind::NoSuchProcess
            | FaultKind::ThreadNotProcess
            | FaultKind::NotCudaProcess
            | FaultKind::OomKilled => ExitStatus::NoProcess,
            FaultKind::PermissionDenied | FaultKind::UnsafePath => ExitStatus::PermissionDenied,
            FaultKind::LockTimeout => ExitStatus::LockTimeout,
            FaultKind::WrongState | FaultKind::ProcessStopped => ExitStatus::WrongState,
            FaultKind::InUse | FaultKind::NeedsRecovery => ExitStatus::InUse,
            FaultKind::RollbackFailed => ExitStatus::RollbackFailed,
            FaultKind::InvalidMap
            | FaultKind::InsufficientGpuMemory
            | FaultKind::Unrestorable
            | FaultKind::Undumpable
            | FaultKind::InsufficientHostMemory
            | FaultKind::CannotDrain => ExitStatus::PreflightRefused,
            FaultKind::DrainTimeout => ExitStatus::DrainTimeout,
            FaultKind::RebuildFailed => ExitStatus::RebuildFailed,
            FaultKind::WaitTimeout => ExitStatus::WaitTimeout,
            FaultKind::Usage => ExitStatus::Usage,
            FaultKind::Interrupted => ExitStatus::Interrupted,
            FaultKind::DriverUnavailable => ExitStatus::DriverUnavailable,
            FaultKind::MapRejected
            | FaultKind::OutOfMemory
            | FaultKind::DriverError
            | FaultKind::NotAttempted
            | FaultKind::RolledBack
            | FaultKind::DeadlineExceeded
            | FaultKind::VerifyFailed
            | FaultKind::ProcUnreadable
            | FaultKind::LockUnavailable
            | FaultKind::SpawnFailed => ExitStatus::Failed,
        }
    }
}

/// A failure, explained.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Fault {
    /// What kind it is: decides the exit status and its name in JSON.
    pub kind: FaultKind,
    /// What was attempted, on which process, and why it failed.
    pub message: String,
    /// What to do next.
    pub hint: Option<String>,
    /// The driver's answer, when the driver answered.
    pub cuda: Option<CudaError>,
    /// The signal that stopped the command, for `interrupted`: it decides
    /// the exit status (128 + its number).
    pub signal: Option<i32>,
}

impl Fault {
    /// A failure of `kind`; an empty `hint` is none.
    pub(crate) fn new(
        kind: FaultKind,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Fault {
        Fault {
            kind,
            message: message.into(),
            hint: Some(hint.into()).filter(|h: &String| !h.is_empty()),
            cuda: None,
            signal: None,
        }
    }

    /// A command stopped by `signal` (`interrupted`).
    pub(crate) fn interrupted(
        signal: i32,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Fault {
        Fault {
            signal: Some(signal),
            ..Fault::new(FaultKind::Interrupted, message, hint)
        }
    }

    /// The status a command that fails this way exits with: its kind's,
    /// but 128 + the signal's number for one a signal stopped.
    pub fn exit_status(&self) -> ExitStatus {
        match (self.kind, self.signal) {
            (FaultKind::Interrupted, Some(signal)) => ExitStatus::of_signal(signal),
            (kind, _) => kind.exit_status(),
        }
    }

    /// A process of a group not attempted because of another's failure
    /// (`why`, after "not attempted: "): a group changes state together or
    /// not at all.
    pub(crate) fn not_attempted(why: impl std::fmt::Display) -> Fault {
        Fault::new(
            FaultKind::NotAttempted,
            format!("not attempted: {why}"),
            "a group changes state together or not at all",
        )
    }

    /// [`Fault::not_attempted`] for a group whose drain was called off.
    pub(crate) fn not_drained(why: impl std::fmt::Display) -> Fault {
        Fault::new(
            FaultKind::NotAttempted,
            format!("not attempted: {why}"),
            "a group drains together or not at all",
        )
    }

    pub(crate) fn with_cuda(mut self, error: CudaError) -> Fault {
        self.cuda = Some(error);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_kind_is_listed_once() {
        // An exhaustive match: a new kind does not compile here until it
        // has a number, and then fails below until ALL (and so the
        // schema) has it.
        const KINDS: usize = 34;
        let number = |kind: FaultKind| match kind {
            FaultKind::NoSuchProcess => 0,
            FaultKind::ThreadNotProcess => 1,
            FaultKind::NotCudaProcess => 2,
            FaultKind::PermissionDenied => 3,
            FaultKind::LockTimeout => 4,
            FaultKind::WrongState => 5,
            FaultKind::MapRejected => 6,
            FaultKind::InvalidMap => 7,
            FaultKind::OutOfMemory => 8,
            FaultKind::DriverError => 9,
            FaultKind::DriverUnavailable => 10,
            FaultKind::WaitTimeout => 11,
            FaultKind::NotAttempted => 12,
            FaultKind::RolledBack => 13,
            FaultKind::RollbackFailed => 14,
            FaultKind::Interrupted => 15,
            FaultKind::DeadlineExceeded => 16,
            FaultKind::ProcessStopped => 17,
            FaultKind::InsufficientGpuMemory => 18,
            FaultKind::VerifyFailed => 19,
            FaultKind::InUse => 20,
            FaultKind::ProcUnreadable => 21,
            FaultKind::UnsafePath => 22,
            FaultKind::Unrestorable => 23,
            FaultKind::InsufficientHostMemory => 24,
            FaultKind::OomKilled => 25,
            FaultKind::NeedsRecovery => 26,
            FaultKind::LockUnavailable => 27,
            FaultKind::SpawnFailed => 28,
            FaultKind::Usage => 29,
            FaultKind::CannotDrain => 30,
            FaultKind::DrainTimeout => 31,
            FaultKind::Undumpable => 32,
            FaultKind::RebuildFailed => 33,
        };
        let mut listed = [false; KINDS];
        for kind in FaultKind::ALL {
            listed[number(kind)] = true;
        }
        let missing: Vec<usize> = (0..KINDS).filter(|n| !listed[*n]).collect();
        assert!(
            missing.is_empty(),
            "ALL misses the kinds numbered {missing:?}"
        );
        assert_eq!(FaultKind::ALL.len(), KINDS, "ALL lists a kind twice");
        let names: std::collections::BTreeSet<&str> =
            FaultKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), FaultKind::ALL.len(), "names are unique");
    }
}
