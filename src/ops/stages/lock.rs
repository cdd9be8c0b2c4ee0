//! Stage 5, lock: one cudackpt at a time per process. A command that
//! changes state takes the per-PID lock of every target (see `pidlock`)
//! and holds it until it ends; a target held by another cudackpt stops the
//! whole group before any driver call.

use crate::ops::journal::intent;
use crate::ops::journal::pidlock::{self, LockError, PidLocks};
use crate::ops::journal::process_lock;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::stop::Stop;

/// The locks of every target (none for a query), or the stop that names
/// the process held elsewhere and who holds it. With the locks held, every
/// target must still be the process that was checked: a PID that was
/// reused since is never handed to the driver.
pub fn lock(
    operation: &Operation,
    ready: &Ready,
    use_locks: bool,
    recovering: bool,
) -> Result<PidLocks, Stop> {
    if !operation.changes_state() {
        return Ok(PidLocks::none());
    }
    let held = if use_locks {
        take(ready)?
    } else {
        PidLocks::none()
    };
    confirm_identities(ready)?;
    if !recovering {
        not_left_by_a_dead_cudackpt(ready)?;
    }
    Ok(held)
}

/// Stops the group if a cudackpt that died mid-change left one of its
/// processes (its intent record is still there): `recover` comes first.
/// Asked before the pre-flights too, whose advice cannot help a process
/// left mid-drain, and again once the locks are held.
pub fn not_left_by_a_dead_cudackpt(ready: &Ready) -> Result<(), Stop> {
    // A record directory that cannot be read was already refused where
    // records are written; here it hides nothing new.
    let abandoned = intent::abandoned().unwrap_or_default();
    if abandoned.is_empty() {
        return Ok(());
    }
    let Some((target, (path, _, left_by))) = ready
        .targets
        .iter()
        .find_map(|t| intent::holding(t.pid, &abandoned).map(|held| (t, held)))
    else {
        return Ok(());
    };
    let mut ran = ready.blocked.clone();
    ran.push(TargetReport {
        failure: Some(Fault::new(
            FaultKind::NeedsRecovery,
            format!(
                "refused before any change: PID {} was {left_by} (its intent record {} is still there)",
                target.pid,
                path.display()
            ),
            "run `cudackpt recover` to put that group back where it started (`--dry-run` says what it would do)",
        )),
        ..TargetReport::new(target.pid, Some(target.name.clone()))
    });
    Err(Stop::Declined {
        refused: ran,
        others: Some(Fault::not_attempted(format!(
            "PID {} needs recovering first",
            target.pid
        ))),
    })
}

/// Stops the group if any target is no longer the process checked.
fn confirm_identities(ready: &Ready) -> Result<(), Stop> {
    let Some((target, lost)) = ready
        .targets
        .iter()
        .find_map(|t| t.still_the_same().err().map(|lost| (t, lost)))
    else {
        return Ok(());
    };
    let mut ran = ready.blocked.clone();
    ran.push(TargetReport {
        failure: Some(Fault::new(
            FaultKind::NoSuchProcess,
            format!("refused before any change: {lost}"),
            "check the PID again (`cudackpt ps`); nothing was done to the process now behind it",
        )),
        ..TargetReport::new(target.pid, Some(target.name.clone()))
    });
    Err(Stop::Declined {
        refused: ran,
        others: Some(Fault::not_attempted(format!(
            "PID {} is no longer the process checked",
            target.pid
        ))),
    })
}

/// Takes the per-PID locks, or says who holds one or why they cannot be
/// taken.
fn take(ready: &Ready) -> Result<PidLocks, Stop> {
    let pids = ready.pids();
    let processes: Vec<process_lock::Locked> = ready
        .targets
        .iter()
        .map(|t| process_lock::Locked {
            pid: t.pid,
            starttime: t.identity.starttime(),
            owner: t.identity.owner(),
        })
        .collect();
    // The files keep this user's cudackpts apart; the names, every user's.
    let taken = pidlock::acquire(&pids).and_then(|files| {
        process_lock::acquire(&processes)
            .map(|names| {
                for remark in &names.remarks {
                    tracing::warn!("{remark}");
                }
                files.with_names(names)
            })
            .map_err(|busy| LockError::Busy {
                pid: busy.pid,
                holder: busy.holder,
            })
    });
    let (busy_pid, holder) = match taken {
        Ok(held) => return Ok(held),
        Err(LockError::Busy { pid, holder }) => (pid, holder),
        Err(LockError::Unusable(why)) => {
            return Err(Stop::not_run(Fault::new(
                FaultKind::LockUnavailable,
                format!(
                    "refused before any change: the per-process lock that keeps two cudackpt apart could not be taken: {why}"
                ),
                format!(
                    "{}; or run with --no-lock if nothing else can act on these processes",
                    crate::files::run_dir_hint("locks", pidlock::DIR_VAR)
                        .unwrap_or_else(|| why.hint())
                ),
            )))
        }
    };
    let holder = holder.map_or("another cudackpt".to_string(), |pid| {
        format!("cudackpt PID {pid}")
    });
    let name = ready
        .targets
        .iter()
        .find(|t| t.pid == busy_pid)
        .map(|t| t.name.clone());
    let mut ran = ready.blocked.clone();
    ran.push(TargetReport {
        failure: Some(Fault::new(
            FaultKind::InUse,
            format!("PID {busy_pid} is being changed by {holder} right now"),
            "wait for that command to finish, then check with `cudackpt state`",
        )),
        ..TargetReport::new(busy_pid, name)
    });
    Err(Stop::Declined {
        refused: ran,
        others: Some(Fault::not_attempted(format!(
            "PID {busy_pid} is in use by another cudackpt"
        ))),
    })
}
