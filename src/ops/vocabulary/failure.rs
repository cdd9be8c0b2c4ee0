//! What went wrong, as data every stage speaks: the kind of a failure
//! (its JSON name and exit status), its message and hint, and the driver's
//! answer when it answered. The words themselves are `diagnose`'s.

use crate::driver::CudaError;
use crate::exit::ExitStatus;

/// The kinds of failure, as stable snake_case names in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

impl FailureKind {
    /// Every kind, for the JSON Schema.
    pub(crate) const ALL: [FailureKind; 34] = [
        FailureKind::NoSuchProcess,
        FailureKind::ThreadNotProcess,
        FailureKind::NotCudaProcess,
        FailureKind::PermissionDenied,
        FailureKind::LockTimeout,
        FailureKind::WrongState,
        FailureKind::MapRejected,
        FailureKind::InvalidMap,
        FailureKind::OutOfMemory,
        FailureKind::DriverError,
        FailureKind::DriverUnavailable,
        FailureKind::WaitTimeout,
        FailureKind::NotAttempted,
        FailureKind::RolledBack,
        FailureKind::RollbackFailed,
        FailureKind::Interrupted,
        FailureKind::DeadlineExceeded,
        FailureKind::ProcessStopped,
        FailureKind::InsufficientGpuMemory,
        FailureKind::VerifyFailed,
        FailureKind::InUse,
        FailureKind::ProcUnreadable,
        FailureKind::UnsafePath,
        FailureKind::Unrestorable,
        FailureKind::Undumpable,
        FailureKind::InsufficientHostMemory,
        FailureKind::OomKilled,
        FailureKind::NeedsRecovery,
        FailureKind::LockUnavailable,
        FailureKind::SpawnFailed,
        FailureKind::CannotDrain,
        FailureKind::DrainTimeout,
        FailureKind::RebuildFailed,
        FailureKind::Usage,
    ];

    /// Its name in JSON (`no_such_process`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::NoSuchProcess => "no_such_process",
            FailureKind::ThreadNotProcess => "thread_not_process",
            FailureKind::NotCudaProcess => "not_cuda_process",
            FailureKind::PermissionDenied => "permission_denied",
            FailureKind::LockTimeout => "lock_timeout",
            FailureKind::WrongState => "wrong_state",
            FailureKind::MapRejected => "map_rejected",
            FailureKind::InvalidMap => "invalid_map",
            FailureKind::OutOfMemory => "out_of_memory",
            FailureKind::DriverError => "driver_error",
            FailureKind::DriverUnavailable => "driver_unavailable",
            FailureKind::WaitTimeout => "wait_timeout",
            FailureKind::NotAttempted => "not_attempted",
            FailureKind::RolledBack => "rolled_back",
            FailureKind::RollbackFailed => "rollback_failed",
            FailureKind::Interrupted => "interrupted",
            FailureKind::DeadlineExceeded => "deadline_exceeded",
            FailureKind::ProcessStopped => "process_stopped",
            FailureKind::InsufficientGpuMemory => "insufficient_gpu_memory",
            FailureKind::VerifyFailed => "verify_failed",
            FailureKind::InUse => "in_use",
            FailureKind::ProcUnreadable => "proc_unreadable",
            FailureKind::UnsafePath => "unsafe_path",
            FailureKind::Unrestorable => "unrestorable",
            FailureKind::Undumpable => "undumpable",
            FailureKind::InsufficientHostMemory => "insufficient_host_memory",
            FailureKind::OomKilled => "oom_killed",
            FailureKind::NeedsRecovery => "needs_recovery",
            FailureKind::LockUnavailable => "lock_unavailable",
            FailureKind::SpawnFailed => "spawn_failed",
            FailureKind::CannotDrain => "cannot_drain",
            FailureKind::DrainTimeout => "drain_timeout",
            FailureKind::RebuildFailed => "rebuild_failed",
            FailureKind::Usage => "usage",
        }
    }

    /// The status a command that fails this way exits with.
    pub fn exit_status(self) -> ExitStatus {
        match self {
            FailureKind::NoSuchProcess
            | FailureKind::ThreadNotProcess
            | FailureKind::NotCudaProcess
            | FailureKind::OomKilled => ExitStatus::NoProcess,
            FailureKind::PermissionDenied | FailureKind::UnsafePath => ExitStatus::PermissionDenied,
            FailureKind::LockTimeout => ExitStatus::LockTimeout,
            FailureKind::WrongState | FailureKind::ProcessStopped => ExitStatus::WrongState,
            FailureKind::InUse | FailureKind::NeedsRecovery => ExitStatus::InUse,
            FailureKind::RollbackFailed => ExitStatus::RollbackFailed,
            FailureKind::InvalidMap
            | FailureKind::InsufficientGpuMemory
            | FailureKind::Unrestorable
            | FailureKind::Undumpable
            | FailureKind::InsufficientHostMemory
            | FailureKind::CannotDrain => ExitStatus::PreflightRefused,
            FailureKind::DrainTimeout => ExitStatus::DrainTimeout,
            FailureKind::RebuildFailed => ExitStatus::RebuildFailed,
            FailureKind::Usage => ExitStatus::Usage,
            FailureKind::Interrupted => ExitStatus::Interrupted,
            FailureKind::DriverUnavailable => ExitStatus::DriverUnavailable,
            FailureKind::MapRejected
            | FailureKind::OutOfMemory
            | FailureKind::DriverError
            | FailureKind::WaitTimeout
            | FailureKind::NotAttempted
            | FailureKind::RolledBack
            | FailureKind::DeadlineExceeded
            | FailureKind::VerifyFailed
            | FailureKind::ProcUnreadable
            | FailureKind::LockUnavailable
            | FailureKind::SpawnFailed => ExitStatus::Failed,
        }
    }
}

/// A failure, explained.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Failure {
    /// What kind it is: decides the exit status and its name in JSON.
    pub kind: FailureKind,
    /// What was attempted, on which process, and why it failed.
    pub message: String,
    /// What to do next.
    pub hint: Option<String>,
    /// The driver's answer, when the driver answered.
    pub cuda: Option<CudaError>,
}

impl Failure {
    /// A failure of `kind`; an empty `hint` is none.
    pub(crate) fn new(
        kind: FailureKind,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Failure {
        Failure {
            kind,
            message: message.into(),
            hint: Some(hint.into()).filter(|h: &String| !h.is_empty()),
            cuda: None,
        }
    }

    /// A process of a group not attempted because of another's failure
    /// (`why`, after "not attempted: "): a group changes state together or
    /// not at all.
    pub(crate) fn not_attempted(why: impl std::fmt::Display) -> Failure {
        Failure::new(
            FailureKind::NotAttempted,
            format!("not attempted: {why}"),
            "a group changes state together or not at all",
        )
    }

    /// [`Failure::not_attempted`] for a group whose drain was called off.
    pub(crate) fn not_drained(why: impl std::fmt::Display) -> Failure {
        Failure::new(
            FailureKind::NotAttempted,
            format!("not attempted: {why}"),
            "a group drains together or not at all",
        )
    }

    pub(crate) fn with_cuda(mut self, error: CudaError) -> Failure {
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
        let number = |kind: FailureKind| match kind {
            FailureKind::NoSuchProcess => 0,
            FailureKind::ThreadNotProcess => 1,
            FailureKind::NotCudaProcess => 2,
            FailureKind::PermissionDenied => 3,
            FailureKind::LockTimeout => 4,
            FailureKind::WrongState => 5,
            FailureKind::MapRejected => 6,
            FailureKind::InvalidMap => 7,
            FailureKind::OutOfMemory => 8,
            FailureKind::DriverError => 9,
            FailureKind::DriverUnavailable => 10,
            FailureKind::WaitTimeout => 11,
            FailureKind::NotAttempted => 12,
            FailureKind::RolledBack => 13,
            FailureKind::RollbackFailed => 14,
            FailureKind::Interrupted => 15,
            FailureKind::DeadlineExceeded => 16,
            FailureKind::ProcessStopped => 17,
            FailureKind::InsufficientGpuMemory => 18,
            FailureKind::VerifyFailed => 19,
            FailureKind::InUse => 20,
            FailureKind::ProcUnreadable => 21,
            FailureKind::UnsafePath => 22,
            FailureKind::Unrestorable => 23,
            FailureKind::InsufficientHostMemory => 24,
            FailureKind::OomKilled => 25,
            FailureKind::NeedsRecovery => 26,
            FailureKind::LockUnavailable => 27,
            FailureKind::SpawnFailed => 28,
            FailureKind::Usage => 29,
            FailureKind::CannotDrain => 30,
            FailureKind::DrainTimeout => 31,
            FailureKind::Undumpable => 32,
            FailureKind::RebuildFailed => 33,
        };
        let mut listed = [false; KINDS];
        for kind in FailureKind::ALL {
            listed[number(kind)] = true;
        }
        let missing: Vec<usize> = (0..KINDS).filter(|n| !listed[*n]).collect();
        assert!(
            missing.is_empty(),
            "ALL misses the kinds numbered {missing:?}"
        );
        assert_eq!(FailureKind::ALL.len(), KINDS, "ALL lists a kind twice");
        let names: std::collections::BTreeSet<&str> =
            FailureKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), FailureKind::ALL.len(), "names are unique");
    }
}
