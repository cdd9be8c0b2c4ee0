//! What cudackpt's two CRIU faces do the same way: the group a CRIU run
//! acts on, with the settings read once ([`super::settings`]) — the
//! driver library, the confirmation the whole host needs, `--force`, the
//! drain — and the tree CRIU names by its root. A dump's group is handed
//! to the CRIU that runs it (`Group::criu_dump`): its intent record
//! outlives the command, so a CRIU that dies mid-dump leaves `recover`
//! what puts the group back. Each face then runs its operations on it:
//! the action script one per CRIU action, the plugin one per hook.

use std::path::Path;

use super::settings::HookSettings;
use crate::api::group::Group;
use crate::vocabulary::request::Selectors;

/// The group of a CRIU run, its settings applied.
pub fn group<'a>(libcuda: Option<&'a Path>, settings: &HookSettings) -> Group<'a> {
    Group::new()
        .libcuda_option(libcuda)
        .confirmed(settings.confirmed)
        .options(settings.force, false, false)
        .drain_options(settings.drain)
}

/// The processes of the tree CRIU names by its root, and `candidates`
/// besides (confirmed by the driver, dropped if gone).
pub fn tree(root: Option<i32>, candidates: Vec<i32>) -> Selectors {
    Selectors {
        trees: root.into_iter().collect(),
        candidates,
        ..Selectors::default()
    }
}
