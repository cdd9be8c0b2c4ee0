//! Crash-safe groups (docs/guide/safety.md, "Memory, crashes and dry runs"): before its first state change a command
//! writes an intent record (which processes, where each started, who runs
//! it) in `intents/` of the run directory, and removes it when it ends,
//! whatever the outcome. A record whose owner died (SIGKILL, the OOM
//! killer, a second signal, power) stays: the next cudackpt that touches
//! one of its processes refuses until `cudackpt recover` has put them back
//! where they started.
//!
//! A drained group (cudackpt(1), DRAIN PROTOCOL) says so in its record, with the signal and how
//! far the handshake got, so that `recover` asks its processes to rebuild.
//!
//! By concern: the record's format ([`record`]), where records live
//! ([`places`]), writing one for a command ([`writer`]), what a panic says
//! of it ([`mod@panic`]), and the records left behind with `recover`'s claim on
//! one ([`mod@abandoned`]). The drain's ledger a record keeps is the drain's
//! (`crate::drain::ledger`).

mod abandoned;
mod panic;
mod places;
mod record;
mod writer;

pub use abandoned::{
    abandoned, claim, holding, release_handed_to, sweep_dead_writers_temporaries, Claimed,
    NotClaimed,
};
pub use panic::report_panics;
pub use record::{Intent, RecordedProcess, Start};
pub use writer::Journal;
