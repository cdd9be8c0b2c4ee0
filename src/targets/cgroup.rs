//! Cgroups as the kernel keeps them: where the cgroup v2 hierarchy is
//! mounted, the directory a `--cgroup` names, and the processes in it.
//!
//! A directory is believed to be a cgroup only when its filesystem is one
//! (`fstatfs` on the opened directory, then every read through that
//! descriptor): any user can make a directory holding a file named
//! `cgroup.procs` and list a root daemon's PID in it.

use super::name::printable_path;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{FileType, FsWord, Mode, OFlags};

use crate::targets::discover;

/// Names the cgroup v2 mount to use instead of the one in
/// /proc/self/mountinfo; it must be a cgroup2 filesystem.
pub const ROOT_VAR: &str = crate::environment::CGROUP_ROOT;

/// Debug builds only (the tests): a plain directory read as the cgroup v2
/// mount, whose memory files the tests write. Release builds ignore it.
pub const DEBUG_TREE_VAR: &str = crate::environment::DEBUG_CGROUP_TREE;

/// `statfs.f_type` of the two cgroup filesystems (linux/magic.h).
const CGROUP2_SUPER_MAGIC: FsWord = 0x6367_7270;
const CGROUP_SUPER_MAGIC: FsWord = 0x0027_e0eb;

/// A root cgroup's `cgroup.procs` lists every process of the host: at
/// most 4 million PIDs of 8 characters.
const PROCS_CAP: u64 = 64 << 20;

/// Which cgroup filesystem a directory is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filesystem {
    V1,
    V2,
}

/// The filesystem of an open directory, when it is a cgroup one.
fn filesystem_of(dir: impl AsFd) -> io::Result<Option<Filesystem>> {
    let found = rustix::fs::fstatfs(dir)?.f_type as FsWord;
    Ok(match found {
        CGROUP2_SUPER_MAGIC => Some(Filesystem::V2),
        CGROUP_SUPER_MAGIC => Some(Filesystem::V1),
        _ => None,
    })
}

/// The tests' stand-in tree, in debug builds when one is named.
pub fn debug_tree() -> Option<PathBuf> {
    crate::environment::debug(DEBUG_TREE_VAR).map(PathBuf::from)
}

/// Why a directory is not taken for a cgroup (each names the path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupError {
    #[error("{} is a symbolic link: name the cgroup directory itself", printable_path(.0))]
    Link(PathBuf),
    #[error("{} is not a directory", printable_path(.0))]
    NotADirectory(PathBuf),
    #[error("{}: {why}", printable_path(path))]
    Unreadable { path: PathBuf, why: String },
    #[error("{} is not a cgroup: it is not on a cgroup filesystem (a directory holding a file named cgroup.procs is not enough)", printable_path(.0))]
    NotACgroup(PathBuf),
    #[error("{ROOT_VAR}: {}", .0)]
    Root(Box<CgroupError>),
    #[error("{ROOT_VAR}: {} is not a cgroup v2 mount (its filesystem is not cgroup2)", printable_path(.0))]
    RootNotCgroup2(PathBuf),
    #[error("{} is not a cgroup directory, and no cgroup v2 mount was found to resolve it against", printable_path(.0))]
    NoMount(PathBuf),
    #[error(
        "no cgroup at {} (nor {})",
        printable_path(named),
        printable_path(tried)
    )]
    Missing { named: PathBuf, tried: PathBuf },
    #[error("{} is under neither the cgroup v2 mount nor the v1 memory hierarchy", printable_path(.0))]
    NoMemoryHierarchy(PathBuf),
}

impl CgroupError {
    pub(crate) fn unreadable(path: &Path, why: impl std::fmt::Display) -> CgroupError {
        CgroupError::Unreadable {
            path: path.to_path_buf(),
            why: why.to_string(),
        }
    }
}

/// `CUDACKPT_CGROUP_ROOT` when it is set: the directory, or why it cannot
/// be used. Checked once per command.
pub fn root_override() -> Result<Option<&'static Path>, &'static CgroupError> {
    static CHECKED: OnceLock<Result<Option<PathBuf>, CgroupError>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let Some(named) = crate::environment::os(ROOT_VAR) else {
                return Ok(None);
            };
            let named = PathBuf::from(named);
            let dir = open_dir(&named).map_err(|why| CgroupError::Root(Box::new(why)))?;
            match filesystem_of(&dir) {
                Ok(Some(Filesystem::V2)) => Ok(Some(named)),
                Ok(_) => Err(CgroupError::RootNotCgroup2(named)),
                Err(e) => Err(CgroupError::Root(Box::new(CgroupError::unreadable(
                    &named, e,
                )))),
            }
        })
        .as_ref()
        .map(Option::as_deref)
}

/// Refuses a `CUDACKPT_CGROUP_ROOT` that names no cgroup v2 mount, before
/// anything reads a cgroup through it.
pub fn check_root_override() -> Result<(), CgroupError> {
    root_override().map(|_| ()).map_err(Clone::clone)
}

/// Where cgroup v2 is mounted: the tests' stand-in (debug builds), else
/// `CUDACKPT_CGROUP_ROOT` when it is one, else from /proc/self/mountinfo.
pub fn v2_root() -> Option<PathBuf> {
    if let Some(tree) = debug_tree() {
        return Some(tree);
    }
    match root_override() {
        Ok(Some(root)) => return Some(root.to_path_buf()),
        Err(_) => return None,
        Ok(None) => {}
    }
    discover::mounts(discover::mountinfo()?)
        .find(|m| m.fstype == "cgroup2")
        .map(|m| PathBuf::from(m.point))
}

/// Opens a directory for reading, without following a link at its last
/// component and without waiting.
fn open_dir(path: &Path) -> Result<OwnedFd, CgroupError> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        // O_DIRECTORY with O_NOFOLLOW answers ENOTDIR for a link.
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink()) =>
        {
            CgroupError::Link(path.to_path_buf())
        }
        rustix::io::Errno::NOTDIR => CgroupError::NotADirectory(path.to_path_buf()),
        e => CgroupError::unreadable(path, io::Error::from(e)),
    })
}

/// A cgroup directory, open, and known to be on a cgroup filesystem (or
/// in the tests' stand-in tree).
#[derive(Debug)]
pub struct Cgroup {
    pub path: PathBuf,
    dir: OwnedFd,
}

impl Cgroup {
    /// Opens the cgroup at `path`, refusing a directory on any other
    /// filesystem.
    pub fn open(path: &Path) -> Result<Cgroup, CgroupError> {
        let dir = open_dir(path)?;
        let stand_in = debug_tree().is_some_and(|tree| path.starts_with(tree));
        match filesystem_of(&dir) {
            Ok(Some(_)) => {}
            Ok(None) if stand_in => {}
            Ok(None) => return Err(CgroupError::NotACgroup(path.to_path_buf())),
            Err(e) => return Err(CgroupError::unreadable(path, e)),
        }
        Ok(Cgroup {
            path: path.to_path_buf(),
            dir,
        })
    }

    /// The cgroup a user named: an absolute directory as is, anything else
    /// relative to the cgroup v2 mount (e.g. `kubepods.slice/...`, or the
    /// path `/proc/PID/cgroup` shows when it is not a directory here).
    pub fn resolve(path: &Path) -> Result<Cgroup, CgroupError> {
        check_root_override()?;
        if path.is_absolute() && path.join("cgroup.procs").exists() {
            return Cgroup::open(path);
        }
        let root = v2_root().ok_or_else(|| CgroupError::NoMount(path.to_path_buf()))?;
        let relative = path.strip_prefix("/").unwrap_or(path);
        let candidate = root.join(relative);
        if !candidate.is_dir() {
            return Err(CgroupError::Missing {
                named: path.to_path_buf(),
                tried: candidate,
            });
        }
        Cgroup::open(&candidate)
    }

    /// Whether this is the root of its hierarchy (or of the cgroup
    /// namespace shown here): every process is in it or below. A root's
    /// parent directory is on another filesystem.
    pub fn is_root(&self) -> bool {
        let parent = rustix::fs::openat(
            &self.dir,
            "..",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        );
        match (rustix::fs::fstat(&self.dir), parent) {
            (Ok(own), Ok(parent)) => {
                rustix::fs::fstat(&parent).is_ok_and(|parent| parent.st_dev != own.st_dev)
            }
            _ => false,
        }
    }

    /// Every PID in this cgroup and its descendant cgroups (a pod's cgroup
    /// holds one child per container), read through the open directories.
    pub fn pids(&self) -> io::Result<Vec<i32>> {
        let mut pids = Vec::new();
        let mut pending = vec![(self.dir.try_clone()?, true)];
        while let Some((dir, named)) = pending.pop() {
            match read_procs(&dir) {
                Ok(text) => pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok())),
                // A child cgroup removed mid-walk is skipped, like a vanished process.
                Err(e) if !named && is_gone(&e) => continue,
                Err(e) => return Err(e),
            }
            pending.extend(self.children(&dir)?);
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    /// The child cgroups of an open cgroup directory, opened. A child on
    /// another filesystem (something mounted over it) is refused, not
    /// walked.
    fn children(&self, dir: &OwnedFd) -> io::Result<Vec<(OwnedFd, bool)>> {
        let mut children = Vec::new();
        for entry in rustix::fs::Dir::read_from(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") || entry.file_type() != FileType::Directory {
                continue;
            }
            let child = match rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(child) => child,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(e.into()),
            };
            if filesystem_of(&child)?.is_none() && filesystem_of(dir)?.is_some() {
                return Err(io::Error::other(format!(
                    "{} holds {}, which is not on a cgroup filesystem",
                    self.path.display(),
                    name.to_string_lossy()
                )));
            }
            children.push((child, false));
        }
        Ok(children)
    }
}

/// A cgroup directory's `cgroup.procs`, capped.
fn read_procs(dir: &OwnedFd) -> io::Result<String> {
    let procs = rustix::fs::openat(
        dir,
        "cgroup.procs",
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut text = String::new();
    File::from(procs)
        .take(PROCS_CAP)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// A cgroup removed while it was read: its files are gone (or read as
/// ENODEV once the kernel has let go of it).
fn is_gone(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound
        || error.raw_os_error() == Some(rustix::io::Errno::NODEV.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_no_cgroup() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("cgroup.procs"), "1\n").expect("procs");
        let why = Cgroup::open(dir.path())
            .expect_err("tmp is not a cgroup filesystem")
            .to_string();
        assert!(why.contains("not on a cgroup filesystem"), "{why}");
    }

    #[test]
    fn a_link_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/sys/fs/cgroup", &link).expect("link");
        let why = Cgroup::open(&link).expect_err("a link").to_string();
        assert!(why.contains("symbolic link"), "{why}");
    }

    #[test]
    fn the_mounted_hierarchy_is_a_root_cgroup() {
        // Where this host mounts cgroup v2 at all (not in every sandbox).
        let Some(root) = v2_root() else { return };
        let cgroup = Cgroup::open(&root).expect("the v2 mount is a cgroup");
        assert!(cgroup.is_root());
        assert!(!cgroup.pids().expect("readable").is_empty());
        let below = std::fs::read_dir(&root)
            .expect("the mount")
            .flatten()
            .find(|e| e.file_type().is_ok_and(|t| t.is_dir()));
        if let Some(below) = below {
            let child = Cgroup::open(&below.path()).expect("a child cgroup");
            assert!(!child.is_root(), "{}", below.path().display());
        }
    }
}
