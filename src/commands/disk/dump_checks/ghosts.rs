//! The tree's deleted files that CRIU must copy into the images ("ghost
//! files"): regular files still open (`/proc/PID/fd`) or mapped
//! (`/proc/PID/map_files`) after their last name went, such as the
//! shared-memory files PyTorch's DataLoader workers hand batches over in
//! (`/dev/shm/torch_*`, 8 MiB for a 16 × 128 × 1024 float32 batch). CRIU
//! refuses one larger than its ghost limit (1 MiB unless told), after the
//! suspend; cudackpt tells it the largest, and counts them all in the
//! room the images need.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

/// CRIU's ghost limit when it is not told one.
pub const CRIU_DEFAULT_LIMIT: u64 = 1 << 20;

/// The tree's deleted files, each once (by device and inode).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ghosts {
    /// (device, inode) → (its path as the kernel names it, its size).
    pub files: BTreeMap<(u64, u64), (String, u64)>,
}

impl Ghosts {
    /// The largest one's size.
    pub fn largest(&self) -> u64 {
        self.files
            .values()
            .map(|(_, size)| *size)
            .max()
            .unwrap_or(0)
    }

    /// What they add to the images.
    pub fn total(&self) -> u64 {
        self.files.values().map(|(_, size)| *size).sum()
    }

    /// The ghost limit to give CRIU (its default when every file is under
    /// it): the largest, rounded up to a whole MiB (pure).
    pub fn limit(&self) -> Option<u64> {
        let largest = self.largest();
        (largest > CRIU_DEFAULT_LIMIT).then(|| largest.div_ceil(1 << 20) << 20)
    }

    /// Notes the deleted files `pid` holds open or maps.
    pub fn gather(&mut self, pid: i32) {
        for dir in ["fd", "map_files"] {
            let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/{dir}")) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(target) = std::fs::read_link(entry.path()) else {
                    continue;
                };
                let target = target.to_string_lossy();
                if !is_deleted_file(&target) {
                    continue;
                }
                // Through the magic link: the file itself, not a name.
                let Ok(metadata) = entry.path().metadata() else {
                    continue;
                };
                if metadata.is_file() {
                    self.files
                        .entry((metadata.dev(), metadata.ino()))
                        .or_insert_with(|| (target.into_owned(), metadata.len()));
                }
            }
        }
    }
}

/// Whether a descriptor's or mapping's link names a deleted file on a
/// filesystem (pure): the kernel appends " (deleted)"; memfds
/// (`/memfd:...`), shared anonymous memory (`/dev/zero`, `/SYSV...`) and
/// the like are CRIU's to dump otherwise.
pub fn is_deleted_file(target: &str) -> bool {
    target.starts_with('/')
        && target.ends_with(" (deleted)")
        && !target.starts_with("/memfd:")
        && !target.starts_with("/dev/zero")
        && !target.starts_with("/SYSV")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_deleted_files_on_a_filesystem_are_ghosts() {
        assert!(is_deleted_file("/dev/shm/torch_1_2_3 (deleted)"));
        assert!(!is_deleted_file("/dev/shm/torch_1_2_3"));
        assert!(!is_deleted_file("/memfd:buffer (deleted)"));
        assert!(!is_deleted_file("/dev/zero (deleted)"));
        assert!(!is_deleted_file("/SYSV00000000 (deleted)"));
        assert!(!is_deleted_file("socket:[123]"));
    }

    #[test]
    fn the_limit_is_the_largest_rounded_up_and_only_above_criu_s_own() {
        let mut ghosts = Ghosts::default();
        assert_eq!(ghosts.limit(), None);
        ghosts
            .files
            .insert((1, 1), ("/a (deleted)".into(), 1 << 20));
        assert_eq!(ghosts.limit(), None, "1 MiB is CRIU's own limit");
        ghosts
            .files
            .insert((1, 2), ("/b (deleted)".into(), (8 << 20) + 1));
        assert_eq!(ghosts.limit(), Some(9 << 20));
        assert_eq!(ghosts.total(), (9 << 20) + 1);
    }

    #[test]
    fn a_deleted_file_held_open_is_found_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("batch");
        std::fs::write(&path, vec![0u8; 3 << 20]).expect("write");
        let open = std::fs::File::open(&path).expect("open");
        let again = std::fs::File::open(&path).expect("open");
        std::fs::remove_file(&path).expect("rm");
        let mut ghosts = Ghosts::default();
        ghosts.gather(std::process::id() as i32);
        // (Other tests of this process may hold ghosts of their own.)
        let ours: Vec<&(String, u64)> = ghosts
            .files
            .values()
            .filter(|(name, _)| name.starts_with(&path.display().to_string()))
            .collect();
        assert_eq!(ours.len(), 1, "one file, held twice: {ghosts:?}");
        assert_eq!(ours[0].1, 3 << 20);
        assert!(ghosts.largest() >= 3 << 20);
        drop((open, again));
    }
}
