//! One cudackpt at a time per process: a command that changes a process's
//! state holds an advisory lock (`flock`) on `/run/cudackpt/locks/PID.lock`
//! (or `$CUDACKPT_LOCK_DIR`) for its whole run, rollback included. A second
//! invocation on the same process gets a clear answer at once instead of
//! interleaving its driver calls with the first's. The kernel drops the lock
//! when its holder exits, however it exits, so a lock never goes stale.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

pub const DIR_VAR: &str = "CUDACKPT_LOCK_DIR";
const DEFAULT_DIR: &str = "/run/cudackpt/locks";

/// Locks held until dropped.
pub struct Held {
    _files: Vec<File>,
}

/// Another cudackpt holds the lock of `pid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    pub pid: i32,
    /// The PID of the cudackpt that holds it, when it could be read.
    pub holder: Option<i32>,
}

fn dir() -> PathBuf {
    std::env::var_os(DIR_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from)
}

/// Takes the locks of every PID, or none. Where the lock directory cannot
/// be used (no permission to /run), locking is skipped, not fatal: the
/// caller could not act on other users' processes anyway.
pub fn acquire(pids: &[i32]) -> Result<Held, Busy> {
    acquire_in(&dir(), pids)
}

/// [`acquire`] with the lock directory given.
pub fn acquire_in(dir: &Path, pids: &[i32]) -> Result<Held, Busy> {
    if let Err(error) = fs::create_dir_all(dir) {
        tracing::debug!(%error, dir = %dir.display(), "no lock directory; not locking");
        return Ok(Held { _files: Vec::new() });
    }
    let mut files = Vec::with_capacity(pids.len());
    for &pid in pids {
        let path = dir.join(format!("{pid}.lock"));
        let mut file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
        {
            Ok(file) => file,
            Err(error) => {
                tracing::debug!(%error, path = %path.display(), "cannot open a lock file; not locking it");
                continue;
            }
        };
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(Busy {
                pid,
                holder: text.trim().parse().ok(),
            });
        }
        // Say who holds it, for the message the next one gets.
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()));
        files.push(file);
    }
    Ok(Held { _files: files })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = acquire_in(dir.path(), &[4242, 4243]).expect("free");
        let busy = acquire_in(dir.path(), &[4243]).err().expect("held");
        assert_eq!(
            busy,
            Busy {
                pid: 4243,
                holder: Some(std::process::id() as i32)
            }
        );
        assert!(
            acquire_in(dir.path(), &[4244]).is_ok(),
            "other processes are free"
        );
        drop(first);
        assert!(acquire_in(dir.path(), &[4243]).is_ok(), "released on drop");
    }
}
