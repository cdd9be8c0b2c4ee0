//! NVIDIA's `cuda-checkpoint` command line, exactly: taken when cudackpt runs
//! under that name (a symlink) or when the first argument is one of
//! `--get-state`, `--get-restore-tid`, `--action`, `--toggle`. CRIU's CUDA
//! plugin and existing scripts drive it unchanged; it shares the modern
//! mode's validation and driver calls (`request::run_process_command`).
//!
//! Contract (docs/guide/criu.md, "NVIDIA-compatible mode and CRIU"): `--get-state` prints exactly the state word,
//! `--get-restore-tid` exactly the number, actions print nothing; exit 0 on
//! success and 1 on any failure, with the message on stderr. Nothing is
//! printed before the answer: no logging in this mode.

use std::ffi::OsString;
use std::path::Path;

use crate::api::group::Group;
use crate::exit::ExitStatus;
use crate::gpu::map::MapSpec;
use crate::ops as request;
use crate::output::{self, human};
use crate::targets::process::parse_pid;
use crate::vocabulary::plan::Operation;
use crate::vocabulary::timeout::{parse_timeout, Timeout};

pub use crate::commands::install_compat::COMPAT_NAME;

/// First arguments that select this grammar under any program name.
const COMPAT_OPERATIONS: [&str; 4] = ["--get-state", "--get-restore-tid", "--action", "--toggle"];

/// NVIDIA-style help. CRIU's plugin checks that it mentions `--action`.
pub const HELP: &str = "\
CUDA checkpoint and restore utility (cudackpt, NVIDIA-compatible mode).

Operations:
--get-state --pid <pid>
        Prints the current checkpoint state of the process specified by <pid>:
        running, locked, checkpointed or failed

--action lock | checkpoint | restore | unlock --pid <pid> [--timeout <ms>] [--device-map <old>=<new>,...]
        Performs the specified action on <pid>.
        For the lock action a timeout can be provided, the lock operation will wait up to <ms> milliseconds
        for the operation to succeed.
        For the restore action a device map can be provided to restore onto other GPUs.

--toggle --pid <pid> [--timeout <ms>] [--device-map <old>=<new>,...]
        Toggles the CUDA state in the specified process between the running and checkpointed states

--get-restore-tid --pid <pid>
        Retrieves the CUDA restore thread ID of the process specified by <pid>

Options:
--pid|-p <pid>
        The pid upon which to perform the operation

--timeout|-t <timeout>
        Optional timeout that can be specified for the lock action in milliseconds

--device-map|-d <old-uuid>=<new-uuid>[,...]
        Optional GPU remapping for restore: every GPU of the host, each to a distinct GPU

--help|-h
        Print this help message

cudackpt's own grammar (JSON, groups of processes, doctor) is `cudackpt --help`.
";

/// A checkpoint action as `--action` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Lock,
    Checkpoint,
    Restore,
    Unlock,
}

/// A parsed compatible-mode invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompatCommand {
    Help,
    GetState {
        pid: i32,
    },
    GetRestoreTid {
        pid: i32,
    },
    Action {
        action: Action,
        pid: i32,
        timeout: Timeout,
        device_map: Vec<String>,
    },
    Toggle {
        pid: i32,
        timeout: Timeout,
        device_map: Vec<String>,
    },
}

/// Whether these arguments (`argv[0]` first) ask for the compatible grammar.
pub fn is_compat_invocation(args: &[OsString]) -> bool {
    let invoked_as_nvidia = args
        .first()
        .and_then(|argv0| Path::new(argv0).file_name())
        .is_some_and(|name| name == COMPAT_NAME);
    let first_is_operation = args.get(1).and_then(|a| a.to_str()).is_some_and(|first| {
        COMPAT_OPERATIONS.iter().any(|op| {
            first == *op
                || first
                    .strip_prefix(op)
                    .is_some_and(|rest| rest.starts_with('='))
        })
    });
    invoked_as_nvidia || first_is_operation
}

/// The flags of the grammar, by their long name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flag {
    GetState,
    GetRestoreTid,
    Toggle,
    Help,
    Action,
    Pid,
    Timeout,
    DeviceMap,
}

impl Flag {
    fn takes_value(self) -> bool {
        matches!(
            self,
            Flag::Action | Flag::Pid | Flag::Timeout | Flag::DeviceMap
        )
    }

    fn long(self) -> &'static str {
        match self {
            Flag::GetState => "--get-state",
            Flag::GetRestoreTid => "--get-restore-tid",
            Flag::Toggle => "--toggle",
            Flag::Help => "--help",
            Flag::Action => "--action",
            Flag::Pid => "--pid",
            Flag::Timeout => "--timeout",
            Flag::DeviceMap => "--device-map",
        }
    }

    fn from_long(name: &str) -> Option<Flag> {
        [
            Flag::GetState,
            Flag::GetRestoreTid,
            Flag::Toggle,
            Flag::Help,
            Flag::Action,
            Flag::Pid,
            Flag::Timeout,
            Flag::DeviceMap,
        ]
        .into_iter()
        .find(|flag| flag.long() == name)
    }

    fn from_short(letter: char) -> Option<Flag> {
        match letter {
            'p' => Some(Flag::Pid),
            't' => Some(Flag::Timeout),
            'd' => Some(Flag::DeviceMap),
            'h' => Some(Flag::Help),
            _ => None,
        }
    }
}

/// Why arguments do not read in NVIDIA's grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompatUsage {
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    #[error("{0} needs a value")]
    NeedsValue(&'static str),
    #[error("{0} takes no value")]
    TakesNoValue(&'static str),
    #[error("{0} given twice")]
    Twice(&'static str),
    #[error("no operation: give one of --get-state, --get-restore-tid, --action, --toggle")]
    NoOperation,
    #[error("give only one of --get-state, --get-restore-tid, --action, --toggle")]
    SeveralOperations,
    #[error("--pid is required")]
    NoPid,
    #[error(transparent)]
    Pid(#[from] crate::targets::process::InvalidPid),
    #[error(transparent)]
    Timeout(#[from] crate::vocabulary::timeout::InvalidDuration),
    #[error("--device-map applies only to --action restore and --toggle")]
    MapNotApplicable,
    #[error("invalid --action {0:?}: expected lock, checkpoint, restore or unlock")]
    Action(String),
}

/// Splits the arguments into (flag, value) pairs: `--flag value`,
/// `--flag=value`, `-f value` and `-fvalue`.
fn tokenize(args: &[String]) -> Result<Vec<(Flag, Option<String>)>, CompatUsage> {
    let mut pairs = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let (flag, inline) = if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            let flag = Flag::from_long(&format!("--{name}"))
                .ok_or_else(|| CompatUsage::UnknownOption(arg.clone()))?;
            (flag, inline)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.chars();
            let letter = chars.next().unwrap_or('-');
            let flag =
                Flag::from_short(letter).ok_or_else(|| CompatUsage::UnknownOption(arg.clone()))?;
            let attached: String = chars.collect();
            (flag, (!attached.is_empty()).then_some(attached))
        } else {
            return Err(CompatUsage::Unexpected(arg.clone()));
        };
        let value = match (flag.takes_value(), inline) {
            (true, Some(value)) => Some(value),
            (true, None) => Some(
                rest.next()
                    .ok_or(CompatUsage::NeedsValue(flag.long()))?
                    .clone(),
            ),
            (false, Some(_)) => return Err(CompatUsage::TakesNoValue(flag.long())),
            (false, None) => None,
        };
        if pairs.iter().any(|(seen, _)| *seen == flag) {
            return Err(CompatUsage::Twice(flag.long()));
        }
        pairs.push((flag, value));
    }
    Ok(pairs)
}

/// Parses NVIDIA's grammar (arguments after `argv[0]`).
pub fn parse(args: &[String]) -> Result<CompatCommand, CompatUsage> {
    let pairs = tokenize(args)?;
    let value = |flag: Flag| {
        pairs
            .iter()
            .find(|(f, _)| *f == flag)
            .and_then(|(_, v)| v.clone())
    };
    let has = |flag: Flag| pairs.iter().any(|(f, _)| *f == flag);
    if has(Flag::Help) {
        return Ok(CompatCommand::Help);
    }
    let operations: Vec<Flag> = [
        Flag::GetState,
        Flag::GetRestoreTid,
        Flag::Action,
        Flag::Toggle,
    ]
    .into_iter()
    .filter(|op| has(*op))
    .collect();
    let operation = match operations.as_slice() {
        [one] => *one,
        [] => return Err(CompatUsage::NoOperation),
        _ => return Err(CompatUsage::SeveralOperations),
    };
    let pid = parse_pid(&value(Flag::Pid).ok_or(CompatUsage::NoPid)?)?;
    let timeout = value(Flag::Timeout)
        .map(|t| parse_timeout(&t))
        .transpose()?
        .unwrap_or(Timeout::NONE);
    let device_map: Vec<String> = value(Flag::DeviceMap).into_iter().collect();
    let map_applies = matches!(operation, Flag::Toggle)
        || (operation == Flag::Action && value(Flag::Action).as_deref() == Some("restore"));
    if !device_map.is_empty() && !map_applies {
        return Err(CompatUsage::MapNotApplicable);
    }
    Ok(match operation {
        Flag::GetState => CompatCommand::GetState { pid },
        Flag::GetRestoreTid => CompatCommand::GetRestoreTid { pid },
        Flag::Toggle => CompatCommand::Toggle {
            pid,
            timeout,
            device_map,
        },
        _ => {
            let action = match value(Flag::Action).as_deref() {
                Some("lock") => Action::Lock,
                Some("checkpoint") => Action::Checkpoint,
                Some("restore") => Action::Restore,
                Some("unlock") => Action::Unlock,
                other => return Err(CompatUsage::Action(other.unwrap_or_default().to_string())),
            };
            CompatCommand::Action {
                action,
                pid,
                timeout,
                device_map,
            }
        }
    })
}

impl CompatCommand {
    /// The process, the operation and the device map a command asks for;
    /// `None` for `--help`.
    fn operation(self) -> Option<(i32, Operation, Vec<String>)> {
        Some(match self {
            CompatCommand::Help => return None,
            CompatCommand::GetState { pid } => {
                (pid, Operation::State { restore_tid: false }, vec![])
            }
            CompatCommand::GetRestoreTid { pid } => (pid, Operation::RestoreTid, vec![]),
            CompatCommand::Toggle {
                pid,
                timeout,
                device_map,
            } => (pid, Operation::Toggle { timeout }, device_map),
            CompatCommand::Action {
                action,
                pid,
                timeout,
                device_map,
            } => {
                let operation = match action {
                    Action::Lock => Operation::Lock { timeout },
                    Action::Checkpoint => Operation::Checkpoint,
                    Action::Restore => Operation::Restore,
                    Action::Unlock => Operation::Unlock,
                };
                (pid, operation, device_map)
            }
        })
    }
}

/// NVIDIA's grammar's one conversion into the library's [`Group`]: one
/// process, NVIDIA's contract (a thread id taken for its process, as
/// CRIU's plugin passes the restore thread's id; NVIDIA's errors), and
/// `--force` and the drain from the environment.
fn compat_group(
    libcuda: Option<&Path>,
    pid: i32,
    map: MapSpec,
    drain: crate::drain::settings::DrainSettings,
) -> Group<'_> {
    Group::new()
        .libcuda_option(libcuda)
        .pid(pid)
        .map_spec(map)
        .nvidia_contract()
        .options(super::env::force_from_env(), false, false)
        .drain_options(drain)
}

/// Runs the compatible grammar; exits 0 on success, 1 on any failure.
pub fn main(args: &[OsString]) -> ExitStatus {
    let args: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let command = match parse(&args) {
        Ok(command) => command,
        Err(problem) => {
            output::write_stderr(&format!(
                "{COMPAT_NAME}: {problem}\nRun `{COMPAT_NAME} --help` for usage.\n"
            ));
            return ExitStatus::Failed;
        }
    };
    let libcuda = super::env::libcuda_from_env();
    let Some((pid, operation, map)) = command.operation() else {
        let _ = output::write_stdout(HELP);
        return ExitStatus::Success;
    };
    let drain = match super::env::drain_from_env() {
        Ok(drain) => drain,
        Err(problem) => {
            output::write_stderr(&format!("{COMPAT_NAME}: {problem}\n"));
            return ExitStatus::Failed;
        }
    };
    let report = match MapSpec::parse(&map) {
        Ok(map) => compat_group(libcuda.as_deref(), pid, map, drain).run(operation.clone()),
        Err(error) => request::refused_map(&operation, &[pid], &error),
    };
    let Some(process) = report.processes.first() else {
        return ExitStatus::Failed;
    };
    // A refusal of the whole command (the driver, the map) is the news,
    // not the process's "not attempted".
    if let Some(failure) = report.failure.as_ref().or(process.failure.as_ref()) {
        output::write_stderr(&human::failure_text(failure).replacen(
            output::stderr::PREFIX,
            &format!("{COMPAT_NAME}: "),
            1,
        ));
        return ExitStatus::Failed;
    }
    let answer = match operation {
        Operation::State { .. } => process.state.map(|s| format!("{}\n", s.as_str())),
        Operation::RestoreTid => process.restore_tid.map(|tid| format!("{tid}\n")),
        _ => None,
    };
    match answer.map(|answer| output::write_stdout(&answer)) {
        Some(Err(error)) => output::write_failed(&error, ExitStatus::Success),
        _ => ExitStatus::Success,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    fn os(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn the_trigger_is_the_name_or_the_first_argument() {
        assert!(is_compat_invocation(&os(
            "/usr/local/bin/cuda-checkpoint --get-state --pid 1"
        )));
        assert!(is_compat_invocation(&os("cuda-checkpoint")));
        assert!(is_compat_invocation(&os("cudackpt --toggle --pid 1")));
        assert!(is_compat_invocation(&os("cudackpt --action=lock --pid 1")));
        assert!(!is_compat_invocation(&os("cudackpt state 1")));
        assert!(!is_compat_invocation(&os("cudackpt --json --get-state")));
        assert!(!is_compat_invocation(&os("cudackpt --actions")));
    }

    #[test]
    fn flags_come_in_any_order_and_every_form() {
        let lock = CompatCommand::Action {
            action: Action::Lock,
            pid: 42,
            timeout: Timeout::from_millis(500),
            device_map: vec![],
        };
        for line in [
            "--action lock --pid 42 --timeout 500",
            "--pid 42 --timeout 500 --action lock",
            "--action=lock --pid=42 --timeout=500",
            "-p 42 -t 500 --action lock",
            "-p42 -t500 --action lock",
        ] {
            assert_eq!(parse(&args(line)), Ok(lock.clone()), "{line}");
        }
        assert_eq!(
            parse(&args("--get-state -p 7")),
            Ok(CompatCommand::GetState { pid: 7 })
        );
        assert_eq!(
            parse(&args("--pid 7 --get-restore-tid")),
            Ok(CompatCommand::GetRestoreTid { pid: 7 })
        );
        assert_eq!(
            parse(&args("--toggle --pid 7")),
            Ok(CompatCommand::Toggle {
                pid: 7,
                timeout: Timeout::NONE,
                device_map: vec![]
            })
        );
    }

    #[test]
    fn device_maps_go_with_restore_and_toggle_only() {
        let map =
            "GPU-11111111-2222-3333-4444-555555555555=GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
        let parsed = parse(&args(&format!("--action restore --pid 9 -d {map}")));
        assert!(
            matches!(parsed, Ok(CompatCommand::Action { action: Action::Restore, device_map, .. }) if device_map == vec![map.to_string()])
        );
        assert!(parse(&args(&format!("--toggle --pid 9 --device-map={map}"))).is_ok());
        let refused = parse(&args(&format!(
            "--action checkpoint --pid 9 --device-map {map}"
        )));
        assert!(refused
            .expect_err("refused")
            .to_string()
            .contains("--device-map"));
    }

    #[test]
    fn help_wins_and_mentions_action() {
        assert_eq!(parse(&args("-h")), Ok(CompatCommand::Help));
        assert_eq!(parse(&args("--get-state --help")), Ok(CompatCommand::Help));
        assert!(HELP.contains("--action") && HELP.contains("--device-map"));
    }

    #[test]
    fn usage_errors_say_what_is_wrong() {
        for (line, words) in [
            ("", "no operation"),
            ("--pid 3", "no operation"),
            ("--get-state", "--pid is required"),
            ("--get-state --toggle --pid 3", "only one"),
            ("--action pause --pid 3", "\"pause\""),
            ("--action", "needs a value"),
            ("--get-state --pid abc", "\"abc\""),
            ("--get-state --pid 3 --pid 4", "twice"),
            ("--get-state --pid 3 extra", "\"extra\""),
            ("--get-state --pid 3 --verbose", "\"--verbose\""),
            ("--get-state=yes --pid 3", "takes no value"),
            ("--action lock --pid 3 --timeout soon", "\"soon\""),
            ("-x", "\"-x\""),
        ] {
            let error = parse(&args(line)).expect_err(line).to_string();
            assert!(error.contains(words), "{line}: {error}");
        }
    }
}
