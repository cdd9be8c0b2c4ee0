//! What a command asks of the drain (cudackpt(1), DRAIN PROTOCOL): whether
//! to drain before the lock, whether to ask for rebuilds, the signal and
//! how long to wait.

use std::time::Duration;

use super::protocol::{self, DrainSignal};

/// The drain handshake of a request (cudackpt(1), DRAIN PROTOCOL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSettings {
    /// `--drain`: ask every process the command will lock to drain first.
    pub before_lock: bool,
    /// Ask drained processes that run again to rebuild (`recover` does it
    /// itself, from its record).
    pub rebuild: bool,
    pub signal: DrainSignal,
    /// How long to wait for every acknowledgement, and every rebuild.
    pub timeout: Duration,
}

impl Default for DrainSettings {
    fn default() -> DrainSettings {
        DrainSettings {
            before_lock: false,
            rebuild: true,
            signal: protocol::DEFAULT_SIGNAL,
            timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// How long a drain waits by default: a few training steps and the tear
/// down of NCCL communicators.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
