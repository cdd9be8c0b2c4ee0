//! What a command means for one process, decided from its current state
//! before any state changes: the driver steps to run, in which phase, and how
//! to undo them. Pure logic; the executor (`ops::execute`) runs the plan.

use std::fmt;

use crate::driver::{GpuPair, ProcessState};
use crate::vocabulary::timeout::Timeout;

/// A validated process command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Query the state, and the restore thread id with `restore_tid`.
    State {
        restore_tid: bool,
    },
    RestoreTid,
    Lock {
        timeout: Timeout,
    },
    Checkpoint,
    /// Restores through the map the pipeline chose (none: in place).
    Restore,
    Unlock,
    Toggle {
        timeout: Timeout,
    },
    Suspend {
        timeout: Timeout,
    },
    Resume,
    Wait {
        state: ProcessState,
        timeout: Timeout,
    },
}

impl Operation {
    /// The command's name as typed and as reported in JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::State { .. } => "state",
            Operation::RestoreTid => "restore-tid",
            Operation::Lock { .. } => "lock",
            Operation::Checkpoint => "checkpoint",
            Operation::Restore => "restore",
            Operation::Unlock => "unlock",
            Operation::Toggle { .. } => "toggle",
            Operation::Suspend { .. } => "suspend",
            Operation::Resume => "resume",
            Operation::Wait { .. } => "wait",
        }
    }

    /// Whether the command changes process state (and so is all-or-nothing
    /// over its targets).
    pub fn changes_state(&self) -> bool {
        !matches!(
            self,
            Operation::State { .. } | Operation::RestoreTid | Operation::Wait { .. }
        )
    }

    /// Whether the command may restore a process (and so may take a map).
    pub fn restores(&self) -> bool {
        matches!(
            self,
            Operation::Restore | Operation::Resume | Operation::Toggle { .. }
        )
    }

    /// Whether the command may checkpoint a process.
    pub fn checkpoints(&self) -> bool {
        matches!(
            self,
            Operation::Checkpoint | Operation::Suspend { .. } | Operation::Toggle { .. }
        )
    }

    /// Whether the command moves GPU memory, where NCCL is known to cause
    /// trouble.
    pub fn moves_memory(&self) -> bool {
        self.restores() || self.checkpoints()
    }

    /// The state a single step needs to start from (compound commands ask
    /// instead).
    pub fn precondition(&self) -> Option<ProcessState> {
        match self {
            Operation::Lock { .. } => Some(ProcessState::Running),
            Operation::Checkpoint | Operation::Unlock => Some(ProcessState::Locked),
            Operation::Restore => Some(ProcessState::Checkpointed),
            _ => None,
        }
    }

    /// Whether the plan depends on the current state (compound commands).
    pub fn needs_current_state(&self) -> bool {
        matches!(
            self,
            Operation::Toggle { .. } | Operation::Suspend { .. } | Operation::Resume
        )
    }
}

/// One driver call that moves a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Lock { timeout: Timeout },
    Checkpoint,
    Restore { map: Vec<GpuPair> },
    Unlock,
}

/// Which driver call a step is, without its arguments: what reports keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverCall {
    /// `cuCheckpointProcessLock`.
    Lock,
    /// `cuCheckpointProcessCheckpoint`.
    Checkpoint,
    /// `cuCheckpointProcessRestore`.
    Restore,
    /// `cuCheckpointProcessUnlock`.
    Unlock,
}

impl DriverCall {
    /// The step's name as logs, reports and progress lines show it; never
    /// compared to learn what happened (compare the kind).
    pub fn as_str(self) -> &'static str {
        match self {
            DriverCall::Lock => "lock",
            DriverCall::Checkpoint => "checkpoint",
            DriverCall::Restore => "restore",
            DriverCall::Unlock => "unlock",
        }
    }
}

impl fmt::Display for DriverCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Step {
    pub fn kind(&self) -> DriverCall {
        match self {
            Step::Lock { .. } => DriverCall::Lock,
            Step::Checkpoint => DriverCall::Checkpoint,
            Step::Restore { .. } => DriverCall::Restore,
            Step::Unlock => DriverCall::Unlock,
        }
    }

    /// The state a successful step leaves the process in.
    pub fn resulting_state(&self) -> ProcessState {
        match self {
            Step::Lock { .. } | Step::Restore { .. } => ProcessState::Locked,
            Step::Checkpoint => ProcessState::Checkpointed,
            Step::Unlock => ProcessState::Running,
        }
    }

    /// The step that puts a process back where this one found it. Undoing a
    /// restore checkpoints again; undoing an unlock locks without a timeout
    /// limit only as long as `relock_timeout` allows.
    pub fn inverse(&self, relock_timeout: Timeout) -> Step {
        match self {
            Step::Lock { .. } => Step::Unlock,
            Step::Checkpoint => Step::Restore { map: Vec::new() },
            Step::Restore { .. } => Step::Checkpoint,
            Step::Unlock => Step::Lock {
                timeout: relock_timeout,
            },
        }
    }

    /// Phase order: a group moves one phase at a time (all locks, then all
    /// checkpoints; all restores, then all unlocks).
    pub fn phase(&self) -> usize {
        match self {
            Step::Lock { .. } | Step::Restore { .. } => 0,
            Step::Checkpoint | Step::Unlock => 1,
        }
    }
}

/// What to do with one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Run these steps in order.
    Steps(Vec<Step>),
    /// Nothing to do: the process is already where the command leads.
    AlreadyThere,
    /// The command cannot start from this state.
    Refused(WrongState),
}

/// A command that cannot start from a process's current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrongState {
    pub state: ProcessState,
    /// What to run instead, in words.
    pub hint: String,
}

/// Plans a state-changing command for a process in `current` (only
/// compound commands need `current`; single steps are planned blind and the
/// driver judges them). A restore goes through `map` (empty: in place).
pub fn plan(operation: &Operation, current: Option<ProcessState>, map: &[GpuPair]) -> Plan {
    use ProcessState::*;
    let suspend = |timeout: Timeout| vec![Step::Lock { timeout }, Step::Checkpoint];
    let restore = || Step::Restore { map: map.to_vec() };
    let resume = || vec![restore(), Step::Unlock];
    match (operation, current) {
        (Operation::Lock { timeout }, _) => Plan::Steps(vec![Step::Lock { timeout: *timeout }]),
        (Operation::Checkpoint, _) => Plan::Steps(vec![Step::Checkpoint]),
        (Operation::Restore, _) => Plan::Steps(vec![restore()]),
        (Operation::Unlock, _) => Plan::Steps(vec![Step::Unlock]),

        (Operation::Suspend { timeout }, Some(Running)) => Plan::Steps(suspend(*timeout)),
        (Operation::Suspend { .. }, Some(Locked)) => Plan::Steps(vec![Step::Checkpoint]),
        (Operation::Suspend { .. }, Some(Checkpointed)) => Plan::AlreadyThere,

        (Operation::Resume, Some(Checkpointed)) => Plan::Steps(resume()),
        (Operation::Resume, Some(Locked)) => Plan::Steps(vec![Step::Unlock]),
        (Operation::Resume, Some(Running)) => Plan::AlreadyThere,

        (Operation::Toggle { timeout }, Some(Running)) => Plan::Steps(suspend(*timeout)),
        (Operation::Toggle { .. }, Some(Checkpointed)) => Plan::Steps(resume()),
        (Operation::Toggle { .. }, Some(Locked)) => Plan::Refused(WrongState {
            state: Locked,
            hint: "toggle goes between running and checkpointed; a locked process needs `unlock` (back to running) or `checkpoint` (on to checkpointed), or use `resume`/`suspend`".to_string(),
        }),

        (_, Some(Failed)) => Plan::Refused(WrongState {
            state: Failed,
            hint: "the driver marks this process's CUDA state as failed; it cannot be checkpointed or restored any more: restart the process".to_string(),
        }),
        (_, state) => Plan::Refused(WrongState {
            state: state.unwrap_or(ProcessState::Unknown(-1)),
            hint: "this driver reports a state cudackpt does not know; upgrade cudackpt".to_string(),
        }),
    }
}

/// The advice for a step the driver refused as illegal in `state`.
pub fn wrong_state_hint(step: &Step, state: ProcessState) -> String {
    use ProcessState::*;
    let text = match (step, state) {
        (Step::Lock { .. }, Locked) => "it is already locked: `checkpoint` it to finish suspending, or `unlock` it to let it run",
        (Step::Lock { .. }, Checkpointed) => "it is checkpointed: `resume` it (or `restore`, then `unlock`)",
        (Step::Checkpoint, Running) => "lock it first (`lock`), or use `suspend`, which does both",
        (Step::Checkpoint, Checkpointed) => "it is already checkpointed; nothing to do",
        (Step::Restore { .. }, Running) => "it is running; there is nothing to restore",
        (Step::Restore { .. }, Locked) => "it is locked, not checkpointed: `unlock` it to let it run, or `checkpoint` it",
        (Step::Unlock, Running) => "it is already running; nothing to do",
        (Step::Unlock, Checkpointed) => "`restore` it first, or use `resume`, which does both",
        (_, Failed) => "its CUDA state has failed; restart the process",
        _ => "check the state with `cudackpt state`",
    };
    text.to_string()
}

/// The steps that undo `done` (the steps a process completed), newest first.
pub fn rollback_steps(done: &[Step], relock_timeout: Timeout) -> Vec<Step> {
    done.iter()
        .rev()
        .map(|step| step.inverse(relock_timeout))
        .collect()
}

/// Groups must move together: a `toggle` over processes in different states
/// would send some up and some down. Returns the state that disagrees.
pub fn mixed_toggle(states: &[ProcessState]) -> Option<(ProcessState, ProcessState)> {
    let first = *states.first()?;
    states
        .iter()
        .find(|&&s| s != first)
        .map(|&other| (first, other))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProcessState::*;

    fn t(ms: u32) -> Timeout {
        Timeout::from_millis(ms)
    }

    #[test]
    fn suspend_starts_wherever_the_process_is() {
        let op = Operation::Suspend { timeout: t(500) };
        assert_eq!(
            plan(&op, Some(Running), &[]),
            Plan::Steps(vec![Step::Lock { timeout: t(500) }, Step::Checkpoint])
        );
        assert_eq!(
            plan(&op, Some(Locked), &[]),
            Plan::Steps(vec![Step::Checkpoint])
        );
        assert_eq!(plan(&op, Some(Checkpointed), &[]), Plan::AlreadyThere);
        assert!(matches!(
            plan(&op, Some(Failed), &[]),
            Plan::Refused(WrongState { state: Failed, .. })
        ));
    }

    #[test]
    fn resume_finishes_a_half_done_restore() {
        let op = Operation::Resume;
        assert_eq!(
            plan(&op, Some(Checkpointed), &[]),
            Plan::Steps(vec![Step::Restore { map: vec![] }, Step::Unlock])
        );
        assert_eq!(
            plan(&op, Some(Locked), &[]),
            Plan::Steps(vec![Step::Unlock])
        );
        assert_eq!(plan(&op, Some(Running), &[]), Plan::AlreadyThere);
    }

    #[test]
    fn toggle_flips_and_refuses_locked() {
        let op = Operation::Toggle { timeout: t(0) };
        assert_eq!(
            plan(&op, Some(Running), &[]),
            Plan::Steps(vec![Step::Lock { timeout: t(0) }, Step::Checkpoint])
        );
        assert_eq!(
            plan(&op, Some(Checkpointed), &[]),
            Plan::Steps(vec![Step::Restore { map: vec![] }, Step::Unlock])
        );
        let Plan::Refused(refusal) = plan(&op, Some(Locked), &[]) else {
            panic!("locked must be refused")
        };
        assert!(refusal.hint.contains("unlock"));
        assert!(matches!(
            plan(&op, Some(Unknown(9)), &[]),
            Plan::Refused(WrongState {
                state: Unknown(9),
                ..
            })
        ));
    }

    #[test]
    fn single_steps_are_planned_blind() {
        assert_eq!(
            plan(&Operation::Unlock, None, &[]),
            Plan::Steps(vec![Step::Unlock])
        );
        assert_eq!(
            plan(&Operation::Checkpoint, None, &[]),
            Plan::Steps(vec![Step::Checkpoint])
        );
    }

    #[test]
    fn rollback_undoes_newest_first() {
        let done = [Step::Lock { timeout: t(5) }, Step::Checkpoint];
        assert_eq!(
            rollback_steps(&done, t(100)),
            vec![Step::Restore { map: vec![] }, Step::Unlock]
        );
        let done = [Step::Restore { map: vec![] }, Step::Unlock];
        assert_eq!(
            rollback_steps(&done, t(100)),
            vec![Step::Lock { timeout: t(100) }, Step::Checkpoint]
        );
        assert!(rollback_steps(&[], t(1)).is_empty());
    }

    #[test]
    fn every_step_and_its_inverse_form_a_round_trip() {
        for step in [
            Step::Lock { timeout: t(1) },
            Step::Checkpoint,
            Step::Restore { map: vec![] },
            Step::Unlock,
        ] {
            let back = step.inverse(t(1)).inverse(t(1));
            assert_eq!(back.kind(), step.kind());
        }
    }

    #[test]
    fn phases_keep_groups_together() {
        assert!(Step::Lock { timeout: t(0) }.phase() < Step::Checkpoint.phase());
        assert!(Step::Restore { map: vec![] }.phase() < Step::Unlock.phase());
    }

    #[test]
    fn mixed_toggles_are_found() {
        assert_eq!(mixed_toggle(&[Running, Running]), None);
        assert_eq!(
            mixed_toggle(&[Running, Checkpointed]),
            Some((Running, Checkpointed))
        );
        assert_eq!(mixed_toggle(&[]), None);
    }

    #[test]
    fn wrong_state_hints_name_the_way_out() {
        assert!(wrong_state_hint(&Step::Checkpoint, Running).contains("suspend"));
        assert!(wrong_state_hint(&Step::Unlock, Checkpointed).contains("resume"));
        assert!(wrong_state_hint(&Step::Lock { timeout: t(0) }, Checkpointed).contains("resume"));
    }
}
