//! The commands that are not one pass of the process pipeline: `check`
//! (two dry runs), `demo`, `devices`, `doctor` (with `headroom`, its
//! cgroup check), `ps` (the pipeline's `state` plus NVML), `recover`,
//! `install_compat`, `criu` (cudackpt's action script and plugin for
//! CRIU), `disk` (`dump` and `undump`: a job to disk and back
//! through CRIU), and `pattern` (the data `demo` and the GPU test target
//! write). Each returns a report value and never prints; `output` renders
//! it.
//!
//! May use: `api`, `ops`, `gpu`, `targets`, `driver`, `exit`, `files`, `environment`.

pub mod check;
pub mod criu;
pub mod demo;
pub mod devices;
pub mod disk;
pub mod doctor;
pub mod headroom;
pub mod install_compat;
pub mod pattern;
pub mod ps;
pub mod recover;
pub mod slurm;
