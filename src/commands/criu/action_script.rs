//! The CRIU hook's command (`--action-script` mode): gives CUDA
//! checkpointing to CRIU versions without the CUDA plugin (docs/guide/criu.md,
//! "NVIDIA-compatible mode and CRIU"). Its grammar, the environment CRIU
//! sets (`CRTOOLS_SCRIPT_ACTION`, `CRTOOLS_INIT_PID`) and cudackpt's own
//! variables, is read once (`cli::criu_hook` for the action,
//! [`super::settings`] for the rest) into a [`HookPlan`]; here is what
//! each action does:
//!
//! - `pre-dump`: the tree still runs; suspend every CUDA process in it (all
//!   or nothing: a failure rolls the group back and exits non-zero, which
//!   makes CRIU abort the dump). Locks wait at most `CUDACKPT_LOCK_TIMEOUT`
//!   (10 s by default, as CRIU's CUDA plugin). Then a detached watcher
//!   waits for the CRIU process (the hook's parent) to end: a dump that
//!   fails after pre-dump thaws the tree and runs no hook cudackpt acts on,
//!   so the watcher resumes whatever it finds alive and still checkpointed
//!   (a plain dump has killed the tree; nothing to do).
//! - `post-dump`: the tree is still frozen, and a restore needs the
//!   process's restore thread to run, so resuming here would never finish.
//!   Instead a detached waiter resumes the processes once CRIU thaws them
//!   (after `--leave-running`), or does nothing when they exit (a plain
//!   dump kills them). It resumes exactly what this dump's pre-dump
//!   suspended (`criu_handoff`: PID and start time), never a process it
//!   merely finds in the tree.
//!
//! - `post-resume`: after `criu restore`, resume the restored tree.
//! - anything else: nothing, exit 0.
//!
//! The tree of PID 1 is the whole host: every action that changes state
//! needs `CUDACKPT_YES=1`, as `--all` needs `--yes`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::lifecycle;
use super::settings::{HookSettings, Unusable};
use crate::gpu::map::MapSpec;
use crate::ops::doors::criu::{self as criu_handoff, Handoff};
use crate::targets::identity::Identity;
use crate::targets::process;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::prose;
use crate::vocabulary::report::CommandReport;
use crate::vocabulary::request::Selectors;
use crate::vocabulary::timeout::Timeout;

/// What the hook does at one CRIU action, with what the action needs.
#[derive(Debug, Clone, PartialEq)]
pub enum HookStep {
    /// `pre-dump`: suspend the CUDA processes of the tree at `root`, each
    /// lock waiting at most `lock_timeout`.
    SuspendTree { root: i32, lock_timeout: Timeout },
    /// `post-dump`: resume what pre-dump suspended once CRIU thaws it.
    ResumeWhenThawed { root: i32 },
    /// `post-resume`: resume the restored tree, onto the GPUs of `map`.
    ResumeTree { root: i32, map: MapSpec },
    /// Any other action.
    Nothing,
}

/// One run of the hook, as its grammar converted it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookPlan {
    pub step: HookStep,
    pub settings: HookSettings,
}

/// The hook's report of an environment it cannot use: CRIU's own
/// variables wrong, or cudackpt's (a usage failure naming what to set).
pub fn unusable(unusable: Unusable) -> CommandReport {
    match unusable.hint {
        None => hook_failure(unusable.message),
        Some(hint) => CommandReport {
            failure: Some(Fault::new(FaultKind::Usage, unusable.message, hint)),
            ..CommandReport::new("criu-hook", Duration::ZERO)
        },
    }
}

/// How long the post-dump waiter waits for CRIU to thaw the tree.
const THAW_WAIT_LIMIT: Duration = Duration::from_secs(3600);
const THAW_POLL: Duration = Duration::from_millis(20);

/// A failure of the hook's own (not of a process), with the way CRIU
/// runs it.
pub fn hook_failure(message: impl std::fmt::Display) -> CommandReport {
    CommandReport {
        failure: Some(Fault::new(
            FaultKind::Usage,
            message.to_string(),
            "run cudackpt as `criu dump|restore --action-script $(which cudackpt)`; CRIU sets CRTOOLS_SCRIPT_ACTION and CRTOOLS_INIT_PID",
        )),
        ..CommandReport::new("criu-hook", Duration::ZERO)
    }
}

/// Post-dump could not start the waiter (a pids limit, no memory): the
/// tree stays checkpointed, and the user is told how to bring it back.
fn waiter_not_started(pids: &[i32], error: &std::io::Error) -> CommandReport {
    CommandReport {
        failure: Some(Fault::new(
            FaultKind::SpawnFailed,
            format!("could not start the waiter that resumes {} once CRIU thaws them: {error}; they stay checkpointed", prose::pids(pids)),
            format!("once CRIU has thawed them, run {}", resume_command(pids)),
        )),
        ..CommandReport::new("criu-hook", Duration::ZERO)
    }
}

/// `` `cudackpt resume 1 2` ``: what brings `pids` back by hand when no
/// helper could (pure).
fn resume_command(pids: &[i32]) -> String {
    let pids: Vec<String> = pids.iter().map(ToString::to_string).collect();
    format!("`cudackpt resume {}`", pids.join(" "))
}

/// Runs `operation` on the CUDA processes of `trees` and on `candidates`
/// (confirmed by the driver, dropped if gone), with the hook's settings.
fn run_on(
    libcuda: Option<&Path>,
    settings: &HookSettings,
    candidates: Vec<i32>,
    trees: Vec<i32>,
    operation: Operation,
    map: MapSpec,
) -> CommandReport {
    let dump_follows = operation.checkpoints();
    let mut group = lifecycle::group(libcuda, settings)
        .selectors(Selectors {
            trees,
            candidates,
            ..Selectors::default()
        })
        .map_spec(map);
    if dump_follows {
        group = group.criu_dump(criu());
    }
    let mut report = group.run(operation);
    report.command = "criu-hook";
    report
}

/// The CRIU process this hook runs under (its parent).
fn criu() -> Identity {
    Identity::of(rustix::process::getppid().map_or(0, |pid| pid.as_raw_nonzero().get()))
}

/// Runs the step CRIU's current action asks for.
pub fn run(libcuda: Option<&Path>, plan: HookPlan) -> CommandReport {
    let HookPlan { step, settings } = plan;
    tracing::debug!(?step, "CRIU action");
    match step {
        HookStep::Nothing => CommandReport::new("criu-hook", Duration::ZERO),
        HookStep::ResumeTree { root, map } => run_on(
            libcuda,
            &settings,
            vec![],
            vec![root],
            Operation::Resume,
            map,
        ),
        HookStep::SuspendTree { root, lock_timeout } => {
            suspend_tree(libcuda, &settings, root, lock_timeout)
        }
        HookStep::ResumeWhenThawed { root } => resume_after_dump(libcuda, &settings, root),
    }
}

/// Pre-dump: suspends the tree, leaves post-dump the list of what it
/// suspended, and starts the watcher that puts the group back if CRIU
/// ends without dumping.
fn suspend_tree(
    libcuda: Option<&Path>,
    settings: &HookSettings,
    root: i32,
    lock_timeout: Timeout,
) -> CommandReport {
    let mut report = run_on(
        libcuda,
        settings,
        vec![],
        vec![root],
        Operation::Suspend {
            timeout: lock_timeout,
        },
        MapSpec::None,
    );
    let suspended = suspended_by(&report);
    criu_handoff::kill_at("before-watcher");
    if !suspended.is_empty() {
        let criu = criu();
        hand_off(criu, root, &suspended, &mut report);
        watch_criu(libcuda, criu, &suspended, &mut report);
    }
    report
}

/// Post-dump: the dump went on; a detached waiter resumes what this
/// dump's pre-dump suspended once CRIU thaws it.
fn resume_after_dump(libcuda: Option<&Path>, settings: &HookSettings, root: i32) -> CommandReport {
    if root == 1 && !settings.confirmed {
        return whole_host_unconfirmed("post-dump");
    }
    // The dump went on: the record pre-dump handed to this CRIU is
    // not needed to put the group back any more.
    criu_handoff::release_handed_to(criu());
    // Exactly what this dump's pre-dump suspended, still the same
    // processes. The tree is frozen, and the driver would not answer
    // for a stopped process until it runs again: /proc alone says.
    let Some(handoff) = criu_handoff::take(criu(), root) else {
        return CommandReport::new("criu-hook", Duration::ZERO);
    };
    let waiting: Vec<Identity> = handoff
        .suspended
        .into_iter()
        .filter(|p| p.is_still_there())
        .collect();
    if waiting.is_empty() {
        return CommandReport::new("criu-hook", Duration::ZERO);
    }
    let pids: Vec<i32> = waiting.iter().map(|p| p.pid).collect();
    match spawn_waiter(libcuda, &waiting) {
        Ok(()) => CommandReport {
            warnings: vec![format!(
                "{} will be resumed once CRIU thaws them (a detached cudackpt waits)",
                prose::pids(&pids)
            )],
            ..CommandReport::new("criu-hook", Duration::ZERO)
        },
        Err(error) => waiter_not_started(&pids, &error),
    }
}

/// The refusal of an action on the tree of PID 1 without `CUDACKPT_YES=1`.
fn whole_host_unconfirmed(action: &str) -> CommandReport {
    CommandReport {
        failure: Some(Fault::new(
            FaultKind::Usage,
            format!("the tree of PID 1 is the whole host: {action} would act on every CUDA process on this host"),
            "set CUDACKPT_YES=1 for CRIU's action script to confirm, or dump a tree of its own",
        )),
        ..CommandReport::new("criu-hook", Duration::ZERO)
    }
}

/// The processes a pre-dump checkpointed, as they are now.
fn suspended_by(report: &CommandReport) -> Vec<Identity> {
    report
        .processes
        .iter()
        .filter(|p| p.ok() && p.did(crate::vocabulary::plan::DriverCall::Checkpoint))
        .map(|p| Identity::of(p.pid))
        .collect()
}

/// Leaves what pre-dump suspended for this dump's post-dump.
fn hand_off(criu: Identity, root: i32, suspended: &[Identity], report: &mut CommandReport) {
    let handoff = Handoff {
        criu,
        root,
        suspended: suspended.to_vec(),
    };
    if let Err(why) = criu_handoff::give(&handoff) {
        let pids: Vec<i32> = suspended.iter().map(|p| p.pid).collect();
        report.warnings.push(format!(
            "could not leave post-dump the list of what was suspended ({why}): it will resume nothing; after a --leave-running dump, run {}",
            resume_command(&pids)
        ));
    }
}

/// Starts `cudackpt criu-hook --resume-when-thawed PIDS` detached from CRIU
/// (own process group, no inherited stdio), so CRIU can finish.
fn spawn_waiter(libcuda: Option<&Path>, processes: &[Identity]) -> std::io::Result<()> {
    let mut args = vec!["criu-hook".to_string(), "--resume-when-thawed".to_string()];
    args.extend(processes.iter().map(ToString::to_string));
    spawn_detached(libcuda, &args)
}

/// Starts `cudackpt ARGS` detached from CRIU (own process group, no
/// inherited stdio), so CRIU can finish while it waits.
fn spawn_detached(libcuda: Option<&Path>, args: &[String]) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe()?);
    if let Some(path) = libcuda {
        command.arg("--libcuda").arg(path);
    }
    command
        .args(args)
        .env_remove(crate::environment::CRIU_ACTION)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
}

/// After a pre-dump that suspended processes: starts a detached watcher
/// that outlives this hook and waits for CRIU (the hook's parent) to end,
/// then resumes whatever of the group it finds alive and checkpointed.
fn watch_criu(
    libcuda: Option<&Path>,
    criu: Identity,
    suspended: &[Identity],
    report: &mut CommandReport,
) {
    let mut args = vec![
        "criu-hook".to_string(),
        "--after-criu".to_string(),
        criu.to_string(),
    ];
    args.extend(suspended.iter().map(ToString::to_string));
    let pids: Vec<i32> = suspended.iter().map(|p| p.pid).collect();
    match spawn_detached(libcuda, &args) {
        Ok(()) => report.warnings.push(format!(
            "a detached cudackpt resumes {} if CRIU (PID {}) ends without dumping them (a failed dump)",
            prose::pids(&pids),
            criu.pid
        )),
        Err(error) => report.warnings.push(format!(
            "could not start the watcher that resumes {} if the dump fails: {error}; if it does, run {}",
            prose::pids(&pids),
            resume_command(&pids)
        )),
    }
}

/// The watcher: waits for CRIU to end. A dump that went on ran a
/// post-dump, which took the intent record pre-dump handed to CRIU (its
/// own waiter resumes what CRIU leaves running); one that failed left the
/// record: once the tree is thawed, the group is put back from it, as
/// `recover` would. Without a record (it could not be handed over), what
/// is still alive and checkpointed is resumed. What pre-dump left for the
/// post-dump goes either way.
pub fn after_criu(
    libcuda: Option<&Path>,
    settings: &HookSettings,
    criu: Identity,
    processes: &[Identity],
) -> CommandReport {
    if criu.is_still_there() {
        wait_for_exit(criu.pid);
    }
    let report = match wait_until_thawed(processes) {
        Err(frozen) => stayed_frozen(&frozen),
        Ok(_) => match crate::commands::recover::run_handed_to(libcuda, criu) {
            (true, mut report) => {
                report.command = "criu-hook";
                report
            }
            (false, _) => resume_when_thawed(libcuda, settings, processes),
        },
    };
    criu_handoff::drop_for(criu);
    report
}

/// Blocks until `pid` has exited: on its pidfd, or by polling /proc.
fn wait_for_exit(pid: i32) {
    let pidfd = rustix::process::Pid::from_raw(pid).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    if let Some(fd) = pidfd {
        loop {
            match process::pidfd_exit_within(&fd, None) {
                Ok(true) => return,
                Ok(false) | Err(rustix::io::Errno::INTR) => continue,
                // Any other failure: /proc says it, below.
                Err(_) => break,
            }
        }
    }
    while process::is_alive(pid) {
        std::thread::sleep(THAW_POLL);
    }
}

/// Writes `line`, what a detached helper (the thaw waiter, the CRIU
/// watcher) did (`output::criu_log::outcome_line`), where an
/// administrator finds it: syslog (`/dev/log`, read by journald), else
/// `criu-hook.log` in the run directory.
pub fn log_outcome(line: &str) {
    let syslog = format!("<13>cudackpt[{}]: {line}", std::process::id());
    let sent = std::os::unix::net::UnixDatagram::unbound()
        .and_then(|socket| socket.send_to(syslog.as_bytes(), "/dev/log"));
    if sent.is_ok() {
        return;
    }
    // The record directory: the run directory unless moved (for tests).
    let dir = crate::gpu::record::dir(None);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let written = crate::files::SafeDir::create(&dir).and_then(|dir| {
        dir.append(
            LOG_FILE,
            &format!("{stamp} pid {} {line}\n", std::process::id()),
        )
    });
    if let Err(error) = written {
        tracing::warn!(%error, "could not log the CRIU hook's outcome");
    }
}

/// The log of the detached helpers, in the run directory (or wherever
/// CUDACKPT_RECORD_DIR moves records), when there is no syslog.
pub const LOG_FILE: &str = "criu-hook.log";

/// Whether a process is stopped by a debugger or a signal (CRIU's freeze).
fn is_stopped(pid: i32) -> Option<bool> {
    let status = process::read_status(pid).ok().flatten()?;
    match status.state {
        'Z' | 'X' => None,
        state => Some(process::is_stopped_state(state)),
    }
}

/// The waiter: once none of `processes` is stopped any more, resume those
/// still alive and still the same processes. Processes that exit (or whose
/// PID names another process by then) are dropped.
pub fn resume_when_thawed(
    libcuda: Option<&Path>,
    settings: &HookSettings,
    processes: &[Identity],
) -> CommandReport {
    match wait_until_thawed(processes) {
        Ok(waiting) if waiting.is_empty() => CommandReport::new("criu-hook", Duration::ZERO),
        Ok(waiting) => run_on(
            libcuda,
            settings,
            waiting,
            vec![],
            Operation::Resume,
            MapSpec::None,
        ),
        Err(frozen) => stayed_frozen(&frozen),
    }
}

/// The failure of processes that stayed frozen past the limit.
fn stayed_frozen(frozen: &[i32]) -> CommandReport {
    hook_failure(format!(
        "{} stayed frozen for {} s; not resumed",
        prose::pids(frozen),
        THAW_WAIT_LIMIT.as_secs()
    ))
}

/// Waits until none of `processes` still there is stopped: those left
/// (none: they exited, a dump without --leave-running), or `Err` with
/// those that stayed frozen past the limit.
fn wait_until_thawed(processes: &[Identity]) -> Result<Vec<i32>, Vec<i32>> {
    let started = Instant::now();
    let mut waiting: Vec<i32> = processes.iter().map(|p| p.pid).collect();
    loop {
        waiting.retain(|&pid| {
            is_stopped(pid).is_some()
                && processes.iter().any(|p| p.pid == pid && p.is_still_there())
        });
        if waiting.iter().all(|&pid| is_stopped(pid) == Some(false)) {
            return Ok(waiting);
        }
        if started.elapsed() > THAW_WAIT_LIMIT {
            return Err(waiting);
        }
        std::thread::sleep(THAW_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_stopped() {
        assert_eq!(is_stopped(std::process::id() as i32), Some(false));
    }
}
