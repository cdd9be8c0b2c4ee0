//! Who takes part in a drain: each process a command will lock either
//! catches the drain signal (a member, asked unless it shows the marker
//! already), holds nothing the driver cannot restore (a bystander, left
//! out), or is unable to drain, which refuses the whole group before
//! anything is sent ([`choose`]). The pipeline's stage words each refusal.

use std::time::Duration;

use super::handshake;
use super::protocol::DrainSignal;
use crate::driver::ProcessState;
use crate::targets::process::Target;

/// One process of a drained group.
pub struct DrainMember {
    pub target: Target,
    pub state: ProcessState,
    /// Sent the request by this command (not: it showed the marker already).
    pub asked: bool,
    pub acknowledged: Option<Duration>,
    pub exempted: Option<String>,
    /// What it held before the request and once drained (NVML), in bytes.
    pub footprint: Option<(u64, u64)>,
}

/// Who takes part in a drain, and who is left out of it.
pub struct Parties {
    pub members: Vec<DrainMember>,
    /// Processes that do not catch the signal and hold nothing the driver
    /// cannot restore (a launcher such as torchrun's agent): never sent
    /// anything, checkpointed as they are.
    pub bystanders: Vec<i32>,
}

/// Why a process cannot take part in a drain (nothing is sent to it, nor
/// to any process of its group).
pub enum Unable {
    /// It does not catch the signal, and this evidence holds it to the
    /// drain (a rank, a CUDA IPC party).
    NotCaught(String),
    /// Its status could not be read (why).
    Unreadable(String),
    /// Locked without having drained: it cannot run the CUDA calls that
    /// release its resources.
    Locked,
    /// Stopped (SIGSTOP, a debugger, CRIU's freeze): it cannot answer.
    Stopped,
}

/// A process unable to take part, and the state it was read in.
pub struct Refusal {
    pub target: Target,
    pub state: Option<ProcessState>,
    pub why: Unable,
}

/// The processes to drain among `targets`: those the command will lock
/// (running), and locked ones that drained before their lock. A process
/// that does not catch the signal is left out when `held_against` (the
/// evidence the driver could not restore it, read once and only when
/// one does not catch it) holds nothing against it; when it does, it
/// refuses the group before any driver call and before anything is sent.
/// So does one locked without having drained (`states`: each target's,
/// read once the catching is known).
pub fn choose(
    targets: &[Target],
    signal: DrainSignal,
    held_against: &dyn Fn() -> Vec<(i32, String)>,
    states: &dyn Fn() -> Vec<Option<ProcessState>>,
) -> Result<Parties, Vec<Refusal>> {
    let marked: Vec<bool> = targets
        .iter()
        .map(|t| handshake::shows_marker(t.pid))
        .collect();
    let mut evidence: Option<Vec<(i32, String)>> = None;
    let mut bystanders = Vec::new();
    let mut unable = Vec::new();
    for (t, _) in targets.iter().zip(&marked).filter(|(_, &m)| !m) {
        let why = match handshake::catches(t, signal) {
            Ok(false) => {
                let findings = evidence.get_or_insert_with(held_against);
                match findings.iter().find(|(pid, _)| *pid == t.pid) {
                    Some((_, held)) => Unable::NotCaught(held.clone()),
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
        unable.push(Refusal {
            target: t.clone(),
            state: None,
            why,
        });
    }
    if !unable.is_empty() {
        return Err(unable);
    }
    let mut members = Vec::new();
    for ((target, state), marked) in targets.iter().zip(states()).zip(marked) {
        if bystanders.contains(&target.pid) {
            continue;
        }
        match state {
            Some(ProcessState::Locked) if !marked => unable.push(Refusal {
                target: target.clone(),
                state,
                why: Unable::Locked,
            }),
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
        Err(unable)
    }
}
