//! A fake `libcuda.so.1` for cudackpt's tests (see `README.md`, the contract).
//!
//! It exports the CUDA driver functions cudackpt calls, keeps each target
//! process's checkpoint state in a file so that separate invocations see the
//! same process, and injects the failures the spec lists. Layout:
//!
//! - `exports`: every `extern "C"` symbol; pointer checks and argument reading.
//! - `ops`: what a checkpoint call does to a process (the behaviour).
//! - `state`: the state machine and its on-disk store, and `calls.log`.
//! - `inject`: failure-injection rules.
//! - `procfs`: facts about processes from `/proc`.
//! - `forks`: children forked from a fake CUDA process, without CUDA state.
//! - `devices`: the fake GPUs, `cuInit`, GPU-map checks.
//! - `memory`: contexts and "device" memory (host memory) for `demo`.
//! - `oom`: the `oom_kill` effect (the kernel killing a target, counted in a cgroup tree).
//! - `nvml`: the fake NVML, for when the library is copied as `libnvidia-ml.so.1`.
//! - `codes`: `CUresult` values and their names.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod codes;
mod devices;
mod exports;
mod forks;
mod inject;
mod memory;
mod nvml;
mod oom;
mod ops;
mod procfs;
mod state;

use std::io::Write;

/// Writes one diagnostic line to stderr, prefixed `fake-libcuda:`. Never
/// panics (unlike `eprintln!`), whatever stderr is.
pub(crate) fn warn(message: &str) {
    let _ = writeln!(std::io::stderr(), "fake-libcuda: {message}");
}
