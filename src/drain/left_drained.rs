//! Which processes a cudackpt drained and left drained (cudackpt(1), DRAIN PROTOCOL): a file
//! per process in `drained/` of the run directory, written when a command
//! ends with a member that acknowledged its drain still locked or
//! checkpointed, and removed when it is asked to rebuild.
//!
//! The marker is a thread name, which any process can take. It is believed
//! (its launcher's world size no longer held against it before a
//! checkpoint) only of a process this command asked and saw answer, or one
//! this file vouches for: the same PID and start time. So `lock --drain`
//! then `checkpoint` goes, and a plain `checkpoint` of a rank that names a
//! thread `cudackpt-drain1` is refused like any rank.

use serde::{Deserialize, Serialize};

use crate::files::SafeDir;
use crate::targets::process;

/// A drained process's file is a few dozen bytes.
const CAP: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    pid: i32,
    /// Field 22 of /proc/PID/stat: a reused PID is not vouched for.
    starttime: Option<u64>,
    /// The signal it was drained with.
    signal: i32,
}

fn dir() -> std::path::PathBuf {
    crate::gpu::record::dir(None).join("drained")
}

fn file_name(pid: i32) -> String {
    format!("{pid}.json")
}

/// Notes that `pid` drained for this command and stays drained.
pub fn note(pid: i32, signal: i32) {
    let entry = Entry {
        pid,
        starttime: process::starttime(pid),
        signal,
    };
    let written = SafeDir::create(&dir())
        .map_err(|e| e.to_string())
        .and_then(|dir| {
            let text = serde_json::to_string(&entry).unwrap_or_default();
            dir.write_atomic(&file_name(pid), text.as_bytes())
                .map_err(|e| e.to_string())
        });
    if let Err(error) = written {
        tracing::warn!(pid, %error, "could not note the drained process");
    }
}

/// Whether a cudackpt drained `pid` (this very process) and left it
/// drained.
pub fn vouches_for(pid: i32) -> bool {
    let Ok(Some(dir)) = SafeDir::open_existing(&dir()) else {
        return false;
    };
    vouches_in(&dir, pid)
}

/// [`vouches_for`], in the directory already open.
fn vouches_in(dir: &SafeDir, pid: i32) -> bool {
    let Ok(Some(text)) = dir.read_capped(&file_name(pid), CAP) else {
        return false;
    };
    serde_json::from_str::<Entry>(&text).is_ok_and(|entry| {
        entry.pid == pid && entry.starttime.is_some() && entry.starttime == process::starttime(pid)
    })
}

/// Forgets `pid`: it was asked to rebuild, or is gone.
pub fn forget(pid: i32) {
    if let Ok(Some(dir)) = SafeDir::open_existing(&dir()) {
        let _ = dir.remove(&file_name(pid));
    }
}

/// Removes the files of processes gone since (their PID dead, or another
/// process's now); returns how many.
pub fn prune() -> usize {
    let Ok(Some(dir)) = SafeDir::open_existing(&dir()) else {
        return 0;
    };
    let mut pruned = 0;
    for (name, pid) in dir.pid_files(".json") {
        if !vouches_in(&dir, pid) {
            let _ = dir.remove(&name);
            pruned += 1;
        }
    }
    pruned
}
