//! cudackpt: checkpoint and restore the CUDA state of running Linux
//! processes through the NVIDIA driver's checkpoint API.
//!
//! The house by floors, top first. A room uses only rooms on lower floors
//! (a test, `tests/cli/layout.rs`, fails on any arrow upwards, so there is
//! no import circle):
//!
//! 1. `cli`: argv in, exit status out. Picks the grammar (modern, NVIDIA's,
//!    the CRIU hook), validates it into a request, dispatches, renders.
//! 2. `output`: every renderer (human text, the JSON contract), `Sink`, `Look`.
//! 3. `commands`: the commands that are not one pass of the pipeline:
//!    check, demo, devices, doctor (and its cgroup `headroom`), ps,
//!    recover, install-compat, and the GPU test `pattern`; each returns a
//!    report value and never prints.
//! 4. `ops`: the process pipeline, as stages: select → check → pre-flights
//!    → choose the map → lock → drain → execute → finish; on floors of its
//!    own (`stages`, `drain`, `preflight`, `journal`, `execute`,
//!    `diagnose`, `vocabulary`), which the layout test holds too.
//! 5. `gpu`: the one GPU inventory, restore maps, NVML, checkpoint records.
//! 6. `targets` (/proc facts and discovery) and `driver` (libcuda: the only
//!    unsafe code, the checkpoint API, GPU UUIDs).
//! 7. `exit` (exit statuses) and `files` (reading files that may be planted).

pub mod cli;
pub mod commands;
pub mod driver;
pub mod exit;
pub mod files;
pub mod gpu;
pub mod ops;
pub mod output;
#[cfg(test)]
mod surface_tests;
pub mod targets;
