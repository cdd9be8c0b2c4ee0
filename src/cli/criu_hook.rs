//! CRIU's `--action-script` mode: gives CUDA checkpointing to CRIU versions
//! without the CUDA plugin (SPEC section 9). CRIU runs the script with
//! `CRTOOLS_SCRIPT_ACTION` and `CRTOOLS_INIT_PID` set:
//!
//! - `pre-dump`: the tree still runs; suspend every CUDA process in it (all
//!   or nothing: a failure rolls the group back and exits non-zero, which
//!   makes CRIU abort the dump).
//! - `post-dump`: the tree is still frozen, and a restore needs the
//!   process's restore thread to run, so resuming here would never finish.
//!   Instead a detached waiter resumes the processes once CRIU thaws them
//!   (after `--leave-running`), or does nothing when they exit (a plain
//!   dump kills them).
//! - `post-resume`: after `criu restore`, resume the restored tree.
//! - anything else: nothing, exit 0.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::ops::diagnose::{Failure, FailureKind};
use crate::ops::plan::Operation;
use crate::ops::report::Report;
use crate::ops::timeout::Timeout;
use crate::ops::{self as request, Request, Selectors};
use crate::targets::discover;
use crate::targets::process::{self, parse_pid};

/// The environment CRIU sets for action scripts.
pub const ACTION_VAR: &str = "CRTOOLS_SCRIPT_ACTION";
pub const INIT_PID_VAR: &str = "CRTOOLS_INIT_PID";

/// How long the post-dump waiter waits for CRIU to thaw the tree.
const THAW_WAIT_LIMIT: Duration = Duration::from_secs(3600);
const THAW_POLL: Duration = Duration::from_millis(20);

/// What cudackpt does at a CRIU action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookStep {
    SuspendTree,
    ResumeWhenThawed,
    ResumeTree,
    Nothing,
}

/// The step for a CRIU action name (pure).
pub fn step_for(action: &str) -> HookStep {
    match action {
        "pre-dump" => HookStep::SuspendTree,
        "post-dump" => HookStep::ResumeWhenThawed,
        "post-resume" => HookStep::ResumeTree,
        _ => HookStep::Nothing,
    }
}

/// Whether this invocation is CRIU running cudackpt as its action script:
/// no arguments, and CRIU's variable set.
pub fn is_hook_invocation(args_after_program: usize) -> bool {
    args_after_program == 0 && std::env::var_os(ACTION_VAR).is_some_and(|v| !v.is_empty())
}

fn hook_failure(message: String) -> Report {
    Report {
        failure: Some(Failure::new(
            FailureKind::Usage,
            message,
            "run cudackpt as `criu dump|restore --action-script $(which cudackpt)`; CRIU sets CRTOOLS_SCRIPT_ACTION and CRTOOLS_INIT_PID",
        )),
        ..Report::new("criu-hook", Duration::ZERO)
    }
}

/// The tree root CRIU names in CRTOOLS_INIT_PID.
fn init_pid() -> Result<i32, String> {
    let text = std::env::var(INIT_PID_VAR).unwrap_or_default();
    parse_pid(&text).map_err(|why| format!("{INIT_PID_VAR}: {why}"))
}

/// Runs `operation` on the CUDA processes of `trees` and on `candidates`
/// (confirmed by the driver, dropped if gone).
fn run_on(
    libcuda: Option<&Path>,
    candidates: Vec<i32>,
    trees: Vec<i32>,
    operation: Operation,
) -> Report {
    let mut report = request::run(Request {
        selectors: Selectors {
            trees,
            candidates,
            ..Selectors::default()
        },
        ..Request::new(libcuda, operation)
    });
    report.command = "criu-hook";
    report
}

/// Runs the step CRIU's current action asks for. `action` is the value of
/// CRTOOLS_SCRIPT_ACTION.
pub fn run(libcuda: Option<&Path>, action: &str) -> Report {
    if action.is_empty() {
        return hook_failure(format!(
            "{ACTION_VAR} is not set: this is CRIU's action-script mode"
        ));
    }
    let step = step_for(action);
    tracing::debug!(action, ?step, "CRIU action");
    match step {
        HookStep::Nothing => Report::new("criu-hook", Duration::ZERO),
        HookStep::SuspendTree | HookStep::ResumeTree => {
            let root = match init_pid() {
                Ok(root) => root,
                Err(why) => return hook_failure(why),
            };
            let operation = if step == HookStep::SuspendTree {
                Operation::Suspend {
                    timeout: Timeout::NONE,
                }
            } else {
                Operation::Resume
            };
            run_on(libcuda, vec![], vec![root], operation)
        }
        HookStep::ResumeWhenThawed => {
            let root = match init_pid() {
                Ok(root) => root,
                Err(why) => return hook_failure(why),
            };
            // Which processes to wait for: the tree's CUDA processes, found
            // from /proc alone. The tree is frozen, and the driver would not
            // answer for a stopped process until it runs again.
            let driver_file = libcuda.and_then(|p| p.file_name()).and_then(|n| n.to_str());
            let pids: Vec<i32> = discover::cuda_candidates(&discover::tree(root), driver_file)
                .into_iter()
                .map(|(pid, _)| pid)
                .collect();
            if pids.is_empty() {
                return Report::new("criu-hook", Duration::ZERO);
            }
            match spawn_waiter(libcuda, &pids) {
                Ok(()) => Report {
                    warnings: vec![format!(
                        "PIDs {pids:?} will be resumed once CRIU thaws them (a detached cudackpt waits)"
                    )],
                    ..Report::new("criu-hook", Duration::ZERO)
                },
                Err(error) => hook_failure(format!("could not start the waiter that resumes {pids:?}: {error}")),
            }
        }
    }
}

/// Starts `cudackpt criu-hook --resume-when-thawed PIDS` detached from CRIU
/// (own process group, no inherited stdio), so CRIU can finish.
fn spawn_waiter(libcuda: Option<&Path>, pids: &[i32]) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe()?);
    if let Some(path) = libcuda {
        command.arg("--libcuda").arg(path);
    }
    command
        .args(["criu-hook", "--resume-when-thawed"])
        .args(pids.iter().map(ToString::to_string))
        .env_remove(ACTION_VAR)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
}

/// Whether a process is stopped by a debugger or a signal (CRIU's freeze).
fn is_stopped(pid: i32) -> Option<bool> {
    let status = process::read_status(pid).ok().flatten()?;
    match status.state {
        'Z' | 'X' => None,
        state => Some(process::is_stopped_state(state)),
    }
}

/// The waiter: once none of `pids` is stopped any more, resume those still
/// alive. Processes that exit are dropped.
pub fn resume_when_thawed(libcuda: Option<&Path>, pids: &[i32]) -> Report {
    let started = Instant::now();
    let mut waiting: Vec<i32> = pids.to_vec();
    loop {
        waiting.retain(|&pid| is_stopped(pid).is_some());
        if waiting.is_empty() {
            // They exited: a dump without --leave-running. Nothing to do.
            return Report::new("criu-hook", started.elapsed());
        }
        if waiting.iter().all(|&pid| is_stopped(pid) == Some(false)) {
            return run_on(libcuda, waiting, vec![], Operation::Resume);
        }
        if started.elapsed() > THAW_WAIT_LIMIT {
            return hook_failure(format!(
                "{waiting:?} stayed frozen for {} s; not resumed",
                THAW_WAIT_LIMIT.as_secs()
            ));
        }
        std::thread::sleep(THAW_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_has_its_step() {
        assert_eq!(step_for("pre-dump"), HookStep::SuspendTree);
        assert_eq!(step_for("post-dump"), HookStep::ResumeWhenThawed);
        assert_eq!(step_for("post-resume"), HookStep::ResumeTree);
        for other in [
            "pre-restore",
            "post-restore",
            "pre-resume",
            "network-lock",
            "setup-namespaces",
            "",
        ] {
            assert_eq!(step_for(other), HookStep::Nothing, "{other}");
        }
    }

    #[test]
    fn this_process_is_not_stopped() {
        assert_eq!(is_stopped(std::process::id() as i32), Some(false));
    }
}
