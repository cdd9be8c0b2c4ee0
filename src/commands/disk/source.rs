//! The images an undump restores, as CRIU will read them: the directory
//! reached from `/` by descriptor with no link on any step, and who could
//! have written it (`files::dir_chain::writers`). Root's alone: CRIU is
//! given that descriptor (`/proc/self/fd/N`) and works in it. Another
//! user's: CRIU, running as root, writes into the directory it restores
//! from (its `stats-restore` image, opened with `O_CREAT|O_TRUNC` and no
//! `O_NOFOLLOW`, and its log), and that user could swap an image between
//! cudackpt's check and CRIU's read. So CRIU gets a private stage instead,
//! in cudackpt's run directory: every image held open, and named there by a
//! link to that open file (`/proc/PID/fd/N`, which reopens the very file
//! held) where nobody but root can change the file, or by a private copy
//! where its owner could. What cudackpt checks is read from what it holds,
//! so it is what CRIU reads.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::files::dir_chain::{self, FileStep, Links, Writers};
use crate::files::{SafeDir, UnsafeDir};

/// Images held for an undump.
pub struct HeldImages {
    /// Who could have written them: root alone, or one user.
    pub writer: Option<u32>,
    /// The directory CRIU is given as its images and work directory.
    pub criu_dir: SafeDir,
    /// Every image, held open (for the stage: the files its names lead to).
    held: BTreeMap<OsString, OwnedFd>,
    /// The stage (its parent held, and its name there), whose names are
    /// taken away once CRIU has run: the stage goes with them unless
    /// CRIU's log is in it.
    staged: Option<(SafeDir, OsString)>,
}

/// Why the images cannot be restored from.
#[derive(Debug, thiserror::Error)]
pub enum SourceProblem {
    #[error(transparent)]
    Unsafe(#[from] UnsafeDir),
    #[error("{path}: {why}, so the images there could be anyone's: a root undump restores images only of root, or of the one user who could have written them")]
    ManyWriters { path: PathBuf, why: String },
    #[error("{path} holds {what}, which is not an image of CRIU's")]
    NotAnImage { path: PathBuf, what: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

impl SourceProblem {
    pub fn hint(&self) -> String {
        match self {
            SourceProblem::Unsafe(UnsafeDir::Symlink { .. }) => {
                "name the images by a path with no symbolic link on any step (`realpath` gives one)".into()
            }
            SourceProblem::Unsafe(why) => why.hint(),
            SourceProblem::ManyWriters { .. } => "move the images where only root, or only the job's owner, can write (`install -d -m 0700`), and undump from there".into(),
            SourceProblem::NotAnImage { .. } => "remove it: a dump writes regular files only".into(),
            SourceProblem::Io { .. } => "check the directory and its permissions".into(),
        }
    }
}

/// The most images one undump holds open (a thread's core image each):
/// past it the undump is refused rather than run out of descriptors.
const MOST_IMAGES: usize = 60_000;

impl HeldImages {
    /// Reaches the images at `path` and holds them for CRIU.
    pub fn open(path: &Path) -> Result<HeldImages, SourceProblem> {
        let reached = dir_chain::reach(path, Links::Refused)?;
        let steps = reached.steps.clone();
        let shown = reached.path.clone();
        let images = SafeDir::from_reached(reached, 0);
        let io = |source| SourceProblem::Io {
            path: shown.clone(),
            source,
        };
        let entries = images.entries().map_err(io)?;
        if let Some(odd) = entries.iter().find(|e| e.kind != FileType::RegularFile) {
            return Err(SourceProblem::NotAnImage {
                path: shown.join(&odd.name),
                what: format!("a {}", kind_in_words(odd.kind)),
            });
        }
        let files: Vec<FileStep> = entries
            .iter()
            .map(|e| FileStep {
                owner: e.owner,
                mode: e.mode,
            })
            .collect();
        let writer = match dir_chain::writers(&steps, &files) {
            Writers::Root => None,
            Writers::User(uid) => Some(uid),
            Writers::Many(why) => return Err(SourceProblem::ManyWriters { path: shown, why }),
        };
        if entries.len() > MOST_IMAGES {
            return Err(io(io::Error::other(format!(
                "{} files: more than the {MOST_IMAGES} an undump holds open",
                entries.len()
            ))));
        }
        raise_open_file_limit();
        let mut held = BTreeMap::new();
        for entry in &entries {
            held.insert(
                entry.name.clone(),
                open_image(&images, &entry.name).map_err(io)?,
            );
        }
        let stage_anyway = crate::environment::debug(crate::environment::DEBUG_STAGE_ALWAYS)
            .is_some_and(|v| v == "1");
        match writer {
            None if stage_anyway => stage(held, None).map_err(io),
            None => Ok(HeldImages {
                writer,
                criu_dir: images,
                held,
                staged: None,
            }),
            Some(uid) => stage(held, Some(uid)).map_err(io),
        }
    }

    /// The bytes of image `name` (at most `cap`), read from the file held;
    /// `Ok(None)` where the images hold no such file.
    pub fn read(&self, name: &str, cap: u64) -> io::Result<Option<Vec<u8>>> {
        let Some(fd) = self.held.get(OsStr::new(name)) else {
            return Ok(None);
        };
        read_held(fd, cap).map(Some)
    }

    /// The names of the images held, as text where they are.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.held.keys().filter_map(|n| n.to_str())
    }

    /// Takes the stage's names away (the log stays): what CRIU read is
    /// no longer needed there.
    pub fn unstage(&mut self) {
        let Some((base, name)) = self.staged.take() else {
            return;
        };
        for image in self.held.keys() {
            let _ = rustix::fs::unlinkat(self.criu_dir.fd(), image.as_os_str(), AtFlags::empty());
        }
        // What CRIU wrote beside them, read by now: its stats and pidfile.
        for left in ["stats-restore", "restore.pid"] {
            let _ = rustix::fs::unlinkat(self.criu_dir.fd(), left, AtFlags::empty());
        }
        // Gone when empty; kept, with CRIU's log, when CRIU ran.
        let _ = rustix::fs::unlinkat(base.fd(), name.as_os_str(), AtFlags::REMOVEDIR);
    }
}

impl Drop for HeldImages {
    fn drop(&mut self) {
        self.unstage();
    }
}

/// Opens image `name` for reading: regular, never through a link, never
/// blocking.
fn open_image(images: &SafeDir, name: &OsStr) -> io::Result<OwnedFd> {
    let fd = rustix::fs::openat(
        images.fd(),
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            Path::new(name).display()
        )));
    }
    Ok(fd)
}

/// Reads a held file from its start, at most `cap` bytes.
fn read_held(fd: &OwnedFd, cap: u64) -> io::Result<Vec<u8>> {
    let file = File::from(fd.try_clone()?);
    let size = file.metadata()?.len();
    if size > cap {
        return Err(io::Error::other(format!(
            "{size} bytes, more than the {cap} read"
        )));
    }
    let mut bytes = vec![0; size as usize];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// Where an undump of another user's images stages them: a directory of
/// its own under cudackpt's run directory (`undumps/`), where CRIU's log
/// stays; with that parent, held, and its name there.
fn stage_dir() -> io::Result<(SafeDir, SafeDir, OsString)> {
    let base =
        SafeDir::create(&crate::files::run_dir().join("undumps")).map_err(io::Error::other)?;
    let name = OsString::from(format!(
        "{}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        std::process::id()
    ));
    rustix::fs::mkdirat(base.fd(), name.as_os_str(), Mode::from_raw_mode(0o700))?;
    let fd = rustix::fs::openat(
        base.fd(),
        name.as_os_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let me = rustix::process::geteuid().as_raw();
    let stat = rustix::fs::fstat(&fd)?;
    if stat.st_uid != me || stat.st_mode & 0o077 != 0 {
        return Err(io::Error::other("the stage is not the directory made"));
    }
    let reached = dir_chain::Reached {
        fd,
        path: base.path().join(&name),
        steps: Vec::new(),
        created: true,
    };
    let dir = SafeDir::from_reached(reached, me);
    Ok((dir, base, name))
}

/// Names each held image in a private stage: a link to the held file where
/// only root can change it, else a private copy, which is then the file
/// held.
fn stage(mut held: BTreeMap<OsString, OwnedFd>, writer: Option<u32>) -> io::Result<HeldImages> {
    let (dir, base, name) = stage_dir()?;
    let me = std::process::id();
    for (name, fd) in held.iter_mut() {
        let stat = rustix::fs::fstat(&*fd)?;
        let only_root_writes = stat.st_uid == 0 && stat.st_mode & 0o022 == 0;
        if only_root_writes {
            let target = format!("/proc/{me}/fd/{}", fd.as_raw_fd());
            rustix::fs::symlinkat(target.as_str(), dir.fd(), name.as_os_str())?;
        } else {
            *fd = copied(fd, &dir, name)?;
        }
    }
    Ok(HeldImages {
        writer,
        criu_dir: dir,
        held,
        staged: Some((base, name)),
    })
}

/// A private copy of `from` named `name` in `dir` (0600, made exclusively),
/// opened for reading.
fn copied(from: &OwnedFd, dir: &SafeDir, name: &OsStr) -> io::Result<OwnedFd> {
    let to = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut reader = File::from(from.try_clone()?);
    // The held descriptor was never read from: its offset is the start.
    let mut writer = File::from(to);
    io::copy(&mut reader, &mut writer)?;
    drop(writer);
    open_image(dir, name)
}

/// Lets this undump hold as many files as its hard limit allows (the soft
/// limit is often 1024, and a job of many threads has more images).
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

fn kind_in_words(kind: FileType) -> &'static str {
    match kind {
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice | FileType::BlockDevice => "device",
        _ => "file of another kind",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Images under a directory another user owns: staged in root's place,
    /// root's files by a link to the file held, theirs copied; what is read
    /// is what was held, whatever they swap in afterwards; the stage goes
    /// once unstaged. (Root only: chown.)
    #[test]
    fn another_users_images_are_staged_and_read_as_held() {
        if !rustix::process::geteuid().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            return;
        }
        let root = tempfile::tempdir().expect("tempdir");
        let home = root.path().join("home");
        std::fs::create_dir(&home).expect("mkdir");
        std::os::unix::fs::chown(&home, Some(65534), Some(65534)).expect("chown");
        let images = home.join("job1");
        std::fs::create_dir(&images).expect("mkdir");
        std::fs::set_permissions(&images, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
        std::fs::write(images.join("core-1.img"), b"root's core").expect("write");
        std::fs::write(images.join("planted.img"), b"theirs").expect("write");
        std::os::unix::fs::chown(images.join("planted.img"), Some(65534), None).expect("chown");
        let mut held = HeldImages::open(&images).expect("held");
        assert_eq!(held.writer, Some(65534));
        let stage = held.criu_dir.path().to_path_buf();
        assert!(stage.starts_with(crate::files::run_dir().join("undumps")));
        let link = std::fs::symlink_metadata(stage.join("core-1.img")).expect("staged");
        assert!(
            link.file_type().is_symlink(),
            "root's file: a link to the one held"
        );
        let copy = std::fs::symlink_metadata(stage.join("planted.img")).expect("staged");
        assert!(
            copy.file_type().is_file() && copy.uid() == 0,
            "theirs: root's copy"
        );
        // Swapped after the look: what is read (and what CRIU reads
        // through the stage) is what was held.
        std::fs::write(images.join("planted.img"), b"changed").expect("write");
        std::fs::remove_file(images.join("core-1.img")).expect("rm");
        std::fs::write(images.join("core-1.img"), b"forged").expect("write");
        assert_eq!(
            held.read("planted.img", 100).expect("read").as_deref(),
            Some(&b"theirs"[..])
        );
        assert_eq!(
            held.read("core-1.img", 100).expect("read").as_deref(),
            Some(&b"root's core"[..])
        );
        assert_eq!(
            std::fs::read(stage.join("core-1.img")).expect("through the link"),
            b"root's core"
        );
        held.unstage();
        assert!(!stage.exists(), "an empty stage goes");
    }
}
