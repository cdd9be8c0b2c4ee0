//! A directory reached from `/` one component at a time, each step opened
//! on the descriptor of the step before (`openat`), so that what is checked
//! is what is used: nobody can swap a component between the look and the
//! use, and a directory made on the way is made under a parent held open
//! (`mkdirat`), its mode set on its own descriptor (`fchmod`), never by
//! path. Where the caller asks, no step may be a symbolic link.
//!
//! The walk also says who could have changed what lies at the end
//! ([`writers`], pure): root alone, one other user, or more than that. A
//! root `undump` restores images only as the user who could have written
//! them (SPEC section 14).

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, CWD};

use super::unsafe_dir::UnsafeDir;

/// Whether a step may be a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// No step may be one (the images directory of a dump or an undump).
    Refused,
    /// Steps before the last may be (`/var/run` is one on Debian); the
    /// last may not.
    FollowedBeforeLast,
}

/// The owner and mode of one directory on the way, `/` first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirStep {
    pub owner: u32,
    pub mode: u32,
}

/// A directory reached: its descriptor (opened for reading), its path
/// (absolute, as walked), and every directory on the way to it, itself
/// last.
#[derive(Debug)]
pub struct Reached {
    pub fd: OwnedFd,
    pub path: PathBuf,
    pub steps: Vec<DirStep>,
    /// Whether the last component was made by this walk.
    pub created: bool,
}

/// `path` made absolute (from the working directory, which the kernel
/// names without links) and lexically normalised: `.` dropped, `..` taking
/// the component before it away. With no link on any step, as the walk
/// then insists, that is where the kernel would lead.
pub fn absolute(path: &Path) -> io::Result<PathBuf> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut normal = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::Normal(name) => normal.push(name),
            Component::ParentDir => {
                normal.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(normal)
}

/// Reaches the existing directory `path`.
pub fn reach(path: &Path, links: Links) -> Result<Reached, UnsafeDir> {
    walk(path, links, None)
}

/// Reaches `path`, making each missing directory with `mode` (exactly:
/// set again on its descriptor, whatever the umask) under its parent held
/// open. A directory made here that is not this user's once opened (swapped
/// in between) is refused.
pub fn reach_creating(path: &Path, links: Links, mode: u32) -> Result<Reached, UnsafeDir> {
    walk(path, links, Some(Making { mode, owner: None }))
}

/// Like [`reach_creating`], each directory made then handed to `uid` and
/// `gid` on its descriptor (what a process of theirs had made there): the
/// directories a restored job binds its Unix sockets in.
pub fn reach_creating_for(
    path: &Path,
    links: Links,
    mode: u32,
    (uid, gid): (u32, u32),
) -> Result<Reached, UnsafeDir> {
    walk(
        path,
        links,
        Some(Making {
            mode,
            owner: Some((uid, gid)),
        }),
    )
}

/// How a missing directory is made: its mode, and whose it becomes (none:
/// this user's).
#[derive(Debug, Clone, Copy)]
struct Making {
    mode: u32,
    owner: Option<(u32, u32)>,
}

fn walk(path: &Path, links: Links, create: Option<Making>) -> Result<Reached, UnsafeDir> {
    let io_at = |at: &Path, source: io::Error| UnsafeDir::Io {
        path: at.to_path_buf(),
        source,
    };
    let absolute = absolute(path).map_err(|e| io_at(path, e))?;
    let names: Vec<&OsStr> = absolute
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let mut at = PathBuf::from("/");
    let mut fd = rustix::fs::openat(
        CWD,
        "/",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_at(&at, e.into()))?;
    let mut steps = vec![step_of(&fd, &at)?];
    let mut created = false;
    for (index, name) in names.iter().enumerate() {
        let last = index + 1 == names.len();
        at.push(name);
        let no_follow = last || links == Links::Refused;
        let (next, made) = open_step(&fd, name, &at, no_follow, last, create)?;
        created = made;
        fd = next;
        steps.push(step_of(&fd, &at)?);
    }
    Ok(Reached {
        fd,
        path: absolute,
        steps,
        created,
    })
}

/// Opens `name` under `parent` (making it first where asked and missing):
/// the descriptor, and whether it was made here.
fn open_step(
    parent: &OwnedFd,
    name: &OsStr,
    at: &Path,
    no_follow: bool,
    last: bool,
    create: Option<Making>,
) -> Result<(OwnedFd, bool), UnsafeDir> {
    match open_dir_at(parent, name, at, no_follow, last) {
        Err(UnsafeDir::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            let Some(Making { mode, owner }) = create else {
                return Err(UnsafeDir::Io {
                    path: at.to_path_buf(),
                    source,
                });
            };
            let made = match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
                Ok(()) => true,
                // Made by someone else in between: checked as found.
                Err(rustix::io::Errno::EXIST) => false,
                Err(e) => {
                    return Err(UnsafeDir::Io {
                        path: at.to_path_buf(),
                        source: e.into(),
                    })
                }
            };
            // Opened without following a link whatever `links` says: what
            // was just made is no link, and a link there now was planted.
            // Opened for reading, last or not: its mode and owner are set
            // on this descriptor, which a path-only one cannot do.
            let fd = open_dir_at(parent, name, at, true, true)?;
            if made {
                claim(&fd, at, mode)?;
                if let Some((uid, gid)) = owner {
                    hand_over(&fd, at, uid, gid)?;
                }
            }
            Ok((fd, made))
        }
        other => other.map(|fd| (fd, false)),
    }
}

/// A directory this walk made, as opened: still this user's (not swapped
/// for another's in between), given exactly `mode` on its descriptor.
fn claim(fd: &OwnedFd, at: &Path, mode: u32) -> Result<(), UnsafeDir> {
    let me = rustix::process::geteuid().as_raw();
    let stat = rustix::fs::fstat(fd).map_err(|e| UnsafeDir::Io {
        path: at.to_path_buf(),
        source: e.into(),
    })?;
    if stat.st_uid != me {
        return Err(UnsafeDir::Owner {
            path: at.to_path_buf(),
            owner: stat.st_uid,
            expected: me,
        });
    }
    if stat.st_mode & 0o7777 != mode {
        rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(|e| UnsafeDir::Io {
            path: at.to_path_buf(),
            source: e.into(),
        })?;
    }
    Ok(())
}

/// A directory this walk made, given to `uid` and `gid` on its descriptor.
fn hand_over(fd: &OwnedFd, at: &Path, uid: u32, gid: u32) -> Result<(), UnsafeDir> {
    let (uid, gid) = (
        rustix::fs::Uid::from_raw(uid),
        rustix::fs::Gid::from_raw(gid),
    );
    rustix::fs::fchown(fd, Some(uid), Some(gid)).map_err(|e| UnsafeDir::Io {
        path: at.to_path_buf(),
        source: e.into(),
    })
}

/// Opens one directory under `parent`: for reading when `readable` (the
/// last step, or one this walk made), else as a path only (a directory
/// this user may pass through but not list, such as a home directory of
/// mode 0711, is still a step).
fn open_dir_at(
    parent: &OwnedFd,
    name: &OsStr,
    at: &Path,
    no_follow: bool,
    readable: bool,
) -> Result<OwnedFd, UnsafeDir> {
    let mut flags = OFlags::DIRECTORY | OFlags::CLOEXEC;
    flags |= if readable {
        OFlags::RDONLY
    } else {
        OFlags::PATH
    };
    if no_follow {
        flags |= OFlags::NOFOLLOW;
    }
    rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP => UnsafeDir::Symlink {
            path: at.to_path_buf(),
        },
        rustix::io::Errno::NOTDIR if is_link_at(parent, name) => UnsafeDir::Symlink {
            path: at.to_path_buf(),
        },
        rustix::io::Errno::NOTDIR => UnsafeDir::NotDirectory {
            path: at.to_path_buf(),
        },
        e => UnsafeDir::Io {
            path: at.to_path_buf(),
            source: e.into(),
        },
    })
}

fn is_link_at(parent: &OwnedFd, name: &OsStr) -> bool {
    rustix::fs::statat(parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink)
}

fn step_of(fd: &OwnedFd, at: &Path) -> Result<DirStep, UnsafeDir> {
    let stat = rustix::fs::fstat(fd).map_err(|e| UnsafeDir::Io {
        path: at.to_path_buf(),
        source: e.into(),
    })?;
    Ok(DirStep {
        owner: stat.st_uid,
        mode: stat.st_mode,
    })
}

/// Who could have written what lies in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writers {
    /// Root alone: every directory on the way and every file is root's,
    /// and none is writable by anyone else (a sticky directory such as
    /// /tmp lets others add entries of their own, not replace root's).
    Root,
    /// One user besides root (the directory's owner, or the owner of one
    /// above it, who can rename what it holds).
    User(u32),
    /// Several users, or anyone: said in words.
    Many(String),
}

/// The owner and mode of a file in the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStep {
    pub owner: u32,
    pub mode: u32,
}

const GROUP_OR_OTHER_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Who could have written the directory reached by `steps` (`/` first,
/// the directory last) and its `files` (pure). The owner of a directory on
/// the way can rename or replace anything below it; a directory others
/// may write and not sticky lets anyone do so; the directory itself, or a
/// file in it, that others may write, lets anyone plant or change an image.
pub fn writers(steps: &[DirStep], files: &[FileStep]) -> Writers {
    let mut users: Vec<u32> = Vec::new();
    let mut anyone: Option<String> = None;
    for (index, step) in steps.iter().enumerate() {
        let last = index + 1 == steps.len();
        if step.owner != 0 && !users.contains(&step.owner) {
            users.push(step.owner);
        }
        let open = step.mode & GROUP_OR_OTHER_WRITE != 0;
        if open && (last || step.mode & STICKY == 0) && anyone.is_none() {
            anyone = Some(format!(
                "{} directory on the way is writable by others (mode {:04o})",
                if last { "the images" } else { "a" },
                step.mode & 0o7777
            ));
        }
    }
    for file in files {
        if file.owner != 0 && !users.contains(&file.owner) {
            users.push(file.owner);
        }
        if file.mode & GROUP_OR_OTHER_WRITE != 0 && anyone.is_none() {
            anyone = Some(format!(
                "a file in it is writable by others (mode {:04o})",
                file.mode & 0o7777
            ));
        }
    }
    if let Some(why) = anyone {
        return Writers::Many(why);
    }
    match users.as_slice() {
        [] => Writers::Root,
        [user] => Writers::User(*user),
        several => Writers::Many(format!(
            "users {} could each have written it",
            several
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(owner: u32, mode: u32) -> DirStep {
        DirStep {
            owner,
            mode: 0o40000 | mode,
        }
    }

    #[test]
    fn paths_are_made_absolute_and_normal() {
        assert_eq!(
            absolute(Path::new("/a/./b/../c/")).expect("absolute"),
            PathBuf::from("/a/c")
        );
        assert_eq!(
            absolute(Path::new("/../x")).expect("absolute"),
            PathBuf::from("/x")
        );
        let here = std::env::current_dir().expect("cwd");
        assert_eq!(absolute(Path::new("y")).expect("absolute"), here.join("y"));
    }

    #[test]
    fn who_could_have_written_a_directory() {
        let root = dir(0, 0o755);
        let tmp = dir(0, 0o1777);
        assert_eq!(writers(&[root, dir(0, 0o700)], &[]), Writers::Root);
        assert_eq!(
            writers(&[root, tmp, dir(0, 0o700)], &[]),
            Writers::Root,
            "a sticky /tmp lets nobody replace root's directory"
        );
        // /home/alice/ckpt/job1: root's, under alice's.
        assert_eq!(
            writers(&[root, root, dir(1000, 0o750), dir(0, 0o700)], &[]),
            Writers::User(1000)
        );
        assert_eq!(
            writers(
                &[root, dir(0, 0o700)],
                &[FileStep {
                    owner: 1000,
                    mode: 0o100600
                }]
            ),
            Writers::User(1000)
        );
        assert!(matches!(
            writers(&[root, dir(1000, 0o755), dir(1001, 0o700)], &[]),
            Writers::Many(why) if why.contains("1000, 1001")
        ));
        assert!(matches!(
            writers(&[root, dir(0, 0o777), dir(0, 0o700)], &[]),
            Writers::Many(why) if why.contains("0777")
        ));
        assert!(matches!(
            writers(&[root, dir(0, 0o1777)], &[]),
            Writers::Many(why) if why.contains("images directory")
        ));
        assert!(matches!(
            writers(&[root, dir(0, 0o700)], &[FileStep { owner: 0, mode: 0o100666 }]),
            Writers::Many(why) if why.contains("a file")
        ));
    }

    #[test]
    fn a_link_on_the_way_is_refused_where_asked() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("real")).expect("dir");
        std::os::unix::fs::symlink(root.path().join("real"), root.path().join("link"))
            .expect("link");
        let through = root.path().join("link/below");
        std::fs::create_dir(&through).expect("dir");
        assert!(matches!(
            reach(&through, Links::Refused),
            Err(UnsafeDir::Symlink { path }) if path.ends_with("link")
        ));
        assert!(reach(&through, Links::FollowedBeforeLast).is_ok());
        assert!(matches!(
            reach(&root.path().join("link"), Links::FollowedBeforeLast),
            Err(UnsafeDir::Symlink { .. })
        ));
    }

    #[test]
    fn what_is_made_on_the_way_has_exactly_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().expect("tempdir");
        let deep = root.path().join("a/b/c");
        let reached = reach_creating(&deep, Links::Refused, 0o700).expect("made");
        assert!(reached.created);
        for made in ["a", "a/b", "a/b/c"] {
            let mode = std::fs::metadata(root.path().join(made))
                .expect("made")
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, 0o700, "{made}");
        }
        assert_eq!(reached.steps.len(), deep.components().count());
        let again = reach_creating(&deep, Links::Refused, 0o700).expect("there");
        assert!(!again.created);
    }

    /// Made for another user: only what this walk made is handed over; a
    /// directory that was there stays whose it was.
    #[test]
    fn what_is_made_for_a_user_is_theirs_and_nothing_else_is() {
        use std::os::unix::fs::MetadataExt;
        if !rustix::process::geteuid().is_root() {
            return; // handing a directory to another user needs root
        }
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("there")).expect("dir");
        let deep = root.path().join("there/made/too");
        reach_creating_for(&deep, Links::Refused, 0o700, (65534, 65533)).expect("made");
        let owner = |p: &str| {
            let m = std::fs::metadata(root.path().join(p)).expect("there");
            (m.uid(), m.gid(), m.mode() & 0o7777)
        };
        assert_eq!(owner("there").0, 0, "was there: still root's");
        assert_eq!(owner("there/made"), (65534, 65533, 0o700));
        assert_eq!(owner("there/made/too"), (65534, 65533, 0o700));
        // A link planted where a directory is to be made is not followed.
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("dir");
        std::os::unix::fs::symlink(&elsewhere, root.path().join("planted")).expect("link");
        assert!(reach_creating_for(
            &root.path().join("planted/x"),
            Links::Refused,
            0o700,
            (65534, 65534)
        )
        .is_err());
        assert!(!elsewhere.join("x").exists());
    }
}
