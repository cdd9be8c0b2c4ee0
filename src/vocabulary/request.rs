//! A process command as every grammar hands it to the pipeline: the
//! targets named and to be found, the operation, and every option.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::drain::settings::DrainSettings;
use crate::gpu::map::MapSpec;
use crate::targets::process::Target;
use crate::vocabulary::plan::{DriverCall, Operation};
use crate::vocabulary::timeout::Timeout;

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
    pub selectors: Selectors,
    /// `--yes`: the user confirmed acting on every CUDA process (`--all`).
    pub confirmed: bool,
    pub operation: Operation,
    /// The GPU map for restores, parsed; resolved against this host here.
    pub map: MapSpec,
    pub thread_ids: ThreadIds,
    /// A limit on the whole command, from its start (0: none).
    pub deadline: Timeout,
    /// Told about every step as it finishes.
    pub progress: Option<ProgressSink<'a>>,
    /// Where checkpoint records live (None: the default).
    pub record_dir: Option<&'a Path>,
    /// Restore despite the memory pre-flight.
    pub force: bool,
    /// Confirm through NVML that checkpoints freed the GPUs and restores
    /// brought the processes back where expected.
    pub verify: bool,
    /// Take the per-PID locks (`--no-lock` clears it).
    pub use_locks: bool,
    /// Run every check and pre-flight, then stop before the first lock:
    /// say what would happen, change nothing (`--dry-run`).
    pub dry_run: bool,
    /// `recover` itself: act on processes an abandoned intent names.
    pub recovering: bool,
    /// The drain handshake (cudackpt(1), DRAIN PROTOCOL): `--drain`, and the rebuild.
    pub drain: DrainSettings,
    /// NVIDIA's grammar: a single step on a process already where it leads
    /// is an error (exit 1), as NVIDIA's tool says; the modern grammar
    /// reports it "already there" and succeeds.
    pub nvidia_errors: bool,
    /// CRIU (this process) dumps the trees once this command is done (its
    /// pre-dump hook): a tree it could not dump is refused first, and the
    /// intent record outlives the command, handed to that CRIU: if it ends
    /// without a post-dump taking it (a failed dump, a killed hook),
    /// `recover` and the hook's watcher put the group back.
    pub criu_dump: Option<crate::targets::identity::Identity>,
    /// Run inside another program that owns its signals (CRIU, with
    /// cudackpt's plugin): no handler is installed; a signal does what
    /// that program says, and the intent record covers a death.
    pub embedded: bool,
}

impl<'a> Request<'a> {
    /// The CRIU this command's intent record goes to when it ends (a CRIU
    /// dump's group that really changed; a dry run writes no record).
    pub fn record_for_criu(&self) -> Option<crate::targets::identity::Identity> {
        self.criu_dump.filter(|_| !self.dry_run)
    }

    /// `operation` on no target yet, with every option at its default:
    /// callers set what differs with struct-update syntax.
    pub fn new(libcuda: Option<&'a Path>, operation: Operation) -> Request<'a> {
        Request {
            libcuda,
            pids: Vec::new(),
            selectors: Selectors::default(),
            confirmed: false,
            operation,
            map: MapSpec::None,
            thread_ids: ThreadIds::Refuse,
            deadline: Timeout::NONE,
            progress: None,
            record_dir: None,
            force: false,
            verify: false,
            use_locks: true,
            dry_run: false,
            recovering: false,
            drain: DrainSettings::default(),
            nvidia_errors: false,
            criu_dump: None,
            embedded: false,
        }
    }
}

/// Targets found rather than named: every CUDA process in these trees and
/// cgroups, or on the whole host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selectors {
    pub trees: Vec<i32>,
    pub cgroups: Vec<PathBuf>,
    pub all: bool,
    /// PIDs to consider like found ones: kept only if they are (still)
    /// CUDA processes, dropped quietly if gone.
    pub candidates: Vec<i32>,
}

impl Selectors {
    pub fn is_empty(&self) -> bool {
        self.trees.is_empty() && self.cgroups.is_empty() && !self.all && self.candidates.is_empty()
    }

    /// Where to look, in words (for "no CUDA process found ...").
    pub fn describe(&self) -> String {
        let mut places: Vec<String> = self
            .trees
            .iter()
            .map(|pid| format!("the tree of PID {pid}"))
            .collect();
        places.extend(
            self.cgroups
                .iter()
                .map(|c| format!("cgroup {}", c.display())),
        );
        if self.all {
            places.push("this host".to_string());
        }
        if !self.candidates.is_empty() {
            places.push(super::prose::pids(&self.candidates));
        }
        places.join(", ")
    }
}

/// What a command tells as it goes, for progress on a terminal and for a
/// scheduler's event stream: a driver call started, a call finished, a
/// pre-flight's remark (said before the work, not only in the report).
pub enum Progress<'a> {
    Started {
        target: &'a Target,
        step: DriverCall,
        rollback: bool,
    },
    Done(StepDone<'a>),
    Remark(&'a str),
    /// The drain's requests went to these processes; the wait for their
    /// acknowledgements starts.
    DrainAsked {
        targets: &'a [&'a Target],
    },
    /// A process asked to drain answered, after this long, or did not
    /// (`None`: not in time, or gone).
    DrainAnswered {
        target: &'a Target,
        acknowledged: Option<Duration>,
    },
}

/// Where a command tells its progress.
pub type ProgressSink<'a> = &'a (dyn Fn(&Progress<'_>) + Sync);

/// A step that just finished, for progress reports.
pub struct StepDone<'a> {
    pub target: &'a Target,
    pub step: DriverCall,
    pub ok: bool,
    pub took: Duration,
    pub rollback: bool,
}
