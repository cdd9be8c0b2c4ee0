//! Files someone else may have planted: cudackpt runs as root, so a file it
//! reads may be a symlink to a device, a FIFO that never answers, or far
//! larger than it should be, and a directory it writes in may hold a link
//! to `/etc/ld.so.preload`. Every read here opens without following a final
//! symlink and without blocking, insists on a regular file, and stops at a
//! size cap; `safe_dir` keeps cudackpt's own directories safe to write in.
//!
//! May use: nothing else of cudackpt (the bottom floor).

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
}

/// Reads at most `cap` bytes of text from `path`: no symlink followed at the
/// last component, no wait on a FIFO or device, nothing but a regular file.
pub fn read_capped(path: &Path, cap: u64) -> Result<String, ReadError> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)?;
    let stat = rustix::fs::fstat(&fd).map_err(io::Error::from)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(ReadError::NotRegular);
    }
    read_fd_capped(fd, cap)
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
