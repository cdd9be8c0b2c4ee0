//! Files someone else may have planted: cudackpt runs as root, so a file it
//! reads may be a symlink to a device, a FIFO that never answers, or far
//! larger than it should be, and a directory it writes in may hold a link
//! to `/etc/ld.so.preload`. Every read here opens without following a final
//! symlink and without blocking, insists on a regular file, and stops at a
//! size cap; `safe_dir` keeps cudackpt's own directories safe to write in.
//!
//! May use: nothing else of cudackpt (the bottom floor).

pub mod for_user;
pub mod privilege;
pub mod safe_dir;

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

pub use safe_dir::{SafeDir, UnsafeDir};

/// Where cudackpt keeps its own files (records, per-PID locks): root's
/// `/run/cudackpt`; another user's `$XDG_RUNTIME_DIR/cudackpt` (private to
/// them, gone at logout), or `/run/cudackpt` when that is unset. Root
/// ignores `XDG_RUNTIME_DIR`, which whoever ran it could have set.
pub fn run_dir() -> PathBuf {
    const SYSTEM: &str = "/run/cudackpt";
    if rustix::process::geteuid().is_root() {
        return PathBuf::from(SYSTEM);
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .map_or_else(|| PathBuf::from(SYSTEM), |dir| dir.join("cudackpt"))
}

/// What to do when cudackpt's own directory (`what`: its locks, its
/// records) cannot be used (pure but for the environment): a user other
/// than root without `XDG_RUNTIME_DIR` lands on root's `/run/cudackpt`,
/// and is told how to give it a place of their own.
pub fn run_dir_hint(what: &str, variable: &str) -> Option<String> {
    let xdg_unset = std::env::var_os("XDG_RUNTIME_DIR").is_none_or(|dir| dir.is_empty());
    let named = std::env::var_os(variable).is_some_and(|dir| !dir.is_empty());
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

/// The user cudackpt acts for, with the group files are opened through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invoker {
    pub uid: u32,
    pub gid: u32,
}

/// The user cudackpt acts for: the real user, or for root the user who
/// reached root through sudo (`SUDO_UID`, `SUDO_GID`), pkexec
/// (`PKEXEC_UID`) or doas (`DOAS_USER`). `None`: root itself. These
/// variables only ever take power away (root then reads and writes with
/// that user's credentials), so one planted by a scheduler passing a
/// user's environment does no harm.
pub fn invoker() -> Option<Invoker> {
    let real = rustix::process::getuid().as_raw();
    if real != 0 {
        return Some(Invoker {
            uid: real,
            gid: rustix::process::getgid().as_raw(),
        });
    }
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|&id| id != 0)
    };
    if let Some(uid) = number("SUDO_UID") {
        return Some(Invoker {
            uid,
            gid: number("SUDO_GID").unwrap_or(OVERFLOW_GID),
        });
    }
    if let Some(uid) = number("PKEXEC_UID") {
        return Some(user(uid));
    }
    let name = std::env::var("DOAS_USER").ok().filter(|u| !u.is_empty())?;
    let (uid, gid) = passwd_entry(&read_passwd(), |entry, _| entry == name)?;
    (uid != 0).then_some(Invoker { uid, gid })
}

/// /etc/passwd, capped (empty where it cannot be read).
fn read_passwd() -> String {
    read_capped(Path::new("/etc/passwd"), PASSWD_CAP).unwrap_or_default()
}

/// The overflow group (nobody's): where the invoker's group is unknown, a
/// file is never opened through a group that user may not be in.
const OVERFLOW_GID: u32 = 65534;

/// The most of /etc/passwd read to find a user.
const PASSWD_CAP: u64 = 16 << 20;

/// The uid and gid of the first /etc/passwd entry that `matches` (its name
/// and uid) (pure).
fn passwd_entry(passwd: &str, matches: impl Fn(&str, u32) -> bool) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let (name, uid, gid) = (fields.first()?, fields.get(2)?, fields.get(3)?);
        let (uid, gid) = (uid.parse().ok()?, gid.parse().ok()?);
        matches(name, uid).then_some((uid, gid))
    })
}

/// Reads a small file that a user named on the command line, on their
/// behalf. As root for someone else (sudo, pkexec, doas), the file is
/// opened with that user's credentials (their uid and group, no
/// supplementary groups) on a thread of its own, so the kernel decides,
/// every directory above it included, and root never shows them a file
/// they could not open themselves. Capped, no link followed at the last
/// component, no FIFO.
pub fn read_for_invoker(path: &Path, cap: u64) -> Result<String, ReadError> {
    let acting_for = acting_for();
    let (fd, _) = as_invoker(|| open_regular(path))
        .map_err(ReadError::Io)?
        .map_err(|error| match (error, acting_for) {
            (ReadError::Io(e), Some(user)) if e.kind() == io::ErrorKind::PermissionDenied => {
                ReadError::NotTheirs { user: user.uid }
            }
            (other, _) => other,
        })?;
    read_fd_capped(fd, cap)
}

/// The user a root cudackpt acts for ([`invoker`]); `None` where
/// cudackpt is not root (it is that user already) or is root itself.
pub fn acting_for() -> Option<Invoker> {
    invoker().filter(|_| privilege::standing().root)
}

/// Runs `work` as the user root acts for ([`invoker`]): on a scoped thread
/// that takes on their credentials (Linux keeps them per thread) and ends,
/// so this thread's stay root's whatever happens there. Where cudackpt is
/// not root, or is root itself, `work` runs here as it is. `Err`: the
/// credentials could not be taken on.
pub fn as_invoker<T: Send>(work: impl FnOnce() -> T + Send) -> io::Result<T> {
    match acting_for() {
        Some(user) => as_user(user, work),
        None => Ok(work()),
    }
}

/// The user `uid` as [`as_user`] takes them on: their primary group from
/// /etc/passwd, else the overflow group.
pub fn user(uid: u32) -> Invoker {
    let gid = passwd_entry(&read_passwd(), |_, entry_uid| entry_uid == uid).map(|(_, gid)| gid);
    Invoker {
        uid,
        gid: gid.unwrap_or(OVERFLOW_GID),
    }
}

/// Runs `work` with `user`'s credentials, on a scoped thread that takes
/// them on (Linux keeps them per thread) and ends, so this thread's stay
/// what they were. Root alone can take on another user's.
pub fn as_user<T: Send>(user: Invoker, work: impl FnOnce() -> T + Send) -> io::Result<T> {
    use rustix::process::{Gid, Uid};
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("cudackpt-as-user".into())
            .spawn_scoped(scope, || -> io::Result<T> {
                // Groups first: after the uid changes, this thread may not.
                rustix::thread::set_thread_groups(&[]).map_err(io::Error::from)?;
                rustix::thread::set_thread_res_gid(None, Gid::from_raw(user.gid), None)
                    .map_err(io::Error::from)?;
                rustix::thread::set_thread_res_uid(None, Uid::from_raw(user.uid), None)
                    .map_err(io::Error::from)?;
                Ok(work())
            })?;
        worker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Why a small file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("it is not a regular file")]
    NotRegular,
    #[error("it is larger than {cap} bytes")]
    TooLarge { cap: u64 },
    #[error("it is not UTF-8 text")]
    NotText,
    #[error("{0}")]
    Unsafe(Box<UnsafeDir>),
    #[error("uid {user}, who ran cudackpt through sudo, pkexec or doas, may not read it")]
    NotTheirs { user: u32 },
}

/// Reads at most `cap` bytes of text from `path`: no symlink followed at the
/// last component, no wait on a FIFO or device, nothing but a regular file.
pub fn read_capped(path: &Path, cap: u64) -> Result<String, ReadError> {
    let (fd, _) = open_regular(path)?;
    read_fd_capped(fd, cap)
}

/// Opens `path` for reading without following a link at its last component
/// and without waiting (a FIFO or device opens at once): how cudackpt opens
/// every file it reads.
pub fn open_for_reading(path: &Path) -> io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// [`open_for_reading`], refusing anything but a regular file.
fn open_regular(path: &Path) -> Result<(OwnedFd, rustix::fs::Stat), ReadError> {
    let fd = open_for_reading(path)?;
    let stat = rustix::fs::fstat(&fd).map_err(io::Error::from)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(ReadError::NotRegular);
    }
    Ok((fd, stat))
}

/// [`read_capped`] for bytes that need not be text (a /proc environ).
pub fn read_capped_bytes(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    let fd = open_for_reading(path)?;
    let mut bytes = Vec::new();
    File::from(fd).take(cap).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads at most `cap` bytes of text from a regular file already open.
fn read_fd_capped(fd: OwnedFd, cap: u64) -> Result<String, ReadError> {
    let mut bytes = Vec::new();
    File::from(fd).take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge { cap });
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotText)
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

    #[test]
    fn a_small_regular_file_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, "hello").expect("write");
        assert_eq!(read_capped(&path, 5).expect("read"), "hello");
        assert!(matches!(
            read_capped(&path, 4),
            Err(ReadError::TooLarge { cap: 4 })
        ));
    }

    #[test]
    fn links_fifos_and_devices_are_refused_without_waiting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        assert!(matches!(read_capped(&link, 10), Err(ReadError::Io(_))));
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        assert!(matches!(read_capped(&fifo, 10), Err(ReadError::NotRegular)));
        assert!(matches!(
            read_capped(Path::new("/dev/zero"), 10),
            Err(ReadError::NotRegular)
        ));
    }
}
