//! Whether a tree's CUDA processes are running, as the driver says: after
//! an undump (the restore must have brought them back) and after a failed
//! dump (the action script's watcher resumes them).

use std::path::Path;

use crate::api::group::Group;
use crate::driver::ProcessState;
use crate::vocabulary::plan::Operation;

/// The first CUDA process in `root`'s tree that is not running, named
/// (`PID 42 (checkpointed)`); None when every one runs.
pub fn first_not_running(libcuda: Option<&Path>, root: i32) -> Option<String> {
    let states = Group::new()
        .libcuda_option(libcuda)
        .tree(root)
        .run(Operation::State { restore_tid: false });
    states
        .processes
        .iter()
        .find(|p| p.state.is_some_and(|s| s != ProcessState::Running))
        .map(|p| {
            format!(
                "PID {} ({})",
                p.pid,
                p.state.map_or("unknown", |s| s.as_str())
            )
        })
}
