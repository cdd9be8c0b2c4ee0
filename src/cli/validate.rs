//! From clap's values to what the pipeline takes: the raw → validated step
//! (ripgrep's lowargs → hiargs). A process command's targets, operation and
//! options are gathered from its variant, `--map-file` is read and the map
//! parsed once, here at the edge.

use std::path::{Path, PathBuf};

use crate::api::group::Group;
use crate::cli::args::{
    Command, DeadlineArg, DrainArg, DryRunArg, ForceArg, GlobalArgs, HandshakeArg, MapArg, Targets,
    VerifyArg,
};
use crate::files;
use crate::gpu::map::{self, MapError, MapSpec};
use crate::ops::vocabulary::plan::Operation;
use crate::ops::vocabulary::timeout::Timeout;
use crate::ops::{DrainSettings, Selectors, StepDone};

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
            drain: drain_of(drain),
            ..self
        }
    }

    fn handshake(self, handshake_arg: HandshakeArg) -> RawProcessCommand {
        RawProcessCommand {
            drain: handshake(handshake_arg),
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

/// The drain settings of `--drain` and the handshake's flags.
pub fn drain_of(drain: DrainArg) -> DrainSettings {
    DrainSettings {
        before_lock: drain.drain,
        ..handshake(drain.handshake)
    }
}

/// The drain settings from the handshake's flags (no `--drain`).
fn handshake(handshake: HandshakeArg) -> DrainSettings {
    DrainSettings {
        signal: handshake.drain_signal,
        timeout: handshake.drain_timeout,
        ..DrainSettings::default()
    }
}

/// The process command in `command`, if it is one.
pub fn split(command: Command) -> Option<RawProcessCommand> {
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

/// A process command ready for the pipeline.
pub struct Invocation {
    pub pids: Vec<i32>,
    pub selectors: Selectors,
    pub operation: Operation,
    pub map: MapSpec,
    pub deadline: Timeout,
    pub force: bool,
    pub verify: bool,
    pub dry_run: bool,
    pub drain: DrainSettings,
}

/// Why a process command cannot start.
#[derive(Debug)]
pub enum Invalid {
    /// `--map-file` could not be read or is not a map file.
    MapFile { file: PathBuf, why: String },
    /// The map is malformed (or names a GPU twice on the left): a usage
    /// error of the command, before any process.
    Map { error: MapError },
}

/// A map file is a few KiB.
const MAP_FILE_CAP: u64 = 1 << 20;

/// The pairs of a map file. An entry that is not a pair is named by its
/// position, never echoed: the file's text is not for an error to show.
fn read_map_file(file: &Path) -> Result<Vec<String>, String> {
    let text = files::read_for_invoker(file, MAP_FILE_CAP).map_err(|e| e.to_string())?;
    let pairs = map::parse_map_file(&text)?;
    for (i, pair) in pairs.iter().enumerate() {
        if let Err(MapError::Syntax { .. }) = MapSpec::parse(std::slice::from_ref(pair)) {
            return Err(format!(
                "entry {} is not OLD=NEW with each side a GPU UUID or a local index",
                i + 1
            ));
        }
    }
    Ok(pairs)
}

impl TryFrom<RawProcessCommand> for Invocation {
    type Error = Invalid;

    fn try_from(raw: RawProcessCommand) -> Result<Invocation, Invalid> {
        let mut values = raw.map;
        if let Some(file) = raw.map_file {
            match read_map_file(&file) {
                Ok(pairs) => values.extend(pairs),
                Err(why) => return Err(Invalid::MapFile { file, why }),
            }
        }
        let pids = raw.targets.pids();
        let map = MapSpec::parse(&values).map_err(|error| Invalid::Map { error })?;
        Ok(Invocation {
            pids,
            selectors: raw.targets.selectors(),
            operation: raw.operation,
            map,
            deadline: raw.deadline,
            force: raw.force,
            verify: raw.verify,
            dry_run: raw.dry_run,
            drain: raw.drain,
        })
    }
}

impl Invocation {
    /// The modern grammar's one conversion into the library's [`Group`],
    /// and the operation to run on it: the command's own options, with the
    /// global ones (`--libcuda`, `--yes`, `--record-dir`, `--no-lock`) and
    /// the progress printer.
    pub fn group<'a>(
        self,
        global: &'a GlobalArgs,
        progress: Option<&'a (dyn Fn(&StepDone<'_>) + Sync)>,
    ) -> (Group<'a>, Operation) {
        let group = Group::new()
            .libcuda_option(global.libcuda.as_deref())
            .pids(self.pids)
            .selectors(self.selectors)
            .confirmed(global.yes)
            .map_spec(self.map)
            .deadline_timeout(self.deadline)
            .progress(progress)
            .record_dir_option(global.record_dir.as_deref())
            .options(self.force, self.verify, self.dry_run)
            .per_pid_locks(!global.no_lock)
            .drain_options(self.drain);
        (group, self.operation)
    }
}

impl RawProcessCommand {
    /// The command's name, as JSON documents give it.
    pub fn command_name(&self) -> &'static str {
        self.operation.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::Cli;
    use clap::Parser;

    fn raw(line: &str) -> RawProcessCommand {
        let cli = Cli::try_parse_from(line.split_whitespace()).expect("parses");
        split(cli.command).expect("a process command")
    }

    #[test]
    fn every_option_reaches_the_invocation() {
        let invocation = Invocation::try_from(raw(
            "cudackpt resume --map auto --force --verify --deadline 2s 7 -p 9",
        ))
        .expect("valid");
        assert_eq!(invocation.pids, [7, 9]);
        assert_eq!(invocation.operation, Operation::Resume);
        assert_eq!(invocation.map, MapSpec::Auto);
        assert!(invocation.force && invocation.verify);
        assert_eq!(invocation.deadline, Timeout::from_millis(2000));
    }

    #[test]
    fn a_bad_map_is_refused_before_any_process() {
        let Err(Invalid::Map { error }) =
            Invocation::try_from(raw("cudackpt restore --map nonsense 4"))
        else {
            panic!("a bad map must be refused")
        };
        assert!(error.is_syntax());
    }

    #[test]
    fn a_missing_map_file_is_named() {
        let Err(Invalid::MapFile { file, .. }) =
            Invocation::try_from(raw("cudackpt restore --map-file /nonexistent/map.json 4"))
        else {
            panic!("an unreadable map file must be refused")
        };
        assert_eq!(file, PathBuf::from("/nonexistent/map.json"));
    }

    #[test]
    fn queries_are_process_commands_and_doctor_is_not() {
        assert!(split(
            Cli::try_parse_from(["cudackpt", "doctor"])
                .expect("parses")
                .command
        )
        .is_none());
        assert_eq!(
            raw("cudackpt state 3").operation,
            Operation::State { restore_tid: true }
        );
    }
}
