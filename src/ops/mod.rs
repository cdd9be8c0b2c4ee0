//! The process pipeline, for every grammar (modern, NVIDIA's, the CRIU
//! hook): one validated [`Request`] in, one [`Report`] out; nothing here
//! prints. [`run`] reads as its stages: select → check → the pre-flights →
//! choose the map → lock → execute → finish.
//!
//! The rooms, one job each:
//! - `stages/`: select, check, choose the map, finish, the dry run's answer;
//! - `preflight/`: what is refused before any change (a checkpoint the
//!   driver could not restore, host memory, GPU memory for a restore);
//! - `journal/`: what outlives a command so no crash leaves a process
//!   behind (the per-PID lock, the intent record, checkpoint records);
//! - `execute/`: the driver calls, phased and concurrent, with rollback, and
//!   what governs them in time (signals, timeouts, deadlines);
//! - `diagnose/`: failures in words, and the post-mortem of a target that
//!   died;
//! - `plan.rs` (what a command means for one process, pure) and `report.rs`
//!   (the result as data): the vocabulary every stage speaks.
//!
//! May use: `gpu`, `targets`, `driver`, `exit`, `files`.

pub mod diagnose;
pub mod drain;
pub mod execute;
pub mod journal;
pub mod plan;
pub mod preflight;
pub mod report;
pub mod stages;

use std::path::Path;
use std::time::Instant;

use crate::driver::{Driver, GpuPair};
use crate::gpu::inventory::Inventory;
use crate::gpu::map::{MapError, MapSpec};
use crate::targets::process::{self, Privileges};
use diagnose::{Failure, FailureKind};
use execute::interrupt::{self, Interrupt};
use execute::timeout::Timeout;
use execute::{Executor, StepDone};
use journal::{drained, intent, lock, pidlock, records};
use plan::Operation;
use preflight::{host_memory, restorable};
use report::{Layout, ProcessReport, Report};
use stages::drain as drain_stage;
pub use stages::select::Selectors;
use stages::{check, choose_map, dry_run, finish, select};

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
    pub progress: Option<&'a (dyn Fn(&StepDone<'_>) + Sync)>,
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
    /// The drain handshake (SPEC 11): `--drain`, and the rebuild.
    pub drain: Drain,
    /// NVIDIA's grammar: a single step on a process already where it leads
    /// is an error (exit 1), as NVIDIA's tool says; the modern grammar
    /// reports it "already there" and succeeds.
    pub nvidia_errors: bool,
}

/// The drain handshake of a request (SPEC 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    /// `--drain`: ask every process the command will lock to drain first.
    pub before_lock: bool,
    /// Ask drained processes that run again to rebuild (`recover` does it
    /// itself, from its record).
    pub rebuild: bool,
    pub signal: drain::protocol::DrainSignal,
    /// How long to wait for every acknowledgement, and every rebuild.
    pub timeout: std::time::Duration,
}

impl Default for Drain {
    fn default() -> Drain {
        Drain {
            before_lock: false,
            rebuild: true,
            signal: drain::protocol::DEFAULT_SIGNAL,
            timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// How long a drain waits by default: a few training steps and the tear
/// down of NCCL communicators.
pub const DEFAULT_DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl<'a> Request<'a> {
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
            drain: Drain::default(),
            nvidia_errors: false,
        }
    }
}

/// Why the pipeline ended before its last stage.
#[derive(Debug)]
pub enum Stop {
    /// Before any target was examined: every named PID shares the failure.
    Refused(Failure),
    /// After the checks: the reports of targets already answered for, and
    /// the failure of every other valid target (none: they simply were
    /// not run).
    Halted {
        ran: Vec<ProcessReport>,
        not_run: Option<Failure>,
    },
}

impl Stop {
    /// Every valid target gets `failure`; nothing ran.
    fn not_run(failure: Failure) -> Stop {
        Stop::Halted {
            ran: Vec::new(),
            not_run: Some(failure),
        }
    }
}

/// What the last stages hand to the report.
struct Finished {
    reports: Vec<ProcessReport>,
    remarks: Vec<String>,
    map: Option<Vec<GpuPair>>,
}

/// A mutex's content, also after a panic elsewhere held it: the journal and
/// the signal board must still be read then.
pub(crate) fn locked<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs one process command through every stage.
pub fn run(request: Request<'_>) -> Report {
    let started = Instant::now();
    let report = match select::select(&request) {
        Ok(selection) => {
            let mut checked = check::check(&request, selection);
            let outcome = proceed(&request, &mut checked, started);
            checked.assemble(outcome, started)
        }
        Err(failure) => refused(&request.operation, &request.pids, failure, started),
    };
    Report {
        prediction: request.dry_run,
        ..report
    }
}

/// The stages after the checks, each of which may stop the command.
fn proceed(
    request: &Request<'_>,
    checked: &mut check::Checked,
    started: Instant,
) -> Result<Finished, Stop> {
    let ready = check::ready(request, checked)?;
    let cleared = match clear(request, &ready) {
        Ok(cleared) => cleared,
        Err(stop) => {
            if request.dry_run {
                checked.read_states(&ready.driver, &ready.targets);
            }
            return Err(stop);
        }
    };
    if request.dry_run {
        let mut reports = dry_run::reports(request, &ready, cleared.map());
        drain_stage::predict(request, &ready, &mut reports);
        return Ok(Finished {
            reports,
            remarks: cleared.remarks,
            map: cleared.chosen.pairs,
        });
    }
    execute_and_finish(request, &ready, cleared, started)
}

/// What the pre-flights and the per-PID locks leave for the driver calls.
struct Cleared<'d> {
    /// Warnings for ranks let through, by PID.
    rank_warnings: Vec<(i32, String)>,
    /// NVML's per-process use, weighed before any change.
    usage: Option<crate::gpu::nvml::Usage>,
    host: Inventory<'d>,
    records: records::Records,
    chosen: choose_map::Chosen,
    /// Held until the command ends.
    locks: pidlock::Held,
    remarks: Vec<String>,
}

impl Cleared<'_> {
    fn map(&self) -> &[GpuPair] {
        self.chosen.pairs.as_deref().unwrap_or_default()
    }
}

/// Every pre-flight, the map and the per-PID locks (none for a dry run),
/// in that order: the first refusal stops the command before any change.
fn clear<'d>(request: &Request<'_>, ready: &'d check::Ready) -> Result<Cleared<'d>, Stop> {
    if request.operation.changes_state() && !request.recovering {
        lock::not_left_by_a_dead_cudackpt(ready)?;
    }
    // A drain proves restorability after the acknowledgements, instead.
    let passed = if request.drain.before_lock && drain_stage::drains(&request.operation) {
        restorable::Passed::default()
    } else {
        restorable::check(request, ready, &drained::vouches_for)?
    };
    let weighed = host_memory::check(request, ready)?;
    let host = Inventory::with_driver(&ready.driver);
    let records = records::open(request)?;
    let chosen = choose_map::choose(
        request,
        &ready.targets,
        records.dir.as_ref(),
        &host,
        &ready.driver,
    )?;
    // One cudackpt at a time per process: held until the command ends.
    let locks = if request.dry_run {
        pidlock::Held::none()
    } else {
        lock::lock(
            &request.operation,
            ready,
            request.use_locks,
            request.recovering,
        )?
    };
    let mut remarks = weighed.remarks;
    remarks.extend(chosen.remarks.iter().cloned());
    remarks.extend(preflight::gpu_memory::check_memory(
        request,
        &ready.targets,
        &chosen.records,
        chosen.pairs.as_deref().unwrap_or_default(),
        &host,
    )?);
    Ok(Cleared {
        rank_warnings: passed.warnings,
        usage: weighed.usage,
        host,
        records,
        chosen,
        locks,
        remarks,
    })
}

/// The drain, the driver calls, then what follows them: the rebuild of
/// drained processes running again, the post-mortem of a target that died,
/// records, `--verify`, the warnings of ranks let through.
fn execute_and_finish(
    request: &Request<'_>,
    ready: &check::Ready,
    cleared: Cleared<'_>,
    started: Instant,
) -> Result<Finished, Stop> {
    let Cleared {
        rank_warnings,
        usage,
        host,
        records,
        chosen,
        locks,
        mut remarks,
    } = cleared;
    let locks_lost = || locks.lost();
    // The crash journal: written just before the first state change,
    // removed when this function returns (however the command ended).
    let journal = intent::Journal::default();
    let write_intent = |places: &[interrupt::Place]| journal.record(&request.operation, places);
    let executor = executor_for(request, ready, started, &locks_lost, &write_intent);
    let drained = drain_stage::drain(
        request,
        ready,
        &journal,
        &executor.interrupt,
        executor.deadline,
    )?;
    let snapshot = request
        .operation
        .checkpoints()
        .then(|| finish::snapshot(&ready.driver, &host, usage));
    let map = chosen.pairs.as_deref().unwrap_or_default();
    let oom_watch =
        diagnose::postmortem::watch(&request.operation, &ready.targets, snapshot.as_ref());
    let mut reports = executor.run(&request.operation, &ready.targets, map);
    remarks.extend(executor.interrupt.unguarded());
    if let Some(drained) = drained {
        drained.settle(&mut reports, &journal, &executor.interrupt);
    }
    // A toggle --drain may also resume processes drained before: they rebuild
    // as after any resume (the settled members have their report already).
    drain_stage::rebuild_resumed(request, ready, &mut reports, &journal, executor.deadline);
    remarks.extend(journal.unwritten());
    if let Some(watch) = &oom_watch {
        watch.diagnose(&mut reports);
    }
    remarks.extend(finish::finish(
        request,
        &mut reports,
        &finish::Moved {
            targets: &ready.targets,
            records: &chosen.records,
            map,
            store: &records,
            snapshot: snapshot.as_ref(),
        },
    ));
    for (pid, warning) in rank_warnings {
        if let Some(report) = reports.iter_mut().find(|r| r.pid == pid) {
            report.warnings.push(warning);
        }
    }
    reports.extend(ready.blocked.iter().cloned());
    Ok(Finished {
        reports,
        remarks,
        map: chosen.pairs,
    })
}

/// The executor of a request: its driver, interrupts, deadline, progress,
/// the lock check between phases and the journal before the first change.
fn executor_for<'a>(
    request: &'a Request<'a>,
    ready: &'a check::Ready,
    started: Instant,
    locks_lost: &'a (dyn Fn() -> Option<String> + Sync),
    before_change: execute::BeforeChange<'a>,
) -> Executor<'a> {
    Executor {
        api: &ready.driver,
        caller_privileged: Privileges::current().is_privileged(),
        is_alive: process::is_alive,
        interrupt: interrupt_for(&request.operation),
        deadline: request.deadline.as_duration().map(|limit| started + limit),
        progress: request.progress,
        locks_lost: Some(locks_lost),
        before_change: Some(before_change),
        already_there_ok: !request.nvidia_errors,
    }
}

/// Only commands that change state (or wait) need to outlive a signal;
/// queries keep the default and die at once.
fn interrupt_for(operation: &Operation) -> Interrupt {
    if operation.changes_state() || matches!(operation, Operation::Wait { .. }) {
        Interrupt::install()
    } else {
        Interrupt::never()
    }
}

/// Loads the driver for process commands, or says why it cannot.
fn load_driver(libcuda: Option<&Path>) -> Result<Driver, Failure> {
    Driver::load_for_checkpoint(libcuda).map_err(|error| diagnose::from_load_error(&error))
}

/// The refusal of a map that cannot be used, in words and an exit status.
pub fn map_failure(error: &MapError) -> Failure {
    let kind = if error.is_syntax() {
        FailureKind::Usage
    } else {
        FailureKind::InvalidMap
    };
    Failure::new(
        kind,
        error.to_string(),
        "write the map as OLD=NEW pairs of GPU UUIDs (`nvidia-smi -L` lists them) or NEW as a GPU index; the driver needs every GPU of this host mapped, each to a distinct GPU",
    )
}

/// The report of a command refused before any process was examined.
pub fn refused(operation: &Operation, pids: &[i32], failure: Failure, started: Instant) -> Report {
    Report {
        processes: pids
            .iter()
            .map(|&pid| ProcessReport {
                failure: Some(failure.clone()),
                ..ProcessReport::new(pid, None)
            })
            .collect(),
        failure: pids.is_empty().then_some(failure),
        layout: Layout::of(operation),
        ..Report::new(operation.name(), started.elapsed())
    }
}

/// The report of a command whose `--map` could not be parsed.
pub fn refused_map(operation: &Operation, pids: &[i32], error: &MapError) -> Report {
    refused(operation, pids, map_failure(error), Instant::now())
}
