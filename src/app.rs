//! From a parsed command line to an exit status: picks the grammar, parses,
//! dispatches each command to the module that does it (process commands to
//! `request.rs`) and hands the result to a renderer.

use std::ffi::OsString;
use std::path::Path;

use clap::Parser;

use crate::cli::{Cli, Command, GlobalArgs, Targets};
use crate::exit::ExitStatus;
use crate::output::{self, human, json, Look};
use crate::plan::Operation;
use crate::request::{run_process_command, Request, ThreadIds};
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
        Command::Ps { filter } => {
            let mut report = run_process_command(Request {
                libcuda: global.libcuda.as_deref(),
                pids: Vec::new(),
                selectors: filter.selectors(),
                confirmed: false,
                operation: Operation::State { restore_tid: true },
                map: &[],
                thread_ids: ThreadIds::Refuse,
            });
            report.command = "ps";
            sink.emit(
                || json::process_report(&report),
                |look| human::process_report(&report, look),
            );
            report.exit_status()
        }
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
                selectors: targets.selectors(),
                confirmed: global.yes,
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
        | Command::Ps { .. }
        | Command::Demo { .. }
        | Command::Completions { .. }
        | Command::Man { .. }
        | Command::InstallCompat { .. } => return None,
    })
}
