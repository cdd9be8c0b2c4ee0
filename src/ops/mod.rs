//! Running one process command, for either grammar: validate the map,
//! select targets (PIDs, process trees, cgroups, the whole host), check
//! them, load the driver, resolve the map and execute. Returns a report;
//! never prints.

pub mod diagnose;
pub mod execute;
pub mod interrupt;
pub mod migration;
pub mod pidlock;
pub mod plan;
pub mod preflight;
pub mod report;
pub mod timeout;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::driver::{code, CallError, CheckpointApi, Driver};
use crate::gpu::inventory::Inventory;
use crate::gpu::map::{self as gpu, Completed, GpuPair, MapEntry, MapError};
use crate::gpu::record::{self, Record};
use crate::ops::execute::{concurrently, Executor, StepDone};
use crate::ops::interrupt::Interrupt;
use crate::ops::plan::Operation;
use crate::ops::report::{ProcessReport, Report};
use crate::ops::timeout::Timeout;
use crate::targets::discover::{self, Mapped};
use crate::targets::process::{self, Privileges, Target, TargetError};
use diagnose::{Failure, FailureKind};

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
    fn describe(&self) -> String {
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
            places.push(format!("PIDs {:?}", self.candidates));
        }
        places.join(", ")
    }
}

/// One process command, validated by its front end (modern or compatible).
pub struct Request<'a> {
    pub libcuda: Option<&'a Path>,
    pub pids: Vec<i32>,
    pub selectors: Selectors,
    /// `--yes`: the user confirmed acting on every CUDA process (`--all`).
    pub confirmed: bool,
    pub operation: Operation,
    /// `--map` / `--device-map` values as typed.
    pub map: &'a [String],
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
            map: &[],
            thread_ids: ThreadIds::Refuse,
            deadline: Timeout::NONE,
            progress: None,
            record_dir: None,
            force: false,
            verify: false,
        }
    }
}

/// Checks a target, resolving a thread id to its process when asked to.
fn check(pid: i32, privileges: &Privileges, thread_ids: ThreadIds) -> Result<Target, Failure> {
    match process::check_target(pid, privileges) {
        Err(TargetError::Thread { tgid, .. }) if thread_ids == ThreadIds::ActOnProcess => {
            tracing::debug!(
                tid = pid,
                pid = tgid,
                "acting on the process of a thread id"
            );
            process::check_target(tgid, privileges)
        }
        other => other,
    }
    .map_err(|e| diagnose::from_target_error(&e))
}

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

/// A report where the command failed before any process was examined.
fn refused(command: &'static str, pids: &[i32], failure: Failure, started: Instant) -> Report {
    Report {
        processes: pids
            .iter()
            .map(|&pid| ProcessReport {
                failure: Some(failure.clone()),
                ..ProcessReport::new(pid, None)
            })
            .collect(),
        failure: pids.is_empty().then_some(failure),
        ..Report::new(command, started.elapsed())
    }
}

/// The CUDA processes the selectors pick, with what each has mapped.
/// Candidates come from /proc (libcuda mapped); the driver's read-only
/// GetState confirms them. Processes that never initialised CUDA, or that
/// vanish meanwhile, are skipped.
fn select(selectors: &Selectors, driver: &Driver) -> Result<Vec<(i32, Mapped)>, Failure> {
    let mut pids = Vec::new();
    for &root in &selectors.trees {
        if !process::is_alive(root) {
            let error = TargetError::NoSuchProcess { pid: root };
            return Err(Failure::new(
                FailureKind::NoSuchProcess,
                format!("--tree {root}: {error}"),
                error.hint(),
            ));
        }
        pids.extend(discover::tree(root));
    }
    for cgroup in &selectors.cgroups {
        let dir = discover::resolve_cgroup(cgroup).map_err(|why| {
            Failure::new(
                FailureKind::Usage,
                format!("--cgroup: {why}"),
                "give a cgroup directory, e.g. /sys/fs/cgroup/kubepods.slice/...",
            )
        })?;
        let members = discover::cgroup_pids(&dir).map_err(|e| {
            Failure::new(
                FailureKind::ProcUnreadable,
                format!("could not read cgroup {}: {e}", dir.display()),
                "",
            )
        })?;
        pids.extend(members);
    }
    pids.extend(&selectors.candidates);
    if selectors.all {
        pids = discover::all_pids();
    }
    pids.sort_unstable();
    pids.dedup();
    let driver_path = driver.path();
    let driver_file = driver_path.file_name().and_then(|n| n.to_str());
    let candidates = discover::cuda_candidates(&pids, driver_file);
    // A stopped candidate is kept unconfirmed: asking the driver would wait
    // until it runs. The checks after selection report it as stopped.
    let confirmed = concurrently(&candidates, |(pid, _)| {
        cannot_answer(driver, *pid)
            || !matches!(
                driver.get_state(*pid),
                Err(CallError::Cuda { error, .. }) if error.is(code::NOT_INITIALIZED) || error.is(code::OPERATING_SYSTEM)
            )
    });
    Ok(candidates
        .into_iter()
        .zip(confirmed)
        .filter(|(_, confirmed)| *confirmed)
        .map(|(candidate, _)| candidate)
        .collect())
}

/// Whether the driver would wait instead of answering for `pid`: its main
/// thread and its restore thread are stopped (measured on driver 580:
/// GetState blocks on a SIGSTOPped process; GetRestoreThreadId does not).
fn cannot_answer(driver: &Driver, pid: i32) -> bool {
    let main_stopped = process::read_status(pid)
        .ok()
        .flatten()
        .is_some_and(|status| process::is_stopped_state(status.state));
    main_stopped && restore_thread_stopped(driver, pid)
}

/// Whether the restore thread of a process is stopped (or cannot be told).
fn restore_thread_stopped(driver: &Driver, pid: i32) -> bool {
    driver
        .restore_thread_id(pid)
        .map_or(true, |tid| process::thread_stopped(pid, tid) != Some(false))
}

/// Whether a failure only says the process is no longer there to act on
/// (exited, a zombie, or no longer a CUDA process).
fn is_gone(failure: Option<&Failure>) -> bool {
    failure.is_some_and(|f| {
        matches!(
            f.kind,
            FailureKind::NoSuchProcess | FailureKind::NotCudaProcess
        )
    })
}

/// Whether a command is one where NCCL is known to cause trouble.
fn warns_about_nccl(operation: &Operation) -> bool {
    matches!(
        operation,
        Operation::Checkpoint
            | Operation::Restore { .. }
            | Operation::Suspend { .. }
            | Operation::Resume { .. }
            | Operation::Toggle { .. }
    )
}

const NCCL_WARNING: &str =
    "NCCL is loaded: multi-process NCCL jobs are a known source of hangs and failed restores; suspend every rank together, and test a round trip first";

/// The GPU map a restore passes to the driver, and remarks on it.
struct PlannedMap {
    /// `None`: pass no map.
    pairs: Option<Vec<GpuPair>>,
    remarks: Vec<String>,
}

/// Turns `--map` (or `--map auto`) into the map the driver gets: indexes
/// resolved against this host's GPUs, every NEW checked to be here, a
/// partial map completed into the bijection the driver needs.
fn plan_map(
    auto: bool,
    entries: &[MapEntry],
    records: &HashMap<i32, Record>,
    targets: &[Target],
    host_gpus: &Inventory<'_>,
) -> Result<PlannedMap, Failure> {
    let mut remarks = Vec::new();
    if auto {
        let pairs = migration::auto_map(records, targets, host_gpus)?;
        if pairs.is_empty() {
            remarks.push(
                "--map auto: the GPUs are the ones recorded at checkpoint; nothing moves"
                    .to_string(),
            );
            return Ok(PlannedMap {
                pairs: None,
                remarks,
            });
        }
        remarks.push(format!("--map auto: {}", gpu::format_map(&pairs)));
        return Ok(PlannedMap {
            pairs: Some(pairs),
            remarks,
        });
    }
    if entries.is_empty() {
        return Ok(PlannedMap {
            pairs: None,
            remarks,
        });
    }
    let local_gpus = match host_gpus.for_map() {
        Ok(listing) => {
            tracing::debug!(source = ?listing.source, count = listing.gpus.len(), "listed the GPUs of this host");
            Some(listing.uuids())
        }
        // UUID-only maps can still go to the driver, which judges them;
        // indexes cannot be resolved.
        Err(unlisted) if !gpu::uses_indexes(entries) => {
            let reason = unlisted.cuda.unwrap_or_default();
            tracing::debug!(%reason, "cannot list GPUs; the driver will judge the map");
            None
        }
        Err(unlisted) => {
            let reason = unlisted.cuda.unwrap_or_default();
            return Err(map_failure(&MapError::DevicesUnavailable { reason }));
        }
    };
    let pairs = gpu::resolve_map(entries, local_gpus.as_deref()).map_err(|e| map_failure(&e))?;
    // The driver takes only a bijection over every GPU of the host:
    // complete what was given, or explain what is missing.
    let pairs = match local_gpus
        .as_deref()
        .map(|local| gpu::complete_map(&pairs, local))
    {
        None => pairs,
        Some(Ok(Completed::NothingMoves)) => {
            remarks
                .push("the map moves no GPU, so the processes are restored in place".to_string());
            Vec::new()
        }
        Some(Ok(Completed::Pairs { pairs, added })) => {
            if added {
                remarks.push(format!(
                    "completed the map to cover every GPU of this host, as the driver needs: {}",
                    gpu::format_map(&pairs)
                ));
            }
            pairs
        }
        Some(Err(error)) => return Err(map_failure(&error)),
    };
    Ok(PlannedMap {
        pairs: Some(pairs),
        remarks,
    })
}

/// Validates, selects and checks targets, loads the driver and runs one
/// process command.
pub fn run_process_command(request: Request<'_>) -> Report {
    let started = Instant::now();
    let Request {
        libcuda,
        pids: named,
        selectors,
        confirmed,
        operation,
        map: map_args,
        thread_ids,
        deadline,
        progress,
        record_dir,
        force,
        verify,
    } = request;
    let auto_map = matches!(map_args, [only] if only.trim().eq_ignore_ascii_case("auto"));
    let command = operation.name();

    let entries = match gpu::parse_map(if auto_map { &[] } else { map_args }) {
        Ok(entries) => entries,
        Err(error) => return refused(command, &named, map_failure(&error), started),
    };
    if selectors.all && operation.changes_state() && !confirmed {
        let failure = Failure::new(
            FailureKind::Usage,
            format!("--all would {command} every CUDA process on this host"),
            "add --yes to confirm, or name the processes (--tree, --cgroup, PIDs)",
        );
        return refused(command, &named, failure, started);
    }

    // The driver is needed early only to confirm discovered processes.
    let mut driver = None;
    let mut mapped: HashMap<i32, Mapped> = HashMap::new();
    let mut warnings = Vec::new();
    let mut pids = named.clone();
    if !selectors.is_empty() {
        let loaded = match Driver::load_for_checkpoint(libcuda) {
            Ok(loaded) => loaded,
            Err(error) => {
                return refused(command, &named, diagnose::from_load_error(&error), started)
            }
        };
        match select(&selectors, &loaded) {
            Ok(found) => {
                if found.is_empty() {
                    warnings.push(format!("no CUDA process found in {}", selectors.describe()));
                }
                for (pid, map) in found {
                    mapped.insert(pid, map);
                    if !pids.contains(&pid) {
                        pids.push(pid);
                    }
                }
            }
            Err(failure) => return refused(command, &named, failure, started),
        }
        driver = Some(loaded);
    }

    let privileges = Privileges::current();
    tracing::debug!(?pids, command, ?privileges, "checking targets");
    // A process that was found, not named, and is gone by now simply drops
    // out of the selection: on a busy host processes come and go.
    let discovered = |pid: i32| !named.contains(&pid);
    let (pids, checked): (Vec<i32>, Vec<Result<Target, Failure>>) = pids
        .iter()
        .map(|&pid| (pid, check(pid, &privileges, thread_ids)))
        .filter(|(pid, check)| !(discovered(*pid) && is_gone(check.as_ref().err())))
        .unzip();
    let valid: Vec<Target> = checked
        .iter()
        .filter_map(|c| c.as_ref().ok().cloned())
        .collect();
    let first_bad = checked
        .iter()
        .zip(&pids)
        .find(|(c, _)| c.is_err())
        .map(|(_, pid)| *pid);

    // Named PIDs were not scanned during selection; scan them where NCCL
    // matters (one read of /proc/PID/maps each, off the fast paths).
    let nccl_matters = warns_about_nccl(&operation);
    if nccl_matters {
        for target in &valid {
            if let Some(map) = discover::mapped(target.pid, None) {
                mapped.entry(target.pid).or_insert(map);
            }
        }
    }

    // `ran` holds the reports of the targets that ran (or were answered for
    // without running); every other valid target gets `not_run`, if any.
    let assemble = |ran: Vec<ProcessReport>, not_run: Option<Failure>| {
        let mut ran: HashMap<i32, ProcessReport> = ran.into_iter().map(|r| (r.pid, r)).collect();
        let processes = checked
            .iter()
            .zip(&pids)
            .map(|(check, &pid)| {
                let mut report = match check {
                    Err(failure) => ProcessReport {
                        failure: Some(failure.clone()),
                        ..ProcessReport::new(pid, None)
                    },
                    Ok(target) => match (ran.remove(&target.pid), &not_run) {
                        (Some(report), _) => report,
                        (None, Some(failure)) => ProcessReport {
                            failure: Some(failure.clone()),
                            ..ProcessReport::new(target.pid, Some(target.name.clone()))
                        },
                        (None, None) => ProcessReport::new(target.pid, Some(target.name.clone())),
                    },
                };
                if let Some(map) = mapped.get(&report.pid) {
                    report.nccl = Some(map.nccl);
                    if map.nccl && nccl_matters {
                        report.warnings.push(NCCL_WARNING.to_string());
                    }
                }
                report
            })
            .collect();
        Report {
            processes,
            warnings: warnings.clone(),
            ..Report::new(command, started.elapsed())
        }
    };
    // Queries drop found processes that exited (or stopped being CUDA
    // processes) while they ran; a group that changes state does not, as
    // every member's fate must be reported.
    let changes_state = operation.changes_state();
    let assemble = |ran: Vec<ProcessReport>, not_run: Option<Failure>| {
        let mut report = assemble(ran, not_run);
        if !changes_state {
            report
                .processes
                .retain(|p| !(discovered(p.pid) && is_gone(p.failure.as_ref())));
        }
        report
    };

    // A group that changes state moves together: one bad target stops all.
    if let (Some(bad), true) = (first_bad, operation.changes_state()) {
        let skipped = Failure::new(
            FailureKind::NotAttempted,
            format!("not attempted: PID {bad} failed its checks"),
            "fix or drop that PID; a group changes state together or not at all",
        );
        return assemble(vec![], Some(skipped));
    }
    if valid.is_empty() {
        return assemble(vec![], None);
    }

    let driver = match driver {
        Some(driver) => driver,
        None => match Driver::load_for_checkpoint(libcuda) {
            Ok(driver) => driver,
            Err(error) => return assemble(vec![], Some(diagnose::from_load_error(&error))),
        },
    };

    // A stopped process whose restore thread is stopped too cannot be asked
    // anything: the driver would wait until it runs. Refuse it up front.
    // (CRIU's plugin resumes just the restore thread before each call,
    // which passes this check.)
    // The restore-thread query itself never waits (CRIU's plugin asks it of
    // frozen processes), so `restore-tid` is always answered.
    let asks_only_restore_tid = matches!(operation, Operation::RestoreTid);
    let (blocked, valid): (Vec<Target>, Vec<Target>) = valid.into_iter().partition(|t| {
        t.stopped && !asks_only_restore_tid && restore_thread_stopped(&driver, t.pid)
    });
    let blocked_reports: Vec<ProcessReport> = blocked
        .iter()
        .map(|t| {
            let mut report = ProcessReport::new(t.pid, Some(t.name.clone()));
            report.stopped = true;
            if discovered(t.pid) && !changes_state {
                // A listing shows it, rather than failing over it.
                report.note = Some("stopped: its CUDA state can be read once it runs".to_string());
            } else {
                report.failure = Some(diagnose::process_stopped(t.pid, Some(&t.name)));
            }
            report
        })
        .collect();
    if let (Some(first), true) = (blocked.first(), changes_state) {
        let skipped = Failure::new(
            FailureKind::NotAttempted,
            format!("not attempted: PID {} is stopped", first.pid),
            "continue the stopped process first; a group changes state together or not at all",
        );
        return assemble(blocked_reports, Some(skipped));
    }

    let mut map_remarks = Vec::new();
    let records_dir = record::dir(record_dir);
    let host_gpus = Inventory::with_driver(&driver);
    let restores = matches!(
        operation,
        Operation::Restore { .. } | Operation::Resume { .. } | Operation::Toggle { .. }
    );
    let checkpoints = matches!(
        operation,
        Operation::Checkpoint | Operation::Suspend { .. } | Operation::Toggle { .. }
    );
    let records: HashMap<i32, Record> = if restores {
        valid
            .iter()
            .filter_map(|t| record::read(&records_dir, t.pid, &t.name).map(|r| (t.pid, r)))
            .collect()
    } else {
        HashMap::new()
    };
    let planned = match plan_map(auto_map, &entries, &records, &valid, &host_gpus) {
        Ok(planned) => planned,
        Err(failure) => return assemble(vec![], Some(failure)),
    };
    map_remarks.extend(planned.remarks);
    let map_used = planned.pairs;
    let operation = match &map_used {
        Some(pairs) => operation.with_map(pairs.clone()),
        None => operation,
    };

    // One cudackpt at a time per process: held until this function returns.
    let _locks = if changes_state {
        let pids: Vec<i32> = valid.iter().map(|t| t.pid).collect();
        match pidlock::acquire(&pids) {
            Ok(held) => Some(held),
            Err(busy) => {
                let holder = busy.holder.map_or("another cudackpt".to_string(), |pid| {
                    format!("cudackpt PID {pid}")
                });
                let mut reports = blocked_reports;
                reports.push(ProcessReport {
                    failure: Some(Failure::new(
                        FailureKind::InUse,
                        format!("PID {} is being changed by {holder} right now", busy.pid),
                        "wait for that command to finish, then check with `cudackpt state`",
                    )),
                    ..ProcessReport::new(
                        busy.pid,
                        valid
                            .iter()
                            .find(|t| t.pid == busy.pid)
                            .map(|t| t.name.clone()),
                    )
                });
                let skipped = Failure::new(
                    FailureKind::NotAttempted,
                    format!(
                        "not attempted: PID {} is in use by another cudackpt",
                        busy.pid
                    ),
                    "a group changes state together or not at all",
                );
                return assemble(reports, Some(skipped));
            }
        }
    } else {
        None
    };

    // Before a restore: will the target GPUs hold what the processes had?
    if restores && !force {
        // A toggle or resume of a process that is running has nothing to
        // restore; without its record there is nothing to say about it.
        let to_check: Vec<Target> = valid
            .iter()
            .filter(|t| {
                matches!(operation, Operation::Restore { .. }) || records.contains_key(&t.pid)
            })
            .cloned()
            .collect();
        let map = map_used.clone().unwrap_or_default();
        match migration::check_memory(&records, &to_check, &map, &host_gpus) {
            Ok(unchecked) => map_remarks.extend(unchecked),
            Err(failure) => return assemble(vec![], Some(failure)),
        }
    }
    // Before a checkpoint: what the record will hold.
    let snapshot = checkpoints.then(|| migration::snapshot(&driver, &host_gpus));

    let executor = Executor {
        api: &driver,
        caller_privileged: privileges.is_privileged(),
        is_alive: process::is_alive,
        // Only commands that change state (or wait) need to outlive a
        // signal; queries keep the default and die at once.
        interrupt: if operation.changes_state() || matches!(operation, Operation::Wait { .. }) {
            Interrupt::install()
        } else {
            Interrupt::never()
        },
        deadline: deadline.as_duration().map(|limit| started + limit),
        progress,
    };
    let mut reports = executor.run(&operation, &valid);
    if verify {
        migration::verify(
            &mut reports,
            &records,
            map_used.as_deref().unwrap_or_default(),
        );
    }
    if let Some(snapshot) = &snapshot {
        map_remarks.extend(migration::write_records(
            &records_dir,
            snapshot,
            &valid,
            &mut reports,
        ));
    }
    if restores {
        migration::clear_records(&records_dir, &reports);
    }
    reports.extend(blocked_reports);
    let mut report = assemble(reports, None);
    report.warnings.extend(map_remarks);
    report.map = map_used;
    report
}
