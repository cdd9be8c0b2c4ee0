//! The pipeline's own stages, in the order it runs them (`ops::run`):
//!
//! 1. `select`: the targets named, and the CUDA processes found in trees,
//!    cgroups or the whole host;
//! 2. `check`: every target alive, a process, ours to act on, not stopped;
//! 3. the pre-flights (`ops::preflight`): a checkpoint the driver could
//!    not restore, host memory;
//! 4. `choose_map`: the GPU map of a restore;
//! 5. `lock`: one cudackpt at a time per process; then (5b) the GPU-memory
//!    pre-flight of a restore, which needs the map;
//! 6. `drain`, when asked for: the handshake (`crate::drain`) before the
//!    calls, the rebuilds after them;
//! 7. the driver calls (`ops::execute`), watched by `postmortem` for a
//!    target that dies;
//! 8. `finish`: records and `--verify` after the calls;
//!
//! or, for `--dry-run`, `dry_run` after stage 5's checks: what would happen.

pub mod check;
pub mod choose_map;
pub mod drain;
pub mod dry_run;
pub mod finish;
pub mod lock;
pub mod postmortem;
pub mod select;
