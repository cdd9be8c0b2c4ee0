//! `recover`: puts back the groups of cudackpt runs that died mid-change
//! (SIGKILL, the OOM killer, a second signal): each abandoned intent record
//! names its processes and where each started; every one still alive (the
//! same process) is brought back there through the pipeline, and the
//! record is removed once all are. A record whose driver calls had all
//! returned (a resume killed while its ranks rebuild) is finished forward
//! instead: its processes stay where the calls put them, and those owed a
//! rebuild are asked. `--dry-run` says what it would do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::api::group::Group;
use crate::drain::ledger::DrainNote;
use crate::drain::recovery::{self, Bounds};
use crate::drain::report::DrainVerdict;
use crate::drain::settings::DrainSettings;
use crate::ops::doors::records::{
    self as intent, Claimed, Intent, NotClaimed, RecordedProcess, Start,
};
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::report::CommandReport;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::timeout::Timeout;

/// The command that brings a member back to where it started: one for
/// every state a record can hold.
fn way_back(start: Start) -> Option<Operation> {
    match start {
        Start::Running => Some(Operation::Resume),
        Start::Checkpointed => Some(Operation::Suspend {
            timeout: Timeout::NONE,
        }),
        // A group that started locked is taken back to running: the lock
        // was someone else's, and a dead cudackpt cannot have meant to keep
        // it; say so rather than guess a lock back.
        Start::Locked => Some(Operation::Resume),
        // A failed process has no way back, and an unknown start none that
        // can be trusted: they are named for a person to look at.
        Start::Failed | Start::Unknown => None,
    }
}

/// Sends the members of a drained group what undoes their drain, and
/// records each answer; one still drained at the end fails.
fn rebuild_drained(
    report: &mut CommandReport,
    pids: &[i32],
    note: &DrainNote,
    claimed: &Claimed,
    bounds: &Bounds<'_>,
) {
    let recovered = recovery::recover(pids, note, claimed, bounds);
    report.warnings.extend(recovered.warnings);
    for (pid, drain) in recovered.reports {
        let at = match report.processes.iter().position(|p| p.pid == pid) {
            Some(at) => at,
            None => {
                report.processes.push(TargetReport::new(pid, None));
                report.processes.len() - 1
            }
        };
        let process = &mut report.processes[at];
        if drain.outcome == DrainVerdict::RebuildFailed && process.failure.is_none() {
            process.failure = Some(intent::rebuild_failed(
                pid,
                drain.signal,
                drain.rebuild_error.as_deref(),
                crate::targets::process::is_alive(pid),
            ));
        }
        if drain.outcome == DrainVerdict::NotRebuilt && process.failure.is_none() {
            process.failure = Some(Fault::new(
                FaultKind::DrainTimeout,
                format!(
                    "PID {pid} was asked to rebuild (signal {}) and still showed the drain marker at the end of the wait",
                    drain.signal
                ),
                format!("look at the process; `cudackpt resume {pid}` asks it again"),
            ));
        }
        process.drain = Some(drain);
    }
}

/// The signal that asked a recover to stop, if one came (0: none): set by
/// signal-hook's handler, which stays installed once registered, so a
/// recover always ends with its report.
static STOPPED_BY: OnceLock<Arc<AtomicUsize>> = OnceLock::new();

fn stopped_by() -> &'static Arc<AtomicUsize> {
    STOPPED_BY.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

/// Catches the signals that ask cudackpt to stop, for the whole recover:
/// each only records itself (the last one to come).
fn catch_signals() {
    for (signal, _) in crate::ops::doors::signals::CAUGHT {
        let number = signal.as_raw();
        let _ =
            signal_hook::flag::register_usize(number, Arc::clone(stopped_by()), number as usize);
    }
}

fn stop_asked() -> bool {
    stopped_by().load(Ordering::SeqCst) != 0
}

pub fn run(
    libcuda: Option<&std::path::Path>,
    dry_run: bool,
    longest: std::time::Duration,
) -> CommandReport {
    catch_signals();
    let bounds = Bounds {
        longest,
        stop: &stop_asked,
    };
    let mut report = recover_where(libcuda, dry_run, &|_| true, &bounds);
    if report.processes.is_empty() && report.failure.is_none() && report.warnings.is_empty() {
        // Said, not silent: a person who runs recover wants to know that
        // there was nothing, and a script reads the same in `warnings`.
        report.warnings.push(
            "nothing to recover: no cudackpt that died mid-change left a record here".to_string(),
        );
    }
    if !dry_run && !stop_asked() {
        // Housekeeping: the lock files of processes gone since (a live
        // process keeps its file between commands; see pidlock).
        let pruned = intent::prune_lock_files();
        tracing::debug!(pruned, "removed stale lock files");
        let pruned = crate::drain::left_drained::prune();
        tracing::debug!(pruned, "forgot drained processes gone since");
        let pruned = intent::prune_handoffs();
        tracing::debug!(
            pruned,
            "removed what pre-dumps left for CRIU processes gone since"
        );
    }
    if let Ok(signal @ 1..) = i32::try_from(stopped_by().load(Ordering::SeqCst)) {
        let name = crate::ops::doors::signals::signal_name(signal);
        report.failure = Some(Fault::interrupted(
            signal,
            format!("{name} came: recover stopped waiting once the driver calls in flight had returned; the processes above are where it left them, and the records it did not finish stay"),
            "run `cudackpt recover` again to finish them (`--dry-run` says what is left)",
        ));
    }
    report.command = "recover";
    report
}

/// The records a CRIU pre-dump handed to `criu`, now that it has ended
/// without a post-dump taking them (a failed dump, a killed hook): the
/// hook's watcher runs this. Whether there was one, and what was done.
pub fn run_handed_to(
    libcuda: Option<&std::path::Path>,
    criu: crate::targets::identity::Identity,
) -> (bool, CommandReport) {
    let found = std::sync::atomic::AtomicBool::new(false);
    let bounds = Bounds {
        longest: crate::drain::settings::DEFAULT_DRAIN_TIMEOUT,
        stop: &|| false,
    };
    let report = recover_where(
        libcuda,
        false,
        &|intent: &Intent| {
            let handed = intent.handed_to(criu);
            if handed {
                found.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            handed
        },
        &bounds,
    );
    (found.into_inner(), report)
}

/// Recovers every abandoned record that `wanted`, side by side (up to the
/// pool's bound, each record's waits bounded by `bounds`): a record
/// another user planted waits no longer than the command line allows, and
/// this cudackpt's own records are taken first.
fn recover_where(
    libcuda: Option<&std::path::Path>,
    dry_run: bool,
    wanted: &(dyn Fn(&Intent) -> bool + Sync),
    bounds: &Bounds<'_>,
) -> CommandReport {
    let started = Instant::now();
    let mut report = CommandReport::new("recover", started.elapsed());
    if !dry_run {
        intent::sweep_dead_writers_temporaries();
    }
    let abandoned = match intent::abandoned() {
        Ok(abandoned) => abandoned,
        Err(why) => {
            report.failure = Some(Fault::new(
                FaultKind::UnsafePath,
                format!(
                    "could not look for what a dead cudackpt left: the intent records cannot be read ({why}); nothing was recovered"
                ),
                why.hint(),
            ));
            report.duration = started.elapsed();
            return report;
        }
    };
    let records: Vec<&(std::path::PathBuf, Intent)> = abandoned
        .iter()
        .filter(|(_, intent)| wanted(intent))
        .collect();
    // A bounded pool, the calling thread one of its workers: records by
    // the thousand, or a pids limit that lets no thread start, are still
    // all recovered. This cudackpt's own records come first (`abandoned`
    // lists them first), so other users' cannot hold them up.
    let each: Vec<CommandReport> = crate::ops::doors::concurrently(&records, |record| {
        let path = &record.0;
        let mut one = CommandReport::new("recover", started.elapsed());
        // One recover at a time per record: a second one sends nothing.
        match intent::claim(path) {
            Ok(claimed) => recover_record(libcuda, dry_run, path, claimed, &mut one, bounds),
            Err(NotClaimed::Gone) => {}
            Err(NotClaimed::Busy(holder)) => held_elsewhere(path, holder, &mut one),
        }
        one
    });
    for one in each {
        report.processes.extend(one.processes);
        report.warnings.extend(one.warnings);
        if report.failure.is_none() {
            report.failure = one.failure;
        }
    }
    report.duration = started.elapsed();
    report
}

/// A record another `recover` holds: left alone, and said.
fn held_elsewhere(path: &std::path::Path, holder: Option<i32>, report: &mut CommandReport) {
    let who = holder.map_or("another cudackpt".to_string(), |pid| {
        format!("cudackpt PID {pid}")
    });
    report.warnings.push(format!(
        "{} is being recovered by {who}: this run left its processes alone",
        path.display()
    ));
    report.failure.get_or_insert_with(|| {
        Fault::new(
            FaultKind::InUse,
            format!("{} is being recovered by {who}", path.display()),
            "wait for that recover to finish, then run `cudackpt recover` again to confirm",
        )
    });
}

/// Puts one abandoned record's processes back where they started, then
/// undoes its drain; removes the record once every one is back.
fn recover_record(
    libcuda: Option<&std::path::Path>,
    dry_run: bool,
    path: &std::path::Path,
    claimed: Claimed,
    report: &mut CommandReport,
    bounds: &Bounds<'_>,
) {
    let intent = claimed.intent();
    if intent.calls_done {
        return finish_forward(libcuda, dry_run, path, claimed, report, bounds);
    }
    let alive: Vec<&RecordedProcess> = intent.members.iter().filter(|m| m.still_there()).collect();
    report
        .warnings
        .push(describe_record(path, &intent, alive.len()));
    let mut all_back = put_back(libcuda, dry_run, &alive, report);
    let unknown: Vec<i32> = alive
        .iter()
        .filter(|m| way_back(m.start).is_none())
        .map(|m| m.pid)
        .collect();
    if !unknown.is_empty() {
        all_back = false;
        report.failure = Some(Fault::new(
            FaultKind::RollbackFailed,
            format!(
                "{}: {} {} no known starting state",
                path.display(),
                crate::vocabulary::prose::pids(&unknown),
                if unknown.len() == 1 { "has" } else { "have" }
            ),
            "check them with `cudackpt state` and resume or suspend them by hand",
        ));
    }
    // Sent once, whatever the answers: asking again could start a new
    // drain. A process still drained after it is named, and `cudackpt
    // resume` asks it again (it shows the marker).
    if let (Some(note), false) = (&intent.drain, dry_run) {
        let pids: Vec<i32> = alive.iter().map(|m| m.pid).collect();
        rebuild_drained(report, &pids, note, &claimed, bounds);
    }
    if all_back && !dry_run && !(bounds.stop)() {
        claimed.finish();
    }
}

/// What a record says: who left it, doing what to whom, and how many of
/// its processes are still there (pure).
fn describe_record(path: &std::path::Path, intent: &Intent, alive: usize) -> String {
    let Intent {
        owner_pid, members, ..
    } = intent;
    let left_by = if intent.handed_to_criu {
        format!("handed by a CRIU pre-dump to CRIU PID {owner_pid}, which ended without a post-dump (a failed dump)")
    } else {
        format!("left by cudackpt PID {owner_pid}")
    };
    format!(
        "{} {left_by} ({} {}): {} of its {} processes still there",
        path.display(),
        intent.command,
        members
            .iter()
            .map(|m| format!("{} from {}", m.pid, m.start))
            .collect::<Vec<_>>()
            .join(", "),
        alive,
        members.len()
    )
}

/// Puts each process still there back where it started, one group per
/// starting state; whether every one went back.
fn put_back(
    libcuda: Option<&std::path::Path>,
    dry_run: bool,
    alive: &[&RecordedProcess],
    report: &mut CommandReport,
) -> bool {
    let mut all_back = true;
    for start in [Start::Running, Start::Checkpointed, Start::Locked] {
        let pids: Vec<i32> = alive
            .iter()
            .filter(|m| m.start == start)
            .map(|m| m.pid)
            .collect();
        let Some(operation) = way_back(start).filter(|_| !pids.is_empty()) else {
            continue;
        };
        let sub = Group::new()
            .libcuda_option(libcuda)
            .pids(pids)
            .options(false, false, dry_run)
            .recovering()
            // A drained group is asked to rebuild after, from its record.
            .drain_options(DrainSettings {
                rebuild: false,
                ..DrainSettings::default()
            })
            .run(operation);
        all_back &= sub.ok();
        report.processes.extend(sub.processes);
        report.warnings.extend(sub.warnings);
    }
    all_back
}

/// A record whose driver calls had all returned: nothing is taken back.
/// Members running again are sent what the record says they are owed (a
/// rebuild, a call-off); members the calls left checkpointed or locked
/// after acknowledging a drain stay drained, and are noted so (their
/// resume asks them to rebuild). The record goes, whatever the answers.
fn finish_forward(
    libcuda: Option<&std::path::Path>,
    dry_run: bool,
    path: &std::path::Path,
    claimed: Claimed,
    report: &mut CommandReport,
    bounds: &Bounds<'_>,
) {
    use crate::driver::ProcessState;
    let intent = claimed.intent();
    let alive: Vec<i32> = intent
        .members
        .iter()
        .filter(|m| m.still_there())
        .map(|m| m.pid)
        .collect();
    report.warnings.push(format!(
        "{} left by cudackpt PID {} ({}) after every driver call had returned: finished forward, nothing taken back ({} of its {} processes still there)",
        path.display(),
        intent.owner_pid,
        intent.command,
        alive.len(),
        intent.members.len()
    ));
    if !alive.is_empty() {
        let now = Group::new()
            .libcuda_option(libcuda)
            .pids(alive)
            .recovering()
            .run(crate::vocabulary::plan::Operation::State { restore_tid: false });
        let in_state = |wanted: &[ProcessState]| -> Vec<i32> {
            now.processes
                .iter()
                .filter(|p| p.state.is_some_and(|s| wanted.contains(&s)))
                .map(|p| p.pid)
                .collect()
        };
        let running = in_state(&[ProcessState::Running]);
        let held = in_state(&[ProcessState::Checkpointed, ProcessState::Locked]);
        report.processes.extend(now.processes.iter().cloned());
        report.warnings.extend(now.warnings.iter().cloned());
        if let Some(note) = &intent.drain {
            if dry_run {
                report.warnings.push(format!(
                    "would send {} what the record says each is owed (signal {}), and leave {} drained",
                    crate::vocabulary::prose::pids(&running),
                    note.signal,
                    crate::vocabulary::prose::pids(&held)
                ));
                return;
            }
            rebuild_drained(report, &running, note, &claimed, bounds);
            for pid in held {
                if crate::drain::handshake::shows_marker(pid) {
                    crate::drain::left_drained::note(pid, note.signal);
                }
            }
        }
    }
    if !dry_run && !(bounds.stop)() {
        claimed.finish();
    }
}
