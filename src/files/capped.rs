//! Small files read without trusting them: no symlink followed at the
//! last component, no wait on a FIFO or device, nothing but a regular
//! file, and a size cap.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::unsafe_dir::UnsafeDir;

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
pub(super) fn open_regular(path: &Path) -> Result<(OwnedFd, rustix::fs::Stat), ReadError> {
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
pub(super) fn read_fd_capped(fd: OwnedFd, cap: u64) -> Result<String, ReadError> {
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
