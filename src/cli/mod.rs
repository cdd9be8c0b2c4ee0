//! From a parsed command line to an exit status: picks the grammar, parses,
//! dispatches each command to the module that does it (process commands to
//! `request.rs`) and hands the result to a renderer.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Parser;

pub mod args;
pub mod artifacts;
pub mod compat;
pub mod criu_hook;
pub mod logging;

use crate::cli::args::{Cli, Command, GlobalArgs, Targets};
use crate::commands::{demo, devices, doctor};
use crate::exit::ExitStatus;
use crate::gpu::inventory::Inventory;
use crate::ops::diagnose;
use crate::ops::execute::StepDone;
use crate::ops::plan::Operation;
use crate::ops::timeout::Timeout;
use crate::ops::{run_process_command, Request, ThreadIds};
use crate::output::{self, json, Look};

/// Runs cudackpt with this process's arguments.
pub fn main() -> ExitStatus {
    let args: Vec<OsString> = std::env::args_os().collect();
    if compat::is_compat_invocation(&args) {
        return compat::main(&args);
    }
    if criu_hook::is_hook_invocation(args.len().saturating_sub(1)) {
        logging::init(0);
        let action = std::env::var(criu_hook::ACTION_VAR).unwrap_or_default();
        let libcuda = std::env::var_os("CUDACKPT_LIBCUDA")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let report = criu_hook::run(libcuda.as_deref(), &action);
        // CRIU logs what the script prints: plain text, no colour.
        let sink = Sink {
            json: false,
            quiet: false,
            look: Look::plain(),
        };
        return sink.finish(&report);
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

    /// Shows a result as asked and returns the exit status it decides.
    pub fn finish(&self, result: &dyn output::Rendered) -> ExitStatus {
        self.emit(|| result.json(), |look| result.human(look));
        result.exit_status()
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
        Command::Ps { filter } => {
            let mut report = run_process_command(Request {
                selectors: filter.selectors(),
                ..Request::new(
                    global.libcuda.as_deref(),
                    Operation::State { restore_tid: true },
                )
            });
            report.command = "ps";
            // GPU memory per process, when NVML is there to say.
            match crate::gpu::nvml::open().and_then(crate::gpu::nvml::memory_by_process) {
                Ok(used) => {
                    for process in &mut report.processes {
                        process.gpu_memory_bytes =
                            Some(used.get(&process.pid).copied().unwrap_or(0));
                    }
                }
                // Not an error: the column shows "-" and JSON omits the field.
                Err(why) => tracing::debug!(%why, "no GPU memory figures"),
            }
            sink.finish(&report)
        }
        Command::CriuHook { resume_when_thawed } => {
            let report = if resume_when_thawed.is_empty() {
                let action = std::env::var(criu_hook::ACTION_VAR).unwrap_or_default();
                criu_hook::run(global.libcuda.as_deref(), &action)
            } else {
                criu_hook::resume_when_thawed(global.libcuda.as_deref(), &resume_when_thawed)
            };
            sink.finish(&report)
        }
        Command::Devices => {
            let report = devices::list(&Inventory::loading(global.libcuda.as_deref()));
            sink.finish(&report)
        }
        Command::Doctor => {
            let report = doctor::examine(global.libcuda.as_deref());
            sink.finish(&report)
        }
        Command::Demo { size_mib, device } => {
            let report = demo::run(global.libcuda.as_deref(), size_mib, device);
            sink.finish(&report)
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
            let Some(mut command) = split(process_command) else {
                return ExitStatus::Usage;
            };
            if let Some(file) = command.map_file.take() {
                let read = std::fs::read_to_string(&file)
                    .map_err(|e| e.to_string())
                    .and_then(|text| crate::gpu::map::parse_map_file(&text));
                match read {
                    Ok(pairs) => command.map.extend(pairs),
                    Err(why) => {
                        let message = format!("cannot use --map-file {}: {why}", file.display());
                        if sink.json {
                            let _ = output::write_stdout(&json::usage_error(
                                "invalid --map-file",
                                &message,
                            ));
                        }
                        output::write_stderr(&format!("cudackpt: {message}\n"));
                        return ExitStatus::Usage;
                    }
                }
            }
            // Progress only where a person watches it: a terminal, and
            // neither JSON nor quiet asked for.
            let watched = !sink.json && !sink.quiet && std::io::stderr().is_terminal();
            let progress: &(dyn Fn(&StepDone<'_>) + Sync) = &print_progress;
            let report = run_process_command(Request {
                libcuda: global.libcuda.as_deref(),
                pids: command.targets.pids(),
                selectors: command.targets.selectors(),
                confirmed: global.yes,
                operation: command.operation,
                map: &command.map,
                thread_ids: ThreadIds::Refuse,
                deadline: command.deadline,
                progress: watched.then_some(progress),
                record_dir: global.record_dir.as_deref(),
                force: command.force,
                verify: command.verify,
            });
            sink.finish(&report)
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

/// A process command as the modern grammar gives it.
struct ProcessCommand {
    targets: Targets,
    operation: Operation,
    /// `--map` values as typed (resolved later, against this host).
    map: Vec<String>,
    deadline: Timeout,
    /// `--force`: restore despite the memory pre-flight.
    force: bool,
    /// `--verify`: confirm through NVML.
    verify: bool,
    /// `--map-file`, read before anything else happens.
    map_file: Option<PathBuf>,
}

/// The process command in `command`, if it is one.
fn split(command: Command) -> Option<ProcessCommand> {
    let plain = |targets, operation| ProcessCommand {
        targets,
        operation,
        map: Vec::new(),
        deadline: Timeout::NONE,
        force: false,
        verify: false,
        map_file: None,
    };
    Some(match command {
        Command::State { targets } => plain(targets, Operation::State { restore_tid: true }),
        Command::RestoreTid { targets } => plain(targets, Operation::RestoreTid),
        Command::Lock { targets, timeout } => plain(
            targets,
            Operation::Lock {
                timeout: timeout.timeout,
            },
        ),
        Command::Checkpoint { targets, verify } => ProcessCommand {
            verify: verify.verify,
            ..plain(targets, Operation::Checkpoint)
        },
        Command::Restore {
            targets,
            map,
            verify,
        } => ProcessCommand {
            verify: verify.verify,
            force: map.force,
            map_file: map.map_file,
            map: map.map,
            ..plain(targets, Operation::Restore { map: vec![] })
        },
        Command::Unlock { targets } => plain(targets, Operation::Unlock),
        Command::Toggle {
            targets,
            timeout,
            map,
            deadline,
            verify,
        } => ProcessCommand {
            verify: verify.verify,
            force: map.force,
            map_file: map.map_file,
            map: map.map,
            deadline: deadline.deadline,
            ..plain(
                targets,
                Operation::Toggle {
                    timeout: timeout.timeout,
                    map: vec![],
                },
            )
        },
        Command::Suspend {
            targets,
            timeout,
            deadline,
            verify,
        } => ProcessCommand {
            verify: verify.verify,
            deadline: deadline.deadline,
            ..plain(
                targets,
                Operation::Suspend {
                    timeout: timeout.timeout,
                },
            )
        },
        Command::Resume {
            targets,
            map,
            deadline,
            verify,
        } => ProcessCommand {
            verify: verify.verify,
            force: map.force,
            map_file: map.map_file,
            map: map.map,
            deadline: deadline.deadline,
            ..plain(targets, Operation::Resume { map: vec![] })
        },
        Command::Wait {
            targets,
            state,
            timeout,
        } => plain(targets, Operation::Wait { state, timeout }),
        Command::Doctor
        | Command::Devices
        | Command::CriuHook { .. }
        | Command::Ps { .. }
        | Command::Demo { .. }
        | Command::Completions { .. }
        | Command::Man { .. }
        | Command::InstallCompat { .. } => return None,
    })
}

/// One stderr line per finished step, for a person watching a terminal.
fn print_progress(done: &StepDone<'_>) {
    let who = diagnose::describe_process(done.target.pid, Some(&done.target.name));
    let what = if done.rollback {
        format!("rollback {}", done.step)
    } else {
        done.step.to_string()
    };
    let verdict = if done.ok { "done" } else { "FAILED" };
    output::write_stderr(&format!(
        "cudackpt: {who}: {what} {verdict} in {}\n",
        output::format_duration(done.took)
    ));
}
