//! What the drain did with each process, as the report keeps it: the
//! verdict, the times to acknowledge and to rebuild, the memory released,
//! a failed rebuild's own words. Renderers turn it into text or JSON;
//! nothing here prints.

use std::time::Duration;

/// What the drain handshake (cudackpt(1), DRAIN PROTOCOL) did with one process.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DrainRecord {
    /// The signal number that asked it.
    pub signal: i32,
    /// Where the handshake left it.
    pub outcome: DrainVerdict,
    /// How long it took to acknowledge, when it did.
    pub acknowledged: Option<Duration>,
    /// How long its rebuild took (its marker gone), when it rebuilt.
    pub rebuilt: Option<Duration>,
    /// The evidence not held against it because it acknowledged.
    pub exempted: Option<String>,
    /// The GPU memory it gave back between the request and its
    /// acknowledgement (NVML), when it acknowledged and NVML could say.
    pub released_bytes: Option<u64>,
    /// The GPU memory it held once drained: what its checkpoint copies.
    pub footprint_bytes: Option<u64>,
    /// Why its rebuild failed, in its own words (its error memfd), cut to
    /// [`super::protocol::ERROR_CHARS`] characters.
    pub rebuild_error: Option<String>,
}

impl DrainRecord {
    pub(crate) fn new(signal: i32, outcome: DrainVerdict) -> DrainRecord {
        DrainRecord {
            signal,
            outcome,
            acknowledged: None,
            rebuilt: None,
            exempted: None,
            released_bytes: None,
            footprint_bytes: None,
            rebuild_error: None,
        }
    }
}

/// Where the handshake left a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DrainVerdict {
    /// A dry run: it catches the signal and would be asked.
    WouldDrain,
    /// It does not catch the signal (or is locked without the marker):
    /// nothing was sent to the group.
    CannotDrain,
    /// Asked, it did not acknowledge in time; it was then asked to call
    /// the drain off.
    NotAcknowledged,
    /// It acknowledged and stays drained (checkpointed or locked): the
    /// command that resumes it asks for the rebuild.
    Drained,
    /// Asked to rebuild, it did (its marker is gone).
    Rebuilt,
    /// Asked to rebuild, it still showed the marker at the end of the
    /// wait (it is running; nothing was rolled back).
    NotRebuilt,
    /// Asked to rebuild, it said its rebuild failed (a thread named
    /// `cudackpt-fail1`), or exited during it.
    RebuildFailed,
    /// Asked to rebuild while stopped (CRIU's restore unlocks before it
    /// thaws): it rebuilds once it runs, and nobody waited for it.
    RebuildAsked,
    /// Left out of the handshake: it does not catch the signal and holds
    /// nothing the driver cannot restore (a launcher, such as torchrun's
    /// agent); nothing was sent to it.
    NotNeeded,
}

impl DrainVerdict {
    pub(crate) const ALL: [DrainVerdict; 9] = [
        DrainVerdict::WouldDrain,
        DrainVerdict::CannotDrain,
        DrainVerdict::NotAcknowledged,
        DrainVerdict::Drained,
        DrainVerdict::Rebuilt,
        DrainVerdict::NotRebuilt,
        DrainVerdict::RebuildFailed,
        DrainVerdict::RebuildAsked,
        DrainVerdict::NotNeeded,
    ];

    /// Its name in JSON (`drained`).
    pub fn as_str(self) -> &'static str {
        match self {
            DrainVerdict::WouldDrain => "would_drain",
            DrainVerdict::CannotDrain => "cannot_drain",
            DrainVerdict::NotAcknowledged => "not_acknowledged",
            DrainVerdict::Drained => "drained",
            DrainVerdict::Rebuilt => "rebuilt",
            DrainVerdict::NotRebuilt => "not_rebuilt",
            DrainVerdict::RebuildFailed => "rebuild_failed",
            DrainVerdict::RebuildAsked => "rebuild_asked",
            DrainVerdict::NotNeeded => "not_needed",
        }
    }
}
