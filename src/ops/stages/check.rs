//! Stage 2, check: every selected PID is checked (alive, a process and not
//! a thread, ours to act on); a group that changes state goes on only when
//! all pass. Then the driver is loaded, and a stopped target whose restore
//! thread is stopped too is set aside: the driver would wait until it runs.
//!
//! The checked targets also assemble the report, once, at the end.

use std::collections::HashMap;
use std::time::Instant;

use crate::driver::{Driver, ProcessState};
use crate::ops::diagnose;
use crate::ops::execute::restore_thread_stopped;
use crate::ops::stages::select::{load_driver, Selection};
use crate::targets::discover::{self, Mapped};
use crate::targets::process::{self, Privileges, Target, TargetError};
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::Finished;
use crate::vocabulary::report::{CommandReport, Layout, TargetReport};
use crate::vocabulary::request::{Request, ThreadIds};
use crate::vocabulary::stop::Stop;

/// The targets after their checks, in selection order.
pub struct Checked {
    command: &'static str,
    layout: Layout,
    named: Vec<i32>,
    pids: Vec<i32>,
    results: Vec<Result<Target, Fault>>,
    mapped: HashMap<i32, Mapped>,
    /// States known from selection, for processes nothing else reached.
    known_states: HashMap<i32, ProcessState>,
    warnings: Vec<String>,
    changes_state: bool,
    /// Loaded during selection, taken when the targets are ready.
    driver: Option<Driver>,
}

/// Checks a target, resolving a thread id to its process when asked to.
fn check_one(
    pid: i32,
    privileges: &Privileges,
    thread_ids: ThreadIds,
    hold: bool,
) -> Result<Target, Fault> {
    match process::check_target(pid, privileges, hold) {
        Err(TargetError::Thread { tgid, .. }) if thread_ids == ThreadIds::ActOnProcess => {
            tracing::debug!(
                tid = pid,
                pid = tgid,
                "acting on the process of a thread id"
            );
            process::check_target(tgid, privileges, hold)
        }
        other => other,
    }
    .map_err(|e| diagnose::from_target_error(&e))
}

/// Whether a failure only says the process is no longer there to act on
/// (exited, a zombie, or no longer a CUDA process).
fn is_gone(failure: Option<&Fault>) -> bool {
    failure.is_some_and(|f| matches!(f.kind, FaultKind::NoSuchProcess | FaultKind::NotCudaProcess))
}

/// Checks every selected PID. A process that was found, not named, and is
/// gone by now simply drops out: on a busy host processes come and go.
pub fn check(request: &Request<'_>, selection: Selection) -> Checked {
    let privileges = Privileges::current();
    let named = request.pids.clone();
    tracing::debug!(pids = ?selection.pids, command = request.operation.name(), ?privileges, "checking targets");
    let mut warnings = selection.warnings;
    let walked = &selection.walked;
    let (pids, results): (Vec<i32>, Vec<Result<Target, Fault>>) = selection
        .pids
        .iter()
        .map(|&pid| {
            let hold = request.operation.changes_state();
            (pid, check_one(pid, &privileges, request.thread_ids, hold))
        })
        .filter(|(pid, result)| named.contains(pid) || !is_gone(result.as_ref().err()))
        // A tree's member is the process its PID was at the walk only if
        // its parent, read once its pidfd is held, is of the tree.
        .filter(|(pid, result)| {
            let stranger = result
                .as_ref()
                .ok()
                .filter(|_| !named.contains(pid))
                .and_then(|target| walked.stranger(target));
            stranger.map(|why| warnings.push(why)).is_none()
        })
        .unzip();
    let mut mapped = selection.mapped;
    // Named PIDs were not scanned during selection; scan them where NCCL
    // matters (one read of /proc/PID/maps each, off the fast paths).
    if request.operation.moves_memory() {
        for target in results.iter().flatten() {
            if let Some(map) = discover::mapped(target.pid, None) {
                mapped.entry(target.pid).or_insert(map);
            }
        }
    }
    Checked {
        command: request.operation.name(),
        layout: Layout::of(&request.operation),
        named,
        pids,
        results,
        mapped,
        known_states: selection.known_states,
        warnings,
        changes_state: request.operation.changes_state(),
        driver: selection.driver,
    }
}

/// The targets ready to act on, or why the command stops here: a group
/// that changes state moves together, so one bad or stopped target stops
/// it before any driver call.
pub fn ready(request: &Request<'_>, checked: &mut Checked) -> Result<Ready, Stop> {
    let first_bad = checked
        .results
        .iter()
        .zip(&checked.pids)
        .find(|(result, _)| result.is_err())
        .map(|(_, pid)| *pid);
    if let (Some(bad), true) = (first_bad, checked.changes_state) {
        if request.dry_run {
            if let Ok(driver) = load_driver(request.libcuda) {
                let valid: Vec<Target> = checked.results.iter().flatten().cloned().collect();
                checked.read_states(&driver, &valid);
            }
        }
        return Err(Stop::not_run(Fault::new(
            FaultKind::NotAttempted,
            format!("not attempted: PID {bad} failed its checks"),
            "fix or drop that PID; a group changes state together or not at all",
        )));
    }
    let valid: Vec<Target> = checked.results.iter().flatten().cloned().collect();
    if valid.is_empty() {
        return Err(Stop::Declined {
            refused: Vec::new(),
            others: None,
        });
    }
    let driver = match checked.driver.take() {
        Some(driver) => driver,
        None => load_driver(request.libcuda).map_err(Stop::not_run)?,
    };
    let (blocked, targets) = set_aside_stopped(request, checked, &driver, valid);
    if let (Some(first), true) = (blocked.first(), checked.changes_state) {
        let pid = first.pid;
        return Err(Stop::Declined {
            refused: blocked,
            others: Some(Fault::new(
                FaultKind::NotAttempted,
                format!("not attempted: PID {pid} is stopped"),
                "continue the stopped process first; a group changes state together or not at all",
            )),
        });
    }
    Ok(Ready {
        driver,
        targets,
        blocked,
    })
}

/// A stopped process whose restore thread is stopped too cannot be asked
/// anything: the driver would wait until it runs. (CRIU's plugin resumes
/// just the restore thread before each call, which passes this check.) The
/// restore-thread query itself never waits (CRIU's plugin asks it of frozen
/// processes), so `restore-tid` is always answered. Returns the reports of
/// the stopped ones, and the others.
fn set_aside_stopped(
    request: &Request<'_>,
    checked: &Checked,
    driver: &Driver,
    valid: Vec<Target>,
) -> (Vec<TargetReport>, Vec<Target>) {
    let asks_only_restore_tid = matches!(
        request.operation,
        crate::vocabulary::plan::Operation::RestoreTid
    );
    let (blocked, targets): (Vec<Target>, Vec<Target>) = valid.into_iter().partition(|t| {
        t.stopped && !asks_only_restore_tid && restore_thread_stopped(driver, t.pid)
    });
    let reports = blocked
        .iter()
        .map(|t| {
            let mut report = TargetReport::new(t.pid, Some(t.name.clone()));
            report.stopped = true;
            if checked.discovered(t.pid) && !checked.changes_state {
                // A listing shows it, rather than failing over it.
                report.note = Some("stopped: its CUDA state can be read once it runs".to_string());
            } else {
                report.failure = Some(diagnose::process_stopped(t.pid, Some(&t.name)));
            }
            report
        })
        .collect();
    (reports, targets)
}

impl Checked {
    /// A prediction that stops (a dry run refused) still says where each
    /// process is: asking changes nothing, and a scheduler reading
    /// `unknown` for a process whose state can be known is misled. A
    /// stopped process is not asked (the driver would wait until it runs).
    pub(in crate::ops) fn read_states(&mut self, driver: &Driver, targets: &[Target]) {
        use crate::driver::CheckpointApi;
        for target in targets.iter().filter(|t| !t.stopped) {
            if self.known_states.contains_key(&target.pid) {
                continue;
            }
            if let Ok(state) = driver.get_state(target.pid) {
                self.known_states.insert(target.pid, state);
            }
        }
    }

    /// Found by a selector, not named.
    fn discovered(&self, pid: i32) -> bool {
        !self.named.contains(&pid)
    }

    /// The report, assembled once whatever stage the command ended at.
    pub(in crate::ops) fn assemble(
        &self,
        outcome: Result<Finished, Stop>,
        started: Instant,
    ) -> CommandReport {
        match outcome {
            Ok(finished) => {
                let mut report = self.report(finished.reports, None, started);
                report.warnings.extend(finished.remarks);
                report.map = finished.map;
                report
            }
            // A refusal of the whole group before any process ran (its
            // memory, its map, the driver) is said once, at the top; each
            // process is then just not attempted.
            Err(Stop::Declined {
                refused: ran,
                others: Some(failure),
            }) if ran.is_empty() && failure.kind != FaultKind::NotAttempted => {
                let each = Fault::new(
                    FaultKind::NotAttempted,
                    format!(
                        "not attempted: the command was refused as a whole ({})",
                        failure.kind.as_str()
                    ),
                    "",
                );
                let mut report = self.report(ran, Some(each), started);
                report.failure = Some(failure);
                report
            }
            Err(Stop::Declined {
                refused: ran,
                others: not_run,
            })
            | Err(Stop::Halted { ran, not_run }) => self.report(ran, not_run, started),
        }
    }

    /// `ran` holds the reports of the targets that ran (or were answered
    /// for without running); every other valid target gets `not_run`, if
    /// any. Queries drop found processes that exited (or stopped being CUDA
    /// processes) while they ran; a group that changes state does not, as
    /// every member's fate must be reported.
    fn report(
        &self,
        ran: Vec<TargetReport>,
        not_run: Option<Fault>,
        started: Instant,
    ) -> CommandReport {
        let mut ran: HashMap<i32, TargetReport> = ran.into_iter().map(|r| (r.pid, r)).collect();
        let mut processes: Vec<TargetReport> = self
            .results
            .iter()
            .zip(&self.pids)
            .map(|(result, &pid)| {
                let mut report = match result {
                    Err(failure) => TargetReport {
                        failure: Some(failure.clone()),
                        ..TargetReport::new(pid, None)
                    },
                    Ok(target) => match (ran.remove(&target.pid), &not_run) {
                        (Some(report), _) => report,
                        (None, Some(failure)) => TargetReport {
                            failure: Some(failure.clone()),
                            ..TargetReport::new(target.pid, Some(target.name.clone()))
                        },
                        (None, None) => TargetReport::new(target.pid, Some(target.name.clone())),
                    },
                };
                // Whether NCCL is mapped, as a fact; only a real rank is
                // warned about (`restorable`), not every PyTorch process.
                if let Some(map) = self.mapped.get(&report.pid) {
                    report.nccl = Some(map.nccl);
                }
                // Not reached by the command: its state is the one the
                // driver gave when selection confirmed it, if it did.
                if report.state.is_none() && report.steps.is_empty() {
                    report.state = self.known_states.get(&report.pid).copied();
                }
                report
            })
            .collect();
        if !self.changes_state {
            processes.retain(|p| !(self.discovered(p.pid) && is_gone(p.failure.as_ref())));
        }
        CommandReport {
            processes,
            warnings: self.warnings.clone(),
            layout: self.layout,
            ..CommandReport::new(self.command, started.elapsed())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::plan::Operation;

    fn target(pid: i32) -> Target {
        Target {
            pid,
            name: format!("p{pid}"),
            stopped: false,
            parent: 1,
            identity: Default::default(),
        }
    }

    fn checked(results: Vec<Result<Target, Fault>>, named: Vec<i32>, changes: bool) -> Checked {
        let pids = results
            .iter()
            .map(|r| r.as_ref().map_or(99, |t| t.pid))
            .collect();
        Checked {
            command: "suspend",
            layout: Layout::Change,
            named,
            pids,
            results,
            mapped: HashMap::new(),
            known_states: HashMap::new(),
            warnings: Vec::new(),
            changes_state: changes,
            driver: None,
        }
    }

    fn gone() -> Fault {
        Fault::new(FaultKind::NoSuchProcess, "gone", "")
    }

    #[test]
    fn one_bad_target_stops_a_group_before_the_driver_is_loaded() {
        let request = Request::new(None, Operation::Unlock);
        let mut checked = checked(vec![Ok(target(1)), Err(gone())], vec![1, 99], true);
        let Err(Stop::Declined {
            refused: ran,
            others: not_run,
        }) = ready(&request, &mut checked)
        else {
            panic!("the group must stop")
        };
        assert!(ran.is_empty());
        let not_run = not_run.expect("the others are not attempted");
        assert_eq!(not_run.kind, FaultKind::NotAttempted);
        assert!(not_run.message.contains("PID 99 failed its checks"));
    }

    #[test]
    fn no_valid_target_stops_with_nothing_run() {
        let request = Request::new(None, Operation::State { restore_tid: true });
        let mut checked = checked(vec![Err(gone())], vec![99], false);
        assert!(matches!(
            ready(&request, &mut checked),
            Err(Stop::Declined { others: None, .. })
        ));
    }

    #[test]
    fn a_stop_of_the_whole_group_is_said_once_at_the_top() {
        let checked = checked(vec![Ok(target(1)), Ok(target(2))], vec![1, 2], true);
        let stop = Stop::not_run(Fault::new(FaultKind::InUse, "busy", ""));
        let report = checked.assemble(Err(stop), Instant::now());
        assert_eq!(
            report.failure.as_ref().map(|f| f.kind),
            Some(FaultKind::InUse)
        );
        assert_eq!(report.processes.len(), 2);
        assert!(report
            .processes
            .iter()
            .all(|p| p.failure.as_ref().map(|f| f.kind) == Some(FaultKind::NotAttempted)));
        assert_eq!(report.exit_status(), crate::exit::ExitStatus::InUse);
        assert_eq!(report.command, "suspend");
    }

    #[test]
    fn queries_drop_found_processes_that_went_away_but_keep_named_ones() {
        let mut listing = checked(vec![Ok(target(1)), Err(gone())], vec![], false);
        listing.pids = vec![1, 2];
        let report = listing.report(Vec::new(), None, Instant::now());
        assert_eq!(
            report.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
            [1]
        );
        let mut named = checked(vec![Ok(target(1)), Err(gone())], vec![1, 2], false);
        named.pids = vec![1, 2];
        assert_eq!(
            named
                .report(Vec::new(), None, Instant::now())
                .processes
                .len(),
            2
        );
    }
}
