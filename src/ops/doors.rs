//! The pipeline's named doors: what the commands beside it may use of
//! `ops` besides running a `Group` through the library's face. Each door
//! is a concern a command has; behind them, the rooms of `ops` stay the
//! pipeline's own (`tests/house/layout.rs` holds `commands/` to these
//! doors).

/// `recover` and `ps`: the intent records dead cudackpts left, claimed one
/// at a time; the words of a rebuild a record owed that failed; the
/// stale files of the run directory.
pub mod records {
    pub use crate::ops::diagnose::rebuild_failed;
    pub use crate::ops::journal::handoff::prune as prune_handoffs;
    pub use crate::ops::journal::intent::{
        abandoned, claim, holding, sweep_dead_writers_temporaries, Claimed, Intent, NotClaimed,
        RecordedProcess, Start,
    };
    pub use crate::ops::journal::pidlock::prune as prune_lock_files;
}

/// Where the pipeline keeps its per-process locks, and the variable
/// that moves them (`doctor` checks the place as this user).
pub mod places {
    pub use crate::ops::journal::pidlock::{dir as lock_dir, DIR_VAR as LOCK_DIR_VAR};
}

/// CRIU's two faces: the list a pre-dump leaves its post-dump, the intent
/// record a group hands to the CRIU that dumps it, and a debug build's
/// kill points.
pub mod criu {
    pub use crate::ops::execute::failpoint::kill_at;
    pub use crate::ops::journal::handoff::{drop_for, give, take, Handoff};
    pub use crate::ops::journal::intent::release_handed_to;
}

/// The signals cudackpt catches, and their names.
pub mod signals {
    pub use crate::ops::execute::interrupt::{signal_name, CAUGHT};
}

/// The pre-flights, asked alone: what the driver restores on this host
/// (`doctor`), what host memory holds (`doctor --cgroup`).
pub mod preflights {
    pub use crate::ops::preflight::host_memory::{judge, HostNeed};
    pub use crate::ops::preflight::restorable::{facts_for, Verdict};
}

/// `demo`'s driver calls, one at a time, and their failures in words.
pub mod calls {
    pub use crate::ops::diagnose::{from_call, from_load_error, Attempt, Facts};
    pub use crate::ops::execute::call;
}

/// Work on many items with the bounded pool of the group commands.
pub use crate::ops::execute::concurrently;
