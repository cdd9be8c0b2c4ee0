//! The command line, as clap types only. Doc comments here are the help
//! text, the man pages and the shell completions; [`super::validate`] turns
//! these raw values into the library's group, once.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::drain::protocol::{DrainSignal, InvalidSignal};
use crate::driver::ProcessState;
use crate::ops::Selectors;
use crate::output::ColorChoice;
use crate::targets::identity::Identity;
use crate::targets::process::parse_pid;
use crate::vocabulary::timeout::{
    parse_drain_timeout, parse_duration_with_unit, parse_timeout, Timeout,
};

/// Checkpoint and restore the CUDA state of running processes.
///
/// cudackpt drives the NVIDIA driver's checkpoint API: it locks a process's
/// CUDA work, copies its GPU memory to host memory and releases its GPUs
/// (checkpoint), and later brings it all back (restore), on one process or
/// many at once. Pair it with CRIU to save whole processes to disk.
#[derive(Debug, Parser)]
#[command(
    name = "cudackpt",
    version,
    propagate_version = true,
    max_term_width = 100
)]
#[command(after_long_help = after_long_help())]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// The top-level `--help`'s epilogue: every exit status, from the code
/// (so a new status cannot be left out), then examples.
fn after_long_help() -> String {
    format!(
        "{} See cudackpt(1).\n\n{EXAMPLES}",
        crate::exit::ExitStatus::summary()
    )
}

const EXAMPLES: &str = "\
Examples:
  cudackpt state 4242                 # running, locked, checkpointed or failed
  cudackpt suspend --timeout 5s 4242 4243
  cudackpt resume 4242 4243
  cudackpt restore --map GPU-aaaa...=GPU-bbbb... 4242
  cudackpt --json state 4242 | jq .processes[0].state";

const CHECK_EXAMPLES: &str = "\
Examples:
  $ cudackpt check 4242
  PID   NAME    RESULT                                                       TIME
  4242  python  suspend: every check passed; would lock, then checkpoint;    -
                resume: already there; nothing to do
  $ cudackpt check 4243          # one end of a CUDA IPC pair
  PID   NAME    RESULT                                    TIME
  4243  python  would be refused: could not be restored   -
  (exit 8, the reason on stderr; --json says \"state\": \"running\", the state the
  driver gave, and the refusal as the process's \"error\")";

/// Options that apply to every command.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Print one JSON document on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Log what cudackpt does to stderr (-v for details, -vv for everything;
    /// RUST_LOG also works).
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Print no result and no warnings; errors still go to stderr, and the
    /// exit status says the rest (as grep -q).
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// The CUDA driver library to load instead of libcuda.so.1 (default:
    /// $CUDACKPT_LIBCUDA when set).
    #[arg(long, global = true, value_name = "PATH")]
    pub libcuda: Option<PathBuf>,

    /// Confirm a command that changes every CUDA process on the host
    /// (--all).
    #[arg(short, long, global = true)]
    pub yes: bool,

    /// Where checkpoint records are kept (default /run/cudackpt as root,
    /// else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU
    /// images directory so they travel with the images. It must belong to
    /// root (or to you, when not root) and not be writable by others.
    #[arg(long, global = true, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,

    /// Change processes without taking cudackpt's per-process locks (when
    /// the lock directory cannot be used and nothing else can act on them).
    #[arg(long, global = true)]
    pub no_lock: bool,

    /// When to colour the output.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,

    /// Write progress events as JSON Lines to descriptor FD, which the
    /// caller opened (a pipe, a file, a terminal; 2 is stderr): each
    /// driver call started and ended, and each pre-flight remark, as it
    /// happens (schema/progress-event.schema.json). stdout keeps its one
    /// document.
    #[arg(long, global = true, value_name = "FD")]
    pub progress_fd: Option<u32>,
}

// The processes a command acts on.
#[derive(Debug, Args, Clone)]
#[group(required = true, multiple = true)]
pub struct Targets {
    /// Process IDs to act on.
    #[arg(value_name = "PID", value_parser = parse_pid, value_hint = clap::ValueHint::Other)]
    pub pids: Vec<i32>,

    /// A process ID to act on (repeatable; same as a positional PID).
    #[arg(short = 'p', long = "pid", value_name = "PID", value_parser = parse_pid, value_hint = clap::ValueHint::Other)]
    pub pid_flags: Vec<i32>,

    /// Every CUDA process in this process's tree: it and its descendants
    /// (repeatable).
    #[arg(long, value_name = "PID", value_parser = parse_pid, value_hint = clap::ValueHint::Other)]
    pub tree: Vec<i32>,

    /// Every CUDA process in this cgroup and its child cgroups: a directory
    /// on a cgroup filesystem, or a path relative to the cgroup v2 root,
    /// e.g. a pod's (repeatable).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<PathBuf>,

    /// Every CUDA process on this host (commands that change state also
    /// need --yes).
    #[arg(long)]
    pub all: bool,
}

// Which processes `ps` lists (all CUDA processes when none is given).
#[derive(Debug, Args, Clone)]
pub struct Filter {
    /// Only this process's tree (repeatable).
    #[arg(long, value_name = "PID", value_parser = parse_pid, value_hint = clap::ValueHint::Other)]
    pub tree: Vec<i32>,

    /// Only this cgroup and its child cgroups (repeatable).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<PathBuf>,
}

/// A state `wait` can wait for (completed by shells from this list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StateArg {
    Running,
    Locked,
    Checkpointed,
    Failed,
}

impl StateArg {
    /// The driver's state of that name.
    pub fn state(self) -> ProcessState {
        match self {
            StateArg::Running => ProcessState::Running,
            StateArg::Locked => ProcessState::Locked,
            StateArg::Checkpointed => ProcessState::Checkpointed,
            StateArg::Failed => ProcessState::Failed,
        }
    }
}

// A lock timeout.
#[derive(Debug, Args, Clone)]
pub struct TimeoutArg {
    /// How long to wait for the process's CUDA work to drain before giving
    /// up (exit 3; the process then keeps running). Milliseconds (500) or a
    /// duration (500ms, 5s, 2m); 0, the default, waits as long as it takes.
    #[arg(short, long, value_name = "T", value_parser = parse_timeout, default_value = "0", allow_hyphen_values = true)]
    pub timeout: Timeout,
}

// A limit on a whole compound command.
#[derive(Debug, Args, Clone)]
pub struct DeadlineArg {
    /// Give up on the whole group after this long: no new step starts, the
    /// group is rolled back and the report names the slowest process. Lock
    /// timeouts are shortened to fit. A duration with its unit (30s,
    /// 500ms, 2m); 0, the default, sets no deadline.
    #[arg(long, value_name = "T", value_parser = parse_duration_with_unit, default_value = "0", allow_hyphen_values = true)]
    pub deadline: Timeout,
}

// Checking a checkpoint or restore through NVML.
#[derive(Debug, Args, Clone)]
pub struct VerifyArg {
    /// Confirm through NVML that a checkpoint left the process holding no
    /// GPU memory, and that a restore put it back on the GPUs expected
    /// (from its checkpoint record and the map). A mismatch, or no NVML,
    /// fails the command.
    #[arg(long)]
    pub verify: bool,
}

// The drain handshake (cudackpt(1), DRAIN PROTOCOL) on a command that locks.
#[derive(Debug, Args, Clone)]
pub struct DrainArg {
    /// Before the first lock, ask every process to release what the driver
    /// cannot restore (NCCL communicators, CUDA IPC) and wait until each
    /// acknowledges; then check the evidence again and lock. A process that
    /// does not catch the drain signal refuses the group before anything is
    /// sent; one that does not acknowledge in time calls it off (exit 12).
    /// See DRAIN PROTOCOL in cudackpt(1).
    #[arg(long)]
    pub drain: bool,

    #[command(flatten)]
    pub handshake: HandshakeArg,
}

// The signal and the wait of the drain handshake, also for the rebuild.
#[derive(Debug, Args, Clone)]
pub struct HandshakeArg {
    /// The signal that asks a process to drain, and to rebuild after its
    /// resume: a real-time signal, as a number (34..64) or RTMIN+N /
    /// RTMAX-N. The target must catch the same one.
    #[arg(long, value_name = "SIG", value_parser = parse_drain_signal, default_value = "40", env = crate::environment::DRAIN_SIGNAL)]
    pub drain_signal: DrainSignal,

    /// How long to wait for every process to acknowledge a drain, and for
    /// every drained process to rebuild once running again: a duration with
    /// its unit (30s, 2m, 500ms).
    #[arg(long, value_name = "T", value_parser = parse_drain_timeout, default_value = "30s", env = crate::environment::DRAIN_TIMEOUT, allow_hyphen_values = true)]
    pub drain_timeout: Duration,
}

// `check --drain`: the same settings as a locking command's --drain, but
// a dry run sends nothing, and its help must say so.
#[derive(Debug, Args, Clone)]
pub struct CheckDrainArg {
    /// Check as `suspend --drain` would: say who would be asked to drain,
    /// who could not be (a process that does not catch the drain signal),
    /// and what each would have to release. Sends nothing: no process is
    /// signalled, and nothing is locked.
    #[arg(long)]
    pub drain: bool,

    #[command(flatten)]
    pub handshake: HandshakeArg,
}

impl CheckDrainArg {
    /// The drain settings the check assumes: those `suspend --drain`
    /// with the same flags would use.
    pub fn settings(self) -> crate::drain::settings::DrainSettings {
        DrainArg {
            drain: self.drain,
            handshake: self.handshake,
        }
        .settings()
    }
}

impl DrainArg {
    /// The drain settings these flags say.
    pub fn settings(self) -> crate::drain::settings::DrainSettings {
        crate::drain::settings::DrainSettings {
            before_lock: self.drain,
            ..self.handshake.settings()
        }
    }
}

impl HandshakeArg {
    /// The handshake's signal and wait, with no drain before the lock (the
    /// rebuild after a resume still uses them).
    pub fn settings(self) -> crate::drain::settings::DrainSettings {
        crate::drain::settings::DrainSettings {
            signal: self.drain_signal,
            timeout: self.drain_timeout,
            ..crate::drain::settings::DrainSettings::default()
        }
    }
}

fn parse_drain_signal(text: &str) -> Result<DrainSignal, InvalidSignal> {
    DrainSignal::parse(text)
}

// Asking before acting.
#[derive(Debug, Args, Clone)]
pub struct DryRunArg {
    /// Run every check and pre-flight (targets, restorability, host and GPU
    /// memory, the map), say what would happen, and change nothing: a
    /// refusal exits as the real command would.
    #[arg(long)]
    pub dry_run: bool,
}

// Checkpointing what cannot be restored, on purpose.
#[derive(Debug, Args, Clone)]
pub struct ForceArg {
    /// Checkpoint even when a pre-flight refuses: a process this driver is
    /// known not to restore (a CUDA IPC party, a rank of an NCCL job over
    /// P2P or shared memory; its restore will fail and it will be lost), or
    /// GPU memory that host or cgroup memory cannot hold (the kernel will
    /// likely kill the process). Also CUDACKPT_FORCE=1.
    #[arg(long)]
    pub force: bool,
}

// A GPU remapping for restore.
#[derive(Debug, Args, Clone)]
pub struct MapArg {
    /// Restore onto other GPUs: OLD=NEW pairs (repeat, or separate with
    /// commas). OLD is a GPU the process was checkpointed on (its UUID, or
    /// its index on this host), NEW a UUID or a GPU index on this host;
    /// UUIDs with or without `GPU-`.
    /// The driver needs every GPU of the host mapped, each to a distinct GPU;
    /// a partial map of this host's GPUs is completed. `auto` maps the GPUs
    /// recorded at checkpoint onto this host's by index (same count and
    /// models).
    #[arg(short, long, value_name = "OLD=NEW")]
    pub map: Vec<String>,

    /// Read OLD=NEW pairs from a JSON file: {"OLD": "NEW", ...}, a list of
    /// "OLD=NEW" strings, or the `map` cudackpt prints with --json.
    #[arg(long, value_name = "FILE")]
    pub map_file: Option<PathBuf>,

    /// Go on despite the pre-flights: restore onto a GPU with less free
    /// memory than the process held, and (toggle) checkpoint a process this
    /// driver is known not to restore.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Subcommand)]
// Each subcommand's own arguments are built only for the one invoked
// (clap's `defer`). That is why the flattened structs above carry plain
// comments: a doc comment there would replace the subcommand's about.
#[command(defer = true)]
pub enum Command {
    /// Print each process's CUDA state and restore thread id.
    State {
        #[command(flatten)]
        targets: Targets,
    },
    /// Block new CUDA calls and wait for submitted work to finish
    /// (running → locked).
    Lock {
        #[command(flatten)]
        targets: Targets,
        #[command(flatten)]
        timeout: TimeoutArg,
        #[command(flatten)]
        drain: DrainArg,
    },
    /// Copy GPU memory to host memory and release the GPUs
    /// (locked → checkpointed).
    Checkpoint {
        #[command(flatten)]
        targets: Targets,
        #[command(flatten)]
        verify: VerifyArg,
        #[command(flatten)]
        force: ForceArg,
        #[command(flatten)]
        dry_run: DryRunArg,
        #[command(flatten)]
        drain: DrainArg,
    },
    /// Reacquire GPUs and copy memory back (checkpointed → locked).
    Restore {
        #[command(flatten)]
        targets: Targets,
        #[command(flatten)]
        map: MapArg,
        #[command(flatten)]
        verify: VerifyArg,
        #[command(flatten)]
        dry_run: DryRunArg,
    },
    /// Let CUDA calls run again (locked → running); a drained process then
    /// rebuilds.
    Unlock {
        #[command(flatten)]
        targets: Targets,
        #[command(flatten)]
        handshake: HandshakeArg,
    },
    /// Suspend running processes, or resume checkpointed ones.
    Toggle {
        #[command(flatten)]
        targets: Targets,
        #[command(flatten)]
        timeout: TimeoutArg,
        #[command(flatten)]
        map: MapArg,
        #[command(flatten)]
        deadline: DeadlineArg,
        #[command(flatten)]
        verify: VerifyArg,
        #[command(flatten)]
        dry_run: DryRunArg,
        #[command(flatten)]
        drain: DrainArg,
    },
    /// Lock and checkpoint: running → checkpointed (already checkpointed is
    /// success). A group moves together or not at all.
    Suspend {
        #[command(flatten)]
        targets: Targets,
        #[command(flatten)]
        timeout: TimeoutArg,
        #[command(flatten)]
        deadline: DeadlineArg,
        #[command(flatten)]
        verify: VerifyArg,
        #[command(flatten)]
        force: ForceArg,
        #[command(flatten)]
        dry_run: DryRunArg,
        #[command(flatten)]
        drain: DrainArg,
    },
    /// Restore and unlock: checkpointed → running (already running is
    /// success). A group moves together or not at all. A process that
    /// drained before its checkpoint is then asked to rebuild.
    Resume {
        #[command(flatten)]
        targets: Targets,
        #[command(flatten)]
        map: MapArg,
        #[command(flatten)]
        deadline: DeadlineArg,
        #[command(flatten)]
        verify: VerifyArg,
        #[command(flatten)]
        dry_run: DryRunArg,
        #[command(flatten)]
        handshake: HandshakeArg,
    },
    /// Print the id of the thread that restores each process's CUDA state
    /// (CRIU needs it unfrozen during restore).
    RestoreTid {
        #[command(flatten)]
        targets: Targets,
    },
    /// Wait until every process reaches a state.
    Wait {
        #[command(flatten)]
        targets: Targets,
        /// The state to wait for.
        #[arg(short, long, value_name = "STATE", value_enum)]
        state: StateArg,
        /// Give up after this long (exit 14). A duration with its unit
        /// (30s, 500ms, 2m); 0, the default, waits as long as it takes.
        #[arg(short, long, value_name = "T", value_parser = parse_duration_with_unit, default_value = "0", allow_hyphen_values = true)]
        timeout: Timeout,
    },
    /// List the CUDA processes on this host.
    ///
    /// Shows each one's state, restore thread and whether NCCL is loaded.
    /// Read-only: candidates are processes with libcuda mapped, confirmed by
    /// the driver's state query; nothing is ever locked to find out.
    Ps {
        #[command(flatten)]
        filter: Filter,
    },
    /// Say, for each process, whether suspend and resume would be safe,
    /// and why not; change nothing.
    ///
    /// Runs both as dry runs: the target checks and every pre-flight
    /// (restorability, host and GPU memory), with only read-only queries
    /// to the driver. The call a scheduler makes before it preempts; the
    /// exit status is that of the first refusal (8 for a pre-flight).
    /// With --drain, says who would be asked to drain, who cannot be, and
    /// what each would have to release.
    #[command(after_long_help = CHECK_EXAMPLES)]
    Check {
        #[command(flatten)]
        targets: Targets,
        #[command(flatten)]
        drain: CheckDrainArg,
    },
    /// Put back the processes of a cudackpt that died mid-change.
    ///
    /// A command that changes processes writes an intent record (which
    /// processes, where each started) before its first change and removes
    /// it when it ends. One left by a cudackpt that was killed (SIGKILL, the
    /// OOM killer, a second signal) names processes that may be locked or
    /// checkpointed; recover brings each one still alive back to where it
    /// started, and removes the record. A record whose driver calls had all
    /// returned (a resume killed while its ranks rebuild) is finished
    /// forward instead: the processes stay where the calls put them, and
    /// each is sent the rebuild (or call-off) it is owed. A record that a
    /// CRIU pre-dump handed over (the dump failed and nobody resumed the
    /// tree) is recovered the same way, once that CRIU is gone. Other
    /// cudackpt refuse to touch those processes until then.
    Recover {
        /// Say what would be done, and do nothing.
        #[arg(long)]
        dry_run: bool,
        /// The longest recover waits for a drained process to rebuild, or
        /// to show whether a signal reached it, whatever a record asks
        /// (records run side by side; a signal stops the waits and recover
        /// reports what it did)
        #[arg(long, value_name = "T", value_parser = parse_drain_timeout, default_value = "30s", allow_hyphen_values = true)]
        drain_timeout: Duration,
    },
    /// List the GPUs of this host.
    ///
    /// Shows each GPU's UUID, name, bus id, memory free and total, MIG and
    /// persistence mode. Uses NVML when it is installed (no CUDA context is created), else the
    /// CUDA driver, and then says what it could not tell.
    Devices,
    /// Check whether this host can checkpoint CUDA processes, and say what
    /// to fix.
    Doctor {
        /// Also weigh this cgroup's memory limits (and its ancestors')
        /// against the GPU memory of its processes: a checkpoint needs
        /// that much headroom (repeatable)
        #[arg(long, value_name = "PATH")]
        cgroup: Vec<PathBuf>,
        /// Check this CRIU rather than the first `criu` on PATH, as `dump
        /// --criu PATH` would run it
        #[arg(long, value_name = "PATH")]
        criu: Option<PathBuf>,
    },
    /// Checkpoint and restore this process's own GPU memory and check that
    /// the data survives.
    Demo {
        /// How much GPU memory to fill and carry through the round trip.
        #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
        size_mib: u64,
        /// The GPU to use (index).
        #[arg(long, value_name = "INDEX", default_value_t = 0)]
        device: i32,
    },
    /// Act as CRIU's action script, giving CUDA support to any CRIU.
    ///
    /// Use it as `criu dump|restore --action-script $(which cudackpt)`. At
    /// pre-dump it suspends every CUDA process in the tree of
    /// CRTOOLS_INIT_PID, after refusing (exit 8, undumpable) a tree that
    /// CRIU could not dump: a process mapping a GPU device node without CUDA
    /// state (a DataLoader worker forked after CUDA started) or an io_uring
    /// ring, named with its parent and the fix. After a --leave-running dump (once CRIU thaws the
    /// tree) and at post-resume it resumes them; other actions do nothing.
    /// Run with no arguments and CRTOOLS_SCRIPT_ACTION set, cudackpt does
    /// this too.
    CriuHook {
        /// (Internal) wait until these processes are thawed, then resume
        /// them.
        #[arg(long, hide = true, num_args = 1.., value_name = "PID@START", value_parser = Identity::parse)]
        resume_when_thawed: Vec<Identity>,
        /// (Internal) wait until CRIU (the first PID) ends, then resume the
        /// other processes if they are still checkpointed.
        #[arg(long, hide = true, num_args = 2.., value_name = "PID@START", value_parser = Identity::parse, conflicts_with = "resume_when_thawed")]
        after_criu: Vec<Identity>,
    },
    /// Install cudackpt as `cuda-checkpoint` (a symlink), so CRIU's CUDA
    /// plugin and scripts written for NVIDIA's tool use it unchanged.
    ///
    /// CRIU runs it as root: only a binary nobody but root can change (the
    /// file and every directory above it) is linked, into a directory only
    /// root can change; anything else is refused (exit 6).
    InstallCompat {
        /// The directory for the symlink (root's); it should come before
        /// NVIDIA's tool on PATH.
        #[arg(value_name = "DIR", default_value = "/usr/local/bin")]
        dir: PathBuf,
        /// Replace an existing cuda-checkpoint there (e.g. NVIDIA's); it is
        /// kept as cuda-checkpoint.orig, and the swap is atomic.
        #[arg(long, conflicts_with = "uninstall")]
        force: bool,
        /// Link to this cudackpt even though it runs from a cargo build
        /// directory (the link breaks at the next rebuild or cargo clean).
        #[arg(long, conflicts_with = "uninstall")]
        allow_build_dir: bool,
        /// Remove the cuda-checkpoint link to this very cudackpt and put
        /// back what it replaced (a backup root owns); anything else there
        /// is left alone.
        #[arg(long)]
        uninstall: bool,
    },
    /// Write a process tree to disk through CRIU, with a manifest
    ///
    /// cudackpt is CRIU's action script. Before anything changes: the
    /// pre-flights, CRIU's options chosen from what the tree holds, room
    /// for the images. Then the images and a manifest
    /// (cudackpt-manifest.json) in DIR. A dump that fails leaves the tree
    /// running.
    Dump {
        /// The images directory: created 0700, or an empty one.
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        /// The root of the tree (CRIU dumps the whole tree below it).
        #[arg(value_name = "PID", required_unless_present_any = ["tree", "cgroup"], conflicts_with_all = ["tree", "cgroup"], value_parser = crate::targets::process::parse_pid)]
        pid: Option<i32>,
        /// The root of the tree, as other commands name a tree.
        #[arg(long, value_name = "PID", conflicts_with = "cgroup", value_parser = crate::targets::process::parse_pid)]
        tree: Option<i32>,
        /// The one process tree this cgroup holds (a container's); a cgroup
        /// of several trees is refused, naming their roots.
        #[arg(long, value_name = "PATH")]
        cgroup: Option<PathBuf>,
        /// The CRIU binary (default: `criu` on PATH). As root, it must be
        /// root's and writable by nobody else.
        #[arg(long, value_name = "PATH")]
        criu: Option<PathBuf>,
        /// Drain the job's CUDA processes before the suspend (smaller
        /// images; NCCL jobs need it).
        #[arg(long)]
        drain: bool,
        /// Keep the job running after the dump.
        #[arg(long)]
        leave_running: bool,
        /// Go on past the pre-flights and the room check.
        #[arg(long)]
        force: bool,
    },
    /// Restore a job `dump` wrote, through CRIU, onto GPUs with room
    ///
    /// Before CRIU restores anything: the manifest is checked against this
    /// host (the driver, free PIDs, the files the job had open, its ports
    /// and addresses), GPUs are chosen where the old ones are absent or
    /// busy, and their memory weighed. Then what a snapshot's job took away
    /// by crashing or ending is put back, each said: the sockets its closed
    /// connections left in TIME_WAIT on its ports are closed, the
    /// directories of its Unix sockets made again, and the files it wrote
    /// to that grew cut back to their size at the dump, what was cut kept
    /// beside each. A restore that fails is killed whole.
    Undump {
        /// The images directory `dump --to` wrote.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// The CRIU binary (default: `criu` on PATH).
        #[arg(long, value_name = "PATH")]
        criu: Option<PathBuf>,
        /// Where the job's GPUs go, OLD=NEW by UUID (repeatable or
        /// comma-separated); default: chosen from free memory.
        #[arg(long, value_name = "OLD=NEW", value_delimiter = ',')]
        map: Vec<String>,
        /// Restore despite what the checks refuse (a different driver, too
        /// little GPU memory, a port or an address CRIU cannot bind).
        #[arg(long)]
        force: bool,
    },
    /// Run a Slurm job so that a preemption writes it to disk and its
    /// restart brings it back, or serve such jobs on a node.
    ///
    /// The batch script runs its command as `exec cudackpt slurm run --
    /// COMMAND` (submitted with `--signal=B:USR1@SECONDS`); the node runs
    /// `cudackpt slurm serve` as root. The guide's Slurm chapter says how
    /// to set both up.
    Slurm {
        #[command(subcommand)]
        command: SlurmCommand,
    },
    /// Print a shell completion script.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Show the man page (or a command's), or write every page into a
    /// directory.
    Man {
        /// The command whose page to show (`cudackpt man dump`); without
        /// one, cudackpt(1). (Checked once parsed, by `artifacts`: the list
        /// comes from this very definition.)
        #[arg(value_name = "COMMAND", conflicts_with = "dir")]
        command: Option<String>,
        /// Write cudackpt.1 and one page per command here (created if
        /// missing). Under sudo, pkexec or doas the pages are written with
        /// the invoking user's credentials; a link or another user's file
        /// at a page's name is left alone and refused (exit 6).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `cudackpt slurm`'s two halves.
#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Run a batch job's command (as the job's user): at Slurm's
    /// preemption signal (USR1) the node's service writes the job to disk,
    /// and at its restart brings it back.
    ///
    /// Used as the batch script's command, `exec cudackpt slurm run --
    /// COMMAND ARGS`. At a restart, the job comes back from its last
    /// complete snapshot onto the GPUs Slurm gave it now, or starts over
    /// saying why; at USR1 it is drained, written to disk and requeued;
    /// other signals go to the job, and the wrapper exits with the job's
    /// status. Without a service, COMMAND runs as it would without
    /// cudackpt.
    Run {
        /// The node's service.
        #[arg(long, value_name = "PATH", default_value = crate::commands::slurm::serve::DEFAULT_SOCKET)]
        socket: PathBuf,
        /// The job's command and its arguments.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<std::ffi::OsString>,
    },
    /// Serve the Slurm jobs of this node (as root): dump each at its
    /// preemption, restore it at its restart.
    ///
    /// Listens on a Unix socket any user may connect to; each connection
    /// must be a batch job's own process (the child of root's slurmstepd
    /// for that job, run as the job's user, as Slurm's controller says),
    /// and the service acts on that job alone: its processes, into its own
    /// directory of the store, which is root's (0700). A job it restored
    /// is killed when its wrapper goes. Runs until it is stopped (a
    /// systemd unit).
    Serve {
        /// The socket the jobs' wrappers connect to (mode 0666).
        #[arg(long, value_name = "PATH", default_value = crate::commands::slurm::serve::DEFAULT_SOCKET)]
        socket: PathBuf,
        /// Where each job's images go (JOB/snapshot-*), on storage every
        /// node reads: made 0700, root's.
        #[arg(long, value_name = "DIR", default_value = crate::commands::slurm::serve::DEFAULT_STORE)]
        store: PathBuf,
        /// The CRIU binary (default: `criu` on PATH).
        #[arg(long, value_name = "PATH")]
        criu: Option<PathBuf>,
        /// Slurm's `scontrol`, which says whose each job is.
        #[arg(long, value_name = "PATH", default_value = "scontrol")]
        scontrol: PathBuf,
    },
}

impl Filter {
    pub fn selectors(&self) -> Selectors {
        Selectors {
            trees: self.tree.clone(),
            cgroups: self.cgroup.clone(),
            all: self.tree.is_empty() && self.cgroup.is_empty(),
            candidates: Vec::new(),
        }
    }
}

impl Targets {
    /// The processes to find rather than the ones named.
    pub fn selectors(&self) -> Selectors {
        Selectors {
            trees: self.tree.clone(),
            cgroups: self.cgroup.clone(),
            all: self.all,
            candidates: Vec::new(),
        }
    }

    /// Every PID given, positional first, duplicates removed, order kept.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::with_capacity(self.pids.len() + self.pid_flags.len());
        for &pid in self.pids.iter().chain(&self.pid_flags) {
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
        pids
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn pids_merge_positional_and_flags_without_duplicates() {
        let cli = Cli::try_parse_from(["cudackpt", "state", "3", "1", "-p", "3", "--pid", "2"])
            .expect("parses");
        let Command::State { targets } = cli.command else {
            panic!("state")
        };
        assert_eq!(targets.pids(), vec![3, 1, 2]);
    }

    #[test]
    fn a_target_is_required() {
        assert!(Cli::try_parse_from(["cudackpt", "lock"]).is_err());
    }
}
