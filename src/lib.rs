//! cudackpt: checkpoint and restore the CUDA state of running Linux
//! processes through the NVIDIA driver's checkpoint API.
//!
//! Layers, from the command line down: `cli` (clap types) → `app` (validate,
//! pick targets, run, render) → `plan` (what each process needs, pure) and
//! `execute` (concurrent phases and rollback) → `driver` (libcuda, the only
//! unsafe code). `diagnose` explains failures, `report` holds results,
//! `output` renders them, `exit` numbers them.

pub mod app;
pub mod artifacts;
pub mod cli;
pub mod compat;
pub mod criu_hook;
pub mod demo;
pub mod devices;
pub mod diagnose;
pub mod discover;
pub mod doctor;
pub mod driver;
pub mod execute;
pub mod exit;
pub mod gpu;
pub mod interrupt;
pub mod inventory;
pub mod logging;
pub mod migration;
pub mod nvml;
pub mod output;
pub mod pattern;
pub mod pidlock;
pub mod plan;
pub mod preflight;
pub mod process;
pub mod record;
pub mod report;
pub mod request;
#[cfg(test)]
mod surface_tests;
pub mod timeout;
