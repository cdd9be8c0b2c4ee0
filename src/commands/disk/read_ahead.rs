//! An undump's page images read ahead while CRIU restores: CRIU reads
//! them one task and one page run at a time, so from a cold page cache its
//! restore waited on each read in turn (a 4.54 GB server undumped at
//! 0.88 GB/s from a disk that reads 1.36 GB/s). Asked for up front, the
//! kernel reads them with its whole queue while CRIU works, and CRIU finds
//! them in the page cache. Only advice (`posix_fadvise(WILLNEED)` on the
//! descriptors held): nothing is read into cudackpt, nothing changes on
//! disk, and the kernel drops those pages first when memory is short.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::Advice;

/// How much one piece of advice covers: small enough that a restore that
/// ends early stops the advice soon, large enough to be a handful of
/// calls for gigabytes.
const PIECE: u64 = 64 << 20;

/// What the read-ahead did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadAhead {
    /// The bytes the kernel was asked to read.
    pub bytes: u64,
    /// How long asking took (the reads go on in the kernel after it).
    pub took: Duration,
}

/// The pieces of advice for files of these sizes, in order: each file
/// whole, in [`PIECE`]s (pure).
fn pieces(sizes: &[u64]) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    for (file, &size) in sizes.iter().enumerate() {
        let mut offset = 0;
        while offset < size {
            let length = PIECE.min(size - offset);
            out.push((file, offset, length));
            offset += length;
        }
    }
    out
}

/// Runs `work` (CRIU's restore) with `pages` read ahead beside it when
/// `enabled`; returns what `work` returned and what the read-ahead did.
pub fn alongside<T>(
    pages: &[(BorrowedFd<'_>, u64)],
    enabled: bool,
    work: impl FnOnce() -> T,
) -> (T, ReadAhead) {
    if !enabled || pages.is_empty() {
        return (work(), ReadAhead::default());
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| advise(pages, &done));
        let result = work();
        done.store(true, Ordering::Relaxed);
        let read = reader.join().unwrap_or_default();
        (result, read)
    })
}

/// Asks the kernel to read `pages`, piece by piece, until all are asked
/// for or `done` says the restore ended.
fn advise(pages: &[(BorrowedFd<'_>, u64)], done: &AtomicBool) -> ReadAhead {
    let started = Instant::now();
    let sizes: Vec<u64> = pages.iter().map(|(_, size)| *size).collect();
    let mut bytes = 0;
    for (file, offset, length) in pieces(&sizes) {
        if done.load(Ordering::Relaxed) {
            break;
        }
        let length_nz = std::num::NonZeroU64::new(length);
        // Advice that fails (a filesystem without a page cache) costs the
        // restore nothing: CRIU reads as it would have.
        if rustix::fs::fadvise(pages[file].0, offset, length_nz, Advice::WillNeed).is_ok() {
            bytes += length;
        }
    }
    ReadAhead {
        bytes,
        took: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn each_file_is_advised_whole_in_pieces() {
        assert_eq!(
            pieces(&[PIECE * 2 + 5, 0, 7]),
            [
                (0, 0, PIECE),
                (0, PIECE, PIECE),
                (0, 2 * PIECE, 5),
                (2, 0, 7)
            ]
        );
        assert!(pieces(&[]).is_empty());
    }

    #[test]
    fn every_piece_is_advised_until_the_restore_ends() {
        let mut file = tempfile::tempfile().expect("a file");
        file.write_all(&[7; 4096]).expect("write");
        let pages = [(file.as_fd(), 4096)];
        let read = advise(&pages, &AtomicBool::new(false));
        assert_eq!(read.bytes, 4096, "{read:?}");
        let ended = advise(&pages, &AtomicBool::new(true));
        assert_eq!(ended.bytes, 0, "{ended:?}");
    }

    #[test]
    fn the_work_s_result_comes_back_with_or_without_reading_ahead() {
        let file = tempfile::tempfile().expect("a file");
        let pages = [(file.as_fd(), 4096)];
        assert_eq!(alongside(&pages, true, || 42).0, 42);
        let (result, read) = alongside(&pages, false, || "off");
        assert_eq!((result, read), ("off", ReadAhead::default()));
        assert_eq!(alongside(&[], true, || 1).1, ReadAhead::default());
    }
}
