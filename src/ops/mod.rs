//! The process pipeline, for every grammar (modern, NVIDIA's, the CRIU
//! hook): one validated [`Request`] in, one [`CommandReport`] out; nothing here
//! prints. [`run`] reads as its stages: select → check → the pre-flights →
//! choose the map → lock → drain → execute → finish ([`stages`]
//! numbers them).
//!
//! The rooms, on floors: each uses only rooms below it (the layout test
//! holds them to it), and this file, the pipeline, is the top.
//! - [`stages`]: the pipeline's own stages, in run order, the drain's among
//!   them (`stages/drain.rs`: the one file that adapts `crate::drain` to a
//!   command);
//! - [`preflight`]: what is refused before any change (a checkpoint the
//!   driver could not restore, host memory, GPU memory for a restore);
//! - [`journal`]: what outlives a command so no crash leaves a process
//!   behind (the per-PID lock files, the intent record, the processes left
//!   drained, checkpoint records): storage only;
//! - [`execute`]: the driver calls, phased and concurrent, with rollback,
//!   and the signals that govern them;
//! - [`diagnose`]: failures in words.
//!
//! Every room speaks the crate's `vocabulary` (a floor below this one).
//! May use: `vocabulary`, `drain`, `gpu`, `targets`, `driver`, `exit`,
//! `files`, `environment`.

pub mod diagnose;
pub mod doors;
pub mod execute;
pub mod journal;
pub mod preflight;
pub mod stages;

pub use crate::vocabulary::request::{
    Progress, ProgressSink, Request, Selectors, StepDone, ThreadIds,
};
pub use crate::vocabulary::stop::Stop;

use std::time::Instant;

use crate::driver::GpuPair;
use crate::gpu::inventory::Inventory;
use crate::gpu::map::MapError;
use crate::targets::process::{self, Privileges};
use crate::vocabulary::failure::Fault;
use crate::vocabulary::plan::Operation;
use crate::vocabulary::report::{CommandReport, Finished, Layout, TargetReport};
use execute::interrupt::Interrupt;
use execute::Executor;
use journal::{intent, pidlock, records};
use stages::{check, choose_map, dry_run, finish, lock, postmortem, select};

/// Runs one process command through every stage.
pub fn run(request: Request<'_>) -> CommandReport {
    let started = Instant::now();
    if asks_nvml(&request) {
        // Its start overlaps the selection and the checks.
        crate::gpu::nvml::open_in_background();
    }
    let report = match select::select(&request) {
        Ok(selection) => {
            let mut checked = check::check(&request, selection);
            // The command's one drain, passed down to every stage that asks it.
            let drain = stages::drain::Drain::of(&request);
            let outcome = after_checks(&request, &drain, &mut checked, started);
            checked.assemble(outcome, started)
        }
        Err(failure) => refused(&request.operation, &request.pids, failure, started),
    };
    // A command that ended before asking NVML does not exit in the middle
    // of its start.
    crate::gpu::nvml::settle();
    CommandReport {
        prediction: request.dry_run,
        ..report
    }
}

/// Whether this command will likely ask NVML: a checkpoint weighs its
/// targets' GPU memory unless forced, a drain weighs what its ranks
/// release, and a checkpoint that is not a dry run records what they held.
fn asks_nvml(request: &Request<'_>) -> bool {
    let forced_dry_run = request.force && request.dry_run && !request.drain.before_lock;
    request.operation.checkpoints() && !forced_dry_run
}

/// The stages after the checks, each of which may stop the command.
fn after_checks(
    request: &Request<'_>,
    drain: &stages::drain::Drain<'_>,
    checked: &mut check::Checked,
    started: Instant,
) -> Result<Finished, Stop> {
    let mut ready = check::ready(request, checked)?;
    let left = leave_out_pools_the_drain_shuts(request, &mut ready);
    let passed = match pass_preflights(request, drain, &ready) {
        Ok(passed) => passed,
        Err(stop) => {
            if request.dry_run {
                checked.read_states(&ready.driver, &ready.targets);
            }
            return Err(stop);
        }
    };
    if let (Some(progress), false) = (request.progress, request.dry_run) {
        // Said before the work, where a person or a scheduler waits for it.
        for remark in &passed.remarks {
            progress(&Progress::Remark(remark));
        }
    }
    let mut finished = if request.dry_run {
        let mut reports = dry_run::reports(request, &ready, passed.map());
        drain.predict(&ready, &mut reports);
        let mut remarks = passed.chosen.remarks;
        remarks.extend(passed.remarks);
        Finished {
            reports,
            remarks,
            map: passed.chosen.pairs,
        }
    } else {
        execute_and_finish(request, drain, &ready, passed, started)?
    };
    finished.reports.extend(left.iter().map(|pool| TargetReport {
        note: Some("left out: torch.compile's compile-worker pool, which the drain for this dump shuts down".to_string()),
        ..TargetReport::new(pool.pid, Some(pool.name.clone()))
    }));
    Ok(finished)
}

/// Takes out of the group each compile-worker pool that the drain shuts
/// down for this dump (it is gone before the first lock; the dumpable
/// pre-flight says so, and looks again once the drain is done), and
/// returns them.
fn leave_out_pools_the_drain_shuts(
    request: &Request<'_>,
    ready: &mut crate::vocabulary::ready::Ready,
) -> Vec<process::Target> {
    let left = preflight::dumpable::pools_left_to_drain(request, &ready.pids());
    let (left, targets) = std::mem::take(&mut ready.targets)
        .into_iter()
        .partition(|t| left.contains(&t.pid));
    ready.targets = targets;
    left
}

/// What the pre-flights and the per-PID locks leave for the driver calls.
struct PreflightsPassed<'d> {
    /// Warnings for ranks let through, by PID.
    rank_warnings: Vec<(i32, String)>,
    /// NVML's per-process use, weighed before any change.
    usage: Option<crate::gpu::nvml::Usage>,
    host: Inventory<'d>,
    records: records::Records,
    chosen: choose_map::Chosen,
    /// Held until the command ends.
    locks: pidlock::PidLocks,
    remarks: Vec<String>,
}

impl PreflightsPassed<'_> {
    fn map(&self) -> &[GpuPair] {
        self.chosen.pairs.as_deref().unwrap_or_default()
    }
}

/// Every pre-flight, the map and the per-PID locks (none for a dry run),
/// in that order: the first refusal stops the command before any change.
fn pass_preflights<'d>(
    request: &Request<'_>,
    drain: &stages::drain::Drain<'_>,
    ready: &'d crate::vocabulary::ready::Ready,
) -> Result<PreflightsPassed<'d>, Stop> {
    if request.operation.changes_state() && !request.recovering {
        lock::not_left_by_a_dead_cudackpt(ready)?;
    }
    let mut remarks = preflight::dumpable::check(request, ready)?;
    let passed = drain.restorability(ready)?;
    let weighed = drain.host_memory(ready)?;
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
        pidlock::PidLocks::none()
    } else {
        lock::lock(
            &request.operation,
            ready,
            request.use_locks,
            request.recovering,
        )?
    };
    remarks.extend(weighed.remarks);
    remarks.extend(preflight::gpu_memory::check_memory(
        request,
        &ready.targets,
        &chosen.records,
        chosen.pairs.as_deref().unwrap_or_default(),
        &host,
    )?);
    Ok(PreflightsPassed {
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
    drain: &stages::drain::Drain<'_>,
    ready: &crate::vocabulary::ready::Ready,
    passed: PreflightsPassed<'_>,
    started: Instant,
) -> Result<Finished, Stop> {
    let PreflightsPassed {
        rank_warnings,
        usage,
        host,
        records,
        chosen,
        locks,
        mut remarks,
    } = passed;
    let locks_lost = || locks.lost();
    // The crash journal: written just before the first state change,
    // removed when this function returns (however the command ended).
    let journal = intent::Journal::default();
    let write_intent =
        |places: &[crate::vocabulary::place::Place]| journal.record(&request.operation, places);
    let executor = executor_for(request, ready, started, &locks_lost, &write_intent);
    let mut underway =
        drain.before_calls(ready, &journal, &executor.interrupt, executor.deadline)?;
    let snapshot = snapshot_to_record(request, ready, &host, usage, &mut underway, &mut remarks);
    let map = chosen.pairs.as_deref().unwrap_or_default();
    let oom_watch = postmortem::watch(&request.operation, &ready.targets, snapshot.as_ref());
    let mut reports = executor.run(&request.operation, &ready.targets, map);
    // From here on a kill leaves the processes where the calls put them:
    // `recover` finishes the record forward (the rebuild), never back.
    // Not for a CRIU dump's group: the dump, not this command, is what
    // a kill interrupts, so `recover` puts the group back.
    if request.record_for_criu().is_none() {
        journal.calls_done();
    }
    remarks.extend(executor.interrupt.unguarded());
    drain.after_calls(
        underway,
        ready,
        &mut reports,
        &journal,
        &executor.interrupt,
        executor.deadline,
    );
    remarks.extend(journal.unwritten());
    if let Some(watch) = &oom_watch {
        watch.diagnose(&mut reports);
    }
    remarks.extend(finish::finish(
        request,
        &mut reports,
        &finish::FinishInputs {
            targets: &ready.targets,
            records: &chosen.records,
            map,
            store: &records,
            snapshot: snapshot.as_ref(),
        },
    ));
    remarks.extend(hand_over_to_criu(request, &journal, &reports));
    for (pid, warning) in rank_warnings {
        if let Some(report) = reports.iter_mut().find(|r| r.pid == pid) {
            report.warnings.push(warning);
        }
    }
    reports.extend(ready.blocked.iter().cloned());
    let (map, map_remarks) = map_used(chosen, &reports);
    remarks.splice(0..0, map_remarks);
    Ok(Finished {
        reports,
        remarks,
        map,
    })
}

/// The map chosen and what was said of it, where a restore used it: a
/// resume of processes already running restored nothing, so neither.
fn map_used(
    chosen: choose_map::Chosen,
    reports: &[TargetReport],
) -> (Option<Vec<GpuPair>>, Vec<String>) {
    if reports
        .iter()
        .any(|r| r.did(crate::vocabulary::plan::DriverCall::Restore))
    {
        (chosen.pairs, chosen.remarks)
    } else {
        (None, Vec::new())
    }
}

/// What a checkpoint's records say of each process (its GPUs, its
/// memory), taken before the calls: on what a drained group kept, where it
/// drained (that is what is copied); nothing for a command that does not
/// checkpoint.
fn snapshot_to_record(
    request: &Request<'_>,
    ready: &crate::vocabulary::ready::Ready,
    host: &Inventory<'_>,
    usage: Option<crate::gpu::nvml::Usage>,
    underway: &mut stages::drain::DrainInProgress,
    remarks: &mut Vec<String>,
) -> Option<crate::vocabulary::snapshot::Snapshot> {
    let usage = match underway.weighed() {
        Some(weighed) => {
            remarks.extend(weighed.remarks);
            weighed.usage.or(usage)
        }
        None => usage,
    };
    request
        .operation
        .checkpoints()
        .then(|| finish::snapshot(&ready.driver, host, usage, &ready.pids()))
}

/// A CRIU dump's group, suspended or locked: handed over to the CRIU (the
/// watcher or the plugin resumes it if the dump fails, `recover` if CRIU
/// dies; the intent record says so). Remarks on what could not be written.
fn hand_over_to_criu(
    request: &Request<'_>,
    journal: &intent::Journal,
    reports: &[crate::vocabulary::report::TargetReport],
) -> Vec<String> {
    let Some(criu) = request.record_for_criu() else {
        return Vec::new();
    };
    // What CRIU's dump now holds: checkpointed (the action script's
    // pre-dump, the plugin's checkpoint hook) or locked (the plugin's
    // first hook, which checkpoints once CRIU has frozen the tree).
    let moved: Vec<i32> = reports
        .iter()
        .filter(|r| {
            r.ok()
                && (r.did(crate::vocabulary::plan::DriverCall::Checkpoint)
                    || r.did(crate::vocabulary::plan::DriverCall::Lock))
        })
        .map(|r| r.pid)
        .collect();
    journal.hand_over(criu, &moved);
    journal.unwritten().into_iter().collect()
}

/// The executor of a request: its driver, interrupts, deadline, progress,
/// the lock check between phases and the journal before the first change.
fn executor_for<'a>(
    request: &'a Request<'a>,
    ready: &'a crate::vocabulary::ready::Ready,
    started: Instant,
    locks_lost: &'a (dyn Fn() -> Option<String> + Sync),
    before_change: execute::BeforeChange<'a>,
) -> Executor<'a> {
    Executor {
        api: &ready.driver,
        caller_privileged: Privileges::current().is_privileged(),
        is_alive: process::is_alive,
        interrupt: interrupt_for(request),
        deadline: request.deadline.as_duration().map(|limit| started + limit),
        progress: request.progress,
        locks_lost: Some(locks_lost),
        before_change: Some(before_change),
        already_there_ok: !request.nvidia_errors,
        journal_every_change: request.record_for_criu().is_some(),
    }
}

/// Only commands that change state (or wait) need to outlive a signal;
/// queries, and dry runs that change nothing (a dump's pre-dump checks,
/// whose caller catches signals of its own while CRIU runs), keep the
/// default and die at once. Inside CRIU (the plugin) CRIU's handlers stay.
fn interrupt_for(request: &Request<'_>) -> Interrupt {
    let operation = &request.operation;
    // A recover catches signals for the whole command itself: its groups
    // finish their calls and it stops after them, saying what it did.
    if request.dry_run || request.recovering || request.embedded {
        return Interrupt::never();
    }
    if operation.changes_state() || matches!(operation, Operation::Wait { .. }) {
        Interrupt::install()
    } else {
        Interrupt::never()
    }
}

/// The report of a command refused before any process was examined.
pub fn refused(
    operation: &Operation,
    pids: &[i32],
    failure: Fault,
    started: Instant,
) -> CommandReport {
    CommandReport {
        processes: pids
            .iter()
            .map(|&pid| TargetReport {
                failure: Some(failure.clone()),
                ..TargetReport::new(pid, None)
            })
            .collect(),
        failure: pids.is_empty().then_some(failure),
        layout: Layout::of(operation),
        ..CommandReport::new(operation.name(), started.elapsed())
    }
}

/// The report of a command whose `--map` could not be parsed.
pub fn refused_map(operation: &Operation, pids: &[i32], error: &MapError) -> CommandReport {
    refused(
        operation,
        pids,
        diagnose::map_failure(error),
        Instant::now(),
    )
}
