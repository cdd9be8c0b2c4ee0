//! An undump's page images read ahead while CRIU restores: CRIU reads
//! them and copies them into the restored processes one page run at a
//! time, waiting on the disk between copies (a 4.23 GB server's memory
//! took CRIU 3.45 s from a dropped page cache and 2.42 s from a warm one,
//! on a disk that reads the images in 2.38 s). A reader of cudackpt's own
//! goes through them in order at the disk's pace, so that CRIU finds them
//! in the page cache. Plain reads of the descriptors held, 8 MiB at a
//! time into one buffer: nothing changes on disk, and the kernel drops
//! those pages first when memory is short. (Asking the kernel for every
//! page at once, `posix_fadvise(WILLNEED)`, made the same undump slower:
//! 5.23 s.)

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How much one read takes: large enough for the disk's pace, small
/// enough that a restore that ends stops the reader soon.
const PIECE: u64 = 8 << 20;

/// What the read-ahead did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadAhead {
    /// The bytes read ahead.
    pub bytes: u64,
    /// How long the reading took.
    pub took: Duration,
}

/// The reads for files of these sizes, in order: each file whole, in
/// [`PIECE`]s (pure).
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
        let reader = scope.spawn(|| read_through(pages, &done));
        let result = work();
        done.store(true, Ordering::Relaxed);
        let read = reader.join().unwrap_or_default();
        (result, read)
    })
}

/// Reads `pages` in order, piece by piece, until all are read or `done`
/// says the restore ended.
fn read_through(pages: &[(BorrowedFd<'_>, u64)], done: &AtomicBool) -> ReadAhead {
    let started = Instant::now();
    let sizes: Vec<u64> = pages.iter().map(|(_, size)| *size).collect();
    let mut buffer = vec![0u8; PIECE as usize];
    let mut bytes = 0;
    for (file, offset, length) in pieces(&sizes) {
        if done.load(Ordering::Relaxed) {
            break;
        }
        // A read that fails costs the restore nothing: CRIU reads as it
        // would have.
        if let Ok(read) = rustix::io::pread(pages[file].0, &mut buffer[..length as usize], offset) {
            bytes += read as u64;
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
    fn each_file_is_read_whole_in_pieces() {
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
    fn every_piece_is_read_until_the_restore_ends() {
        let mut file = tempfile::tempfile().expect("a file");
        file.write_all(&[7; 4096]).expect("write");
        let pages = [(file.as_fd(), 4096)];
        let read = read_through(&pages, &AtomicBool::new(false));
        assert_eq!(read.bytes, 4096, "{read:?}");
        let ended = read_through(&pages, &AtomicBool::new(true));
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
