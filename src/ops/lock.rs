//! Stage 4, lock: one cudackpt at a time per process. A command that
//! changes state takes the per-PID lock of every target (see `pidlock`)
//! and holds it until it ends; a target held by another cudackpt stops the
//! whole group before any driver call.

use crate::ops::check::Ready;
use crate::ops::diagnose::{Failure, FailureKind};
use crate::ops::pidlock::{self, Held};
use crate::ops::plan::Operation;
use crate::ops::report::ProcessReport;
use crate::ops::Stop;

/// The locks of every target (none for a query), or the stop that names
/// the process held elsewhere and who holds it.
pub fn lock(operation: &Operation, ready: &Ready) -> Result<Option<Held>, Stop> {
    if !operation.changes_state() {
        return Ok(None);
    }
    let pids: Vec<i32> = ready.targets.iter().map(|t| t.pid).collect();
    let busy = match pidlock::acquire(&pids) {
        Ok(held) => return Ok(Some(held)),
        Err(busy) => busy,
    };
    let holder = busy.holder.map_or("another cudackpt".to_string(), |pid| {
        format!("cudackpt PID {pid}")
    });
    let name = ready
        .targets
        .iter()
        .find(|t| t.pid == busy.pid)
        .map(|t| t.name.clone());
    let mut ran = ready.blocked.clone();
    ran.push(ProcessReport {
        failure: Some(Failure::new(
            FailureKind::InUse,
            format!("PID {} is being changed by {holder} right now", busy.pid),
            "wait for that command to finish, then check with `cudackpt state`",
        )),
        ..ProcessReport::new(busy.pid, name)
    });
    Err(Stop::Halted {
        ran,
        not_run: Some(Failure::new(
            FailureKind::NotAttempted,
            format!(
                "not attempted: PID {} is in use by another cudackpt",
                busy.pid
            ),
            "a group changes state together or not at all",
        )),
    })
}
