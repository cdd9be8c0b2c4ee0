//! After the driver calls: every drained process running again (rolled
//! back, or resumed by `resume`, `toggle`, `unlock`) is asked to rebuild,
//! and the wait for its marker to go is reported; a rank whose rebuild
//! failed says why.

use std::time::Instant;

use crate::drain::handshake;
use crate::drain::ledger::SignalLedger;
use crate::drain::protocol;
use crate::drain::rebuild::rebuild;
use crate::drain::report::{DrainRecord, DrainVerdict};
use crate::drain::sending::wait_until;
use crate::driver::ProcessState;
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::request::Request;

/// Whether `operation` leaves processes running, so drained ones rebuild.
pub(super) fn resumes(operation: &Operation) -> bool {
    matches!(
        operation,
        Operation::Resume | Operation::Unlock | Operation::Toggle { .. }
    )
}

pub(super) fn state_in(reports: &[TargetReport], pid: i32) -> Option<ProcessState> {
    reports.iter().find(|r| r.pid == pid).and_then(|r| r.state)
}

/// A rebuild that did not finish is the command's failure when nothing
/// else failed, else a warning.
pub(super) fn note_rebuild(report: &mut TargetReport, drain: &DrainRecord) {
    if drain.outcome == DrainVerdict::RebuildFailed {
        let failure = rebuild_failed(report.pid, drain.signal, drain.rebuild_error.as_deref());
        match &report.failure {
            None => report.failure = Some(failure),
            Some(_) => report.warnings.push(failure.message),
        }
        return;
    }
    if drain.outcome != DrainVerdict::NotRebuilt {
        return;
    }
    let words = format!(
        "asked to rebuild (signal {}), PID {} still showed the drain marker at the end of the wait: it is running, and was not rolled back",
        drain.signal, report.pid
    );
    if report.failure.is_none() {
        report.failure = Some(Fault::new(
            FaultKind::DrainTimeout,
            words,
            "look at the process: its rebuild (e.g. a new NCCL communicator) may be waiting for a rank that is not back",
        ));
    } else {
        report.warnings.push(words);
    }
}

/// The failure of a process whose rebuild failed (it renamed its marker
/// thread, and may have said why) or that exited during it.
pub fn rebuild_failed(pid: i32, signal: i32, stated: Option<&str>) -> Fault {
    let how = if crate::targets::process::is_alive(pid) {
        let why = stated.map_or(String::new(), |text| {
            format!(": \"{}\"", crate::targets::name::printable(text))
        });
        format!(
            "said that its rebuild failed{why} (it names a thread {}): it runs with process groups that do not work",
            protocol::FAIL_MARKER
        )
    } else {
        "exited during its rebuild".to_string()
    };
    Fault::new(
        FaultKind::RebuildFailed,
        format!("PID {pid}, asked to rebuild (signal {signal}), {how}; nothing was rolled back"),
        "read the process's own log for the whole error (the drain client raises it in the training loop); its checkpoint was restored, so only the job's communicators are at fault",
    )
}

/// After a command that resumes: every process running again that shows
/// the marker (it drained before its checkpoint) is asked to rebuild.
pub(super) fn rebuild_resumed(
    request: &Request<'_>,
    ready: &Ready,
    reports: &mut [TargetReport],
    ledger: &dyn SignalLedger,
    deadline: Option<Instant>,
) {
    if !request.drain.rebuild || !resumes(&request.operation) {
        return;
    }
    let waiting: Vec<&Target> = ready
        .targets
        .iter()
        .filter(|t| state_in(reports, t.pid) == Some(ProcessState::Running))
        .filter(|t| reports.iter().any(|r| r.pid == t.pid && r.drain.is_none()))
        .filter(|t| handshake::shows_marker(t.pid))
        .collect();
    if waiting.is_empty() {
        return;
    }
    let signal = request.drain.signal;
    let (askable, deaf): (Vec<&Target>, Vec<&Target>) = waiting
        .into_iter()
        .partition(|t| handshake::catches(t, signal) == Ok(true));
    for target in deaf {
        if let Some(report) = reports.iter_mut().find(|r| r.pid == target.pid) {
            report.drain = Some(DrainRecord::new(signal.number(), DrainVerdict::NotRebuilt));
            report.failure.get_or_insert_with(|| Fault::new(
                FaultKind::CannotDrain,
                format!("PID {} shows the drain marker, so it waits to rebuild, but it does not catch signal {signal}: nothing was sent", target.pid),
                "resume it again with the --drain-signal it was drained with (CUDACKPT_DRAIN_SIGNAL)",
            ));
        }
    }
    let until = wait_until(request.drain.timeout, deadline);
    let asked: Vec<i32> = askable.iter().map(|t| t.pid).collect();
    ledger.rebuilding(signal.number(), request.drain.timeout, &asked);
    for (pid, drain) in rebuild(&askable, signal, until, ledger, &|| false) {
        if let Some(report) = reports.iter_mut().find(|r| r.pid == pid) {
            note_rebuild(report, &drain);
            report.drain = Some(drain);
        }
    }
}
