//! The library's face: what a program other than the `cudackpt` command
//! uses, and what the command itself goes through.
//! - `process`: one process and the driver's operations on it;
//! - `group`: a command over many processes, all-or-nothing, as the tool
//!   runs it;
//! - `map`: where a restore puts GPU memory;
//! - `report`: what a group's command did, the library's own types.
//!
//! May use: `ops`, `gpu`, `targets`, `driver`, `exit`, `files`.

pub mod group;
pub mod map;
pub mod process;
pub mod report;
