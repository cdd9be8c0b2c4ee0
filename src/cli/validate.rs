//! From clap's values to what a command takes, in one conversion per
//! kind of command (as ripgrep's lowargs → hiargs): a process command's
//! targets, operation and options are gathered from its variant,
//! `--map-file` is read and the map parsed once, here at the edge, and the
//! library's [`Group`] is built with the global options
//! ([`process_command`]); `dump` and `undump` become their settings
//! ([`disk_command`]). The CRIU hook's grammar, its environment, converts
//! in `cli::criu_hook`.

use std::path::{Path, PathBuf};

use crate::api::group::Group;
use crate::cli::args::{
    Command, DeadlineArg, DrainArg, DryRunArg, ForceArg, GlobalArgs, HandshakeArg, MapArg, Targets,
    VerifyArg,
};
use crate::commands::disk::dump::{DumpSettings, DumpTarget};
use crate::commands::disk::undump::UndumpSettings;
use crate::drain::settings::DrainSettings;
use crate::files;
use crate::gpu::map::{self, MapError, MapSpec};
use crate::ops::ProgressSink;
use crate::vocabulary::plan::Operation;
use crate::vocabulary::timeout::Timeout;

/// A process command as the modern grammar gives it, not yet validated.
pub struct RawProcessCommand {
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
    /// `--dry-run`: check everything, change nothing.
    dry_run: bool,
    /// `--drain` and the handshake's signal and wait.
    drain: DrainSettings,
}

impl RawProcessCommand {
    /// `operation` on `targets`, every option at its default.
    fn new(targets: Targets, operation: Operation) -> RawProcessCommand {
        RawProcessCommand {
            targets,
            operation,
            map: Vec::new(),
            deadline: Timeout::NONE,
            force: false,
            verify: false,
            map_file: None,
            dry_run: false,
            drain: DrainSettings::default(),
        }
    }

    fn drain(self, drain: DrainArg) -> RawProcessCommand {
        RawProcessCommand {
            drain: drain.settings(),
            ..self
        }
    }

    fn handshake(self, handshake_arg: HandshakeArg) -> RawProcessCommand {
        RawProcessCommand {
            drain: handshake_arg.settings(),
            ..self
        }
    }

    fn dry_run(self, dry_run: DryRunArg) -> RawProcessCommand {
        RawProcessCommand {
            dry_run: dry_run.dry_run,
            ..self
        }
    }

    fn verify(self, verify: VerifyArg) -> RawProcessCommand {
        RawProcessCommand {
            verify: verify.verify,
            ..self
        }
    }

    fn deadline(self, deadline: DeadlineArg) -> RawProcessCommand {
        RawProcessCommand {
            deadline: deadline.deadline,
            ..self
        }
    }

    fn force(self, force: ForceArg) -> RawProcessCommand {
        RawProcessCommand {
            force: force.force,
            ..self
        }
    }

    fn map(self, map: MapArg) -> RawProcessCommand {
        RawProcessCommand {
            map: map.map,
            map_file: map.map_file,
            force: map.force,
            ..self
        }
    }
}

/// The process command in `command`, if it is one, its options gathered.
fn split(command: Command) -> Option<RawProcessCommand> {
    use RawProcessCommand as Raw;
    Some(match command {
        Command::State { targets } => Raw::new(targets, Operation::State { restore_tid: true }),
        Command::RestoreTid { targets } => Raw::new(targets, Operation::RestoreTid),
        Command::Lock {
            targets,
            timeout,
            drain,
        } => Raw::new(
            targets,
            Operation::Lock {
                timeout: timeout.timeout,
            },
        )
        .drain(drain),
        Command::Checkpoint {
            targets,
            verify,
            force,
            dry_run,
            drain,
        } => Raw::new(targets, Operation::Checkpoint)
            .verify(verify)
            .force(force)
            .dry_run(dry_run)
            .drain(drain),
        Command::Restore {
            targets,
            map,
            verify,
            dry_run,
        } => Raw::new(targets, Operation::Restore)
            .map(map)
            .verify(verify)
            .dry_run(dry_run),
        Command::Unlock { targets, handshake } => {
            Raw::new(targets, Operation::Unlock).handshake(handshake)
        }
        Command::Wait {
            targets,
            state,
            timeout,
        } => Raw::new(
            targets,
            Operation::Wait {
                state: state.state(),
                timeout,
            },
        ),
        compound @ (Command::Toggle { .. } | Command::Suspend { .. } | Command::Resume { .. }) => {
            return split_compound(compound)
        }
        _ => return None,
    })
}

/// The compound commands: `toggle`, `suspend`, `resume`.
fn split_compound(command: Command) -> Option<RawProcessCommand> {
    use RawProcessCommand as Raw;
    Some(match command {
        Command::Toggle {
            targets,
            timeout,
            map,
            deadline,
            verify,
            dry_run,
            drain,
        } => Raw::new(
            targets,
            Operation::Toggle {
                timeout: timeout.timeout,
            },
        )
        .map(map)
        .deadline(deadline)
        .verify(verify)
        .dry_run(dry_run)
        .drain(drain),
        Command::Suspend {
            targets,
            timeout,
            deadline,
            verify,
            force,
            dry_run,
            drain,
        } => Raw::new(
            targets,
            Operation::Suspend {
                timeout: timeout.timeout,
            },
        )
        .deadline(deadline)
        .verify(verify)
        .force(force)
        .dry_run(dry_run)
        .drain(drain),
        Command::Resume {
            targets,
            map,
            deadline,
            verify,
            dry_run,
            handshake,
        } => Raw::new(targets, Operation::Resume)
            .map(map)
            .deadline(deadline)
            .verify(verify)
            .dry_run(dry_run)
            .handshake(handshake),
        _ => return None,
    })
}

/// Why a process command cannot start, before any process is looked at.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    /// `--map-file` could not be read.
    #[error("cannot read --map-file {}: {why}", file.display())]
    MapFileUnreadable { file: PathBuf, why: String },
    /// `--map-file` is not a map file.
    #[error("cannot use --map-file {}: {why}", file.display())]
    MapFile { file: PathBuf, why: String },
    /// The map is malformed (or names a GPU twice on the left).
    #[error("invalid --map: {error}")]
    Map { error: MapError },
    /// A dump names no tree (clap requires one: a parser that let one
    /// through is refused here rather than given a made-up PID).
    #[error("dump needs the root of the tree to dump: PID, --tree PID or --cgroup PATH")]
    NoDumpTarget,
    /// An undump's `--map` is not pairs of GPU UUIDs.
    #[error("{0}")]
    UndumpMap(String),
}

impl Invalid {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            Invalid::MapFileUnreadable { .. } => "check the path, and that you may read the file (under sudo it is opened with your own credentials)",
            Invalid::MapFile { .. } | Invalid::Map { .. } => "write the map as OLD=NEW pairs, each side a GPU UUID (`nvidia-smi -L` lists them) or a GPU index of this host, or `auto`",
            Invalid::NoDumpTarget => "`cudackpt dump --to DIR PID`",
            Invalid::UndumpMap(_) => "give --map OLD=NEW with the GPUs' UUIDs (`cudackpt devices` lists them)",
        }
    }
}

/// Why a map file gives no map.
enum MapFileProblem {
    Unreadable(String),
    NotAMap(String),
}

/// A map file is a few KiB.
const MAP_FILE_CAP: u64 = 1 << 20;

/// The pairs of a map file. An entry that is not a pair is named by its
/// position, never echoed: the file's text is not for an error to show.
fn read_map_file(file: &Path) -> Result<Vec<String>, MapFileProblem> {
    let text = files::read_for_invoker(file, MAP_FILE_CAP)
        .map_err(|e| MapFileProblem::Unreadable(e.to_string()))?;
    let pairs = map::parse_map_file(&text).map_err(MapFileProblem::NotAMap)?;
    for (i, pair) in pairs.iter().enumerate() {
        if let Err(MapError::Syntax { .. }) = MapSpec::parse(std::slice::from_ref(pair)) {
            return Err(MapFileProblem::NotAMap(format!(
                "entry {} is not OLD=NEW with each side a GPU UUID or a local index",
                i + 1
            )));
        }
    }
    Ok(pairs)
}

/// A process command, ready to run: the library's [`Group`] and the
/// operation to run on it.
pub struct ProcessCommand<'a> {
    pub group: Group<'a>,
    pub operation: Operation,
}

/// The modern grammar's one conversion: clap's `command`, when it is a
/// process command, into the library's [`Group`] with the command's own
/// options, the global ones (`--libcuda`, `--yes`, `--record-dir`,
/// `--no-lock`) and the progress printer; or why it cannot start (the
/// command's name, for its usage error, and the problem). `None`: not a
/// process command.
pub fn process_command<'a>(
    command: Command,
    global: &'a GlobalArgs,
    progress: Option<ProgressSink<'a>>,
) -> Option<Result<ProcessCommand<'a>, (&'static str, Invalid)>> {
    let raw = split(command)?;
    let name = raw.operation.name();
    Some(
        raw.into_group(global, progress)
            .map_err(|invalid| (name, invalid)),
    )
}

impl RawProcessCommand {
    /// The map read and parsed, then the group built.
    fn into_group<'a>(
        self,
        global: &'a GlobalArgs,
        progress: Option<ProgressSink<'a>>,
    ) -> Result<ProcessCommand<'a>, Invalid> {
        let mut values = self.map;
        if let Some(file) = self.map_file {
            match read_map_file(&file) {
                Ok(pairs) => values.extend(pairs),
                Err(MapFileProblem::Unreadable(why)) => {
                    return Err(Invalid::MapFileUnreadable { file, why })
                }
                Err(MapFileProblem::NotAMap(why)) => return Err(Invalid::MapFile { file, why }),
            }
        }
        let map = MapSpec::parse(&values).map_err(|error| Invalid::Map { error })?;
        let group = Group::new()
            .libcuda_option(global.libcuda.as_deref())
            .pids(self.targets.pids())
            .selectors(self.targets.selectors())
            .confirmed(global.yes)
            .map_spec(map)
            .deadline_timeout(self.deadline)
            .progress(progress)
            .record_dir_option(global.record_dir.as_deref())
            .options(self.force, self.verify, self.dry_run)
            .per_pid_locks(!global.no_lock)
            .drain_options(self.drain);
        Ok(ProcessCommand {
            group,
            operation: self.operation,
        })
    }
}

/// A dump or an undump, ready to run.
pub enum DiskCommand<'a> {
    Dump(DumpSettings<'a>),
    Undump(UndumpSettings<'a>),
}

/// `dump` and `undump`'s one conversion: clap's `command` into the
/// command's settings, with `--libcuda` from the global options; or why it
/// cannot start. `None`: neither command.
pub fn disk_command(
    command: Command,
    global: &GlobalArgs,
) -> Option<Result<DiskCommand<'_>, Invalid>> {
    let libcuda = global.libcuda.as_deref();
    Some(match command {
        Command::Dump {
            to,
            pid,
            tree,
            cgroup,
            criu,
            drain,
            leave_running,
            force,
        } => match (pid.or(tree), cgroup) {
            (Some(pid), _) => Ok(DumpTarget::Tree(pid)),
            (None, Some(cgroup)) => Ok(DumpTarget::Cgroup(cgroup)),
            (None, None) => Err(Invalid::NoDumpTarget),
        }
        .map(|target| {
            DiskCommand::Dump(DumpSettings {
                target,
                to,
                criu,
                drain,
                leave_running,
                force,
                libcuda,
            })
        }),
        Command::Undump {
            dir,
            criu,
            map,
            force,
        } => undump_map(&map).map_err(Invalid::UndumpMap).map(|map| {
            DiskCommand::Undump(UndumpSettings {
                from: dir,
                criu,
                map,
                force,
                libcuda,
            })
        }),
        _ => return None,
    })
}

/// `--map OLD=NEW` of an undump: UUID pairs (pure).
fn undump_map(values: &[String]) -> Result<Option<Vec<(String, String)>>, String> {
    if values.is_empty() {
        return Ok(None);
    }
    values
        .iter()
        .filter(|v| !v.trim().is_empty())
        .map(|value| {
            let (old, new) = value
                .split_once('=')
                .ok_or_else(|| format!("--map {value}: not OLD=NEW"))?;
            let uuid = |text: &str| {
                text.trim()
                    .parse::<crate::driver::GpuUuid>()
                    .map(|u| u.to_string())
                    .map_err(|why| format!("--map {value}: {why}"))
            };
            Ok((uuid(old)?, uuid(new)?))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::Cli;
    use clap::Parser;

    fn built(line: &str) -> Result<ProcessCommand<'static>, (&'static str, Invalid)> {
        let cli = Cli::try_parse_from(line.split_whitespace()).expect("parses");
        let global: &'static GlobalArgs = Box::leak(Box::new(cli.global));
        process_command(cli.command, global, None).expect("a process command")
    }

    #[test]
    fn every_option_reaches_the_request() {
        let Ok(command) = built(
            "cudackpt --yes --no-lock resume --map auto --force --verify --deadline 2s 7 -p 9",
        ) else {
            panic!("valid")
        };
        let request = command.group.request();
        assert_eq!(request.pids, [7, 9]);
        assert_eq!(command.operation, Operation::Resume);
        assert_eq!(request.map, MapSpec::Auto);
        assert!(request.force && request.verify && request.confirmed && !request.use_locks);
        assert_eq!(request.deadline, Timeout::from_millis(2000));
    }

    #[test]
    fn a_bad_map_is_refused_before_any_process() {
        let Err(("restore", Invalid::Map { error })) = built("cudackpt restore --map nonsense 4")
        else {
            panic!("a bad map must be refused")
        };
        assert!(error.is_syntax());
    }

    #[test]
    fn a_missing_map_file_is_named() {
        let Err((_, invalid @ Invalid::MapFileUnreadable { .. })) =
            built("cudackpt restore --map-file /nonexistent/map.json 4")
        else {
            panic!("an unreadable map file must be refused")
        };
        assert!(invalid.to_string().contains("/nonexistent/map.json"));
        assert!(invalid.hint().contains("check the path") && !invalid.hint().contains("OLD=NEW"));
    }

    #[test]
    fn queries_are_process_commands_and_doctor_is_not() {
        let cli = Cli::try_parse_from(["cudackpt", "doctor"]).expect("parses");
        assert!(process_command(cli.command, &cli.global, None).is_none());
        let Ok(state) = built("cudackpt state 3") else {
            panic!("valid")
        };
        assert_eq!(state.operation, Operation::State { restore_tid: true });
    }
}
