//! One cudackpt at a time per process: a command that changes a process's
//! state holds an advisory lock (`flock`) on `PID.lock` in the lock
//! directory (`locks/` in the run directory, or `$CUDACKPT_LOCK_DIR`) for
//! its whole run, rollback included. A second invocation on the same
//! process gets a clear answer at once instead of interleaving its driver
//! calls with the first's. The kernel drops the lock when its holder exits,
//! however it exits, so a lock never goes stale.
//!
//! A lock file stays while its process lives: the next command on that
//! process opens it again instead of creating it, since creating and
//! unlinking a file cost 0.2 to 0.4 ms where the run directory is on disk
//! (ext4, measured on the GPU host), a tenth of the bare driver call. The
//! holder's PID is written over the file in place, in a fixed width. The
//! file of a process found gone at release is removed then (still held), and
//! `recover` removes the ones whose process is gone and nobody holds.
//!
//! The lock fails closed: a directory that cannot be made or trusted, or a
//! lock file that cannot be opened (EMFILE, a planted link), refuses the
//! command rather than running it unlocked (`--no-lock` runs it anyway).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use crate::files::{self, SafeDir, UnsafeDir};

pub const DIR_VAR: &str = crate::environment::LOCK_DIR;

/// A lock file's content is a PID.
const HOLDER_CAP: u64 = 32;

/// Locks held until dropped.
pub struct PidLocks {
    dir: Option<SafeDir>,
    /// Each lock's file name, file and process.
    files: Vec<(String, File, i32)>,
    /// The same processes' names shared with every user
    /// (`process_lock`), once taken.
    names: Option<super::process_lock::NameLocks>,
}

impl PidLocks {
    /// No lock at all (`--no-lock`).
    pub fn none() -> PidLocks {
        PidLocks {
            dir: None,
            files: Vec::new(),
            names: None,
        }
    }

    /// Also holds `names`, the processes' locks shared across users.
    pub fn with_names(mut self, names: super::process_lock::NameLocks) -> PidLocks {
        self.names = Some(names);
        self
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
            .find(|(name, file, _)| !dir.still_holds(name, file))
            .map(|(name, _, _)| {
                format!(
                    "the lock file {} was removed while this command held it",
                    dir.path().join(name).display()
                )
            })
    }
}

impl Drop for PidLocks {
    fn drop(&mut self) {
        // The file of a process that is gone goes too, unlinked while still
        // held, so nobody can take a lock on a file that is about to vanish;
        // a live process keeps its file for the next command.
        if let Some(dir) = &self.dir {
            for (name, _file, pid) in &self.files {
                if !process_exists(*pid) {
                    let _ = dir.remove(name);
                }
            }
        }
    }
}

/// Whether `/proc/PID` is there: one stat, as this runs at every release
/// (`process::is_alive` reads the status file to tell a zombie, which only
/// keeps a file a little longer, until `recover` prunes it).
fn process_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
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
    crate::environment::os(DIR_VAR).map_or_else(|| files::run_dir().join("locks"), PathBuf::from)
}

/// Takes the locks of every PID, or none.
pub fn acquire(pids: &[i32]) -> Result<PidLocks, LockError> {
    acquire_in(&dir(), pids)
}

/// [`acquire`] with the lock directory given.
pub fn acquire_in(dir: &Path, pids: &[i32]) -> Result<PidLocks, LockError> {
    let dir = SafeDir::create(dir).map_err(LockError::Unusable)?;
    let mut held = PidLocks {
        dir: None,
        files: Vec::with_capacity(pids.len()),
        names: None,
    };
    for &pid in pids {
        let name = format!("{pid}.lock");
        let mut file = dir.open_lock_file(&name).map_err(LockError::Unusable)?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let text = SafeDir::read_open(&mut file, HOLDER_CAP);
            return Err(LockError::Busy {
                pid,
                holder: holder_of(&text),
            });
        }
        // Say who holds it, for the message the next one gets: written over
        // what the last holder wrote, in a width that covers any PID.
        let _ = file.write_all_at(holder_text(std::process::id()).as_bytes(), 0);
        held.files.push((name, file, pid));
    }
    held.dir = Some(dir);
    Ok(held)
}

/// What a holder writes in a lock file: its PID, padded to the width of the
/// largest one, so that a shorter PID overwrites a longer one whole.
fn holder_text(pid: u32) -> String {
    format!("{pid:<10}\n")
}

/// The holder's PID in a lock file's text: its first line.
fn holder_of(text: &str) -> Option<i32> {
    text.lines().next()?.trim().parse().ok()
}

/// Removes the lock files of processes that are gone and that nobody holds
/// (`recover` calls it); returns how many. Each is unlinked while this
/// holds it, as at release.
pub fn prune() -> usize {
    prune_in(&dir())
}

/// [`prune`] with the lock directory given.
pub fn prune_in(dir: &Path) -> usize {
    let Ok(Some(dir)) = SafeDir::open_existing(dir) else {
        return 0;
    };
    let mut removed = 0;
    for (name, pid) in dir.pid_files(".lock") {
        if process_exists(pid) {
            continue;
        }
        let Ok(file) = dir.open_lock_file(&name) else {
            continue;
        };
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok()
            && dir.remove(&name).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(result: Result<PidLocks, LockError>) -> (i32, Option<i32>) {
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
        assert!(acquire_in(dir.path(), &[4243]).is_ok(), "released on drop");
    }

    // Above the kernel's PID_MAX_LIMIT (4194304): never a live process.
    const GONE: i32 = 4_194_305;

    #[test]
    fn a_live_process_keeps_its_lock_file_and_a_gone_one_loses_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let me = std::process::id() as i32;
        drop(acquire_in(dir.path(), &[me, GONE]).expect("free"));
        assert!(
            dir.path().join(format!("{me}.lock")).exists(),
            "kept for the next command"
        );
        assert!(
            !dir.path().join(format!("{GONE}.lock")).exists(),
            "removed at release"
        );
        // The next holder writes over the last one's PID in place.
        std::fs::write(dir.path().join(format!("{me}.lock")), "123456789012345\n")
            .expect("a long one");
        let held = acquire_in(dir.path(), &[me]).expect("free again");
        let text = std::fs::read_to_string(dir.path().join(format!("{me}.lock"))).expect("read");
        assert_eq!(holder_of(&text), Some(me), "{text:?}");
        drop(held);
    }

    #[test]
    fn prune_removes_the_files_of_gone_processes_that_nobody_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let locks = dir.path().join("locks");
        let me = std::process::id() as i32;
        drop(acquire_in(&locks, &[me]).expect("free"));
        std::fs::write(locks.join(format!("{GONE}.lock")), holder_text(1)).expect("stale");
        std::fs::write(locks.join(format!("{}.lock", GONE + 1)), holder_text(1)).expect("held");
        std::fs::write(locks.join("notes.txt"), "not a lock").expect("other");
        let held = acquire_in(&locks, &[GONE + 1]).expect("free");
        assert_eq!(prune_in(&locks), 1);
        assert!(!locks.join(format!("{GONE}.lock")).exists());
        assert!(
            locks.join(format!("{}.lock", GONE + 1)).exists(),
            "held: left alone"
        );
        assert!(
            locks.join(format!("{me}.lock")).exists(),
            "live: left alone"
        );
        assert!(locks.join("notes.txt").exists());
        drop(held);
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
        assert_eq!(PidLocks::none().lost(), None);
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
