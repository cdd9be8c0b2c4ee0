//! Where intent records live: `intents/` in the run directory, and (for
//! root acting on one user's processes) that user's runtime directory,
//! where their own cudackpt finds it.

use std::path::{Path, PathBuf};

use super::record::RecordedProcess;
use crate::files::SafeDir;

/// Where intents live: `intents/` in the run directory (or wherever
/// `CUDACKPT_RECORD_DIR` moves records, as tests do).
pub fn dir() -> PathBuf {
    crate::gpu::record::dir(None).join("intents")
}

/// Where users' runtime directories are (`/run/user/UID`, as systemd-logind
/// makes them); a debug build takes another from
/// `CUDACKPT_DEBUG_USER_RUNTIME_BASE` (the tests' stand-in).
fn user_runtime_base() -> PathBuf {
    crate::environment::debug(crate::environment::DEBUG_USER_RUNTIME_BASE)
        .map_or_else(|| PathBuf::from("/run/user"), PathBuf::from)
}

/// The intents directory of user `uid`, as their own cudackpt keeps it
/// (`$XDG_RUNTIME_DIR/cudackpt/intents`, `/run/user/UID/...`).
pub(super) fn user_intents(uid: u32) -> PathBuf {
    user_runtime_base()
        .join(uid.to_string())
        .join("cudackpt")
        .join("intents")
}

/// The user whose runtime directory holds intents at `dir`, when it is one
/// (pure but for the base).
pub(super) fn user_of_intents(dir: &Path) -> Option<u32> {
    let relative = dir.strip_prefix(user_runtime_base()).ok()?;
    let uid: u32 = relative
        .components()
        .next()?
        .as_os_str()
        .to_str()?
        .parse()
        .ok()?;
    (dir == user_intents(uid)).then_some(uid)
}

/// Where root writes the record of `members`: in the runtime directory of
/// their one owner when that is another user who has one, so that the
/// owner's own cudackpt sees it (and refuses those processes, or recovers
/// them) and root's commands and theirs never take a process two ways;
/// else in root's. Another user's cudackpt writes in its own.
pub(super) fn home_for(members: &[RecordedProcess]) -> Option<u32> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let mut owners = members.iter().map(|m| m.owner);
    let first = owners.next()??;
    let one_owner = first != 0 && owners.all(|owner| owner == Some(first));
    let runtime = user_runtime_base().join(first.to_string());
    (one_owner && SafeDir::open_existing_of(&runtime, first).is_ok_and(|d| d.is_some()))
        .then_some(first)
}

pub(super) fn file_name(owner: i32) -> String {
    format!("{owner}.json")
}

/// This cudackpt's intents directory, and (as root) every user's that is
/// there and theirs.
pub(super) fn intent_dirs() -> Vec<SafeDir> {
    let own = SafeDir::open_existing(&dir()).ok().flatten();
    own.into_iter()
        .chain(users_intent_dirs().into_iter().map(|(_, dir)| dir))
        .collect()
}

/// As root, every user's intents directory that is there and theirs, with
/// its user; none for another user.
pub(super) fn users_intent_dirs() -> Vec<(u32, SafeDir)> {
    if !rustix::process::geteuid().is_root() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(user_runtime_base()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let uid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let dir = SafeDir::open_existing_of(&user_intents(uid), uid).ok()??;
            Some((uid, dir))
        })
        .collect()
}
