//! cudackpt's two faces for CRIU, in one room: the action script
//! (`--action-script`: cudackpt run by CRIU at each action) and the plugin
//! (loaded into CRIU; the ABI is the `cudackpt-criu-plugin` crate's). Both
//! read their [`settings`] once from the environment CRIU runs them in,
//! both suspend a tree as a group before CRIU dumps it (weighed first,
//! its intent record handed to that CRIU for `recover`), resume it on a
//! failure or after a restore, and ask drained ranks to rebuild through
//! the drain's one door. The code that finds, runs and reads CRIU as a
//! program is the disk commands' (`disk/criu_*`).
//!
//! - [`settings`]: what the environment says, read once.
//! - [`lifecycle`]: the group a CRIU run acts on, for both faces.
//! - [`action_script`]: what each CRIU action does, and the detached
//!   helpers (the watcher of a failed dump, the waiter for a thaw).
//! - [`plugin`]: what each plugin hook does, behind a `Host`.

pub mod action_script;
pub mod lifecycle;
pub mod plugin;
pub mod settings;
