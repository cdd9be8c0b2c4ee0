//! Files someone else may have planted: cudackpt runs as root, so a file it
//! reads may be a symlink to a device, a FIFO that never answers, or far
//! larger than it should be, and a directory it writes in may hold a link
//! to `/etc/ld.so.preload`. Every read here opens without following a final
//! symlink and without blocking, insists on a regular file, and stops at a
//! size cap; `safe_dir` keeps cudackpt's own directories safe to write in.
//!
//! May use: `environment` (the floor below).

pub mod capped;
pub mod dir_chain;
pub mod for_user;
pub mod privilege;
pub mod safe_dir;
pub mod unsafe_dir;
pub mod users;

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

pub use capped::{open_for_reading, read_capped, read_capped_bytes};
pub use safe_dir::SafeDir;
pub use unsafe_dir::UnsafeDir;
pub use users::{as_user, read_for_invoker, user};

/// Where cudackpt keeps its own files (records, per-PID locks): root's
/// `/run/cudackpt`; another user's `$XDG_RUNTIME_DIR/cudackpt` (private to
/// them, gone at logout), or `/run/cudackpt` when that is unset. Root
/// ignores `XDG_RUNTIME_DIR`, which whoever ran it could have set.
pub fn run_dir() -> PathBuf {
    const SYSTEM: &str = "/run/cudackpt";
    if rustix::process::geteuid().is_root() {
        return PathBuf::from(SYSTEM);
    }
    crate::environment::os(crate::environment::XDG_RUNTIME_DIR)
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .map_or_else(|| PathBuf::from(SYSTEM), |dir| dir.join("cudackpt"))
}

/// What to do when cudackpt's own directory (`what`: its locks, its
/// records) cannot be used (pure but for the environment): a user other
/// than root without `XDG_RUNTIME_DIR` lands on root's `/run/cudackpt`,
/// and is told how to give it a place of their own.
pub fn run_dir_hint(what: &str, variable: &str) -> Option<String> {
    let xdg_unset = crate::environment::os(crate::environment::XDG_RUNTIME_DIR).is_none();
    let named = crate::environment::os(variable).is_some();
    (!rustix::process::geteuid().is_root() && xdg_unset && !named).then(|| {
        format!(
            "as a user other than root, cudackpt keeps its {what} in $XDG_RUNTIME_DIR/cudackpt, and XDG_RUNTIME_DIR is not set here (no login session): set it (e.g. `export XDG_RUNTIME_DIR=/run/user/$(id -u)`), or name a directory of your own with {variable}"
        )
    })
}

/// Why root (or a capable cudackpt) will not load a library.
#[derive(Debug, thiserror::Error)]
pub enum UntrustedLibrary {
    /// It could not be opened.
    #[error("{path}: {source}")]
    Io {
        /// The library named.
        path: PathBuf,
        /// Why it could not be opened.
        source: io::Error,
    },
    /// It is not a regular file.
    #[error("{path} is not a regular file")]
    NotRegular {
        /// The library named.
        path: PathBuf,
    },
    /// Another user owns it.
    #[error("{path} belongs to uid {owner}, not to root: loading it as root would run that user's code as root")]
    Owner {
        /// The library named.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// Others may write it.
    #[error("{path} is writable by {who} (mode {mode:04o}): anyone who can write it could run code as root")]
    Writable {
        /// The library named.
        path: PathBuf,
        /// Its mode.
        mode: u32,
        /// Who may write it (group, others).
        who: &'static str,
    },
}

/// Opens a shared library that root is about to load, and checks the file
/// itself (not its name, which could be swapped): a regular file owned by
/// root and writable by nobody else. The caller loads it through
/// `/proc/self/fd/N`, so what was checked is what runs. Other users load
/// what they like into their own process: for them only the opening
/// counts, unless this process has more power than they do (capabilities,
/// secure execution), which it is then checked as root.
pub fn open_library_for_root(path: &Path) -> Result<OwnedFd, UntrustedLibrary> {
    let fd =
        rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| {
            UntrustedLibrary::Io {
                path: path.to_path_buf(),
                source: e.into(),
            }
        })?;
    if !privilege::elevated() {
        return Ok(fd);
    }
    let stat = rustix::fs::fstat(&fd).map_err(|e| UntrustedLibrary::Io {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    judge_library(path, stat.st_uid, stat.st_mode)?;
    Ok(fd)
}

/// The verdict on a library's owner and mode, as root (pure, for tests).
pub fn judge_library(path: &Path, owner: u32, mode: u32) -> Result<(), UntrustedLibrary> {
    if rustix::fs::FileType::from_raw_mode(mode) != rustix::fs::FileType::RegularFile {
        return Err(UntrustedLibrary::NotRegular {
            path: path.to_path_buf(),
        });
    }
    if owner != 0 {
        return Err(UntrustedLibrary::Owner {
            path: path.to_path_buf(),
            owner,
        });
    }
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 {
            "everyone"
        } else {
            "its group"
        };
        return Err(UntrustedLibrary::Writable {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
            who,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_loads_only_libraries_only_root_can_change() {
        let p = Path::new("/lib/x.so");
        assert!(judge_library(p, 0, 0o100644).is_ok());
        assert!(judge_library(p, 0, 0o100755).is_ok());
        assert!(matches!(
            judge_library(p, 1000, 0o100644),
            Err(UntrustedLibrary::Owner { owner: 1000, .. })
        ));
        assert!(matches!(
            judge_library(p, 0, 0o100666),
            Err(UntrustedLibrary::Writable {
                who: "everyone",
                ..
            })
        ));
        assert!(matches!(
            judge_library(p, 0, 0o100664),
            Err(UntrustedLibrary::Writable {
                who: "its group",
                ..
            })
        ));
        assert!(matches!(
            judge_library(p, 0, 0o020644),
            Err(UntrustedLibrary::NotRegular { .. })
        ));
    }
}
