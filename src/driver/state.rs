//! `CUprocessState`: where a process stands in the checkpoint cycle.

use std::fmt;
use std::str::FromStr;

/// A process's CUDA checkpoint state as the driver reports it. Newer drivers
/// may add states; they are kept as `Unknown` with their number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcessState {
    /// It runs on its GPUs as usual.
    Running,
    /// Its GPU work finished and no new work starts (`lock`, or `restore`).
    Locked,
    /// Its GPU memory is in host memory and its GPUs are released.
    Checkpointed,
    /// A checkpoint or restore failed part-way (driver 580 has not been
    /// seen to leave a process here).
    Failed,
    /// A state this build does not know (a newer driver's), by number.
    Unknown(i32),
}

impl ProcessState {
    /// The state for the driver's `CUprocessState` number.
    pub fn from_raw(raw: i32) -> ProcessState {
        match raw {
            0 => ProcessState::Running,
            1 => ProcessState::Locked,
            2 => ProcessState::Checkpointed,
            3 => ProcessState::Failed,
            other => ProcessState::Unknown(other),
        }
    }

    /// The word used in output and accepted on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessState::Running => "running",
            ProcessState::Locked => "locked",
            ProcessState::Checkpointed => "checkpointed",
            ProcessState::Failed => "failed",
            ProcessState::Unknown(_) => "unknown",
        }
    }
}

impl fmt::Display for ProcessState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessState::Unknown(raw) => write!(f, "unknown ({raw})"),
            known => f.write_str(known.as_str()),
        }
    }
}

/// The states a user can name (`wait --state`).
pub const NAMED_STATES: [ProcessState; 4] = [
    ProcessState::Running,
    ProcessState::Locked,
    ProcessState::Checkpointed,
    ProcessState::Failed,
];

/// A state name that is none of the driver's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?}: expected one of running, locked, checkpointed, failed")]
pub struct UnknownState(pub String);

impl FromStr for ProcessState {
    type Err = UnknownState;

    fn from_str(text: &str) -> Result<ProcessState, UnknownState> {
        NAMED_STATES
            .into_iter()
            .find(|state| state.as_str().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| UnknownState(text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_values_follow_cuda_h() {
        assert_eq!(ProcessState::from_raw(0), ProcessState::Running);
        assert_eq!(ProcessState::from_raw(2), ProcessState::Checkpointed);
        assert_eq!(ProcessState::from_raw(7), ProcessState::Unknown(7));
        assert_eq!(ProcessState::Unknown(7).to_string(), "unknown (7)");
    }

    #[test]
    fn names_parse_back() {
        for state in NAMED_STATES {
            assert_eq!(state.as_str().parse::<ProcessState>(), Ok(state));
        }
        assert_eq!("Locked".parse::<ProcessState>(), Ok(ProcessState::Locked));
        assert!("paused"
            .parse::<ProcessState>()
            .unwrap_err()
            .to_string()
            .contains("\"paused\""));
    }
}
