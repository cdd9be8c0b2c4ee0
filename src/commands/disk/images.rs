//! The images directory of a dump: reached from `/` by descriptor with no
//! link on any step (`files::dir_chain`), made 0700 under its parent held
//! open (or an empty one checked, as cudackpt's own directories are: owned
//! by root or the user, not writable by others), and from then on used
//! only through that descriptor, by cudackpt and by CRIU (which is given
//! `/proc/self/fd/N`): a user who owns a directory above it can rename it
//! away, but never swap another in under the dump. Also the room on its
//! filesystem, its size while CRIU writes, and the empty plugin directory
//! CRIU is given, cudackpt's own and never inside the images.

use std::path::Path;

use crate::files::dir_chain::{self, Links};
use crate::files::{SafeDir, UnsafeDir};

/// Why the images directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ImagesDirProblem {
    #[error(transparent)]
    Unsafe(#[from] UnsafeDir),
    #[error("{0} is not empty: a dump writes into a directory of its own")]
    NotEmpty(std::path::PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl ImagesDirProblem {
    pub fn hint(&self) -> String {
        match self {
            ImagesDirProblem::Unsafe(UnsafeDir::Symlink { .. }) => {
                "name the images directory by a path with no symbolic link on any step (`realpath` gives one)".into()
            }
            ImagesDirProblem::Unsafe(why) => why.hint(),
            ImagesDirProblem::NotEmpty(_) => {
                "name a new directory with --to (cudackpt creates it), or empty this one".into()
            }
            ImagesDirProblem::Io { .. } => "name a directory cudackpt can create and write".into(),
        }
    }
}

/// An images directory made for a dump, held open.
pub struct Prepared {
    pub dir: SafeDir,
    /// Made by this dump (so a refused dump takes it away again).
    pub made_here: bool,
}

/// Makes `path` (0700, parents too, each under its parent held open) or
/// checks the empty directory there.
pub fn prepare(path: &Path) -> Result<Prepared, ImagesDirProblem> {
    let reached = dir_chain::reach_creating(path, Links::Refused, 0o700)?;
    let made_here = reached.created;
    let dir = checked(reached, path)?;
    Ok(Prepared { dir, made_here })
}

/// The directory reached, if it may hold a dump: safe (root's or this
/// user's, nobody else may write it) and empty.
fn checked(reached: dir_chain::Reached, path: &Path) -> Result<SafeDir, ImagesDirProblem> {
    let stat = rustix::fs::fstat(&reached.fd).map_err(|e| ImagesDirProblem::Io {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let me = rustix::process::geteuid().as_raw();
    crate::files::safe_dir::judge_dir(path, stat.st_uid, stat.st_mode, me)?;
    let dir = SafeDir::from_reached(reached, me);
    let names = dir.names().map_err(|source| ImagesDirProblem::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !names.is_empty() {
        return Err(ImagesDirProblem::NotEmpty(path.to_path_buf()));
    }
    Ok(dir)
}

/// Takes away the empty directory a refused dump made, if what is at its
/// name is still the one held (a user owning the parent may have put
/// another there, which stays).
pub fn remove_made(prepared: &Prepared) {
    if !prepared.made_here {
        return;
    }
    let path = prepared.dir.path();
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let Ok(parent) = dir_chain::reach(parent, Links::Refused) else {
        return;
    };
    let held = rustix::fs::fstat(prepared.dir.fd());
    let there = rustix::fs::statat(&parent.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
    if let (Ok(held), Ok(there)) = (held, there) {
        if (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino) {
            let _ = rustix::fs::unlinkat(&parent.fd, name, rustix::fs::AtFlags::REMOVEDIR);
        }
    }
}

/// The empty directory CRIU is given as `--libdir`: cudackpt's own
/// (`no-plugins` in its run directory: root's `/run/cudackpt`), checked
/// empty, never inside the images. CRIU then loads no plugin, so its CUDA
/// plugin, where a host has one installed, does not act on a tree that
/// cudackpt's action script already suspends; and nothing a user put
/// beside the images is loaded into a root CRIU.
pub fn no_plugins_dir() -> std::io::Result<SafeDir> {
    let path = crate::files::run_dir().join("no-plugins");
    let dir = SafeDir::create(&path).map_err(std::io::Error::other)?;
    if !dir.names()?.is_empty() {
        return Err(std::io::Error::other(format!(
            "{} is not empty: CRIU would load what it holds",
            path.display()
        )));
    }
    Ok(dir)
}

/// Whether `path` can become the images directory, without creating it:
/// missing, or an empty directory that is safe to use, with no link on
/// the way to it.
pub fn check_unused(path: &Path) -> Result<(), ImagesDirProblem> {
    match dir_chain::reach(path, Links::Refused) {
        Err(UnsafeDir::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(())
        }
        Err(why) => Err(why.into()),
        Ok(reached) => checked(reached, path).map(drop),
    }
}

/// The bytes of the regular files directly in `dir` (CRIU writes no
/// subdirectories), listed through its descriptor.
pub fn size_of(dir: &SafeDir) -> u64 {
    dir.entries()
        .unwrap_or_default()
        .iter()
        .filter(|e| e.kind == rustix::fs::FileType::RegularFile)
        .map(|e| e.bytes)
        .sum()
}

/// A process's host memory that CRIU would write: resident plus swapped
/// (`/proc/PID/smaps_rollup`), bytes; `None` when it cannot be read.
pub fn host_footprint(pid: i32) -> Option<u64> {
    let text =
        crate::files::read_capped(Path::new(&format!("/proc/{pid}/smaps_rollup")), 64 * 1024)
            .ok()?;
    Some(rollup_bytes(&text))
}

/// `Rss:` plus `Swap:` of an smaps_rollup, in bytes (pure).
pub fn rollup_bytes(text: &str) -> u64 {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            matches!(key.trim(), "Rss" | "Swap")
                .then(|| value.split_whitespace().next()?.parse::<u64>().ok())
                .flatten()
        })
        .sum::<u64>()
        * 1024
}

/// Whether `needed` bytes fit in `free`, with a margin for CRIU's own
/// files (an eighth, at least 64 MiB) (pure).
pub fn fits(needed: u64, free: u64) -> bool {
    let margin = (needed / 8).max(64 << 20);
    needed.saturating_add(margin) <= free
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_and_swap_are_summed() {
        let text = "55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:                1024 kB\nPss:                 512 kB\nSwap:                  8 kB\nSwapPss:               8 kB\n";
        assert_eq!(rollup_bytes(text), 1032 * 1024);
    }

    #[test]
    fn room_keeps_a_margin() {
        assert!(fits(1 << 30, 2 << 30));
        assert!(!fits(1 << 30, (1 << 30) + (1 << 20)));
        assert!(!fits(0, 1 << 20));
    }

    #[test]
    fn a_directory_with_files_is_refused_and_a_new_one_made_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fresh = dir.path().join("images");
        let prepared = prepare(&fresh).expect("made");
        assert!(prepared.made_here);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&fresh)
                .expect("stat")
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        std::fs::write(fresh.join("x"), "y").expect("write");
        assert!(matches!(
            prepare(&fresh),
            Err(ImagesDirProblem::NotEmpty(_))
        ));
        assert_eq!(size_of(&prepared.dir), 1);
        assert!(prepared.dir.free_bytes().is_some());
        std::fs::remove_file(fresh.join("x")).expect("rm");
        remove_made(&prepared);
        assert!(!fresh.exists(), "made here, so taken away");
    }

    #[test]
    fn a_link_anywhere_on_the_way_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("real")).expect("dir");
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).expect("link");
        let below = dir.path().join("link/images");
        assert!(matches!(
            check_unused(&below),
            Err(ImagesDirProblem::Unsafe(UnsafeDir::Symlink { .. }))
        ));
        assert!(matches!(
            prepare(&below),
            Err(ImagesDirProblem::Unsafe(UnsafeDir::Symlink { .. }))
        ));
        assert!(!dir.path().join("real/images").exists());
    }
}
