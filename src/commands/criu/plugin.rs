//! CRIU's CUDA plugin as cudackpt runs it inside CRIU: what each hook does,
//! with cudackpt's pipeline (pre-flights before any change, the group
//! suspended or resumed as a whole and rolled back on failure, the drain
//! when asked, an intent record that `recover` finds if CRIU dies). The
//! plugin's ABI (the descriptor CRIU reads, the hooks' C signatures, the
//! calls into CRIU and ptrace) is the `cudackpt-criu-plugin` crate's
//! fenced module; it gives this one a [`Host`].
//!
//! A dump weighs the whole tree and locks its CUDA processes as a group at
//! the first `PAUSE_DEVICES` hook (for the tree's root, before CRIU
//! freezes anything: a refusal comes before any change, and a drain's
//! ranks still run to answer), and checkpoints the group at the first
//! `CHECKPOINT_DEVICES` hook, once CRIU has frozen the tree: the copy of
//! GPU memory, which takes seconds for a large job, runs outside the seize
//! timeout CRIU keeps with `alarm()` (`--timeout`, 10 s by default; CRIU
//! gives up and crashes five seconds past it). From then on the tree is
//! stopped under CRIU's ptrace, at the checkpoint, at the end of a dump
//! that failed or leaves the tree running, and at restore
//! (`RESUME_DEVICES_LATE`): the host lets each process's restore thread run
//! while the group's calls run side by side, and stops it again, as CRIU's
//! own plugin does one process at a time.
//!
//! Every group command here is handed to this CRIU (its intent record
//! outlives the command): a CRIU that dies mid-dump leaves the record, and
//! `cudackpt recover` puts the group back to running; `fini` removes it.

use super::lifecycle;
pub use super::settings::PluginSettings;
use crate::api::group::Group;
use crate::driver::Driver;
use crate::gpu::map::MapSpec;
use crate::targets::identity::Identity;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::{DriverCall, Operation};
use crate::vocabulary::prose;
use crate::vocabulary::report::CommandReport;

/// The plugin's name in CRIU's log and in the images' inventory: a restore
/// of images it dumped needs it (CRIU refuses without it).
pub const NAME: &str = "cudackpt";

/// The CRIU releases whose plugin ABI this plugin was built for and tested
/// with (`criu-plugin.h` version 0.2.0, 13 hooks, stages dump, pre-dump and
/// restore). CRIU does not tell a plugin its ABI, so the plugin asks its
/// version and refuses another rather than guess.
pub const KNOWN_CRIU: [&str; 5] = ["4.0", "4.1", "4.1.1", "4.2", "4.2.1"];

/// A stage of CRIU, as `init` is told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `criu dump`.
    Dump,
    /// `criu pre-dump` (memory only: the plugin stays out of it).
    PreDump,
    /// `criu restore`.
    Restore,
}

impl Stage {
    /// CRIU's number for it (`CR_PLUGIN_STAGE__*`), if it is one of these.
    pub fn from_criu(stage: i32) -> Option<Stage> {
        match stage {
            0 => Some(Stage::Dump),
            1 => Some(Stage::PreDump),
            2 => Some(Stage::Restore),
            _ => None,
        }
    }
}

/// A line's level in CRIU's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Shown by default: what failed.
    Error,
    /// Shown by default: what the user should know.
    Warn,
    /// `-v3`: what was done to which process.
    Info,
    /// `-v4`: the details.
    Debug,
}

/// What a hook answers CRIU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookAnswer {
    /// Done (0).
    Done,
    /// Not this plugin's (`-ENOTSUP`: CRIU asks the next plugin).
    NotMine,
    /// Failed (-1): CRIU stops the dump or the restore.
    Failed,
}

/// What the plugin tells CRIU's log beside its messages, for the host to
/// write: the lines are rendered in `output::criu_log`, as a terminal's
/// are in `output` (`internal::criu_log_lines`).
pub struct Said<'a>(pub(crate) Saying<'a>);

/// What [`Said`] holds.
pub(crate) enum Saying<'a> {
    /// A group command (`what`: suspend, lock, checkpoint, resume,
    /// rebuild) and its report.
    Report(&'a str, &'a CommandReport),
    /// The first pause hook's pre-flights: processes weighed, time spent.
    Preflights {
        processes: usize,
        spent: std::time::Duration,
    },
}

/// What CRIU gives the plugin, behind the ABI's fence.
pub trait Host {
    /// Writes a line to CRIU's log.
    fn log(&self, level: Level, line: &str);
    /// Writes what the plugin says of a command to CRIU's log.
    fn say(&self, said: Said<'_>);
    /// Marks the images as needing this plugin to restore.
    fn add_to_inventory(&self) -> bool;
    /// Whether the images were dumped with this plugin (and takes the mark).
    fn take_from_inventory(&self) -> bool;
    /// Whether the dump leaves the tree running (`--leave-running`).
    fn leave_running(&self) -> bool;
    /// Makes CRIU freeze a container's tree by ptrace interrupts, not by
    /// its cgroup's freezer, which would hold the restore threads the
    /// checkpoint needs running (as CRIU's own plugin does); false where
    /// this CRIU cannot.
    fn freeze_by_interrupts(&self) -> bool;
    /// Lets the driver's restore threads `tids` run (CRIU has every thread
    /// of the tree stopped), runs `work`, and stops them again.
    fn with_restore_threads_running(
        &self,
        tids: &[i32],
        work: &mut dyn FnMut(),
    ) -> Result<(), String>;
}

/// One CRIU run's plugin: created at `init`, dropped at `fini`.
pub struct Plugin {
    stage: Stage,
    settings: PluginSettings,
    /// Set when the plugin stays out of this run (pre-dump; a restore of
    /// images it did not dump).
    idle: bool,
    /// The tree's root, once the first hook named it.
    root: Option<i32>,
    /// What this plugin moved: locked at dump, resumed at restore.
    moved: Vec<i32>,
    /// Whether the dump's group has been checkpointed.
    checkpointed: bool,
    /// CRIU's process, as `init` found it: the hooks may run in a helper
    /// forked from it, and a dump's intent record is handed to CRIU.
    criu: Identity,
}

impl Plugin {
    /// CRIU's `init(stage)`: refuses a CRIU it does not know (its version
    /// as `criu --version` says it, `None` when it could not be read).
    pub fn init(
        host: &dyn Host,
        stage: i32,
        criu_version: Option<&str>,
        settings: Result<PluginSettings, String>,
    ) -> Option<Plugin> {
        if let Err(why) = known_criu(criu_version) {
            host.log(Level::Error, &why);
            return None;
        }
        let Some(stage) = Stage::from_criu(stage) else {
            host.log(Level::Error, &format!("CRIU started stage {stage}, which this plugin does not know (it knows dump 0, pre-dump 1 and restore 2); refusing rather than guessing"));
            return None;
        };
        let settings = match settings {
            Ok(settings) => settings,
            Err(why) => {
                host.log(Level::Error, &why);
                return None;
            }
        };
        let idle = match stage {
            Stage::PreDump => true,
            Stage::Restore => !host.take_from_inventory(),
            Stage::Dump => false,
        };
        // As CRIU's own plugin: on a host with an NVIDIA GPU (or a driver
        // named), a container's tree is frozen by interrupts.
        if stage == Stage::Dump
            && (nvidia_gpu_present() || settings.libcuda.is_some())
            && !host.freeze_by_interrupts()
        {
            host.log(Level::Warn, "this CRIU cannot freeze by interrupts: a tree frozen by its cgroup would hold the restore threads its checkpoint needs");
        }
        host.log(
            Level::Info,
            &format!(
                "{NAME} {} loaded for {stage:?}{}",
                env!("CARGO_PKG_VERSION"),
                if idle { ", with nothing to do" } else { "" }
            ),
        );
        Some(Plugin {
            stage,
            settings,
            idle,
            root: None,
            moved: Vec::new(),
            checkpointed: false,
            criu: Identity::of(std::process::id() as i32),
        })
    }

    /// `PAUSE_DEVICES`: the first call, for the tree's root, weighs the
    /// whole tree as a suspend would (the pre-flights, before any change),
    /// then locks every CUDA process of it as a group (drained first when
    /// asked); later calls answer for the processes found then.
    pub fn pause_devices(&mut self, host: &dyn Host, pid: i32) -> HookAnswer {
        if let Err(answer) = self.first_call(Stage::Dump, pid) {
            return answer;
        }
        let started = std::time::Instant::now();
        if !self.tree_maps_the_driver(pid) {
            host.log(
                Level::Info,
                &format!("no process of the tree of PID {pid} maps the CUDA driver: nothing to do"),
            );
            return HookAnswer::NotMine;
        }
        let timeout = self.settings.lock_timeout;
        let weighed = self
            .dump_group(pid)
            .options(self.settings.hook.force, false, true)
            .run(Operation::Suspend { timeout });
        if !weighed.ok() {
            host.say(Said(Saying::Report("suspend", &weighed)));
            return HookAnswer::Failed;
        }
        host.say(Said(Saying::Preflights {
            processes: weighed.processes.len(),
            spent: started.elapsed(),
        }));
        let locked = self.dump_group(pid).run(Operation::Lock { timeout });
        host.say(Said(Saying::Report("lock", &locked)));
        if !locked.ok() {
            return HookAnswer::Failed;
        }
        self.moved = moved_by(&locked, DriverCall::Lock);
        if !self.moved.is_empty() && !host.add_to_inventory() {
            host.log(Level::Error, "could not mark the images as needing this plugin to restore; the dump stops and the group is resumed");
            return HookAnswer::Failed;
        }
        self.answer_for(pid)
    }

    /// `CHECKPOINT_DEVICES`: the first call, once CRIU has frozen the
    /// tree, checkpoints the locked group as a whole (its restore threads
    /// let run for it), rolled back to locked if any checkpoint fails.
    pub fn checkpoint_devices(&mut self, host: &dyn Host, pid: i32) -> HookAnswer {
        if !self.acts_in(Stage::Dump) {
            return HookAnswer::NotMine;
        }
        if !self.checkpointed && !self.moved.is_empty() {
            self.checkpointed = true;
            // The pre-flights weighed the tree at the first hook; the
            // frozen tree is the same one.
            let report = self.with_restore_threads(host, &self.moved, |cuda| {
                self.group()
                    .pids(cuda)
                    .criu_dump(self.criu)
                    .options(true, false, false)
                    .run(Operation::Checkpoint)
            });
            host.say(Said(Saying::Report("checkpoint", &report)));
            if !report.ok() {
                return HookAnswer::Failed;
            }
        }
        self.answer_for(pid)
    }

    /// `RESUME_DEVICES_LATE`: the first call, for the restored tree's root,
    /// resumes every CUDA process of the tree as a group.
    pub fn resume_devices_late(&mut self, host: &dyn Host, pid: i32) -> HookAnswer {
        if let Err(answer) = self.first_call(Stage::Restore, pid) {
            return answer;
        }
        if !self.settings.hook.force {
            // The resume weighs GPU memory through NVML: its start (tens
            // of milliseconds) overlaps the driver's load and the lookup
            // of the restore threads.
            crate::gpu::nvml::open_in_background();
        }
        let tree = crate::targets::discover::trees(&[pid]);
        let report = self.resume(host, tree, self.settings.map.clone());
        crate::gpu::nvml::settle();
        self.moved = moved_by(&report, DriverCall::Restore);
        if report.ok() {
            self.answer_for(pid)
        } else {
            HookAnswer::Failed
        }
    }

    /// CRIU's `fini(stage, ret)`. After a restore, CRIU has let the tree
    /// run: the drained processes the hook resumed are asked to rebuild
    /// now (stopped, they could not answer). After a dump that failed or
    /// leaves the tree running, the group is resumed in place; the intent
    /// record handed to this CRIU goes either way (a dump that finished
    /// killed the tree).
    pub fn fini(self, host: &dyn Host, ret: i32) {
        host.log(
            Level::Debug,
            &format!(
                "fini of {:?} (CRIU's result {ret}), {} moved",
                self.stage,
                prose::pids(&self.moved)
            ),
        );
        if self.idle || self.moved.is_empty() {
            return;
        }
        match self.stage {
            Stage::Restore if ret == 0 => {
                let rebuilt = self.group().pids(self.moved.clone()).run(Operation::Resume);
                host.say(Said(Saying::Report("rebuild", &rebuilt)));
            }
            Stage::Dump => self.finish_dump(host, ret),
            _ => {}
        }
    }

    fn finish_dump(&self, host: &dyn Host, ret: i32) {
        if ret != 0 || host.leave_running() {
            let why = if ret != 0 {
                "the dump failed"
            } else {
                "the dump leaves the tree running"
            };
            host.log(
                Level::Info,
                &format!("{why}: resuming {}", prose::pids(&self.moved)),
            );
            let report = self.resume(host, self.moved.clone(), MapSpec::None);
            if !report.ok() {
                host.log(Level::Error, &format!("{} stay where the failure above left them; `cudackpt recover` puts them back once CRIU has ended", prose::pids(&self.moved)));
                return;
            }
            if self.settings.hook.drain.before_lock {
                self.ask_to_rebuild(host);
            }
        }
        crate::ops::doors::criu::release_handed_to(self.criu);
    }

    /// Asks the drained processes of a dump that leaves them running to
    /// rebuild, without waiting: CRIU has them stopped until this hook
    /// returns, and the signal waits for them (the drain's own rebuild
    /// does not wait for a stopped process).
    fn ask_to_rebuild(&self, host: &dyn Host) {
        use crate::drain::handshake;
        let caller = crate::targets::process::Privileges::current();
        let signal = self.settings.hook.drain.signal;
        let targets: Vec<_> = self
            .moved
            .iter()
            .filter(|&&pid| handshake::shows_marker(pid))
            .filter_map(|&pid| crate::targets::process::check_target(pid, &caller, false).ok())
            .filter(|target| handshake::catches(target, signal) == Ok(true))
            .collect();
        if targets.is_empty() {
            return;
        }
        let asked: Vec<i32> = targets.iter().map(|t| t.pid).collect();
        let targets: Vec<_> = targets.iter().collect();
        crate::drain::rebuild::rebuild(
            &targets,
            signal,
            std::time::Instant::now(),
            &Unrecorded,
            &|| false,
        );
        host.log(
            Level::Info,
            &format!(
                "asked {} to rebuild (signal {}): they do once CRIU lets them run (`cudackpt ps` shows them drained until then)",
                prose::pids(&asked),
                signal.number()
            ),
        );
    }

    /// Resumes the CUDA processes among `candidates`, their restore threads
    /// let run for it. CRIU has the tree stopped, so a drained process
    /// could not answer a rebuild: that is asked at `fini`.
    fn resume(&self, host: &dyn Host, candidates: Vec<i32>, map: MapSpec) -> CommandReport {
        let mut drain = self.settings.hook.drain;
        drain.rebuild = false;
        let report = self.with_restore_threads(host, &candidates, |cuda| {
            self.group()
                .drain_options(drain)
                .pids(cuda)
                .map_spec(map)
                .run(Operation::Resume)
        });
        host.say(Said(Saying::Report("resume", &report)));
        report
    }

    /// Runs `command` on the CUDA processes among `pids` (those with a
    /// restore thread), their restore threads let run (CRIU has the tree
    /// stopped under ptrace).
    fn with_restore_threads(
        &self,
        host: &dyn Host,
        pids: &[i32],
        command: impl FnOnce(Vec<i32>) -> CommandReport,
    ) -> CommandReport {
        let (cuda, tids): (Vec<i32>, Vec<i32>) =
            restore_threads(self.settings.libcuda.as_deref(), pids)
                .into_iter()
                .unzip();
        let mut command = Some(command);
        let mut report = None;
        let mut work = || report = command.take().map(|command| command(cuda.clone()));
        if let Err(why) = host.with_restore_threads_running(&tids, &mut work) {
            host.log(Level::Error, &why);
        }
        report.unwrap_or_else(|| CommandReport {
            failure: Some(Fault::new(
                FaultKind::DriverError,
                "the restore threads could not be let run, so the driver was not called",
                "see CRIU's log above for why; `cudackpt recover` puts the group back once CRIU has ended",
            )),
            ..CommandReport::new("criu-plugin", std::time::Duration::ZERO)
        })
    }

    /// Whether a process of `root`'s tree maps the CUDA driver, or could not
    /// be looked at: a tree without CUDA (most dumps, on a host where the
    /// plugin is installed for all) needs no driver, loaded or not.
    fn tree_maps_the_driver(&self, root: i32) -> bool {
        let driver_file = self
            .settings
            .libcuda
            .as_deref()
            .and_then(|path| path.file_name())
            .and_then(|name| name.to_str());
        let scan = crate::targets::discover::cuda_candidates(
            &crate::targets::discover::trees(&[root]),
            driver_file,
        );
        !scan.found.is_empty() || !scan.unreadable.is_empty() || !scan.past_cap.is_empty()
    }

    /// The group of a dump's first hook: the tree of `root`, for this CRIU.
    fn dump_group(&self, root: i32) -> Group<'_> {
        self.group()
            .selectors(lifecycle::tree(Some(root), Vec::new()))
            .criu_dump(self.criu)
    }

    /// The group this plugin runs: the settings, and no signal handling of
    /// its own (CRIU's process: CRIU owns its signals).
    fn group(&self) -> Group<'_> {
        lifecycle::group(self.settings.libcuda.as_deref(), &self.settings.hook).embedded()
    }

    /// Whether the plugin stays out of this run (a pre-dump; a restore of
    /// images it did not dump): its hooks answer without the driver.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// Whether this run is the plugin's and of `stage`.
    fn acts_in(&self, stage: Stage) -> bool {
        !self.idle && self.stage == stage
    }

    /// The first call of a hook that acts for the whole tree names its
    /// root (`Ok`); any other call gets its answer for `pid` at once.
    fn first_call(&mut self, stage: Stage, pid: i32) -> Result<(), HookAnswer> {
        if !self.acts_in(stage) {
            return Err(HookAnswer::NotMine);
        }
        if self.root.is_some() {
            return Err(self.answer_for(pid));
        }
        self.root = Some(pid);
        Ok(())
    }

    /// A hook's answer for one process: done if this plugin moved it.
    fn answer_for(&self, pid: i32) -> HookAnswer {
        if self.moved.contains(&pid) {
            HookAnswer::Done
        } else {
            HookAnswer::NotMine
        }
    }
}

/// The ledger of the rebuild asked at the end of a dump that leaves the
/// tree running: the intent record it would go to is released right
/// after, so nothing is written.
struct Unrecorded;

impl crate::drain::ledger::SignalLedger for Unrecorded {
    fn begin(&self, _pid: i32) {}
    fn end(&self, _pid: i32, _delivered: bool) {}
    fn flush(&self) {}
}

/// Whether the NVIDIA driver shows a GPU (`/proc/driver/nvidia/gpus/`).
fn nvidia_gpu_present() -> bool {
    std::path::Path::new("/proc/driver/nvidia/gpus").is_dir()
}

/// Whether this plugin knows CRIU's plugin ABI, from its version (pure).
pub fn known_criu(version: Option<&str>) -> Result<(), String> {
    match version {
        Some(v) if KNOWN_CRIU.contains(&v) => Ok(()),
        Some(v) => Err(format!(
            "this CRIU is {v}; {NAME}'s plugin knows the plugin ABI of CRIU {} only, and CRIU does not tell a plugin its ABI: refusing rather than guessing (use CRIU's own CUDA plugin with cudackpt as its cuda-checkpoint, or a {NAME} built for this CRIU)",
            KNOWN_CRIU.join(", ")
        )),
        None => Err(format!(
            "could not tell which CRIU loaded {NAME}'s plugin (its `--version` did not say): refusing rather than guessing its plugin ABI"
        )),
    }
}

/// Why `criu --version` gave no version, for CRIU's log before the
/// refusal: how it ended and what it said on stderr, on one line with its
/// control characters escaped, so it cannot forge a line of the log (pure).
pub fn version_not_said(ended: &str, error_output: &[u8]) -> String {
    let said = String::from_utf8_lossy(error_output);
    format!(
        "`/proc/self/exe --version` ended with {ended} and printed no version: {}",
        crate::targets::name::printable(said.trim())
    )
}

/// CRIU's version in what `criu --version` printed (pure).
pub fn criu_version(output: &str) -> Option<&str> {
    output
        .lines()
        .find_map(|line| line.trim().strip_prefix("Version:"))
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The CUDA processes among `pids`, each with its restore thread (the
/// driver names none for a process without CUDA; asking does not wait for
/// a stopped process).
fn restore_threads(libcuda: Option<&std::path::Path>, pids: &[i32]) -> Vec<(i32, i32)> {
    let Ok(driver) = Driver::load(libcuda) else {
        return Vec::new();
    };
    pids.iter()
        .filter_map(|&pid| {
            crate::api::process::Process::open(&driver, pid)
                .and_then(|p| p.restore_thread_id())
                .ok()
                .map(|tid| (pid, tid))
        })
        .collect()
}

/// The processes `report` ran `call` on, successfully (pure).
fn moved_by(report: &CommandReport, call: DriverCall) -> Vec<i32> {
    report
        .processes
        .iter()
        .filter(|p| p.ok() && p.did(call))
        .map(|p| p.pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn why_criu_gave_no_version_is_one_line_of_the_log() {
        let why = version_not_said(
            "exit status: 127",
            b"error while loading shared libraries: libnet.so.1\n(00.1) cudackpt: forged\n",
        );
        assert_eq!(
            why,
            "`/proc/self/exe --version` ended with exit status: 127 and printed no version: error while loading shared libraries: libnet.so.1\\x0a(00.1) cudackpt: forged"
        );
    }

    #[test]
    fn the_version_is_read_from_what_criu_printed() {
        assert_eq!(criu_version("Version: 4.2.1\n"), Some("4.2.1"));
        assert_eq!(criu_version("Version: 4.2\nGitID: v4.2\n"), Some("4.2"));
        assert_eq!(criu_version("criu: unknown option\n"), None);
        assert_eq!(criu_version("Version:   \n"), None);
    }

    #[test]
    fn a_criu_of_another_abi_is_refused_naming_both() {
        assert!(known_criu(Some("4.2.1")).is_ok());
        let refused = known_criu(Some("9.0")).expect_err("unknown");
        assert!(refused.contains("this CRIU is 9.0"), "{refused}");
        assert!(refused.contains("4.2.1"), "{refused}");
        let refused = known_criu(None).expect_err("unknown");
        assert!(refused.contains("could not tell"), "{refused}");
    }

    #[test]
    fn stages_are_criu_s_numbers() {
        assert_eq!(Stage::from_criu(0), Some(Stage::Dump));
        assert_eq!(Stage::from_criu(1), Some(Stage::PreDump));
        assert_eq!(Stage::from_criu(2), Some(Stage::Restore));
        assert_eq!(Stage::from_criu(3), None);
    }
}
