//! A command over many processes, as the `cudackpt` command runs it: every
//! target checked, the pre-flights (a checkpoint the driver could never
//! restore, host and GPU memory, the GPU map), cudackpt's per-PID locks and
//! crash journal, the drain handshake when asked, the driver calls made
//! concurrently, all-or-nothing with rollback, and a [`Report`] of what
//! happened to each process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::map::GpuMap;
use crate::api::report::Report;
use crate::drain::settings::DrainSettings;
use crate::driver::ProcessState;
use crate::ops::{ProgressSink, Request, ThreadIds};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::report::CommandReport as PipelineReport;
use crate::vocabulary::timeout::Timeout;

/// The processes of one command and its options; a verb
/// ([`suspend`](Group::suspend), [`resume`](Group::resume), …) runs it.
///
/// A command that changes state is all-or-nothing: if one process cannot
/// be changed, none is (those already changed are put back), and the
/// report says why. A refusal before any change makes no driver call.
///
/// ```
/// # include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/doc/support.rs"));
/// # fn main() {
/// # let fake = Fake::start();
/// # let other = fake.spawn();
/// # let (libcuda, a, b) = (fake.path(), fake.pid(), other.pid());
/// use cudackpt::{Group, ProcessState};
///
/// // `libcuda` is left out to load the host's libcuda.so.1.
/// let report = Group::new().libcuda(libcuda).pids([a, b]).suspend(None);
/// assert!(report.ok(), "{report:?}");
/// for process in &report.processes {
///     assert_eq!(process.state, Some(ProcessState::Checkpointed));
/// }
///
/// let report = Group::new().libcuda(libcuda).pids([a, b]).resume();
/// assert_eq!(report.exit_status().code(), 0);
/// # }
/// ```
pub struct Group<'a> {
    request: Request<'a>,
}

impl Default for Group<'_> {
    fn default() -> Self {
        Group::new()
    }
}

impl<'a> Group<'a> {
    /// No process yet, every option at the command's default.
    pub fn new() -> Group<'a> {
        Group {
            // The operation is the verb's, set when it runs.
            request: Request::new(None, Operation::State { restore_tid: false }),
        }
    }

    /// Loads the CUDA driver from `path` instead of `libcuda.so.1`. Run
    /// as root or with capabilities, the library must be root's and
    /// writable by nobody else.
    pub fn libcuda(mut self, path: &'a Path) -> Group<'a> {
        self.request.libcuda = Some(path);
        self
    }

    /// Adds process `pid`.
    pub fn pid(mut self, pid: i32) -> Group<'a> {
        self.request.pids.push(pid);
        self
    }

    /// Adds processes by PID.
    pub fn pids(mut self, pids: impl IntoIterator<Item = i32>) -> Group<'a> {
        self.request.pids.extend(pids);
        self
    }

    /// Adds every CUDA process in the tree of `root` (itself included).
    pub fn tree(mut self, root: i32) -> Group<'a> {
        self.request.selectors.trees.push(root);
        self
    }

    /// Adds every CUDA process in a cgroup and those below it (a directory
    /// of a cgroup filesystem, such as a container's).
    pub fn cgroup(mut self, path: impl Into<PathBuf>) -> Group<'a> {
        self.request.selectors.cgroups.push(path.into());
        self
    }

    /// Adds every CUDA process on this host.
    pub fn every_cuda_process(mut self) -> Group<'a> {
        self.request.selectors.all = true;
        self.request.confirmed = true;
        self
    }

    /// Restores through `map` (restore, resume, toggle).
    pub fn map(mut self, map: GpuMap) -> Group<'a> {
        self.request.map = map.into_spec();
        self
    }

    /// Ends the whole command after `limit`, rolling back what it changed.
    pub fn deadline(mut self, limit: Duration) -> Group<'a> {
        self.request.deadline = Timeout::from_duration(limit);
        self
    }

    /// Asks every process to drain before the lock (cudackpt(1), DRAIN
    /// PROTOCOL): to release what the driver cannot restore, such as NCCL
    /// communicators, and to rebuild after the resume. Waits up to
    /// `timeout` for each answer.
    pub fn drain(mut self, timeout: Duration) -> Group<'a> {
        self.request.drain.before_lock = true;
        self.request.drain.timeout = timeout;
        self
    }

    /// Checkpoints even what the driver is known not to restore, and
    /// restores despite the GPU memory pre-flight.
    pub fn force(mut self) -> Group<'a> {
        self.request.force = true;
        self
    }

    /// Confirms through NVML that checkpoints freed the GPUs and restores
    /// brought the processes back where expected.
    pub fn verify(mut self) -> Group<'a> {
        self.request.verify = true;
        self
    }

    /// Runs every check and pre-flight, then says what would happen and
    /// changes nothing.
    pub fn dry_run(mut self) -> Group<'a> {
        self.request.dry_run = true;
        self
    }

    /// Keeps checkpoint records (the GPUs a process left, for a later
    /// `map(GpuMap::Auto)`) in `dir` instead of the default.
    pub fn record_dir(mut self, dir: &'a Path) -> Group<'a> {
        self.request.record_dir = Some(dir);
        self
    }

    /// Each process's state (`with_restore_thread`: and its restore thread).
    pub fn state(self, with_restore_thread: bool) -> Report {
        self.verb(Operation::State {
            restore_tid: with_restore_thread,
        })
    }

    /// Each process's restore thread.
    pub fn restore_thread_ids(self) -> Report {
        self.verb(Operation::RestoreTid)
    }

    /// Locks every process: running → locked. `timeout` bounds the wait
    /// for each one's GPU work (`None`: as long as it takes).
    pub fn lock(self, timeout: Option<Duration>) -> Report {
        self.verb(Operation::Lock {
            timeout: Timeout::from_option(timeout),
        })
    }

    /// Checkpoints every process: locked → checkpointed.
    pub fn checkpoint(self) -> Report {
        self.verb(Operation::Checkpoint)
    }

    /// Restores every process through the map: checkpointed → locked.
    pub fn restore(self) -> Report {
        self.verb(Operation::Restore)
    }

    /// Unlocks every process: locked → running.
    pub fn unlock(self) -> Report {
        self.verb(Operation::Unlock)
    }

    /// Lock and checkpoint every process: running → checkpointed.
    pub fn suspend(self, lock_timeout: Option<Duration>) -> Report {
        self.verb(Operation::Suspend {
            timeout: Timeout::from_option(lock_timeout),
        })
    }

    /// Restore through the map and unlock every process: checkpointed →
    /// running.
    pub fn resume(self) -> Report {
        self.verb(Operation::Resume)
    }

    /// Suspends the processes if they run, resumes them if they are
    /// checkpointed.
    pub fn toggle(self, lock_timeout: Option<Duration>) -> Report {
        self.verb(Operation::Toggle {
            timeout: Timeout::from_option(lock_timeout),
        })
    }

    /// Waits until every process is in `state`, for at most `timeout`.
    pub fn wait(self, state: ProcessState, timeout: Duration) -> Report {
        self.verb(Operation::Wait {
            state,
            timeout: Timeout::from_duration(timeout),
        })
    }

    /// A verb: the pipeline's run, told in the library's own report.
    fn verb(self, operation: Operation) -> Report {
        Report::from_pipeline(self.run(operation))
    }
}

/// What the grammars set that a library user does not: each is a promise
/// of one grammar's contract (NVIDIA's errors, CRIU's thread ids, the
/// confirmation `--yes` gives, `recover`'s own run).
impl<'a> Group<'a> {
    /// What the pipeline will be asked (for the grammars' tests).
    #[cfg(test)]
    pub(crate) fn request(&self) -> &Request<'a> {
        &self.request
    }

    /// Runs `operation` through the pipeline: every verb, and the grammars.
    pub(crate) fn run(mut self, operation: Operation) -> PipelineReport {
        self.request.operation = operation;
        crate::ops::run(self.request)
    }

    pub(crate) fn libcuda_option(mut self, path: Option<&'a Path>) -> Group<'a> {
        self.request.libcuda = path;
        self
    }

    pub(crate) fn record_dir_option(mut self, dir: Option<&'a Path>) -> Group<'a> {
        self.request.record_dir = dir;
        self
    }

    pub(crate) fn selectors(mut self, selectors: crate::ops::Selectors) -> Group<'a> {
        self.request.selectors = selectors;
        self
    }

    pub(crate) fn map_spec(mut self, map: crate::gpu::map::MapSpec) -> Group<'a> {
        self.request.map = map;
        self
    }

    pub(crate) fn deadline_timeout(mut self, deadline: Timeout) -> Group<'a> {
        self.request.deadline = deadline;
        self
    }

    pub(crate) fn drain_options(mut self, drain: DrainSettings) -> Group<'a> {
        self.request.drain = drain;
        self
    }

    /// `--yes` (or CRIU's `CUDACKPT_YES=1`): `every_cuda_process` may act.
    pub(crate) fn confirmed(mut self, confirmed: bool) -> Group<'a> {
        self.request.confirmed = confirmed;
        self
    }

    pub(crate) fn options(mut self, force: bool, verify: bool, dry_run: bool) -> Group<'a> {
        self.request.force = force;
        self.request.verify = verify;
        self.request.dry_run = dry_run;
        self
    }

    /// `--no-lock`: leave cudackpt's per-PID locks untaken.
    pub(crate) fn per_pid_locks(mut self, take: bool) -> Group<'a> {
        self.request.use_locks = take;
        self
    }

    pub(crate) fn progress(mut self, progress: Option<ProgressSink<'a>>) -> Group<'a> {
        self.request.progress = progress;
        self
    }

    /// NVIDIA's grammar: a thread id acts on its process, and a single step
    /// on a process already where it leads is an error.
    pub(crate) fn nvidia_contract(mut self) -> Group<'a> {
        self.request.thread_ids = ThreadIds::ActOnProcess;
        self.request.nvidia_errors = true;
        self
    }

    /// `recover`: acts on processes an abandoned intent record names.
    pub(crate) fn recovering(mut self) -> Group<'a> {
        self.request.recovering = true;
        self
    }

    /// CRIU's pre-dump hook: CRIU (`criu`) dumps the trees next, so a tree
    /// it could not dump is refused before any change, and the intent
    /// record is handed to it.
    pub(crate) fn criu_dump(mut self, criu: crate::targets::identity::Identity) -> Group<'a> {
        self.request.criu_dump = Some(criu);
        self
    }

    /// Inside another program (CRIU's plugin): its signal handlers stay as
    /// they are.
    pub(crate) fn embedded(mut self) -> Group<'a> {
        self.request.embedded = true;
        self
    }
}
