//! Files cudackpt writes where a user told it to (`man --dir DIR`): root
//! must not write through a link the user planted there (`ln -s
//! /etc/shadow DIR/cudackpt.1`), nor anywhere the user could not write
//! themselves. Under sudo, pkexec or doas every step runs with that user's
//! credentials, so the kernel decides as it would for them; the directory
//! is opened once without following a link and checked (theirs or root's,
//! writable by nobody else unless sticky), and each file is created
//! exclusively under a temporary name, without following links, then
//! renamed into place. A link, a device or another user's file already at
//! a name is left alone and named.

use std::path::{Path, PathBuf};

use super::safe_dir::SafeDir;
use super::unsafe_dir::UnsafeDir;
use super::users::as_invoker;

/// Mode of a directory created for the user's files.
const DIR_MODE: u32 = 0o755;
/// Mode of each file written (pages others may read).
const FILE_MODE: u32 = 0o644;

/// Writes each `(name, contents)` into `dir` (created, with its parents,
/// if missing) for the user cudackpt acts for. Stops at the first file it
/// may not write. Returns the paths written.
pub fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<Vec<PathBuf>, UnsafeDir> {
    let io = |source| UnsafeDir::Io {
        path: dir.to_path_buf(),
        source,
    };
    as_invoker(|| {
        let held = SafeDir::create_with_mode(dir, DIR_MODE)?;
        files
            .iter()
            .map(|(name, contents)| {
                held.replaceable(name)?;
                held.write_atomic_with_mode(name, contents, FILE_MODE)
                    .map_err(|source| UnsafeDir::Io {
                        path: dir.join(name),
                        source,
                    })
            })
            .collect()
    })
    .map_err(io)?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn pages() -> Vec<(String, Vec<u8>)> {
        vec![
            ("a.1".to_string(), b"page a".to_vec()),
            ("b.1".to_string(), b"page b".to_vec()),
        ]
    }

    #[test]
    fn pages_are_written_and_replaced_in_a_new_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("man/man1");
        let written = write_files(&dir, &pages()).expect("written");
        assert_eq!(written, [dir.join("a.1"), dir.join("b.1")]);
        assert_eq!(std::fs::read(dir.join("a.1")).expect("a"), b"page a");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join("b.1")), FILE_MODE);
        assert_eq!(mode(&dir), DIR_MODE);
        // Written again: this user's own files are replaced.
        write_files(&dir, &pages()).expect("rewritten");
    }

    #[test]
    fn a_planted_link_is_left_alone_and_named() {
        let root = tempfile::tempdir().expect("tempdir");
        let victim = root.path().join("victim");
        std::fs::write(&victim, "precious").expect("victim");
        let dir = root.path().join("man");
        std::fs::create_dir(&dir).expect("dir");
        symlink(&victim, dir.join("b.1")).expect("link");
        let error = write_files(&dir, &pages()).expect_err("refused");
        assert!(matches!(error, UnsafeDir::Symlink { .. }), "{error}");
        assert!(error.to_string().contains("b.1"), "{error}");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "precious"
        );
        // The directory itself as a link is refused too.
        let linked = root.path().join("linked");
        symlink(&dir, &linked).expect("link");
        assert!(matches!(
            write_files(&linked, &pages()),
            Err(UnsafeDir::Symlink { .. })
        ));
    }
}
