//! The drain's failures in words (cudackpt(1), DRAIN PROTOCOL): why a
//! process cannot take part, why a group's drain was called off, and a
//! rebuild that failed or did not finish.

use std::time::Duration;

use super::process::{describe_process, process_stopped};
use crate::drain::members::{Refusal, Unable};
use crate::drain::protocol::{self, DrainSignal};
use crate::drain::report::{DrainRecord, DrainVerdict};
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::timeout::format_duration;

/// Why a drain was called off, for every member's report.
pub enum CallOffReason {
    /// These processes did not acknowledge in time.
    NoAnswer(Vec<i32>, Duration),
    /// These had not acknowledged when the command's --deadline passed.
    Deadline(Vec<i32>, Duration),
    /// A process exited (or could not be sent the request).
    Gone(i32, String),
    /// cudackpt was asked to stop by this signal (its number and name).
    Signal(i32, String),
    /// The section 10 pre-flight refused, after the acknowledgements.
    Refused(Vec<TargetReport>),
    /// This process was stopped during the drain: its lock would wait.
    Stopped(i32),
    /// Even drained, the group's host copies would not fit (the failure of
    /// the host-memory pre-flight, on what the members kept).
    HostMemory(Fault),
    /// Drained for a CRIU dump, the tree still holds what CRIU cannot
    /// dump (a compile-worker pool its owner kept).
    Undumpable(Fault),
}

/// What a called-off drain says of one member, PID `pid` named `name`.
pub fn called_off(pid: i32, name: &str, signal: DrainSignal, why: &CallOffReason) -> Fault {
    let who = describe_process(pid, Some(name));
    let rebuilt = "every process asked was asked again to rebuild, and nothing was locked";
    match why {
        CallOffReason::NoAnswer(silent, _) | CallOffReason::Deadline(silent, _) if !silent.contains(&pid) => {
            Fault::not_drained(format!("PID {} did not drain in time; {rebuilt}", silent[0]))
        }
        CallOffReason::NoAnswer(_, waited) => Fault::new(
            FaultKind::DrainTimeout,
            format!(
                "{who} did not acknowledge the drain (signal {signal}) within {}: no thread named {} in /proc/{pid}/task; {rebuilt}",
                format_duration(*waited),
                protocol::MARKER
            ),
            "give it longer (--drain-timeout; a rank answers at its next step boundary), check that every rank of the job was named (all ranks must agree), or run `cudackpt check --drain`",
        ),
        CallOffReason::Deadline(_, waited) => Fault::new(
            FaultKind::DeadlineExceeded,
            format!(
                "{who} had not acknowledged the drain (signal {signal}) when the command's --deadline passed, {} into the drain; {rebuilt}",
                format_duration(*waited),
            ),
            "give the command a later --deadline (a rank answers at its next step boundary), or leave it out to wait the whole --drain-timeout",
        ),
        CallOffReason::Gone(gone, reason) if *gone == pid => Fault::new(
            FaultKind::NoSuchProcess,
            format!("{who}: {reason}; {rebuilt}"),
            "check the job: one of its processes is gone",
        ),
        CallOffReason::Gone(gone, _) => Fault::not_drained(format!("PID {gone} exited during the drain; {rebuilt}")),
        CallOffReason::Stopped(stopped) if *stopped == pid => {
            let stopped = process_stopped(pid, Some(name));
            Fault::new(
                stopped.kind,
                format!("{} during the drain; {rebuilt}", stopped.message),
                stopped.hint.unwrap_or_default(),
            )
        }
        CallOffReason::Stopped(stopped) => Fault::not_drained(format!("PID {stopped} was stopped during the drain; {rebuilt}")),
        CallOffReason::Signal(signal, name) => Fault::interrupted(
            *signal,
            format!("interrupted by {name} during the drain; {rebuilt}"),
            "run the command again when it may finish",
        ),
        CallOffReason::HostMemory(failure) | CallOffReason::Undumpable(failure) => Fault::new(
            failure.kind,
            format!("{}; {rebuilt}", failure.message),
            failure.hint.clone().unwrap_or_default(),
        ),
        CallOffReason::Refused(refused) => Fault::not_attempted(format!(
            "PID {} drained but still could not be restored; {rebuilt}",
            refused.first().map_or(0, |r| r.pid)
        )),
    }
}

/// The report of a process that cannot take part in a drain.
pub fn cannot_drain(refusal: &Refusal, signal: DrainSignal) -> TargetReport {
    let target = &refusal.target;
    let who = describe_process(target.pid, Some(&target.name));
    let (message, hint) = match &refusal.why {
        Unable::NotCaught(evidence) => (
            format!("refused before any change: {who} does not catch the drain signal, {signal}, according to SigCgt in /proc/{}/status: it does not speak the drain protocol and the signal could kill it, yet it holds what the driver cannot restore ({evidence}); nothing was sent to any process", target.pid),
            "start it with a drain client (the PyTorch one: `import cudackpt_drain`; see cudackpt(1), DRAIN PROTOCOL), pass the signal it catches with --drain-signal, or leave out --drain".to_string(),
        ),
        Unable::Unreadable(reason) => (
            format!("refused before any change: whether {who} catches the drain signal, {signal}, could not be read ({reason}); nothing was sent to any process"),
            "check /proc/PID/status, then try again".to_string(),
        ),
        Unable::Stopped => (
            format!("refused before any change: {who} is stopped (SIGSTOP, a debugger, or CRIU's freeze), so it cannot reach a safe point to drain; nothing was sent to any process"),
            "drain before the freeze: CRIU's action-script mode drains at pre-dump (CUDACKPT_DRAIN=1), before CRIU freezes the tree, or run `cudackpt suspend --drain` before `criu dump`".to_string(),
        ),
        Unable::Locked => (
            format!("refused before any change: {who} is locked and has not drained: a locked process cannot run the CUDA calls that release its resources"),
            format!("unlock it (`cudackpt unlock {}`), then drain with `suspend --drain`", target.pid),
        ),
    };
    TargetReport {
        state_before: refusal.state,
        state: refusal.state,
        failure: Some(Fault::new(FaultKind::CannotDrain, message, hint)),
        drain: Some(DrainRecord::new(signal.number(), DrainVerdict::CannotDrain)),
        ..TargetReport::new(target.pid, Some(target.name.clone()))
    }
}

/// The failure of a process whose rebuild failed (it renamed its marker
/// thread, and may have said why) or that exited during it (`alive`).
pub fn rebuild_failed(pid: i32, signal: i32, stated: Option<&str>, alive: bool) -> Fault {
    let how = if alive {
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

/// A rebuild that did not finish in `report`: the command's failure when
/// nothing else failed, else a warning.
pub fn rebuild_unfinished(report: &mut TargetReport, drain: &DrainRecord) {
    if drain.outcome == DrainVerdict::RebuildFailed {
        let alive = crate::targets::process::is_alive(report.pid);
        let failure = rebuild_failed(
            report.pid,
            drain.signal,
            drain.rebuild_error.as_deref(),
            alive,
        );
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
