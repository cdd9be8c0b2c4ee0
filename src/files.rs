//! Reading small files that someone else may have planted: cudackpt runs as
//! root, so a file it reads may be a symlink to a device, a FIFO that never
//! answers, or far larger than it should be. Every read here opens without
//! following a final symlink and without blocking, insists on a regular
//! file, and stops at a size cap.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

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
