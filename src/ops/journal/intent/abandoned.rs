//! The records a dead cudackpt left, and `recover`'s claim on one: found
//! in every intents directory (a user's believed only of that user's
//! processes), taken over under a lock so that two `recover`s never send
//! one process two signals, and written again as it signals.

use std::path::{Path, PathBuf};

use super::places::{dir, intent_dirs, user_of_intents, users_intent_dirs};
use super::record::{Intent, INTENT_CAP};
use crate::drain::ledger::SignalLedger;
use crate::files::{SafeDir, UnsafeDir};
use crate::targets::process;
use crate::vocabulary::locked;

/// Every intent left by a cudackpt that died, with its file's path; none
/// when there is no record directory yet. `Err`: the directory is there
/// but could not be read or trusted, so nobody can say what it holds.
/// Root also reads every user's runtime directory, believing a record
/// there only of that user's own processes.
pub fn abandoned() -> Result<Vec<(PathBuf, Intent)>, UnsafeDir> {
    let path = dir();
    let mut found = match SafeDir::open_existing(&path)? {
        Some(dir) => abandoned_in(&dir)?,
        None => Vec::new(),
    };
    found.extend(abandoned_in_users_dirs());
    Ok(found)
}

/// What the users' runtime directories hold, each record narrowed to the
/// processes of that directory's user; what cannot be read is skipped.
fn abandoned_in_users_dirs() -> Vec<(PathBuf, Intent)> {
    let mut found = Vec::new();
    for (uid, dir) in users_intent_dirs() {
        for (path, mut intent) in abandoned_in(&dir).unwrap_or_default() {
            intent.keep_members_of(uid);
            if !intent.members.is_empty() {
                found.push((path, intent));
            }
        }
    }
    found
}

/// The abandoned records in one directory.
fn abandoned_in(dir: &SafeDir) -> Result<Vec<(PathBuf, Intent)>, UnsafeDir> {
    let entries = std::fs::read_dir(dir.path()).map_err(|source| UnsafeDir::Io {
        path: dir.path().to_path_buf(),
        source,
    })?;
    Ok(entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().to_str()?.to_string();
            if !name.ends_with(".json") || name.starts_with('.') {
                return None;
            }
            let text = dir.read_capped(&name, INTENT_CAP).ok()??;
            let intent: Intent = serde_json::from_str(&text).ok()?;
            intent
                .owner_is_dead()
                .then(|| (dir.path().join(&name), intent))
        })
        .collect())
}

/// Removes the half-written records of dead writers: a cudackpt killed
/// between creating a record's temporary file and renaming it into place
/// leaves `.PID.json.RANDOM.tmp`, which no record reader looks at. Root's
/// directory and the users' alike; a writer still alive keeps its file.
/// Returns how many went.
pub fn sweep_dead_writers_temporaries() -> usize {
    let mut dirs: Vec<SafeDir> = SafeDir::open_existing(&dir())
        .ok()
        .flatten()
        .into_iter()
        .collect();
    dirs.extend(users_intent_dirs().into_iter().map(|(_, dir)| dir));
    let mut swept = 0;
    for dir in dirs {
        for name in dir.names().unwrap_or_default() {
            let Some(name) = name.to_str() else { continue };
            let dead = temporary_writer(name).is_some_and(|pid| !process::is_alive(pid));
            if dead && dir.remove(name).is_ok() {
                swept += 1;
            }
        }
    }
    swept
}

/// The PID that wrote a temporary record file (`.PID.json.HEX.tmp`), if
/// `name` is one (pure).
pub fn temporary_writer(name: &str) -> Option<i32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (record, random) = rest.rsplit_once('.')?;
    if random.is_empty() || !random.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    record
        .strip_suffix(".json")?
        .parse()
        .ok()
        .filter(|pid: &i32| *pid > 0)
}

/// Removes the records a pre-dump handed to `criu`, which is alive and
/// dumping (its post-dump takes them: the dump went on, and its own waiter
/// resumes what CRIU leaves running). Returns how many.
pub fn release_handed_to(criu: crate::targets::identity::Identity) -> usize {
    let mut released = 0;
    for dir in intent_dirs() {
        for (name, _) in dir.pid_files(".json") {
            let handed = dir
                .read_capped(&name, INTENT_CAP)
                .ok()
                .flatten()
                .and_then(|text| serde_json::from_str::<Intent>(&text).ok())
                .is_some_and(|intent| intent.handed_to(criu));
            if handed && dir.remove(&name).is_ok() {
                released += 1;
            }
        }
    }
    released
}

/// An abandoned record taken over by one `recover`: it holds the record's
/// lock file (`NAME.lock`, flock) until dropped, so a second `recover` at
/// the same time sends nothing to its processes, and it writes the record
/// again as it signals them, so a `recover` killed midway leaves the next
/// one an exact account too.
pub struct Claimed {
    dir: SafeDir,
    name: String,
    /// The flock, released when dropped (or by the kernel when the holder
    /// dies).
    _lock: std::fs::File,
    intent: std::sync::Mutex<Intent>,
}

/// Why a record could not be taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotClaimed {
    /// Another cudackpt (this PID, when it said) holds it.
    Busy(Option<i32>),
    /// It is gone (the other `recover` finished it), or cannot be read.
    Gone,
}

/// Takes the record at `path` over, or says who has it.
pub fn claim(path: &Path) -> Result<Claimed, NotClaimed> {
    use std::os::unix::fs::FileExt;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(NotClaimed::Gone);
    };
    let opened = match user_of_intents(parent) {
        Some(user) => SafeDir::open_existing_of(parent, user),
        None => SafeDir::open_existing(parent),
    };
    let Ok(Some(dir)) = opened else {
        return Err(NotClaimed::Gone);
    };
    let lock_name = format!("{name}.lock");
    // Made as the directory's user, who must be able to take it too.
    let mut lock = dir
        .as_its_user(|| dir.open_lock_file(&lock_name))
        .map_err(|_| NotClaimed::Gone)?
        .map_err(|_| NotClaimed::Gone)?;
    use rustix::fs::{flock, FlockOperation};
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        let text = SafeDir::read_open(&mut lock, 32);
        return Err(NotClaimed::Busy(text.trim().parse().ok()));
    }
    let _ = lock.set_len(0);
    let _ = lock.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0);
    // Read under the lock: the one before may have finished it, or changed
    // it as it signalled.
    let mut intent = match dir.read_capped(name, INTENT_CAP) {
        Ok(Some(text)) => serde_json::from_str::<Intent>(&text).map_err(|_| NotClaimed::Gone)?,
        _ => {
            let _ = dir.remove(&lock_name);
            return Err(NotClaimed::Gone);
        }
    };
    // A user's directory is believed only of that user's processes.
    if let Some(user) = user_of_intents(parent) {
        intent.keep_members_of(user);
    }
    Ok(Claimed {
        dir,
        name: name.to_string(),
        _lock: lock,
        intent: std::sync::Mutex::new(intent),
    })
}

impl Claimed {
    pub fn intent(&self) -> Intent {
        locked(&self.intent).clone()
    }

    /// Removes the record (its processes are back), then its lock file.
    pub fn finish(self) {
        let _ = self.dir.remove(&self.name);
        let _ = self.dir.remove(&format!("{}.lock", self.name));
    }

    fn write(&self) {
        let text = serde_json::to_string_pretty(&*locked(&self.intent)).unwrap_or_default();
        // As the directory's user: a record in a user's directory stays
        // theirs to read.
        let written = self
            .dir
            .as_its_user(|| self.dir.write_atomic(&self.name, text.as_bytes()))
            .and_then(|written| written);
        if let Err(error) = written {
            tracing::warn!(%error, "could not write the recovered record again");
        }
    }
}

impl SignalLedger for Claimed {
    fn begin(&self, pid: i32) {
        if let Some(note) = locked(&self.intent).drain.as_mut() {
            note.begin(pid);
        }
        self.write();
    }

    fn end(&self, pid: i32, delivered: bool) {
        if let Some(note) = locked(&self.intent).drain.as_mut() {
            note.end(pid, delivered);
        }
    }

    fn flush(&self) {
        self.write();
    }
}

/// The abandoned intent that names `pid` (the same process), if any: its
/// path, the PID of its owner, and who that owner was in words.
pub fn holding(pid: i32, abandoned: &[(PathBuf, Intent)]) -> Option<(PathBuf, i32, String)> {
    let now = process::starttime(pid);
    abandoned.iter().find_map(|(path, intent)| {
        intent
            .members
            .iter()
            .any(|m| m.pid == pid && m.started_at(now))
            .then(|| (path.clone(), intent.owner_pid, intent.left_by()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_record_names_its_writer_and_nothing_else_does() {
        assert_eq!(
            temporary_writer(".4242.json.00ff12ab34cd56ef.tmp"),
            Some(4242)
        );
        assert_eq!(temporary_writer("4242.json"), None);
        assert_eq!(temporary_writer(".4242.json.tmp"), None);
        assert_eq!(temporary_writer(".4242.json.zz.tmp"), None);
        assert_eq!(temporary_writer(".lock.json.00ff.tmp"), None);
        assert_eq!(temporary_writer(".0.json.00ff.tmp"), None);
    }
}
