//! Who takes part in a drain: each process a command will lock either
//! catches the drain signal (a member, asked unless it shows the marker
//! already), holds nothing the driver cannot restore (a bystander, left
//! out), or is unable to drain, which refuses the whole group before
//! anything is sent. The pipeline's stage decides which (`ops::drain`).

use std::time::Duration;

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
