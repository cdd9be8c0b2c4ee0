//! Files the job wrote to that grew since its snapshot (its log, its
//! launcher's `> out`), cut back to their size at the snapshot before CRIU
//! opens them again (CRIU restores a file only as it was: "has bad size"):
//! what was written since is kept first, beside the file, in a file of
//! its own named in the output, so a crash recovery loses nothing
//! silently and needs no hand work on each log. Only for images root
//! alone could have written ([`super::open_files::refuse_changed`]); each
//! file is reached with no link on any step and opened without following
//! one, its copy created exclusively, as the file's owner's.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::commands::disk::criu_tool::image_files::Differs;
use crate::commands::disk::report::DiskFailure;
use crate::files::dir_chain::{self, Links};

/// The name the part written since is kept under, beside the file (pure):
/// the `nth` try in the same second gets a suffix of its own.
pub fn kept_name(name: &str, at_unix_s: u64, nth: u32) -> String {
    match nth {
        0 => format!("{name}.after-snapshot-{at_unix_s}"),
        n => format!("{name}.after-snapshot-{at_unix_s}.{n}"),
    }
}

/// How many names [`kept_name`] tries before it gives up.
const NAMES_TRIED: u32 = 100;

/// Cuts each grown file back, its tail kept first, each said in a remark.
/// One that cannot be cut refuses the undump before CRIU runs (the ones
/// cut before it stay cut, their tails kept, and are said).
pub fn cut_back(grown: &[Differs<u64>], remarks: &mut Vec<String>) -> Result<(), DiskFailure> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for file in grown {
        let shown = |p: &Path| crate::targets::name::printable(&p.to_string_lossy()).into_owned();
        match cut_one(&file.path, file.at_dump, now) {
            Ok((kept, bytes)) => remarks.push(format!(
                "cut {} back to its {} bytes at the snapshot; the {bytes} bytes written to it since are kept in {}",
                shown(&file.path),
                file.at_dump,
                shown(&kept)
            )),
            Err(why) => {
                return Err(DiskFailure::refused(
                    "files_changed",
                    format!(
                        "refused before CRIU ran: {} was {} bytes at the snapshot and is {} now, and it could not be cut back ({why})",
                        shown(&file.path),
                        file.at_dump,
                        file.now
                    ),
                    format!(
                        "keep a copy and cut it back (`truncate -s {} {}`), then undump again",
                        file.at_dump,
                        shown(&file.path)
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Keeps what `path` holds past `size` in a new file beside it, then cuts
/// it back to `size`: the kept file's path and how many bytes it holds.
fn cut_one(path: &Path, size: u64, now: u64) -> io::Result<(std::path::PathBuf, u64)> {
    let not_found = || io::Error::new(io::ErrorKind::InvalidInput, "no directory and name");
    let (parent, name) = (
        path.parent().ok_or_else(not_found)?,
        path.file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(not_found)?,
    );
    let dir = dir_chain::reach(parent, Links::Refused).map_err(io::Error::other)?;
    let fd = rustix::fs::openat(
        &dir.fd,
        name,
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(io::Error::other("not a regular file now"));
    }
    let length = u64::try_from(stat.st_size).unwrap_or(0);
    let tail = length.saturating_sub(size);
    let (kept_as, kept) = (0..NAMES_TRIED)
        .map(|nth| kept_name(name, now, nth))
        .find_map(|kept_as| {
            match rustix::fs::openat(
                &dir.fd,
                kept_as.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(stat.st_mode & 0o666),
            ) {
                Err(rustix::io::Errno::EXIST) => None,
                opened => Some(opened.map(|fd| (kept_as, fd))),
            }
        })
        .unwrap_or(Err(rustix::io::Errno::EXIST))?;
    rustix::fs::fchown(
        kept.as_fd(),
        Some(rustix::fs::Uid::from_raw(stat.st_uid)),
        Some(rustix::fs::Gid::from_raw(stat.st_gid)),
    )?;
    let mut file = File::from(fd);
    file.seek(SeekFrom::Start(size))?;
    let copied = io::copy(&mut io::Read::take(&mut file, tail), &mut File::from(kept))?;
    if copied != tail {
        return Err(io::Error::other(format!(
            "{copied} of the {tail} bytes past the snapshot's size copied"
        )));
    }
    file.set_len(size)?;
    Ok((dir.path.join(kept_as), copied))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_part_written_since_is_kept_under_a_name_that_says_so() {
        assert_eq!(
            kept_name("out", 1_795_898_400, 0),
            "out.after-snapshot-1795898400"
        );
        assert_eq!(
            kept_name("out", 1_795_898_400, 2),
            "out.after-snapshot-1795898400.2"
        );
    }

    #[test]
    fn a_grown_file_is_cut_back_with_its_tail_kept_beside_it() {
        let dir = tempfile::tempdir().expect("a directory");
        let log = dir.path().join("out");
        std::fs::write(&log, b"before the snapshot\nafter it\n").expect("write");
        let (kept, bytes) = cut_one(&log, 20, 7).expect("cut");
        assert_eq!(std::fs::read(&log).expect("read"), b"before the snapshot\n");
        assert_eq!(bytes, 9);
        assert_eq!(kept, dir.path().join("out.after-snapshot-7"));
        assert_eq!(std::fs::read(&kept).expect("read"), b"after it\n");
        // A second cut in the same second keeps its part apart.
        std::fs::write(&log, b"before the snapshot\nagain\n").expect("write");
        let (again, _) = cut_one(&log, 20, 7).expect("cut again");
        assert_eq!(again, dir.path().join("out.after-snapshot-7.1"));
        assert_eq!(std::fs::read(&kept).expect("read"), b"after it\n");
        assert_eq!(std::fs::read(&again).expect("read"), b"again\n");
    }

    #[test]
    fn a_link_planted_at_the_kept_name_is_passed_by_not_written_through() {
        let dir = tempfile::tempdir().expect("a directory");
        let log = dir.path().join("out");
        std::fs::write(&log, b"before\nafter\n").expect("write");
        let target = dir.path().join("root-file");
        std::fs::write(&target, b"root's").expect("write");
        std::os::unix::fs::symlink(&target, dir.path().join("out.after-snapshot-7")).expect("link");
        let (kept, _) = cut_one(&log, 7, 7).expect("cut");
        assert_eq!(kept, dir.path().join("out.after-snapshot-7.1"));
        assert_eq!(std::fs::read(&target).expect("read"), b"root's");
        assert_eq!(std::fs::read(&kept).expect("read"), b"after\n");
    }

    #[test]
    fn a_fifo_in_the_file_s_place_is_not_cut() {
        let dir = tempfile::tempdir().expect("a directory");
        let fifo = dir.path().join("out");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        assert!(cut_one(&fifo, 0, 1).is_err());
        assert!(!dir.path().join("out.after-snapshot-1").exists());
    }

    #[test]
    fn a_link_in_the_file_s_place_is_not_followed() {
        let dir = tempfile::tempdir().expect("a directory");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"not the job's log, longer than it").expect("write");
        std::os::unix::fs::symlink(&target, dir.path().join("out")).expect("link");
        assert!(cut_one(&dir.path().join("out"), 3, 1).is_err());
        assert_eq!(
            std::fs::read(&target).expect("read"),
            b"not the job's log, longer than it"
        );
    }
}
