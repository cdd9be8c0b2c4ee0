//! Who takes part in a command's drain (the words: `crate::drain::members`),
//! decided from its checked targets and the restorability pre-flight's
//! evidence, and the report of each process unable to drain, which
//! refuses the whole group before anything is sent.

use crate::drain::handshake;
use crate::drain::members::{DrainMember, Parties, Unable};
use crate::drain::protocol::DrainSignal;
use crate::drain::report::{DrainRecord, DrainVerdict};
use crate::driver::{CheckpointApi, ProcessState};
use crate::ops::diagnose::describe_process;
use crate::ops::execute::concurrently;
use crate::ops::preflight::restorable;
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::place::Place;
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::stop::Stop;

/// The processes to drain: those the command will lock (running), and
/// locked ones that drained before their lock. A process that does not
/// catch the signal is left out when the evidence holds nothing against
/// it; when it does, it stops the group before any driver call and before
/// anything is sent. So does one locked without having drained.
pub(super) fn parties(ready: &Ready, signal: DrainSignal) -> Result<Parties, Stop> {
    let marked: Vec<bool> = ready
        .targets
        .iter()
        .map(|t| handshake::shows_marker(t.pid))
        .collect();
    let mut held_against: Option<Vec<(i32, String)>> = None;
    let mut bystanders = Vec::new();
    let mut unable = Vec::new();
    for (t, _) in ready.targets.iter().zip(&marked).filter(|(_, &m)| !m) {
        let why = match handshake::catches(t, signal) {
            Ok(false) => {
                // Read once, and only when a process does not catch it.
                let findings = held_against.get_or_insert_with(|| restorable::pending(ready));
                match findings.iter().find(|(pid, _)| *pid == t.pid) {
                    Some((_, evidence)) => Unable::NotCaught(evidence.clone()),
                    None => {
                        bystanders.push(t.pid);
                        continue;
                    }
                }
            }
            Err(reason) => Unable::Unreadable(reason),
            Ok(true) if t.stopped => Unable::Stopped,
            Ok(true) => continue,
        };
        unable.push(cannot_drain(t, None, &why, signal));
    }
    if !unable.is_empty() {
        return Err(stop_unable(unable));
    }
    let states = concurrently(&ready.targets, |t| ready.driver.get_state(t.pid).ok());
    let mut members = Vec::new();
    for ((target, state), marked) in ready.targets.iter().zip(states).zip(marked) {
        if bystanders.contains(&target.pid) {
            continue;
        }
        match state {
            Some(ProcessState::Locked) if !marked => {
                unable.push(cannot_drain(target, state, &Unable::Locked, signal));
            }
            Some(state @ (ProcessState::Running | ProcessState::Locked)) => {
                members.push(DrainMember {
                    target: target.clone(),
                    state,
                    asked: !marked,
                    acknowledged: None,
                    exempted: None,
                    footprint: None,
                })
            }
            // Checkpointed already, or a state the command refuses.
            _ => {}
        }
    }
    if unable.is_empty() {
        Ok(Parties {
            members,
            bystanders,
        })
    } else {
        Err(stop_unable(unable))
    }
}

pub(super) fn stop_unable(unable: Vec<TargetReport>) -> Stop {
    let first = unable[0].pid;
    Stop::Declined {
        refused: unable,
        others: Some(Fault::not_drained(format!(
            "PID {first} cannot drain, so nothing was sent to any process"
        ))),
    }
}

/// The report of a process that cannot take part.
pub(super) fn cannot_drain(
    target: &Target,
    state: Option<ProcessState>,
    why: &Unable,
    signal: DrainSignal,
) -> TargetReport {
    let who = describe_process(target.pid, Some(&target.name));
    let (message, hint) = match why {
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
        state_before: state,
        state,
        failure: Some(Fault::new(FaultKind::CannotDrain, message, hint)),
        drain: Some(DrainRecord::new(signal.number(), DrainVerdict::CannotDrain)),
        ..TargetReport::new(target.pid, Some(target.name.clone()))
    }
}

/// Where each member is, for the intent record.
pub(super) fn places(members: &[DrainMember]) -> Vec<Place> {
    members
        .iter()
        .map(|m| Place {
            pid: m.target.pid,
            name: m.target.name.clone(),
            state: Some(m.state),
            in_flight: None,
        })
        .collect()
}
