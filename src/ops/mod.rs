//! The process pipeline, for every grammar (modern, NVIDIA's, the CRIU
//! hook): one validated [`Request`] in, one [`Report`] out; nothing here
//! prints. [`run`] reads as its stages, one file each:
//! select → check → choose the map → lock → pre-flight → execute → finish.
//!
//! Also here: the plan (what each process needs, pure), the executor
//! (concurrent phases, rollback), interrupts, timeouts, the per-PID lock,
//! the diagnosis of failures and the report.
//!
//! May use: `gpu`, `targets`, `driver`, `exit`, `files`.

pub mod check;
pub mod choose_map;
pub mod diagnose;
pub mod execute;
pub mod failpoint;
pub mod finish;
pub mod host_memory;
pub mod intent;
pub mod interrupt;
pub mod lock;
pub mod pidlock;
pub mod plan;
pub mod postmortem;
pub mod preflight;
pub mod records;
pub mod report;
pub mod restorable;
pub mod select;
pub mod timeout;

use std::path::Path;
use std::time::Instant;

use crate::driver::{Driver, GpuPair};
use crate::gpu::inventory::Inventory;
use crate::gpu::map::{MapError, MapSpec};
use crate::targets::process::{self, Privileges};
use diagnose::{Failure, FailureKind};
use execute::{Executor, StepDone};
use interrupt::Interrupt;
use plan::Operation;
use report::{Layout, ProcessReport, Report};
pub use select::Selectors;
use timeout::Timeout;

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
}

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

/// Runs one process command through every stage.
pub fn run(request: Request<'_>) -> Report {
    let started = Instant::now();
    let selection = match select::select(&request) {
        Ok(selection) => selection,
        Err(failure) => return refused(&request.operation, &request.pids, failure, started),
    };
    let mut checked = check::check(&request, selection);
    let outcome = proceed(&request, &mut checked, started);
    checked.assemble(outcome, started)
}

/// The stages after the checks, each of which may stop the command.
fn proceed(
    request: &Request<'_>,
    checked: &mut check::Checked,
    started: Instant,
) -> Result<Finished, Stop> {
    let ready = check::ready(request, checked)?;
    let rank_warnings = restorable::check(request, &ready)?;
    let weighed = host_memory::check(request, &ready)?;
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
            &ready,
            request.use_locks,
            request.recovering,
        )?
    };
    let locks_lost = || locks.lost();
    // The crash journal: written just before the first state change,
    // removed when this function returns (however the command ended).
    let journal = intent::Journal::default();
    let write_intent = |places: &[interrupt::Place]| journal.record(&request.operation, places);
    let mut remarks = weighed.remarks;
    remarks.extend(chosen.remarks);
    remarks.extend(preflight::check_memory(
        request,
        &ready.targets,
        &chosen.records,
        chosen.pairs.as_deref().unwrap_or_default(),
        &host,
    )?);
    if request.dry_run {
        return Ok(Finished {
            reports: dry_run(request, &ready, chosen.pairs.as_deref().unwrap_or_default()),
            remarks,
            map: chosen.pairs,
        });
    }
    let snapshot = request
        .operation
        .checkpoints()
        .then(|| finish::snapshot(&ready.driver, &host, weighed.usage));
    let executor = executor_for(request, &ready, started, &locks_lost, &write_intent);
    let map = chosen.pairs.as_deref().unwrap_or_default();
    let oom_watch = postmortem::watch(&request.operation, &ready.targets, snapshot.as_ref());
    remarks.extend(executor.interrupt.unguarded().map(str::to_string));
    let mut reports = executor.run(&request.operation, &ready.targets, map);
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
    reports.extend(ready.blocked);
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
    }
}

/// What a dry run says of each target once every pre-flight passed: its
/// state now (a read-only query) and the steps the command would take.
fn dry_run(request: &Request<'_>, ready: &check::Ready, map: &[GpuPair]) -> Vec<ProcessReport> {
    use crate::driver::CheckpointApi;
    let states = execute::concurrently(&ready.targets, |t| ready.driver.get_state(t.pid).ok());
    let mut reports: Vec<ProcessReport> = ready
        .targets
        .iter()
        .zip(states)
        .map(|(target, state)| {
            let current = state.filter(|_| request.operation.needs_current_state());
            let what = match plan::plan(&request.operation, current, map) {
                plan::Plan::Steps(steps) => {
                    let names: Vec<&str> = steps.iter().map(|s| s.kind().as_str()).collect();
                    format!(
                        "dry run: every check passed; would {}",
                        names.join(", then ")
                    )
                }
                plan::Plan::AlreadyThere => "dry run: already there; nothing to do".to_string(),
                plan::Plan::Refused(wrong) => {
                    format!(
                        "dry run: would be refused: it is {} ({})",
                        wrong.state, wrong.hint
                    )
                }
            };
            ProcessReport {
                state_before: state,
                state,
                note: Some(what),
                ..ProcessReport::new(target.pid, Some(target.name.clone()))
            }
        })
        .collect();
    reports.extend(ready.blocked.iter().cloned());
    reports
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
