//! Turning what went wrong into words: every failure gets a kind (for JSON
//! and the exit status), a message saying what was attempted on which
//! process and why it failed, and a hint saying what to do next. Pure: the
//! facts it needs (is the process alive, its state now) come from the caller.

mod drain;
mod process;

pub use drain::{called_off, cannot_drain, rebuild_failed, rebuild_unfinished, CallOffReason};
pub use process::{describe_process, process_stopped};

use crate::driver::{code, CallError, LoadError, ProcessState};
use crate::gpu::map::MapError;
use crate::targets::process::{TargetError, PERMISSION_HINT};
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::{wrong_state_hint, Step};
use crate::vocabulary::timeout::Timeout;

/// The refusal of a map that cannot be used, in words and an exit status.
pub fn map_failure(error: &MapError) -> Fault {
    let kind = if error.is_syntax() {
        FaultKind::Usage
    } else {
        FaultKind::InvalidMap
    };
    Fault::new(
        kind,
        error.to_string(),
        "write the map as OLD=NEW pairs of GPU UUIDs (`nvidia-smi -L` lists them) or NEW as a GPU index; the driver needs every GPU of this host mapped, each to a distinct GPU",
    )
}

pub fn from_target_error(error: &TargetError) -> Fault {
    let kind = match error {
        TargetError::NoSuchProcess { .. } | TargetError::Zombie { .. } => FaultKind::NoSuchProcess,
        TargetError::Thread { .. } => FaultKind::ThreadNotProcess,
        TargetError::PermissionDenied { .. } => FaultKind::PermissionDenied,
        TargetError::Unreadable { .. } => FaultKind::ProcUnreadable,
    };
    Fault::new(kind, error.to_string(), error.hint())
}

pub fn from_load_error(error: &LoadError) -> Fault {
    let kind = match error {
        LoadError::Untrusted(_) => FaultKind::UnsafePath,
        _ => FaultKind::DriverUnavailable,
    };
    Fault::new(kind, error.to_string(), error.hint())
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
) -> Fault {
    let who = describe_process(pid, name);
    let verb = attempt.verb();
    let cuda = match error {
        CallError::Missing(missing) => return missing_function(verb, &who, missing.function),
        CallError::Cuda { error, .. } => *error,
    };
    let failure = match cuda.code {
        // A process that died during the call can also answer this way.
        code::NOT_INITIALIZED | code::OPERATING_SYSTEM if !facts.alive => Fault::new(
            FaultKind::NoSuchProcess,
            format!("could not {verb} {who}: the process has exited"),
            "check the PID",
        ),
        code::NOT_INITIALIZED => Fault::new(
            FaultKind::NotCudaProcess,
            format!("{who} is not a CUDA process: the driver has no CUDA state for it"),
            "check the PID; a process must have initialised CUDA before it can be checkpointed (`nvidia-smi` lists GPU processes)",
        ),
        code::OPERATING_SYSTEM if !facts.caller_privileged => Fault::new(
            FaultKind::PermissionDenied,
            format!("could not {verb} {who}: the driver was refused access to the process"),
            PERMISSION_HINT,
        ),
        code::NOT_PERMITTED => Fault::new(
            FaultKind::PermissionDenied,
            format!("could not {verb} {who}: the driver does not permit it"),
            PERMISSION_HINT,
        ),
        code::ILLEGAL_STATE => illegal_state(attempt, &who, verb, facts.state_now),
        code::NOT_READY if matches!(attempt, Attempt::Step(Step::Lock { .. })) => {
            lock_timeout(attempt, &who)
        }
        code::INVALID_VALUE if matches!(attempt, Attempt::Step(Step::Restore { map }) if !map.is_empty()) => Fault::new(
            FaultKind::MapRejected,
            format!("could not restore {who}: the driver rejected the GPU map; the process is still checkpointed"),
            "the driver needs a map over every GPU of this host, each sent to a distinct GPU (on two GPUs: A=B,B=A); `nvidia-smi -L` lists the UUIDs",
        ),
        code::OUT_OF_MEMORY => out_of_memory(attempt, &who, verb),
        code::NOT_SUPPORTED => not_supported(attempt, &who, verb),
        code::OPERATING_SYSTEM => Fault::new(
            FaultKind::DriverError,
            format!("could not {verb} {who}: the driver hit an operating-system error"),
            "if an earlier restore of this process failed (for example out of GPU memory), the driver may be unable to recover it; check `cudackpt state`",
        ),
        _ => unexplained(verb, &who, facts.driver_says),
    };
    failure.with_cuda(cuda)
}

/// A driver without the checkpoint function the call needed.
fn missing_function(verb: &str, who: &str, function: &str) -> Fault {
    Fault::new(
        FaultKind::DriverUnavailable,
        format!("could not {verb} {who}: this CUDA driver has no {function}"),
        "the checkpoint API needs display driver 570 or newer; run `cudackpt doctor`",
    )
}

/// An answer no case above explains: the driver's own words, if any.
fn unexplained(verb: &str, who: &str, driver_says: Option<&str>) -> Fault {
    Fault::new(
        FaultKind::DriverError,
        match driver_says {
            Some(words) => format!("could not {verb} {who}: the driver says \"{words}\""),
            None => format!("could not {verb} {who}: the driver returned an error"),
        },
        "run with -v for details, and `cudackpt doctor` to check the host",
    )
}

/// `CUDA_ERROR_NOT_READY` from a lock: its CUDA work outlasted the timeout.
fn lock_timeout(attempt: Attempt<'_>, who: &str) -> Fault {
    let timeout = match attempt {
        Attempt::Step(Step::Lock { timeout }) => *timeout,
        _ => Timeout::NONE,
    };
    let waited = match timeout.as_duration() {
        Some(_) => format!("within {timeout}"),
        None => "before the driver gave up waiting".to_string(),
    };
    Fault::new(
        FaultKind::LockTimeout,
        format!("could not lock {who}: its CUDA work did not finish {waited}; the process is still running"),
        "retry with a longer --timeout (0 waits as long as it takes), or when the process is idle",
    )
}

/// `CUDA_ERROR_NOT_SUPPORTED` (801). Measured on driver 580 (docs/driver-facts.md, F4): at
/// checkpoint it refuses what it cannot copy (managed memory) and loses
/// nothing; at restore it follows a checkpoint that succeeded, and may not
/// be undone.
/// Not enough memory, said for the step that needed it: a restore needs
/// GPU memory, a checkpoint host memory (it copies the GPU memory into the
/// process's own).
fn out_of_memory(attempt: Attempt<'_>, who: &str, verb: &str) -> Fault {
    let hint = match attempt {
        Attempt::Step(Step::Restore { .. }) => "free GPU memory on the target GPU before retrying; NVIDIA reports (driver 580.95) that a restore failing for memory can leave a process unrecoverable",
        Attempt::Step(Step::Checkpoint) => "a checkpoint copies the process's GPU memory into its own host memory: free host memory (or raise its cgroup's memory.max), or shrink what it holds first (--drain empties PyTorch's cache)",
        _ => "free memory and try again; `cudackpt doctor` checks the host",
    };
    Fault::new(
        FaultKind::OutOfMemory,
        format!("could not {verb} {who}: not enough memory"),
        hint,
    )
}

fn not_supported(attempt: Attempt<'_>, who: &str, verb: &str) -> Fault {
    match attempt {
        Attempt::Step(Step::Checkpoint) => Fault::new(
            FaultKind::DriverError,
            format!("could not checkpoint {who}: the driver does not support checkpointing what this process uses (managed/UVM memory, or another feature); nothing was lost, the process stays where it was"),
            "checkpoint processes that use plain device allocations; managed memory (cudaMallocManaged) cannot be checkpointed by this driver",
        ),
        Attempt::Step(Step::Restore { .. }) => Fault::new(
            FaultKind::DriverError,
            format!("could not restore {who}: the driver does not support restoring it here, after a checkpoint that succeeded; the process stays checkpointed and may be unrecoverable"),
            "on driver 580 this is what a rank of an NCCL job over P2P/SHM, or a CUDA IPC party, does; try again, and if it keeps failing (304), the process is lost: restart it",
        ),
        _ => Fault::new(
            FaultKind::DriverError,
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
) -> Fault {
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
    Fault::new(FaultKind::WrongState, message, hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::driver::{CudaError, GpuPair};

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
                FaultKind::NotCudaProcess,
                5,
            ),
            (
                Attempt::Step(&lock),
                304,
                Facts::default(),
                FaultKind::NoSuchProcess,
                5,
            ),
            (
                Attempt::Step(&lock),
                3,
                Facts::default(),
                FaultKind::NoSuchProcess,
                5,
            ),
            (
                Attempt::Step(&lock),
                304,
                Facts {
                    alive: true,
                    ..Facts::default()
                },
                FaultKind::PermissionDenied,
                6,
            ),
            (
                Attempt::Step(&lock),
                304,
                alive(),
                FaultKind::DriverError,
                1,
            ),
            (
                Attempt::Step(&lock),
                600,
                alive(),
                FaultKind::LockTimeout,
                3,
            ),
            (Attempt::Step(&lock), 401, alive(), FaultKind::WrongState, 4),
            (
                Attempt::Step(&lock),
                800,
                alive(),
                FaultKind::PermissionDenied,
                6,
            ),
            (Attempt::GetState, 999, alive(), FaultKind::DriverError, 1),
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
            FaultKind::MapRejected
        );
        let plain = Step::Restore { map: vec![] };
        assert_eq!(
            from_call(Attempt::Step(&plain), 7, None, &cuda(1), alive()).kind,
            FaultKind::DriverError
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

    #[test]
    fn out_of_memory_is_said_for_the_step_that_needed_it() {
        let oom = cuda(code::OUT_OF_MEMORY);
        let hint = |step: &Step| {
            from_call(Attempt::Step(step), 7, Some("train"), &oom, alive())
                .hint
                .unwrap_or_default()
        };
        let checkpoint = hint(&Step::Checkpoint);
        assert!(
            checkpoint.contains("host memory") && !checkpoint.contains("restore"),
            "{checkpoint}"
        );
        let restore = hint(&Step::Restore { map: Vec::new() });
        assert!(
            restore.contains("GPU memory") && restore.contains("restore"),
            "{restore}"
        );
    }
}
