//! The images directory: created 0700 (or an empty one checked, as
//! cudackpt's own directories are: owned by root or the user, not writable
//! by others), the room on its filesystem, and its size while CRIU writes.

use std::path::Path;

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
            ImagesDirProblem::Unsafe(why) => why.hint(),
            ImagesDirProblem::NotEmpty(_) => {
                "name a new directory with --to (cudackpt creates it), or empty this one".into()
            }
            ImagesDirProblem::Io { .. } => "name a directory cudackpt can create and write".into(),
        }
    }
}

/// Creates `path` (0700, parents too) or checks the empty directory there.
pub fn prepare(path: &Path) -> Result<SafeDir, ImagesDirProblem> {
    let dir = SafeDir::create(path)?;
    check_unused(path)?;
    Ok(dir)
}

/// The empty directory CRIU is given as `--libdir` (`no-plugins` in the
/// images directory, made here): CRIU then loads no plugin, so its CUDA
/// plugin, where a host has one installed, does not act on a tree that
/// cudackpt's action script already suspends.
pub fn no_plugins_dir(images: &Path) -> std::io::Result<std::path::PathBuf> {
    let dir = images.join("no-plugins");
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let metadata = std::fs::symlink_metadata(&dir)?;
            if metadata.is_dir() {
                Ok(dir)
            } else {
                Err(std::io::Error::other(format!(
                    "{} is not a directory",
                    dir.display()
                )))
            }
        }
        Err(e) => Err(e),
    }
}

/// Whether `path` can become the images directory, without creating it:
/// missing, or an empty directory that is safe to use.
pub fn check_unused(path: &Path) -> Result<(), ImagesDirProblem> {
    if SafeDir::open_existing(path)?.is_none() {
        return Ok(());
    }
    let mut entries = std::fs::read_dir(path).map_err(|source| ImagesDirProblem::Io {
        path: path.to_path_buf(),
        source,
    })?;
    match entries.next() {
        None => Ok(()),
        Some(_) => Err(ImagesDirProblem::NotEmpty(path.to_path_buf())),
    }
}

/// The bytes an unprivileged writer may still put on `path`'s filesystem.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(path).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// The bytes of the regular files directly in `path` (CRIU writes no
/// subdirectories).
pub fn size_of(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len())
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
        prepare(&fresh).expect("made");
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
        assert_eq!(size_of(&fresh), 1);
        assert!(free_bytes(&fresh).is_some());
    }
}
