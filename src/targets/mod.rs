//! The processes a command acts on: one process's /proc facts and the
//! caller's privileges (`process`), and discovery of CUDA processes in
//! trees, cgroups or the whole host (`discover`), PIDs across PID
//! namespaces (`namespace`), read-only.
//!
//! May use: `exit`, `files`, `environment`.

pub mod cgroup;
pub mod discover;
pub mod dumpable;
pub mod evidence;
pub mod identity;
pub mod kmsg;
pub mod memory;
pub mod name;
pub mod namespace;
pub mod process;
pub mod procfs;
pub mod unix_peers;
