//! Checkpoint and restore the CUDA state of running Linux processes through
//! the NVIDIA driver's checkpoint API (driver 570 or newer; GPU maps need
//! 580).
//!
//! A checkpoint copies a process's GPU memory into its own host memory and
//! releases its GPUs; a restore brings the memory back, onto the same GPUs
//! or others. Between the two the process is stopped on the GPU only: a
//! tool such as CRIU can then dump it whole.
//!
//! Two ways in:
//! - [`Process`]: one process and the driver's own operations on it, as
//!   NVIDIA's Python API (`cuda.core.checkpoint.Process`) offers them:
//!   [`state`](Process::state), [`restore_thread_id`](Process::restore_thread_id),
//!   [`lock`](Process::lock) and [`try_lock`](Process::try_lock),
//!   [`checkpoint`](Process::checkpoint), [`restore`](Process::restore),
//!   [`unlock`](Process::unlock), and [`suspend`](Process::suspend),
//!   [`resume`](Process::resume), [`toggle`](Process::toggle) and
//!   [`wait_for_state`](Process::wait_for_state) built from them.
//! - [`Group`]: a command over many processes as the `cudackpt` command
//!   runs it (the command is this library's first client): targets found by
//!   PID, process tree or cgroup, the pre-flights that refuse what the
//!   driver could never restore, cudackpt's per-PID locks and crash
//!   journal, concurrent driver calls, all-or-nothing with rollback, and a
//!   [`Report`] per command.
//!
//! ```
//! # include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/doc/support.rs"));
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let fake = Fake::start();
//! # let (libcuda, pid) = (fake.libcuda(), fake.pid());
//! use std::time::Duration;
//! use cudackpt::{Driver, Process, ProcessState, TryLock};
//!
//! let driver = Driver::load(libcuda)?; // None: the host's libcuda.so.1
//! let process = Process::open(&driver, pid)?;
//! if process.try_lock(Duration::from_secs(5))? == TryLock::Locked {
//!     process.checkpoint()?;
//!     // ... dump the process, move it, or just hold its GPUs free ...
//!     process.restore(&[])?;
//!     process.unlock()?;
//! }
//! process.wait_for_state(ProcessState::Running, Duration::from_secs(1))?;
//! # Ok(())
//! # }
//! ```
//!
//! Nothing here calls `cuInit`: the checkpoint functions do not need it.
//! The driver's behaviour that cudackpt relies on, measured on H100 and
//! H200 GPUs, is in the repository's `docs/driver-facts.md`.
//!
//! # The house
//!
//! By floors, top first. A room uses only rooms on lower floors (a test,
//! `tests/house/layout.rs`, fails on any arrow upwards, so there is no import
//! circle):
//!
//! 1. `cli`: argv in, exit status out. Picks the grammar (modern, NVIDIA's,
//!    the CRIU hook), validates it into a [`Group`], runs it, renders.
//! 2. `output`: every renderer (human text, the JSON contract).
//! 3. `commands`: the commands that are not one pass of the pipeline:
//!    check, demo, devices, doctor, ps, recover, install-compat, the CRIU
//!    hook, dump and undump, and the GPU test `pattern`; each returns a
//!    report value and never prints.
//! 4. `api`: this face ([`Process`], [`Group`], [`GpuMap`]).
//! 5. `ops`: the process pipeline, as stages: select → check → pre-flights
//!    → choose the map → lock → drain → execute → finish, on floors of its
//!    own, which the layout test holds too.
//! 6. `vocabulary`: the words every floor above speaks (the request, the
//!    plan, the report, failures, the stop, the ready targets, timeouts,
//!    prose), which name nothing of the pipeline.
//! 7. `drain`: the drain protocol whole (its words and constants, the
//!    handshake with a process, the signals' ledger, the processes left
//!    drained, its report and settings), but for the pipeline's stage in
//!    `ops`; it uses nothing of `ops`.
//! 8. `gpu`: the one GPU inventory, restore maps, NVML, checkpoint records.
//! 9. `targets` (/proc facts and discovery) and `driver` (libcuda: the only
//!    unsafe code, the checkpoint API, GPU UUIDs).
//! 10. `exit` (exit statuses) and `files` (reading files that may be planted).
//! 11. `environment`: every environment variable cudackpt reads, read there.

#![warn(missing_docs, unnameable_types)]

pub(crate) mod api;
pub(crate) mod cli;
pub(crate) mod commands;
pub(crate) mod drain;
pub(crate) mod driver;
pub(crate) mod environment;
pub(crate) mod exit;
pub(crate) mod files;
pub(crate) mod gpu;
pub(crate) mod ops;
pub(crate) mod output;
#[cfg(test)]
mod surface_tests;
pub(crate) mod targets;
pub(crate) mod vocabulary;

pub use api::group::Group;
pub use api::map::{GpuMap, Pairs};
pub use api::process::{Error, Process, TryLock};
pub use api::report::{
    DrainOutcome, DrainReport, Failure, FailureKind, GpuMemory, ProcessReport, Report, StepKind,
    StepRecord,
};
pub use driver::{
    code, CallError, CheckpointApi, CudaError, DeviceBuffer, DeviceInfo, DeviceSession, Driver,
    GpuPair, GpuUuid, LoadAttempt, LoadError, MissingFunction, ProcessState, UnknownState,
    UuidError,
};
pub use exit::ExitStatus;
pub use files::UntrustedLibrary;
pub use gpu::map::MapError;
pub use targets::process::{IdentityLost, TargetError};

/// What the `cudackpt` binary, the tests, the benchmarks and the GPU test
/// target use of the inside: not part of the library's interface, and
/// free to change in any release.
#[doc(hidden)]
pub mod internal {
    pub use crate::cli::main as cli_main;
    pub use crate::commands::criu::plugin as criu_plugin;
    pub use crate::commands::criu::settings::plugin_settings as criu_plugin_settings;
    pub use crate::commands::pattern;
    pub use crate::drain::protocol as drain_protocol;
    pub use crate::exit::ALL as EXIT_STATUSES;
    pub use crate::output::criu_log::lines as criu_log_lines;
    pub use crate::output::json::schemas;
    pub use crate::targets::discover::{mounts, Mount};
    pub use crate::targets::memory::v1_memory_hierarchy;
    pub use crate::targets::name::printable;

    /// The modern grammar, as clap describes it.
    pub fn cli_command() -> clap::Command {
        <crate::cli::args::Cli as clap::CommandFactory>::command()
    }
}
