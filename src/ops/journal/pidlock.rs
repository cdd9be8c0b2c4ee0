//! One cudackpt at a time per process: a command that changes a process's
//! state holds an advisory lock (`flock`) on `PID.lock` in the lock
//! directory (`locks/` in the run directory, or `$CUDACKPT_LOCK_DIR`) for
//! its whole run, rollback included. A second invocation on the same
//! process gets a clear answer at once instead of interleaving its driver
//! calls with the first's. The kernel drops the lock when its holder exits,
//! however it exits, so a lock never goes stale; the file is removed when
//! released.
//!
//! The lock fails closed: a directory that cannot be made or trusted, or a
//! lock file that cannot be opened (EMFILE, a planted link), refuses the
//! command rather than running it unlocked (`--no-lock` runs it anyway).

use std::fs::File;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use crate::files::{self, SafeDir, UnsafeDir};

pub const DIR_VAR: &str = "CUDACKPT_LOCK_DIR";

/// A lock file's content is a PID.
const HOLDER_CAP: u64 = 32;

/// Locks held until dropped; their files are removed then.
pub struct Held {
    dir: Option<SafeDir>,
    files: Vec<(String, File)>,
}

impl Held {
    /// No lock at all (`--no-lock`).
    pub fn none() -> Held {
        Held {
            dir: None,
            files: Vec::new(),
        }
    }

    /// Why these locks no longer keep others out, if they do not: the lock
    /// directory was removed or replaced, or a lock file unlinked, so a
    /// second cudackpt would make a fresh one and get in.
    pub fn lost(&self) -> Option<String> {
        let dir = self.dir.as_ref()?;
        if !dir.is_still_at_its_path() {
            return Some(format!(
                "the lock directory {} was removed or replaced while this command held its locks",
                dir.path().display()
            ));
        }
        self.files
            .iter()
            .find(|(name, file)| !dir.still_holds(name, file))
            .map(|(name, _)| {
                format!(
                    "the lock file {} was removed while this command held it",
                    dir.path().join(name).display()
                )
            })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Unlink while still holding the lock, so nobody can take a lock on
        // a file that is about to vanish; a waiter then makes a fresh one.
        if let Some(dir) = &self.dir {
            for (name, _file) in &self.files {
                let _ = dir.remove(name);
            }
        }
    }
}

/// Why the locks could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another cudackpt holds the lock of `pid`.
    Busy {
        pid: i32,
        /// The PID of the cudackpt that holds it, when it could be read.
        holder: Option<i32>,
    },
    /// The lock directory or a lock file cannot be used.
    Unusable(UnsafeDir),
}

/// The lock directory: `$CUDACKPT_LOCK_DIR`, else `locks` in the run
/// directory.
pub fn dir() -> PathBuf {
    std::env::var_os(DIR_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(|| files::run_dir().join("locks"), PathBuf::from)
}

/// Takes the locks of every PID, or none.
pub fn acquire(pids: &[i32]) -> Result<Held, LockError> {
    acquire_in(&dir(), pids)
}

/// [`acquire`] with the lock directory given.
pub fn acquire_in(dir: &Path, pids: &[i32]) -> Result<Held, LockError> {
    let dir = SafeDir::create(dir).map_err(LockError::Unusable)?;
    let mut held = Held {
        dir: None,
        files: Vec::with_capacity(pids.len()),
    };
    for &pid in pids {
        let name = format!("{pid}.lock");
        let mut file = dir.open_lock_file(&name).map_err(LockError::Unusable)?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let text = SafeDir::read_open(&mut file, HOLDER_CAP);
            return Err(LockError::Busy {
                pid,
                holder: text.trim().parse().ok(),
            });
        }
        // Say who holds it, for the message the next one gets.
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()));
        held.files.push((name, file));
    }
    held.dir = Some(dir);
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(result: Result<Held, LockError>) -> (i32, Option<i32>) {
        match result {
            Err(LockError::Busy { pid, holder }) => (pid, holder),
            Err(LockError::Unusable(why)) => panic!("unusable: {why}"),
            Ok(_) => panic!("taken"),
        }
    }

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = acquire_in(dir.path(), &[4242, 4243]).expect("free");
        assert_eq!(
            busy(acquire_in(dir.path(), &[4243])),
            (4243, Some(std::process::id() as i32))
        );
        assert!(
            acquire_in(dir.path(), &[4244]).is_ok(),
            "other processes are free"
        );
        drop(first);
        assert!(
            !dir.path().join("4242.lock").exists(),
            "released lock files are removed"
        );
        assert!(acquire_in(dir.path(), &[4243]).is_ok(), "released on drop");
    }

    #[test]
    fn a_lock_directory_removed_under_its_holder_is_noticed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let locks = dir.path().join("locks");
        let held = acquire_in(&locks, &[7, 8]).expect("free");
        assert_eq!(held.lost(), None);
        std::fs::remove_file(locks.join("8.lock")).expect("unlink");
        assert!(held.lost().is_some_and(|why| why.contains("8.lock")));
        std::fs::remove_dir_all(&locks).expect("rm -rf");
        std::fs::create_dir(&locks).expect("a fresh one");
        assert!(held
            .lost()
            .is_some_and(|why| why.contains("removed or replaced")));
        assert_eq!(Held::none().lost(), None);
    }

    #[test]
    fn a_planted_link_or_an_unsafe_directory_fails_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").expect("victim");
        let locks = dir.path().join("locks");
        std::fs::create_dir(&locks).expect("locks");
        std::os::unix::fs::symlink(&victim, locks.join("7.lock")).expect("link");
        assert!(matches!(
            acquire_in(&locks, &[7]),
            Err(LockError::Unusable(UnsafeDir::Symlink { .. }))
        ));
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "precious"
        );
        let open = dir.path().join("open");
        std::fs::create_dir(&open).expect("dir");
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .expect("chmod");
        assert!(matches!(
            acquire_in(&open, &[7]),
            Err(LockError::Unusable(UnsafeDir::Writable { .. }))
        ));
    }
}
