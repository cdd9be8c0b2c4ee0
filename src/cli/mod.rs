//! The edge: argv in, exit status out. Picks the grammar (modern, NVIDIA's
//! compatible one, CRIU's action script), parses and validates it, runs the
//! command and shows its report through `output`.
//!
//! May use every other room.

pub mod args;
pub mod artifacts;
pub mod compat;
pub mod criu_hook;
mod env;
pub mod logging;
pub mod parse;
pub mod validate;

use std::ffi::OsString;

use crate::cli::args::{Cli, Command, GlobalArgs, SlurmCommand};
use crate::cli::validate::{DiskCommand, ProcessCommand};
use crate::commands::criu::action_script as hook;
use crate::commands::{check, demo, devices, disk, doctor, install_compat, ps, recover};
use crate::exit::ExitStatus;
use crate::gpu::inventory::Inventory;
use crate::ops::{Progress, ProgressSink};
use crate::output::{self, json, Look, Sink};

/// Runs cudackpt with this process's arguments.
pub fn main() -> ExitStatus {
    crate::exit::set_last_words(output::stderr::last_words);
    crate::ops::journal::intent::report_panics();
    let mut args: Vec<OsString> = std::env::args_os().collect();
    if compat::is_compat_invocation(&args) {
        return compat::main(&args);
    }
    if criu_hook::is_hook_invocation(args.len().saturating_sub(1)) {
        logging::init(0);
        if env_flag(crate::environment::LIBCUDA_UNSAFE) {
            warn_libcuda_unsafe_has_no_effect();
        }
        let libcuda = libcuda_from_env();
        let report = criu_hook::run_action(libcuda.as_deref());
        // CRIU logs what the script prints: plain text, no colour.
        return Sink::plain().finish(&report);
    }
    let old_override =
        take_libcuda_unsafe(&mut args) || env_flag(crate::environment::LIBCUDA_UNSAFE);
    let cli = match parse::parse(&args) {
        Ok(cli) => cli,
        Err(error) => return clap_error(error, &args),
    };
    if let args::Command::Man {
        command: Some(name),
        ..
    } = &cli.command
    {
        if let Err(error) = artifacts::check_man_command(name) {
            return clap_error(error, &args);
        }
    }
    logging::init(cli.global.verbose);
    allow_open_files_up_to_the_hard_limit();
    if old_override && !cli.global.quiet {
        warn_libcuda_unsafe_has_no_effect();
    }
    run(cli)
}

/// A group holds a lock file and a pidfd per process: raise the soft limit
/// on open files to the hard one, as CRIU does, so a large group does not
/// run out at 1024. Where that cannot be done the limit stays, and running
/// out is reported as such (never as a verdict about a process).
fn allow_open_files_up_to_the_hard_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(error) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(%error, "could not raise the open-file limit");
        }
    }
}

use env::flag as env_flag;
use env::libcuda_from_env;

/// Takes every `--libcuda-unsafe` before a `--` out of `args`: it is no
/// flag any more (help, completions and man pages do not offer it), yet a
/// script that passes it still runs. Whether there was one.
fn take_libcuda_unsafe(args: &mut Vec<OsString>) -> bool {
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let before = args.len();
    let mut at = 0;
    args.retain(|arg| {
        at += 1;
        at > end || arg != "--libcuda-unsafe"
    });
    args.len() != before
}

/// `--libcuda-unsafe` once let root load a library anyone owned. No flag
/// can say whose choice a library was (root reached through sudo, doas,
/// pkexec or a scheduler passing a user's environment looks the same), so
/// it lifts nothing now; scripts that pass it still run, and are told
/// (NVIDIA's grammar says nothing: CRIU's plugin reads its first line).
fn warn_libcuda_unsafe_has_no_effect() {
    output::stderr::warn(
        "--libcuda-unsafe (CUDACKPT_LIBCUDA_UNSAFE) has no effect: as root or with capabilities, --libcuda loads only a library owned by root and writable by nobody else; without extra power it loads what you name anyway",
    );
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
        let what = error.kind().as_str().unwrap_or("invalid arguments");
        let message = usage_message(&error.render().to_string());
        let command = command_named(args);
        let help = match command.as_deref() {
            Some(command) => format!("cudackpt {command} --help"),
            None => "cudackpt --help".to_string(),
        };
        let hint = format!("{what}: `{help}` lists the arguments");
        let _ = output::write_stdout(&json::usage_error(command.as_deref(), &message, &hint));
    }
    if error.kind() == ErrorKind::DisplayVersion && args.iter().any(|a| a == "--json") {
        let _ = output::write_stdout(&json::version(env!("CARGO_PKG_VERSION")));
        return status;
    }
    if status == ExitStatus::Usage {
        // Every line cudackpt writes to stderr begins with its name, clap's
        // usage errors too (clap begins them `error:`).
        output::stderr::write(&usage_text(&error.render().to_string()));
    } else {
        let _ = error.print();
    }
    status
}

/// Clap's usage error as cudackpt says errors: `cudackpt: MESSAGE` for
/// clap's `error: MESSAGE`, its usage line and tip kept (pure).
pub fn usage_text(rendered: &str) -> String {
    let text = rendered.strip_prefix("error: ").unwrap_or(rendered);
    format!("{}{text}", output::stderr::PREFIX)
}

/// Clap's message for a JSON document: without its `error: ` prefix and
/// its "For more information, try '--help'." tail (pure).
pub fn usage_message(rendered: &str) -> String {
    let text = rendered.trim();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    let text = match text.rfind("For more information") {
        Some(at) => &text[..at],
        None => text,
    };
    text.trim_end().to_string()
}

/// The subcommand named on the command line, if any: the first argument
/// that is one of cudackpt's subcommands.
fn command_named(args: &[OsString]) -> Option<String> {
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| parse::SUBCOMMANDS.contains(a))
        .map(str::to_string)
}

fn sink(global: &GlobalArgs) -> Sink {
    Sink {
        json: global.json,
        quiet: global.quiet,
        look: Look::for_stdout(global.color),
    }
}

pub fn run(cli: Cli) -> ExitStatus {
    let Cli { global, command } = cli;
    let sink = sink(&global);
    let libcuda = global.libcuda.as_deref();
    match command {
        Command::Ps { filter } => sink.finish(&ps::run(libcuda, filter.selectors())),
        Command::Recover {
            dry_run,
            drain_timeout,
        } => sink.finish(&recover::run(libcuda, dry_run, drain_timeout)),
        Command::Check { targets, drain } => sink.finish(&check::run(
            libcuda,
            targets.pids(),
            targets.selectors(),
            drain.settings(),
        )),
        Command::CriuHook {
            resume_when_thawed,
            after_criu,
        } => {
            let report = if resume_when_thawed.is_empty() && after_criu.is_empty() {
                criu_hook::run_action(libcuda)
            } else {
                criu_hook::run_helper(libcuda, &resume_when_thawed, &after_criu)
            };
            // The detached helpers have no terminal: log what they did.
            if !resume_when_thawed.is_empty() || !after_criu.is_empty() {
                hook::log_outcome(&output::criu_log::outcome_line(&report));
            }
            sink.finish(&report)
        }
        Command::Devices => sink.finish(&devices::list(&Inventory::loading(libcuda))),
        Command::Doctor { cgroup, criu } => {
            sink.finish(&doctor::examine(libcuda, &cgroup, criu.as_deref()))
        }
        Command::Demo { size_mib, device } => sink.finish(&demo::run(libcuda, size_mib, device)),
        Command::Completions { shell } => emit_artifact(output::write_stdout(
            &String::from_utf8_lossy(&artifacts::completions(shell)),
        )),
        Command::Man { dir: None, command } => {
            let page = artifacts::man_page(command.as_deref()).unwrap_or_default();
            match output::man_page::show(&page) {
                Ok(true) => ExitStatus::Success,
                Ok(false) => ExitStatus::Failed,
                Err(error) => output::write_failed(&error, ExitStatus::Success),
            }
        }
        Command::Man { dir: Some(dir), .. } => write_man_pages(&dir),
        Command::InstallCompat {
            dir,
            force,
            allow_build_dir,
            uninstall,
        } => sink.finish(&install_compat::run(
            &dir,
            install_compat::Options {
                force,
                allow_build_dir,
                uninstall,
            },
        )),
        Command::Slurm { command } => run_slurm(command),
        command @ (Command::Dump { .. } | Command::Undump { .. }) => {
            run_disk(command, &global, &sink)
        }
        process_command => validate_and_run(process_command, &global, &sink),
    }
}

/// `slurm run` exits with its job's status, whatever it is; `slurm serve`
/// runs until it is stopped.
fn run_slurm(command: SlurmCommand) -> ExitStatus {
    use crate::commands::slurm;
    slurm::set_writer(output::stderr::say);
    match command {
        SlurmCommand::Run { socket, command } => {
            let code = slurm::run::run(&slurm::run::RunSettings { socket, command });
            std::process::exit(code.clamp(0, 255));
        }
        SlurmCommand::Serve {
            socket,
            store,
            criu,
            scontrol,
        } => match slurm::serve::run(slurm::serve::ServeSettings {
            socket,
            store,
            criu,
            scontrol,
        }) {
            Ok(()) => ExitStatus::Success,
            Err(why) => {
                output::stderr::error(
                    &format!("slurm serve: {why}"),
                    "see `cudackpt slurm serve --help` and the guide's Slurm chapter",
                );
                ExitStatus::Failed
            }
        },
    }
}

/// `dump` and `undump`: a job to disk and back through CRIU.
fn run_disk(command: Command, global: &GlobalArgs, sink: &Sink) -> ExitStatus {
    let (name, verb) = match command {
        Command::Dump { .. } => ("dump", "written"),
        _ => ("undump", "read"),
    };
    let disk_command = match validate::disk_command(command, global) {
        None => return ExitStatus::Usage,
        Some(Ok(disk_command)) => disk_command,
        Some(Err(invalid)) => {
            return usage_failure(sink, Some(name), &invalid.to_string(), invalid.hint())
        }
    };
    let ticker = match disk_ticker(sink, global, name, verb) {
        Ok(ticker) => ticker,
        Err(status) => return status,
    };
    sink.finish(&match disk_command {
        DiskCommand::Dump(settings) => disk::dump::run(&settings, &ticker),
        DiskCommand::Undump(settings) => disk::undump::run(&settings, &ticker),
    })
}

/// What a dump or an undump tells while CRIU runs: a person on a terminal
/// a line every two seconds (bytes against the expected size, elapsed),
/// and a scheduler that asked (`--progress-fd`) an `images` event every
/// half second; else nothing. Exit 2 for a descriptor it cannot write.
fn disk_ticker(
    sink: &Sink,
    global: &GlobalArgs,
    command: &'static str,
    verb: &'static str,
) -> Result<impl Fn(u64, u64, std::time::Duration), ExitStatus> {
    let events = progress_events(global, sink, Some(command))?;
    let watched = watched(sink);
    let last = std::cell::Cell::new(0u64);
    Ok(
        move |bytes: u64, expected: u64, elapsed: std::time::Duration| {
            if let Some(events) = &events {
                events.images(command, bytes, expected);
            }
            let seconds = elapsed.as_secs();
            if !watched || seconds < 2 || seconds / 2 == last.get() {
                return;
            }
            last.set(seconds / 2);
            output::stderr::write(&output::disk::progress_line(
                command, verb, bytes, expected, elapsed,
            ));
        },
    )
}

fn write_man_pages(dir: &std::path::Path) -> ExitStatus {
    match artifacts::write_man_pages(dir) {
        Ok(()) => ExitStatus::Success,
        Err(why) => {
            output::stderr::error(&format!("cannot write the man pages: {why}"), &why.hint());
            match why {
                crate::files::UnsafeDir::Io { source, .. }
                    if source.kind() != std::io::ErrorKind::PermissionDenied =>
                {
                    ExitStatus::Failed
                }
                _ => ExitStatus::PermissionDenied,
            }
        }
    }
}

/// Whether a person watches: a terminal, and neither JSON nor quiet asked
/// for.
fn watched(sink: &Sink) -> bool {
    !sink.json && !sink.quiet && output::stderr::is_terminal()
}

/// The events stream `--progress-fd` names, if any; a descriptor it cannot
/// write is a usage error (exit 2), said for `command`.
fn progress_events(
    global: &GlobalArgs,
    sink: &Sink,
    command: Option<&str>,
) -> Result<Option<output::progress::Events>, ExitStatus> {
    let Some(fd) = global.progress_fd else {
        return Ok(None);
    };
    output::progress::Events::to_fd(fd).map(Some).map_err(|why| {
        usage_failure(
            sink,
            command,
            &format!("cannot write progress events to descriptor {fd}: {why}"),
            "open it for the command (`3>events.jsonl cudackpt --progress-fd 3 ...`): a pipe, a file or a terminal",
        )
    })
}

/// A process command: converted once into the library's group (its map
/// read and parsed), then run.
fn validate_and_run(command: Command, global: &GlobalArgs, sink: &Sink) -> ExitStatus {
    // Progress for a person only where one watches: a terminal, and
    // neither JSON nor quiet asked for; events wherever the caller asked.
    let terminal = watched(sink).then(output::progress::Terminal::start);
    // A global option's error, before any command is taken up.
    let events = match progress_events(global, sink, None) {
        Ok(events) => events,
        Err(status) => return status,
    };
    let tell = |event: &Progress<'_>| {
        if let Some(terminal) = &terminal {
            terminal.tell(event);
        }
        if let Some(events) = &events {
            events.tell(event);
        }
    };
    let progress: ProgressSink<'_> = &tell;
    let told = (terminal.is_some() || events.is_some()).then_some(progress);
    match validate::process_command(command, global, told) {
        None => ExitStatus::Usage,
        Some(Ok(ProcessCommand { group, operation })) => {
            let mut report = group.run(operation);
            if let Some(terminal) = terminal {
                // Said already, before the work: not again after it.
                let said = terminal.said();
                report.warnings.retain(|w| !said.contains(w));
            }
            sink.finish(&report)
        }
        // Arguments that cannot be used are the command's error, before any
        // process is looked at: one top-level usage error.
        Some(Err((command, invalid))) => {
            usage_failure(sink, Some(command), &invalid.to_string(), invalid.hint())
        }
    }
}

/// A usage error found after the arguments were parsed: said on stderr,
/// and as a usage-error document with `--json`; exit 2.
fn usage_failure(sink: &Sink, command: Option<&str>, message: &str, hint: &str) -> ExitStatus {
    if sink.json {
        let _ = output::write_stdout(&json::usage_error(command, message, hint));
    }
    output::stderr::error(message, hint);
    ExitStatus::Usage
}

fn emit_artifact(result: std::io::Result<()>) -> ExitStatus {
    match result {
        Ok(()) => ExitStatus::Success,
        Err(error) => output::write_failed(&error, ExitStatus::Success),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_override_is_taken_out_before_parsing_but_not_after_dashes() {
        let mut args: Vec<OsString> = [
            "cudackpt",
            "--libcuda-unsafe",
            "state",
            "--",
            "--libcuda-unsafe",
        ]
        .map(OsString::from)
        .to_vec();
        assert!(take_libcuda_unsafe(&mut args));
        assert_eq!(args, ["cudackpt", "state", "--", "--libcuda-unsafe"]);
        assert!(!take_libcuda_unsafe(&mut args));
    }
}
