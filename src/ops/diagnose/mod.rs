//! Turning what went wrong into words: every failure gets a kind (for JSON
//! and the exit status), a message saying what was attempted on which
//! process and why it failed, and a hint saying what to do next. Pure: the
//! facts it needs (is the process alive, its state now) come from the caller.

pub mod postmortem;

use crate::driver::{code, CallError, CudaError, LoadError, ProcessState};
use crate::exit::ExitStatus;
use crate::ops::execute::timeout::Timeout;
use crate::ops::plan::{wrong_state_hint, Step};
use crate::targets::process::{TargetError, PERMISSION_HINT};

/// The kinds of failure, as stable snake_case names in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    NoSuchProcess,
    ThreadNotProcess,
    NotCudaProcess,
    PermissionDenied,
    LockTimeout,
    WrongState,
    MapRejected,
    InvalidMap,
    OutOfMemory,
    DriverError,
    DriverUnavailable,
    WaitTimeout,
    NotAttempted,
    RolledBack,
    RollbackFailed,
    Interrupted,
    DeadlineExceeded,
    ProcessStopped,
    InsufficientGpuMemory,
    VerifyFailed,
    InUse,
    ProcUnreadable,
    /// A directory or file cudackpt will not trust (owner, mode, a link).
    UnsafePath,
    /// The driver is known not to restore this process after a checkpoint.
    Unrestorable,
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
    Usage,
}

impl FailureKind {
    /// Every kind, for the JSON Schema.
    pub const ALL: [FailureKind; 32] = [
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
        FailureKind::InsufficientHostMemory,
        FailureKind::OomKilled,
        FailureKind::NeedsRecovery,
        FailureKind::LockUnavailable,
        FailureKind::SpawnFailed,
        FailureKind::CannotDrain,
        FailureKind::DrainTimeout,
        FailureKind::Usage,
    ];

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
            FailureKind::InsufficientHostMemory => "insufficient_host_memory",
            FailureKind::OomKilled => "oom_killed",
            FailureKind::NeedsRecovery => "needs_recovery",
            FailureKind::LockUnavailable => "lock_unavailable",
            FailureKind::SpawnFailed => "spawn_failed",
            FailureKind::CannotDrain => "cannot_drain",
            FailureKind::DrainTimeout => "drain_timeout",
            FailureKind::Usage => "usage",
        }
    }

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
            | FailureKind::InsufficientHostMemory
            | FailureKind::CannotDrain => ExitStatus::PreflightRefused,
            FailureKind::DrainTimeout => ExitStatus::DrainTimeout,
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
pub struct Failure {
    pub kind: FailureKind,
    /// What was attempted, on which process, and why it failed.
    pub message: String,
    /// What to do next.
    pub hint: Option<String>,
    /// The driver's answer, when the driver answered.
    pub cuda: Option<CudaError>,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>, hint: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            hint: Some(hint.into()).filter(|h: &String| !h.is_empty()),
            cuda: None,
        }
    }

    fn with_cuda(mut self, error: CudaError) -> Failure {
        self.cuda = Some(error);
        self
    }
}

/// `PID 4242 (python3)`, or `PID 4242` when the name is unknown.
pub fn describe_process(pid: i32, name: Option<&str>) -> String {
    match name {
        // Printable: a newline in a name must not start a line of its own.
        Some(name) => format!("PID {pid} ({})", crate::targets::name::printable(name)),
        None => format!("PID {pid}"),
    }
}

pub fn from_target_error(error: &TargetError) -> Failure {
    let kind = match error {
        TargetError::NoSuchProcess { .. } | TargetError::Zombie { .. } => {
            FailureKind::NoSuchProcess
        }
        TargetError::Thread { .. } => FailureKind::ThreadNotProcess,
        TargetError::PermissionDenied { .. } => FailureKind::PermissionDenied,
        TargetError::Unreadable { .. } => FailureKind::ProcUnreadable,
    };
    Failure::new(kind, error.to_string(), error.hint())
}

/// A target whose restore thread is stopped: every driver call but the
/// restore-thread query would wait until it runs again (measured on driver
/// 580: GetState blocks on a SIGSTOPped process), so nothing is asked.
pub fn process_stopped(pid: i32, name: Option<&str>) -> Failure {
    Failure::new(
        FailureKind::ProcessStopped,
        format!(
            "{} is stopped (SIGSTOP, a debugger or CRIU's freeze), and the driver cannot answer for it until it runs",
            describe_process(pid, name)
        ),
        format!("continue it (`kill -CONT {pid}`), or let whoever stopped it finish"),
    )
}

pub fn from_load_error(error: &LoadError) -> Failure {
    let kind = match error {
        LoadError::Untrusted(_) => FailureKind::UnsafePath,
        _ => FailureKind::DriverUnavailable,
    };
    Failure::new(kind, error.to_string(), error.hint())
}

/// What a failed call was trying to do.
#[derive(Debug, Clone, Copy)]
pub enum Attempt<'a> {
    Step(&'a Step),
    GetState,
    GetRestoreTid,
}

impl Attempt<'_> {
    fn verb(&self) -> &'static str {
        match self {
            Attempt::Step(Step::Lock { .. }) => "lock",
            Attempt::Step(Step::Checkpoint) => "checkpoint",
            Attempt::Step(Step::Restore { .. }) => "restore",
            Attempt::Step(Step::Unlock) => "unlock",
            Attempt::GetState => "read the CUDA state of",
            Attempt::GetRestoreTid => "read the restore thread id of",
        }
    }
}

/// What is known about the process after a call failed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts<'a> {
    pub alive: bool,
    pub caller_privileged: bool,
    /// The state queried after the failure, when the query worked.
    pub state_now: Option<ProcessState>,
    /// The driver's own description of the error (`cuGetErrorString`).
    pub driver_says: Option<&'a str>,
}

/// Explains a failed driver call on a process.
pub fn from_call(
    attempt: Attempt<'_>,
    pid: i32,
    name: Option<&str>,
    error: &CallError,
    facts: Facts<'_>,
) -> Failure {
    let who = describe_process(pid, name);
    let verb = attempt.verb();
    let cuda = match error {
        CallError::Missing(missing) => {
            return Failure::new(
                FailureKind::DriverUnavailable,
                format!(
                    "could not {verb} {who}: this CUDA driver has no {}",
                    missing.function
                ),
                "the checkpoint API needs display driver 570 or newer; run `cudackpt doctor`",
            )
        }
        CallError::Cuda { error, .. } => *error,
    };
    let failure = match cuda.code {
        // A process that died during the call can also answer this way.
        code::NOT_INITIALIZED | code::OPERATING_SYSTEM if !facts.alive => Failure::new(
            FailureKind::NoSuchProcess,
            format!("could not {verb} {who}: the process has exited"),
            "check the PID",
        ),
        code::NOT_INITIALIZED => Failure::new(
            FailureKind::NotCudaProcess,
            format!("{who} is not a CUDA process: the driver has no CUDA state for it"),
            "check the PID; a process must have initialised CUDA before it can be checkpointed (`nvidia-smi` lists GPU processes)",
        ),
        code::OPERATING_SYSTEM if !facts.caller_privileged => Failure::new(
            FailureKind::PermissionDenied,
            format!("could not {verb} {who}: the driver was refused access to the process"),
            PERMISSION_HINT,
        ),
        code::NOT_PERMITTED => Failure::new(
            FailureKind::PermissionDenied,
            format!("could not {verb} {who}: the driver does not permit it"),
            PERMISSION_HINT,
        ),
        code::ILLEGAL_STATE => illegal_state(attempt, &who, verb, facts.state_now),
        code::NOT_READY if matches!(attempt, Attempt::Step(Step::Lock { .. })) => {
            lock_timeout(attempt, &who)
        }
        code::INVALID_VALUE if matches!(attempt, Attempt::Step(Step::Restore { map }) if !map.is_empty()) => Failure::new(
            FailureKind::MapRejected,
            format!("could not restore {who}: the driver rejected the GPU map; the process is still checkpointed"),
            "the driver needs a map over every GPU of this host, each sent to a distinct GPU (on two GPUs: A=B,B=A); `nvidia-smi -L` lists the UUIDs",
        ),
        code::OUT_OF_MEMORY => Failure::new(
            FailureKind::OutOfMemory,
            format!("could not {verb} {who}: not enough memory"),
            "free GPU memory on the target GPU before retrying; NVIDIA reports (driver 580.95) that a restore failing for memory can leave a process unrecoverable",
        ),
        code::NOT_SUPPORTED => not_supported(attempt, &who, verb),
        code::OPERATING_SYSTEM => Failure::new(
            FailureKind::DriverError,
            format!("could not {verb} {who}: the driver hit an operating-system error"),
            "if an earlier restore of this process failed (for example out of GPU memory), the driver may be unable to recover it; check `cudackpt state`",
        ),
        _ => Failure::new(
            FailureKind::DriverError,
            match facts.driver_says {
                Some(words) => format!("could not {verb} {who}: the driver says \"{words}\""),
                None => format!("could not {verb} {who}: the driver returned an error"),
            },
            "run with -v for details, and `cudackpt doctor` to check the host",
        ),
    };
    failure.with_cuda(cuda)
}

/// `CUDA_ERROR_NOT_READY` from a lock: its CUDA work outlasted the timeout.
fn lock_timeout(attempt: Attempt<'_>, who: &str) -> Failure {
    let timeout = match attempt {
        Attempt::Step(Step::Lock { timeout }) => *timeout,
        _ => Timeout::NONE,
    };
    let waited = match timeout.as_duration() {
        Some(_) => format!("within {timeout}"),
        None => "before the driver gave up waiting".to_string(),
    };
    Failure::new(
        FailureKind::LockTimeout,
        format!("could not lock {who}: its CUDA work did not finish {waited}; the process is still running"),
        "retry with a longer --timeout (0 waits as long as it takes), or when the process is idle",
    )
}

/// `CUDA_ERROR_NOT_SUPPORTED` (801). Measured on driver 580 (SPEC 2): at
/// checkpoint it refuses what it cannot copy (managed memory) and loses
/// nothing; at restore it follows a checkpoint that succeeded, and may not
/// be undone.
fn not_supported(attempt: Attempt<'_>, who: &str, verb: &str) -> Failure {
    match attempt {
        Attempt::Step(Step::Checkpoint) => Failure::new(
            FailureKind::DriverError,
            format!("could not checkpoint {who}: the driver does not support checkpointing what this process uses (managed/UVM memory, or another feature); nothing was lost, the process stays where it was"),
            "checkpoint processes that use plain device allocations; managed memory (cudaMallocManaged) cannot be checkpointed by this driver",
        ),
        Attempt::Step(Step::Restore { .. }) => Failure::new(
            FailureKind::DriverError,
            format!("could not restore {who}: the driver does not support restoring it here, after a checkpoint that succeeded; the process stays checkpointed and may be unrecoverable"),
            "on driver 580 this is what a rank of an NCCL job over P2P/SHM, or a CUDA IPC party, does; try again, and if it keeps failing (304), the process is lost: restart it",
        ),
        _ => Failure::new(
            FailureKind::DriverError,
            format!("could not {verb} {who}: the driver does not support this here"),
            "this GPU, driver or setup (MIG, vGPU, MPS, an old driver) may not support checkpointing; run `cudackpt doctor`",
        ),
    }
}

fn illegal_state(
    attempt: Attempt<'_>,
    who: &str,
    verb: &str,
    state_now: Option<ProcessState>,
) -> Failure {
    let (needs, step) = match attempt {
        Attempt::Step(step @ Step::Lock { .. }) => ("running", Some(step)),
        Attempt::Step(step @ (Step::Checkpoint | Step::Unlock)) => ("locked", Some(step)),
        Attempt::Step(step @ Step::Restore { .. }) => ("checkpointed", Some(step)),
        Attempt::GetState | Attempt::GetRestoreTid => ("a different", None),
    };
    let message = match state_now {
        Some(state) => {
            format!("could not {verb} {who}: it is {state}, and {verb} needs a {needs} process")
        }
        None => format!("could not {verb} {who}: {verb} needs a {needs} process"),
    };
    let hint = match (step, state_now) {
        (Some(step), Some(state)) => wrong_state_hint(step, state),
        _ => "check the state with `cudackpt state`".to_string(),
    };
    Failure::new(FailureKind::WrongState, message, hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_kind_is_listed_once() {
        // An exhaustive match: a new kind does not compile here until it
        // has a number, and then fails below until ALL (and so the
        // schema) has it.
        const KINDS: usize = 32;
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
    use crate::driver::GpuPair;

    fn cuda(code: i32) -> CallError {
        CallError::Cuda {
            function: "cuCheckpointProcessLock",
            error: CudaError { code },
        }
    }

    fn alive() -> Facts<'static> {
        Facts {
            alive: true,
            caller_privileged: true,
            ..Facts::default()
        }
    }

    #[test]
    fn every_spec_answer_maps_to_its_exit_status() {
        let lock = Step::Lock {
            timeout: Timeout::from_millis(500),
        };
        let cases = [
            (
                Attempt::Step(&lock),
                3,
                alive(),
                FailureKind::NotCudaProcess,
                5,
            ),
            (
                Attempt::Step(&lock),
                304,
                Facts::default(),
                FailureKind::NoSuchProcess,
                5,
            ),
            (
                Attempt::Step(&lock),
                3,
                Facts::default(),
                FailureKind::NoSuchProcess,
                5,
            ),
            (
                Attempt::Step(&lock),
                304,
                Facts {
                    alive: true,
                    ..Facts::default()
                },
                FailureKind::PermissionDenied,
                6,
            ),
            (
                Attempt::Step(&lock),
                304,
                alive(),
                FailureKind::DriverError,
                1,
            ),
            (
                Attempt::Step(&lock),
                600,
                alive(),
                FailureKind::LockTimeout,
                3,
            ),
            (
                Attempt::Step(&lock),
                401,
                alive(),
                FailureKind::WrongState,
                4,
            ),
            (
                Attempt::Step(&lock),
                800,
                alive(),
                FailureKind::PermissionDenied,
                6,
            ),
            (Attempt::GetState, 999, alive(), FailureKind::DriverError, 1),
        ];
        for (attempt, code, facts, kind, exit) in cases {
            let failure = from_call(attempt, 42, Some("python3"), &cuda(code), facts);
            assert_eq!(failure.kind, kind, "code {code}");
            assert_eq!(failure.kind.exit_status().code(), exit, "code {code}");
            assert_eq!(failure.cuda, Some(CudaError { code }));
            assert!(
                failure.message.contains("PID 42 (python3)"),
                "{}",
                failure.message
            );
            assert!(failure.hint.is_some());
        }
    }

    #[test]
    fn lock_timeout_names_the_timeout_and_says_it_still_runs() {
        let lock = Step::Lock {
            timeout: Timeout::from_millis(500),
        };
        let failure = from_call(Attempt::Step(&lock), 7, None, &cuda(600), alive());
        assert!(
            failure.message.contains("500 ms") && failure.message.contains("still running"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn wrong_state_names_state_and_way_out() {
        let facts = Facts {
            state_now: Some(ProcessState::Checkpointed),
            ..alive()
        };
        let failure = from_call(Attempt::Step(&Step::Unlock), 7, None, &cuda(401), facts);
        assert_eq!(
            failure.message,
            "could not unlock PID 7: it is checkpointed, and unlock needs a locked process"
        );
        assert!(failure
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("resume")));
    }

    #[test]
    fn a_rejected_map_is_told_apart_from_a_bad_restore() {
        let uuid = "GPU-11111111-2222-3333-4444-555555555555"
            .parse()
            .expect("uuid");
        let mapped = Step::Restore {
            map: vec![GpuPair {
                old: uuid,
                new: uuid,
            }],
        };
        assert_eq!(
            from_call(Attempt::Step(&mapped), 7, None, &cuda(1), alive()).kind,
            FailureKind::MapRejected
        );
        let plain = Step::Restore { map: vec![] };
        assert_eq!(
            from_call(Attempt::Step(&plain), 7, None, &cuda(1), alive()).kind,
            FailureKind::DriverError
        );
    }

    #[test]
    fn unknown_errors_quote_the_driver() {
        let facts = Facts {
            driver_says: Some("unspecified launch failure"),
            ..alive()
        };
        let failure = from_call(Attempt::Step(&Step::Checkpoint), 7, None, &cuda(719), facts);
        assert!(failure.message.contains("\"unspecified launch failure\""));
        assert_eq!(
            failure.cuda.map(|c| c.name()),
            Some("CUDA_ERROR_LAUNCH_FAILED".to_string())
        );
    }
}
