//! Processes.

pub mod discover;
pub mod process;
