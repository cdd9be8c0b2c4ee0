//! From a parsed command line to an exit status: validates what the user
//! typed (before any driver call), checks the target processes, loads the
//! driver, runs the operation and hands the report to a renderer.

use std::ffi::OsString;
use std::path::Path;
use std::time::Instant;

use clap::Parser;

use crate::cli::{Cli, Command, GlobalArgs, Targets};
use crate::diagnose::{self, Failure, FailureKind};
use crate::driver::Driver;
use crate::execute::Executor;
use crate::exit::ExitStatus;
use crate::gpu::{self, MapError};
use crate::interrupt::Interrupt;
use crate::inventory;
use crate::output::{self, human, json, Look};
use crate::plan::Operation;
use crate::process::{self, Privileges, Target, TargetError};
use crate::report::{ProcessReport, Report};
use crate::{artifacts, compat, demo, doctor, logging};

/// Runs cudackpt with this process's arguments.
pub fn main() -> ExitStatus {
    let args: Vec<OsString> = std::env::args_os().collect();
    if compat::is_compat_invocation(&args) {
        return compat::main(&args);
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(error) => return clap_error(error, &args),
    };
    logging::init(cli.global.verbose);
    run(cli)
}

/// Help and version are successes; anything else is a usage error, also
/// reported as a JSON document when `--json` was asked for.
fn clap_error(error: clap::Error, args: &[OsString]) -> ExitStatus {
    use clap::error::ErrorKind;
    let status = match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitStatus::Success,
        _ => ExitStatus::Usage,
    };
    if status == ExitStatus::Usage && args.iter().any(|a| a == "--json") {
        let message = error
            .kind()
            .as_str()
            .unwrap_or("invalid arguments")
            .to_string();
        let detail = error.render().to_string();
        let _ = output::write_stdout(&json::usage_error(&message, detail.trim()));
    }
    let _ = error.print();
    status
}

/// Where a run's output goes, and how it looks.
pub struct Sink {
    pub json: bool,
    pub quiet: bool,
    pub look: Look,
}

impl Sink {
    pub fn new(global: &GlobalArgs) -> Sink {
        Sink {
            json: global.json,
            quiet: global.quiet,
            look: Look::for_stdout(global.color),
        }
    }

    /// Emits a rendered result: `json` or the human (stdout, stderr) pair.
    pub fn emit(
        &self,
        json: impl FnOnce() -> String,
        human: impl FnOnce(Look) -> (String, String),
    ) {
        if self.quiet {
            return;
        }
        let written = if self.json {
            output::write_stdout(&json())
        } else {
            let (out, err) = human(self.look);
            output::write_stderr(&err);
            output::write_stdout(&out)
        };
        if let Err(error) = written {
            tracing::warn!(%error, "could not write the result to stdout");
        }
    }
}

pub fn run(cli: Cli) -> ExitStatus {
    let Cli { global, command } = cli;
    let sink = Sink::new(&global);
    match command {
        Command::Doctor => {
            let report = doctor::examine(global.libcuda.as_deref());
            sink.emit(
                || doctor::render_json(&report),
                |look| (doctor::render_human(&report, look), String::new()),
            );
            report.exit_status()
        }
        Command::Demo { size_mib, device } => {
            let report = demo::run(global.libcuda.as_deref(), size_mib, device);
            sink.emit(
                || demo::render_json(&report),
                |look| demo::render_human(&report, look),
            );
            report.exit_status()
        }
        Command::Completions { shell } => emit_artifact(output::write_stdout(
            &String::from_utf8_lossy(&artifacts::completions(shell)),
        )),
        Command::Man { dir: None } => emit_artifact(output::write_stdout(
            &String::from_utf8_lossy(&artifacts::root_man_page()),
        )),
        Command::Man { dir: Some(dir) } => emit_artifact(artifacts::write_man_pages(&dir)),
        Command::InstallCompat { dir, force } => install_compat(&dir, force, &sink),
        process_command => {
            let Some((targets, operation, map)) = split(process_command) else {
                return ExitStatus::Usage;
            };
            let report = run_process_command(Request {
                libcuda: global.libcuda.as_deref(),
                pids: targets.pids(),
                operation,
                map: &map,
                thread_ids: ThreadIds::Refuse,
            });
            sink.emit(
                || json::process_report(&report),
                |look| human::process_report(&report, look),
            );
            report.exit_status()
        }
    }
}

fn install_compat(dir: &Path, force: bool, sink: &Sink) -> ExitStatus {
    let outcome = std::env::current_exe()
        .and_then(|exe| exe.canonicalize())
        .and_then(|exe| compat::install(dir, &exe, force).map(|(link, done)| (link, exe, done)));
    let (ok, message) = match &outcome {
        Ok((link, exe, done)) => {
            let verb = match done {
                compat::Installed::Created => "installed",
                compat::Installed::Replaced => "replaced",
                compat::Installed::AlreadyThere => "already installed:",
            };
            (
                true,
                format!("{verb} {} -> {}", link.display(), exe.display()),
            )
        }
        Err(error) => (
            false,
            format!(
                "could not install {}: {error}",
                dir.join(compat::COMPAT_NAME).display()
            ),
        ),
    };
    sink.emit(
        || json::install_compat(ok, &message),
        |_| {
            if ok {
                (format!("{message}\n"), String::new())
            } else {
                (String::new(), format!("cudackpt: {message}\n"))
            }
        },
    );
    if ok {
        ExitStatus::Success
    } else if matches!(&outcome, Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied) {
        ExitStatus::PermissionDenied
    } else {
        ExitStatus::Failed
    }
}

fn emit_artifact(result: std::io::Result<()>) -> ExitStatus {
    match result {
        Ok(()) => ExitStatus::Success,
        Err(error) => {
            output::write_stderr(&format!("cudackpt: {error}\n"));
            ExitStatus::Failed
        }
    }
}

/// A process command's targets, operation (map not yet resolved) and raw
/// `--map` values.
fn split(command: Command) -> Option<(Targets, Operation, Vec<String>)> {
    Some(match command {
        Command::State { targets } => (targets, Operation::State { restore_tid: true }, vec![]),
        Command::RestoreTid { targets } => (targets, Operation::RestoreTid, vec![]),
        Command::Lock { targets, timeout } => (
            targets,
            Operation::Lock {
                timeout: timeout.timeout,
            },
            vec![],
        ),
        Command::Checkpoint { targets } => (targets, Operation::Checkpoint, vec![]),
        Command::Restore { targets, map } => (targets, Operation::Restore { map: vec![] }, map.map),
        Command::Unlock { targets } => (targets, Operation::Unlock, vec![]),
        Command::Toggle {
            targets,
            timeout,
            map,
        } => (
            targets,
            Operation::Toggle {
                timeout: timeout.timeout,
                map: vec![],
            },
            map.map,
        ),
        Command::Suspend { targets, timeout } => (
            targets,
            Operation::Suspend {
                timeout: timeout.timeout,
            },
            vec![],
        ),
        Command::Resume { targets, map } => (targets, Operation::Resume { map: vec![] }, map.map),
        Command::Wait {
            targets,
            state,
            timeout,
        } => (targets, Operation::Wait { state, timeout }, vec![]),
        Command::Doctor
        | Command::Demo { .. }
        | Command::Completions { .. }
        | Command::Man { .. }
        | Command::InstallCompat { .. } => return None,
    })
}

/// A report where every target failed the same way before anything ran.
fn everyone_failed(
    command: &'static str,
    pids: &[i32],
    failure: &Failure,
    started: Instant,
) -> Report {
    Report {
        command,
        processes: pids
            .iter()
            .map(|&pid| ProcessReport {
                failure: Some(failure.clone()),
                ..ProcessReport::new(pid, None)
            })
            .collect(),
        duration: started.elapsed(),
    }
}

fn map_failure(error: &MapError) -> Failure {
    let kind = if error.is_syntax() {
        FailureKind::Usage
    } else {
        FailureKind::InvalidMap
    };
    Failure::new(
        kind,
        error.to_string(),
        "write the map as OLD=NEW pairs of GPU UUIDs (`nvidia-smi -L` lists them) or NEW as a GPU index; the driver needs every GPU of this host mapped, each to a distinct GPU",
    )
}

/// What to do about a thread id given as a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadIds {
    /// Refuse it, naming its process (the modern grammar: the driver would
    /// silently act on the whole process).
    Refuse,
    /// Act on its process, as NVIDIA's tool does (the compatible grammar:
    /// CRIU's plugin passes the restore thread's id).
    ActOnProcess,
}

/// One process command, validated by its front end (modern or compatible).
pub struct Request<'a> {
    pub libcuda: Option<&'a Path>,
    pub pids: Vec<i32>,
    pub operation: Operation,
    /// `--map` / `--device-map` values as typed.
    pub map: &'a [String],
    pub thread_ids: ThreadIds,
}

/// Checks a target, resolving a thread id to its process when asked to.
fn check(pid: i32, privileges: &Privileges, thread_ids: ThreadIds) -> Result<Target, Failure> {
    match process::check_target(pid, privileges) {
        Err(TargetError::Thread { tgid, .. }) if thread_ids == ThreadIds::ActOnProcess => {
            tracing::debug!(
                tid = pid,
                pid = tgid,
                "acting on the process of a thread id"
            );
            process::check_target(tgid, privileges)
        }
        other => other,
    }
    .map_err(|e| diagnose::from_target_error(&e))
}

/// Validates, checks targets, loads the driver and runs one process command.
pub fn run_process_command(request: Request<'_>) -> Report {
    let started = Instant::now();
    let Request {
        libcuda,
        pids,
        operation,
        map: map_args,
        thread_ids,
    } = request;
    let command = operation.name();

    let entries = match gpu::parse_map(map_args) {
        Ok(entries) => entries,
        Err(error) => return everyone_failed(command, &pids, &map_failure(&error), started),
    };

    let privileges = Privileges::current();
    tracing::debug!(?pids, command, ?privileges, "checking targets");
    let checked: Vec<Result<Target, Failure>> = pids
        .iter()
        .map(|&pid| check(pid, &privileges, thread_ids))
        .collect();
    let valid: Vec<Target> = checked
        .iter()
        .filter_map(|c| c.as_ref().ok().cloned())
        .collect();
    let first_bad = checked
        .iter()
        .zip(&pids)
        .find(|(c, _)| c.is_err())
        .map(|(_, pid)| *pid);

    let assemble = |ran: Vec<ProcessReport>, not_run: Option<Failure>| {
        let mut ran = ran.into_iter();
        let processes = checked
            .iter()
            .zip(&pids)
            .map(|(check, &pid)| match check {
                Err(failure) => ProcessReport {
                    failure: Some(failure.clone()),
                    ..ProcessReport::new(pid, None)
                },
                Ok(target) => match &not_run {
                    Some(failure) => ProcessReport {
                        failure: Some(failure.clone()),
                        ..ProcessReport::new(target.pid, Some(target.name.clone()))
                    },
                    None => ran.next().unwrap_or_else(|| {
                        ProcessReport::new(target.pid, Some(target.name.clone()))
                    }),
                },
            })
            .collect();
        Report {
            command,
            processes,
            duration: started.elapsed(),
        }
    };

    // A group that changes state moves together: one bad target stops all.
    if let (Some(bad), true) = (first_bad, operation.changes_state()) {
        let skipped = Failure::new(
            FailureKind::NotAttempted,
            format!("not attempted: PID {bad} failed its checks"),
            "fix or drop that PID; a group changes state together or not at all",
        );
        return assemble(vec![], Some(skipped));
    }
    if valid.is_empty() {
        return assemble(vec![], None);
    }

    let driver = match Driver::load_for_checkpoint(libcuda) {
        Ok(driver) => driver,
        Err(error) => return assemble(vec![], Some(diagnose::from_load_error(&error))),
    };

    let operation = if entries.is_empty() {
        operation
    } else {
        let local_gpus = match inventory::host_gpus(&driver) {
            Ok((gpus, source)) => {
                tracing::debug!(?source, count = gpus.len(), "listed the GPUs of this host");
                Some(gpus)
            }
            // UUID-only maps can still go to the driver, which judges them;
            // indexes cannot be resolved.
            Err(reason) if !gpu::uses_indexes(&entries) => {
                tracing::debug!(%reason, "cannot list GPUs; the driver will judge the map");
                None
            }
            Err(reason) => {
                let failure = map_failure(&MapError::DevicesUnavailable { reason });
                return assemble(vec![], Some(failure));
            }
        };
        match gpu::resolve_map(&entries, local_gpus.as_deref()) {
            Ok(pairs) => operation.with_map(pairs),
            Err(error) => return assemble(vec![], Some(map_failure(&error))),
        }
    };

    let executor = Executor {
        api: &driver,
        caller_privileged: privileges.is_privileged(),
        is_alive: process::is_alive,
        // Only commands that change state (or wait) need to outlive a
        // signal; queries keep the default and die at once.
        interrupt: if operation.changes_state() || matches!(operation, Operation::Wait { .. }) {
            Interrupt::install()
        } else {
            Interrupt::never()
        },
    };
    assemble(executor.run(&operation, &valid), None)
}
