//! cudackpt: checkpoint and restore the CUDA state of running Linux
//! processes through the NVIDIA driver's checkpoint API.

pub mod cli;
pub mod commands;
pub mod driver;
pub mod exit;
pub mod gpu;
pub mod ops;
pub mod output;
#[cfg(test)]
mod surface_tests;
pub mod targets;
