//! A directory cudackpt keeps its own files in (checkpoint records, per-PID
//! locks), used safely when it runs as root next to other users:
//!
//! - opened once, `O_DIRECTORY|O_NOFOLLOW`, and used only through `*at`
//!   calls on that descriptor, so no path is resolved twice;
//! - trusted only when owned by root or by the user cudackpt runs as, and
//!   not writable by group or others unless sticky (like /tmp), so nobody
//!   else can plant or swap files in it;
//! - created 0700 when missing, and files in it created 0600 with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW`, whatever the umask;
//! - files read or locked in it must be regular and owned by root or that
//!   user, so a planted file (in a sticky directory) is never believed.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::capped::{read_fd_capped, ReadError};
pub use super::unsafe_dir::UnsafeDir;

/// Mode bits that let others write into a directory.
const GROUP_OR_OTHER_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Who may own cudackpt's directories and files: root, and the user it
/// runs as.
fn trusted(owner: u32, me: u32) -> bool {
    owner == 0 || owner == me
}

fn my_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The verdict on a directory's owner and mode (pure, for tests).
pub fn judge_dir(path: &Path, owner: u32, mode: u32, me: u32) -> Result<(), UnsafeDir> {
    if !trusted(owner, me) {
        return Err(UnsafeDir::Owner {
            path: path.to_path_buf(),
            owner,
            expected: me,
        });
    }
    if mode & GROUP_OR_OTHER_WRITE != 0 && mode & STICKY == 0 {
        let who = if mode & 0o002 != 0 {
            "everyone"
        } else {
            "its group"
        };
        return Err(UnsafeDir::Writable {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
            who,
        });
    }
    Ok(())
}

/// One entry of a directory, as listed through its descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    pub name: std::ffi::OsString,
    pub kind: FileType,
    pub owner: u32,
    pub mode: u32,
    pub bytes: u64,
}

/// A directory's descriptor as a child process inherits it.
#[derive(Debug)]
pub struct Inherited {
    /// Held until the child has started; close-on-exec off.
    _held: OwnedFd,
    /// `/proc/self/fd/N`, as the child names it.
    pub path: String,
}

/// A checked directory, held open.
#[derive(Debug)]
pub struct SafeDir {
    fd: OwnedFd,
    path: PathBuf,
    /// Who besides root may own it and its files: the user cudackpt runs
    /// as, or the user whose directory it is (a user's runtime directory,
    /// read by root).
    trusted: u32,
}

impl SafeDir {
    /// Opens `path` if it exists and is safe; `Ok(None)` when it does not
    /// exist (nothing to read from).
    pub fn open_existing(path: &Path) -> Result<Option<SafeDir>, UnsafeDir> {
        match SafeDir::open(path) {
            Err(UnsafeDir::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(None)
            }
            other => other.map(Some),
        }
    }

    /// Opens `path`, creating it and any missing parent 0700 first.
    pub fn create(path: &Path) -> Result<SafeDir, UnsafeDir> {
        SafeDir::create_with_mode(path, 0o700)
    }

    /// [`SafeDir::create`] with another mode for what it creates (0755 for
    /// a user's man directory).
    pub fn create_with_mode(path: &Path, mode: u32) -> Result<SafeDir, UnsafeDir> {
        // Usually it is there already: one open, no mkdir per component.
        if let Some(dir) = SafeDir::open_existing(path)? {
            return Ok(dir);
        }
        // Each missing directory is made under its parent held open, and
        // given its mode on its own descriptor: never chmod by path, which
        // a user who owns a parent could point at a file of root's.
        let reached = super::dir_chain::reach_creating(
            path,
            super::dir_chain::Links::FollowedBeforeLast,
            mode,
        )?;
        let stat = rustix::fs::fstat(&reached.fd).map_err(|e| UnsafeDir::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        judge_dir(path, stat.st_uid, stat.st_mode, my_uid())?;
        Ok(SafeDir {
            fd: reached.fd,
            path: path.to_path_buf(),
            trusted: my_uid(),
        })
    }

    /// Opens `path` if it exists and is safe as a directory of `user`
    /// (root reading a user's own runtime directory): theirs or root's,
    /// and its files theirs or root's. `Ok(None)` when it does not exist.
    pub fn open_existing_of(path: &Path, user: u32) -> Result<Option<SafeDir>, UnsafeDir> {
        match SafeDir::open_trusting(path, user) {
            Err(UnsafeDir::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(None)
            }
            other => other.map(Some),
        }
    }

    fn open(path: &Path) -> Result<SafeDir, UnsafeDir> {
        SafeDir::open_trusting(path, my_uid())
    }

    fn open_trusting(path: &Path, user: u32) -> Result<SafeDir, UnsafeDir> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => UnsafeDir::Symlink {
                path: path.to_path_buf(),
            },
            rustix::io::Errno::NOTDIR if is_symlink(path) => UnsafeDir::Symlink {
                path: path.to_path_buf(),
            },
            rustix::io::Errno::NOTDIR => UnsafeDir::NotDirectory {
                path: path.to_path_buf(),
            },
            e => UnsafeDir::Io {
                path: path.to_path_buf(),
                source: e.into(),
            },
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| UnsafeDir::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        judge_dir(path, stat.st_uid, stat.st_mode, user)?;
        Ok(SafeDir {
            fd,
            path: path.to_path_buf(),
            trusted: user,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` as this directory's user (root writing in a user's
    /// runtime directory: what it makes there stays theirs to read), or
    /// as this process where that is who it is.
    pub fn as_its_user<T: Send>(&self, work: impl FnOnce() -> T + Send) -> io::Result<T> {
        if self.trusted == my_uid() || my_uid() != 0 {
            return Ok(work());
        }
        super::users::as_user(super::users::user(self.trusted), work)
    }

    /// Whether the directory at its path is still this one (not removed,
    /// not replaced by another).
    pub fn is_still_at_its_path(&self) -> bool {
        let (Ok(held), Ok(there)) = (rustix::fs::fstat(&self.fd), rustix::fs::stat(&self.path))
        else {
            return false;
        };
        held.st_dev == there.st_dev && held.st_ino == there.st_ino && held.st_nlink > 0
    }

    /// Whether `name` in this directory is still the file held open.
    pub fn still_holds(&self, name: &str, file: &File) -> bool {
        let (Ok(held), Ok(there)) = (
            rustix::fs::fstat(file),
            rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW),
        ) else {
            return false;
        };
        held.st_dev == there.st_dev && held.st_ino == there.st_ino
    }

    /// Checks a file opened in this directory: regular, and owned by root
    /// or this user.
    fn check_file(&self, name: &str, fd: &OwnedFd) -> Result<(), UnsafeDir> {
        let path = self.path.join(name);
        let stat = rustix::fs::fstat(fd).map_err(|e| UnsafeDir::Io {
            path: path.clone(),
            source: e.into(),
        })?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(UnsafeDir::NotRegular { path });
        }
        if !trusted(stat.st_uid, self.trusted) {
            return Err(UnsafeDir::Owner {
                path,
                owner: stat.st_uid,
                expected: self.trusted,
            });
        }
        Ok(())
    }

    /// Writes `name` atomically: a fresh temporary file (exclusive, no
    /// link followed, 0600) renamed over it. Returns its path.
    pub fn write_atomic(&self, name: &str, contents: &[u8]) -> io::Result<PathBuf> {
        self.write_atomic_with_mode(name, contents, 0o600)
    }

    /// [`SafeDir::write_atomic`] with another mode (0644 for a man page).
    /// The rename replaces whatever `name` was, never writing through it:
    /// a caller in a directory others share asks [`SafeDir::replaceable`]
    /// first.
    pub fn write_atomic_with_mode(
        &self,
        name: &str,
        contents: &[u8],
        mode: u32,
    ) -> io::Result<PathBuf> {
        let mut attempt = 0;
        let (temporary, fd) = loop {
            let temporary = format!(".{name}.{:016x}.tmp", unpredictable());
            match rustix::fs::openat(
                &self.fd,
                temporary.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode),
            ) {
                Ok(fd) => break (temporary, fd),
                Err(rustix::io::Errno::EXIST) if attempt < 16 => attempt += 1,
                Err(e) => return Err(e.into()),
            }
        };
        let written = rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(io::Error::from)
            .and_then(|()| File::from(fd).write_all(contents))
            .and_then(|()| {
                rustix::fs::renameat(&self.fd, temporary.as_str(), &self.fd, name)
                    .map_err(io::Error::from)
            });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, temporary.as_str(), AtFlags::empty());
        }
        written.map(|()| self.path.join(name))
    }

    /// Whether `name` may be replaced: it is not there, or it is a regular
    /// file of root or this user. A link, a FIFO, a device or another
    /// user's file is left alone (and named).
    pub fn replaceable(&self, name: &str) -> Result<(), UnsafeDir> {
        let path = self.path.join(name);
        let stat = match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => {
                return Err(UnsafeDir::Io {
                    path,
                    source: e.into(),
                })
            }
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => Err(UnsafeDir::Symlink { path }),
            FileType::RegularFile if trusted(stat.st_uid, self.trusted) => Ok(()),
            FileType::RegularFile => Err(UnsafeDir::Owner {
                path,
                owner: stat.st_uid,
                expected: self.trusted,
            }),
            _ => Err(UnsafeDir::NotRegular { path }),
        }
    }

    /// Reads at most `cap` bytes of `name`; `Ok(None)` when there is no
    /// such file. Refuses links, FIFOs, devices and files of other users.
    pub fn read_capped(&self, name: &str, cap: u64) -> Result<Option<String>, ReadError> {
        let fd = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io::Error::from(e).into()),
        };
        self.check_file(name, &fd)
            .map_err(|e| ReadError::Unsafe(Box::new(e)))?;
        read_fd_capped(fd, cap).map(Some)
    }

    /// Appends `line` to `name` (created 0600), never through a link, and
    /// only to a regular file of root or this user.
    pub fn append(&self, name: &str, line: &str) -> Result<(), UnsafeDir> {
        let path = self.path.join(name);
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => UnsafeDir::Symlink { path: path.clone() },
            e => UnsafeDir::Io {
                path: path.clone(),
                source: e.into(),
            },
        })?;
        self.check_file(name, &fd)?;
        File::from(fd)
            .write_all(line.as_bytes())
            .map_err(|source| UnsafeDir::Io { path, source })
    }

    /// The files named `PID` + `suffix` (`4242.lock`), with their PIDs:
    /// the per-process files a directory of cudackpt's keeps. Anything
    /// else there is left out.
    pub fn pid_files(&self, suffix: &str) -> Vec<(String, i32)> {
        self.names()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|name| {
                let name = name.into_string().ok()?;
                let pid = name.strip_suffix(suffix)?.parse::<i32>().ok()?;
                Some((name, pid))
            })
            .collect()
    }

    /// The names in this directory (not `.` and `..`), listed through its
    /// descriptor, never its path.
    pub fn names(&self) -> io::Result<Vec<std::ffi::OsString>> {
        use std::os::unix::ffi::OsStrExt;
        let dir = rustix::fs::Dir::read_from(&self.fd)?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
            }
        }
        Ok(names)
    }

    /// Each entry with its type, owner, mode and size, not following
    /// links (pure of the path: through the descriptor).
    pub fn entries(&self) -> io::Result<Vec<ListedEntry>> {
        self.names()?
            .into_iter()
            .map(|name| {
                let stat =
                    rustix::fs::statat(&self.fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?;
                Ok(ListedEntry {
                    name,
                    kind: FileType::from_raw_mode(stat.st_mode),
                    owner: stat.st_uid,
                    mode: stat.st_mode,
                    bytes: stat.st_size as u64,
                })
            })
            .collect()
    }

    /// The bytes an unprivileged writer may still put on this directory's
    /// filesystem.
    pub fn free_bytes(&self) -> Option<u64> {
        let stat = rustix::fs::fstatvfs(&self.fd).ok()?;
        Some(stat.f_bavail.saturating_mul(stat.f_frsize))
    }

    /// The directory's descriptor, for `*at` calls of the caller's.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// A copy of the descriptor that a child process inherits, and the
    /// path the child reaches the directory by (`/proc/self/fd/N`): the
    /// directory checked here, whatever is at its path by then. Dropped
    /// once the child has started.
    pub fn inheritable(&self) -> io::Result<Inherited> {
        // dup() leaves close-on-exec off, as a child must find it.
        let fd = rustix::io::dup(&self.fd)?;
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        Ok(Inherited { _held: fd, path })
    }

    /// A directory reached by [`super::dir_chain`], trusting files of root
    /// and of `user` in it.
    pub fn from_reached(reached: super::dir_chain::Reached, user: u32) -> SafeDir {
        SafeDir {
            fd: reached.fd,
            path: reached.path,
            trusted: user,
        }
    }

    /// Removes `name` if it is there.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens (creating 0600 if needed) `name` for locking: a regular file
    /// of root or this user, never through a link.
    pub fn open_lock_file(&self, name: &str) -> Result<File, UnsafeDir> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => UnsafeDir::Symlink {
                path: self.path.join(name),
            },
            e => UnsafeDir::Io {
                path: self.path.join(name),
                source: e.into(),
            },
        })?;
        self.check_file(name, &fd)?;
        Ok(File::from(fd))
    }

    /// The text of a small file that is already open (a lock file's holder).
    pub fn read_open(file: &mut File, cap: u64) -> String {
        let mut text = String::new();
        let _ = file.take(cap).read_to_string(&mut text);
        text
    }
}

/// 64 bits nobody else can guess, so a temporary name cannot be planted in
/// advance: the standard library seeds its hasher keys from the OS.
fn unpredictable() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    use super::*;

    #[test]
    fn only_root_or_this_user_and_no_foreign_writers() {
        let p = Path::new("/d");
        assert!(judge_dir(p, 0, 0o40700, 0).is_ok());
        assert!(
            judge_dir(p, 1000, 0o40700, 1000).is_ok(),
            "my own, not root"
        );
        assert!(judge_dir(p, 0, 0o41777, 1000).is_ok(), "sticky, like /tmp");
        assert!(matches!(
            judge_dir(p, 1000, 0o40700, 0),
            Err(UnsafeDir::Owner { owner: 1000, .. })
        ));
        assert!(matches!(
            judge_dir(p, 0, 0o40777, 0),
            Err(UnsafeDir::Writable {
                who: "everyone",
                ..
            })
        ));
        assert!(matches!(
            judge_dir(p, 0, 0o40770, 0),
            Err(UnsafeDir::Writable {
                who: "its group",
                ..
            })
        ));
    }

    /// (Under umask 000 too: `tests/cli/attacks.rs` runs cudackpt so, in a
    /// process of its own; changing this test process's umask would race
    /// with the other unit tests.)
    #[test]
    fn created_directories_and_files_are_private() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = SafeDir::create(&root.path().join("a/b")).expect("created");
        for path in [root.path().join("a"), root.path().join("a/b")] {
            let mode = std::fs::metadata(&path).expect("made").permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", path.display());
        }
        let file = dir.write_atomic("x.json", b"{}").expect("written");
        let mode = std::fs::metadata(&file).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            dir.read_capped("x.json", 10).expect("read"),
            Some("{}".into())
        );
        assert_eq!(dir.read_capped("missing", 10).expect("none"), None);
        dir.remove("x.json").expect("removed");
        dir.remove("x.json").expect("removing twice is fine");
    }

    #[test]
    fn a_planted_temporary_link_is_never_written_through() {
        let root = tempfile::tempdir().expect("tempdir");
        let victim = root.path().join("victim");
        std::fs::write(&victim, "precious").expect("victim");
        let dir = SafeDir::create(&root.path().join("records")).expect("dir");
        // Temporary names cannot be guessed; a link at the names a naive
        // writer would use changes nothing.
        for name in [".7.json.tmp", "7.json.tmp", ".7.json.swp"] {
            symlink(&victim, root.path().join("records").join(name)).expect("link");
        }
        symlink(&victim, root.path().join("records/7.json")).expect("link");
        dir.write_atomic("7.json", b"record")
            .expect("written beside the links");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "precious"
        );
        let written =
            std::fs::symlink_metadata(root.path().join("records/7.json")).expect("the record");
        assert!(
            written.file_type().is_file(),
            "the link was replaced, not followed"
        );
    }

    #[test]
    fn links_to_directories_and_foreign_files_are_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("real")).expect("dir");
        symlink(root.path().join("real"), root.path().join("link")).expect("link");
        assert!(matches!(
            SafeDir::create(&root.path().join("link")),
            Err(UnsafeDir::Symlink { .. })
        ));
        let dir = SafeDir::create(&root.path().join("real")).expect("dir");
        symlink("/etc/passwd", root.path().join("real/lnk")).expect("link");
        assert!(dir.read_capped("lnk", 100).is_err());
        assert!(matches!(
            dir.open_lock_file("lnk"),
            Err(UnsafeDir::Symlink { .. })
        ));
        if rustix::process::geteuid().is_root() {
            let foreign = root.path().join("real/foreign");
            std::fs::write(&foreign, "x").expect("file");
            std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).expect("chown");
            assert_eq!(std::fs::metadata(&foreign).expect("f").uid(), 65534);
            assert!(dir.read_capped("foreign", 100).is_err());
            assert!(matches!(
                dir.open_lock_file("foreign"),
                Err(UnsafeDir::Owner { owner: 65534, .. })
            ));
        }
    }
}
