//! Asking drained processes to rebuild (cudackpt(1), DRAIN PROTOCOL),
//! once each, every send in the ledger, and the wait for each marker to
//! go: rebuilt, not rebuilt in time, or failed (renamed marker, or gone),
//! with a failed rank's own words. Used after a command that resumes and
//! by `recover`.

use std::cell::RefCell;
use std::time::Instant;

use super::handshake::{self, Answer};
use super::ledger::SignalLedger;
use super::left_drained;
use super::protocol::DrainSignal;
use super::report::{DrainRecord, DrainVerdict};
use super::sending::send;
use crate::targets::process::Target;

/// Asks each target that catches `signal` to rebuild, once, each send
/// written down in `ledger`, and waits until `until` (or `stop`) for each
/// marker to go.
pub fn rebuild(
    targets: &[&Target],
    signal: DrainSignal,
    until: Instant,
    ledger: &dyn SignalLedger,
    stop: &dyn Fn() -> bool,
) -> Vec<(i32, DrainRecord)> {
    let mut sent = Vec::new();
    let mut reports = Vec::new();
    for &target in targets {
        let sendable = handshake::catches(target, signal) == Ok(true);
        // Forgotten before the send: once a rebuild may have gone, no file
        // may vouch for the marker (a kill between the two would let a
        // checkpoint through while the rank rebuilds its communicators).
        if sendable {
            left_drained::forget(target.pid);
        }
        if sendable && send(target, signal, ledger).is_ok() {
            sent.push(target);
        } else {
            reports.push((
                target.pid,
                DrainRecord::new(signal.number(), DrainVerdict::NotRebuilt),
            ));
        }
    }
    ledger.flush();
    // A stopped process takes the signal once it runs again: not waited for.
    let (stopped, sent): (Vec<&Target>, Vec<&Target>) = sent
        .into_iter()
        .partition(|t| crate::targets::process::is_stopped(t.pid));
    reports.extend(stopped.iter().map(|t| {
        (
            t.pid,
            DrainRecord::new(signal.number(), DrainVerdict::NotRebuilt),
        )
    }));
    // The marker went: rebuilt, unless it went because the rebuild failed
    // (renamed) or the process exited, judged when it went (a rank may
    // finish its job and exit while the others still rebuild).
    // The wait asks one process at a time, on this thread.
    let failed = RefCell::new(Vec::new());
    let answered = |pid: i32| {
        if handshake::shows_marker(pid) {
            return false;
        }
        if handshake::shows_failure(pid) || !crate::targets::process::is_alive(pid) {
            failed.borrow_mut().push(pid);
        }
        true
    };
    let answers = handshake::wait_for(&sent, answered, until, stop);
    let failed = failed.into_inner();
    for (target, answer) in sent.iter().zip(answers) {
        let mut report = DrainRecord::new(signal.number(), DrainVerdict::Rebuilt);
        match answer {
            Answer::After(_) if failed.contains(&target.pid) => {
                report.outcome = DrainVerdict::RebuildFailed;
                report.rebuild_error = handshake::stated_error(target.pid);
            }
            Answer::After(took) => report.rebuilt = Some(took),
            Answer::Gone => report.outcome = DrainVerdict::RebuildFailed,
            Answer::None => report.outcome = DrainVerdict::NotRebuilt,
        }
        reports.push((target.pid, report));
    }
    reports
}
