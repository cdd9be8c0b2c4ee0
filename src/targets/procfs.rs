//! /proc files whose size their process chooses. A process can map one
//! file with a 4,000-character path 32,000 times: its `maps` is then
//! 130 MB, and reading it whole cost a root `cudackpt ps` 2.8 s and
//! 130 MB. Every such file is read here up to a cap in bytes and in lines
//! (whole lines only), and the reader learns whether it saw all of it, so
//! a process past the cap is named as such, never judged on half its
//! file in silence.

use std::fs::{self, File};
use std::io::{self, Read};

/// The most of one `/proc/PID/maps` read: 4 MiB, or 65,536 lines (the
/// kernel's `vm.max_map_count` is 65,530 by default). A process with short
/// lines at the kernel's limit fits; a few ms of reading at most.
pub const MAPS_BYTES_CAP: u64 = 4 << 20;
/// See [`MAPS_BYTES_CAP`].
pub const MAPS_LINES_CAP: usize = 65_536;

/// The most descriptors of one process looked at.
pub const FD_CAP: usize = 65_536;

/// What a look through a process's descriptors found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FdLink {
    /// The first descriptor whose link (`/proc/PID/fd/N`) matched, as
    /// read.
    Found(Vec<u8>),
    /// None matched, or the descriptors could not be listed.
    None,
    /// More than [`FD_CAP`] of them, none of those looked at matched.
    PastCap,
}

/// The first of `pid`'s descriptors whose link target `matches`, looking
/// at [`FD_CAP`] descriptors at most. The links are read, never followed.
pub fn find_fd_link(pid: i32, matches: impl Fn(&[u8]) -> bool) -> FdLink {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return FdLink::None;
    };
    for (seen, entry) in entries.flatten().enumerate() {
        if seen == FD_CAP {
            return FdLink::PastCap;
        }
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        let bytes = target.into_os_string().into_encoded_bytes();
        if matches(&bytes) {
            return FdLink::Found(bytes);
        }
    }
    FdLink::None
}

/// Whole lines of a /proc file, and whether they are the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lines {
    pub bytes: Vec<u8>,
    /// False when the file went on past the cap.
    pub complete: bool,
}

/// Reads `/proc/PID/maps` up to [`MAPS_BYTES_CAP`] and [`MAPS_LINES_CAP`].
pub fn read_maps(pid: i32) -> io::Result<Lines> {
    read_lines(&format!("/proc/{pid}/maps"), MAPS_BYTES_CAP, MAPS_LINES_CAP)
}

/// Reads at most `byte_cap` bytes and `line_cap` lines of `path`.
pub fn read_lines(path: &str, byte_cap: u64, line_cap: usize) -> io::Result<Lines> {
    let mut bytes = Vec::with_capacity(64 << 10);
    File::open(path)?
        .take(byte_cap + 1)
        .read_to_end(&mut bytes)?;
    Ok(keep_whole_lines(bytes, byte_cap, line_cap))
}

/// The first whole lines of `bytes` within both caps (pure).
pub fn keep_whole_lines(mut bytes: Vec<u8>, byte_cap: u64, line_cap: usize) -> Lines {
    let mut complete = bytes.len() as u64 <= byte_cap;
    let within = bytes
        .len()
        .min(usize::try_from(byte_cap).unwrap_or(usize::MAX));
    let mut end = if complete { bytes.len() } else { within };
    if let Some(past) = memchr::memchr_iter(b'\n', &bytes[..end]).nth(line_cap) {
        // More than `line_cap` lines: keep exactly that many.
        end = memchr::memchr_iter(b'\n', &bytes[..past])
            .nth(line_cap - 1)
            .map_or(0, |n| n + 1);
        complete = false;
    } else if !complete {
        end = memchr::memrchr(b'\n', &bytes[..end]).map_or(0, |n| n + 1);
    }
    bytes.truncate(end);
    Lines { bytes, complete }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_within_the_caps_is_whole() {
        let lines = keep_whole_lines(b"a\nb\nc\n".to_vec(), 100, 10);
        assert_eq!(lines.bytes, b"a\nb\nc\n");
        assert!(lines.complete);
        assert!(keep_whole_lines(b"a\nb\n".to_vec(), 4, 2).complete);
    }

    #[test]
    fn past_a_cap_only_whole_lines_stay_and_it_is_said() {
        // Past the byte cap (the reader asked for one byte more).
        let lines = keep_whole_lines(b"aaa\nbbb\nccc".to_vec(), 10, 10);
        assert_eq!(
            (lines.bytes.as_slice(), lines.complete),
            (&b"aaa\nbbb\n"[..], false)
        );
        // Past the line cap.
        let lines = keep_whole_lines(b"a\nb\nc\nd\n".to_vec(), 100, 2);
        assert_eq!(
            (lines.bytes.as_slice(), lines.complete),
            (&b"a\nb\n"[..], false)
        );
        // One line longer than the cap: nothing.
        let lines = keep_whole_lines(b"aaaaaaaa".to_vec(), 4, 10);
        assert_eq!((lines.bytes.len(), lines.complete), (0, false));
    }

    #[test]
    fn this_process_maps_fit() {
        let own = read_maps(std::process::id() as i32).expect("own maps");
        assert!(own.complete && !own.bytes.is_empty());
    }
}
