//! What CRIU's pre-dump hook suspended, handed to the post-dump hook of
//! the same `criu dump` (both are children of that CRIU process): a file
//! per CRIU process in `criu-hook/` of the run directory. Post-dump resumes
//! exactly these processes, each identified by PID and start time, and
//! never one it merely finds in the tree (one another user checkpointed on
//! purpose, say).

use serde::{Deserialize, Serialize};

use crate::files::{SafeDir, UnsafeDir};
use crate::targets::identity::Identity;

/// A handoff is a few KiB.
const CAP: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// The CRIU process both hooks run under.
    pub criu: Identity,
    /// CRIU's CRTOOLS_INIT_PID.
    pub root: i32,
    /// What pre-dump suspended.
    pub suspended: Vec<Identity>,
}

fn dir() -> std::path::PathBuf {
    crate::gpu::record::dir(None).join("criu-hook")
}

fn file_name(criu: i32) -> String {
    format!("{criu}.json")
}

/// Writes what pre-dump suspended; says why it could not.
pub fn give(handoff: &Handoff) -> Result<(), UnsafeDir> {
    let dir = SafeDir::create(&dir())?;
    let text = serde_json::to_string(handoff).unwrap_or_default();
    let name = file_name(handoff.criu.pid);
    dir.write_atomic(&name, text.as_bytes())
        .map(drop)
        .map_err(|source| UnsafeDir::Io {
            path: dir.path().join(&name),
            source,
        })
}

/// Removes what a pre-dump left for `criu` (the watcher, once that CRIU
/// has ended: a failed dump runs no post-dump to take it).
pub fn drop_for(criu: Identity) {
    let Ok(Some(dir)) = SafeDir::open_existing(&dir()) else {
        return;
    };
    let name = file_name(criu.pid);
    let mine = dir
        .read_capped(&name, CAP)
        .ok()
        .flatten()
        .and_then(|text| serde_json::from_str::<Handoff>(&text).ok())
        .is_some_and(|handoff| handoff.criu == criu);
    if mine {
        let _ = dir.remove(&name);
    }
}

/// Removes what pre-dumps left for CRIU processes that are gone (a dump
/// that failed, and whose watcher never ran): `recover`'s housekeeping.
/// Returns how many.
pub fn prune() -> usize {
    let Ok(Some(dir)) = SafeDir::open_existing(&dir()) else {
        return 0;
    };
    let mut pruned = 0;
    for (name, _) in dir.pid_files(".json") {
        let gone = dir
            .read_capped(&name, CAP)
            .ok()
            .flatten()
            .and_then(|text| serde_json::from_str::<Handoff>(&text).ok())
            .is_none_or(|handoff| !handoff.criu.is_still_there());
        if gone && dir.remove(&name).is_ok() {
            pruned += 1;
        }
    }
    pruned
}

/// Takes (reads and removes) what the pre-dump of this same CRIU process,
/// for this tree, suspended: `None` when it suspended nothing (or another
/// CRIU, since gone, wrote the file).
pub fn take(criu: Identity, root: i32) -> Option<Handoff> {
    let dir = SafeDir::open_existing(&dir()).ok()??;
    let name = file_name(criu.pid);
    let text = dir.read_capped(&name, CAP).ok()??;
    let _ = dir.remove(&name);
    let handoff: Handoff = serde_json::from_str(&text).ok()?;
    (handoff.criu == criu && handoff.root == root).then_some(handoff)
}
