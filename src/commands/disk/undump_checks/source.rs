//! The images an undump restores, as CRIU will read them: the directory
//! reached from `/` by descriptor with no link on any step, and who could
//! have written it (`files::dir_chain::writers`). Root's alone: CRIU is
//! given that descriptor (`/proc/self/fd/N`) and works in it. Another
//! user's: CRIU, running as root, writes its log, stats and pidfile in its
//! work directory (its log opened with `O_TRUNC` and no `O_NOFOLLOW`), and
//! that user could swap an image between cudackpt's check and CRIU's read,
//! or link a file of root's in, under the name CRIU writes. So CRIU gets a
//! private stage instead, in cudackpt's run directory (`undumps/NAME`,
//! root's alone): its work directory there, new and empty, and beside it
//! `images/`, holding only CRIU's images (`*.img`), each held open and
//! named by a link to that open file (`/proc/PID/fd/N`, which reopens the
//! very file held) where nobody but root can change the file, or by a
//! private copy where its owner could. What cudackpt checks is read from
//! what it holds, so it is what CRIU reads.
//!
//! The stage is filled only once the undump's checks pass (the manifest
//! read and checked first), and only where the copies fit: every copy's
//! apparent and real size is counted against the room there before the
//! first is made (a sparse file of a terabyte is a terabyte to copy), and a
//! stage that fails is taken away whole.

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
    /// The images directory, held.
    dir: SafeDir,
    /// Every image, held open (for the stage: the files its names lead to).
    held: BTreeMap<OsString, OwnedFd>,
    /// The private stage CRIU is given instead of `dir`, once made.
    staged: Option<PrivateStage>,
}

/// A private stage of images: CRIU's work directory and, in it, its images.
struct PrivateStage {
    /// `undumps/` in cudackpt's run directory, held, and the stage's name
    /// there.
    base: SafeDir,
    name: OsString,
    /// CRIU's work directory: its log, stats and pidfile.
    work: SafeDir,
    /// CRIU's images: a name for each held `*.img`.
    images: SafeDir,
}

/// The name of the images' directory in a stage.
const STAGED_IMAGES: &str = "images";

/// Room a stage leaves free on the run directory's filesystem: `/run` is
/// often a small tmpfs that the host needs too.
const STAGE_SPARE_BYTES: u64 = 64 << 20;

/// Why another user's images could not be staged.
#[derive(Debug, thiserror::Error)]
pub enum StageProblem {
    #[error("staging these images for CRIU would copy {needed} MiB into {where_to}, which has {free} MiB free (and keeps {spare} MiB for the host): images their owner could still change are copied before CRIU reads them", needed = .needed >> 20, free = .free >> 20, spare = STAGE_SPARE_BYTES >> 20, where_to = .place.display())]
    NoRoom {
        place: PathBuf,
        needed: u64,
        free: u64,
    },
    #[error("the images could not be staged for CRIU in {}: {source}", .place.display())]
    Io { place: PathBuf, source: io::Error },
}

impl StageProblem {
    pub fn hint(&self) -> String {
        match self {
            StageProblem::NoRoom { .. } => "make the images root's (`chown -R root:`, then nobody else may write them or anything above them) so that they are linked rather than copied, or free room in the run directory; a file far larger than it holds (a sparse file) is not an image a dump writes".into(),
            StageProblem::Io { .. } => "check the run directory (/run/cudackpt) and its room".into(),
        }
    }
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
        Ok(HeldImages {
            writer,
            dir: images,
            held,
            staged: None,
        })
    }

    /// Makes ready where CRIU reads these images and works: the images
    /// directory itself where only root could have written it, else a
    /// private stage (filled now, where the copies fit). Called once the
    /// manifest is read and checked, and before any image is: a copy is
    /// then the file held, so what the checks read is what CRIU reads.
    pub fn prepare_for_criu(&mut self) -> Result<(), StageProblem> {
        let stage_anyway = crate::environment::debug(crate::environment::DEBUG_STAGE_ALWAYS)
            .is_some_and(|v| v == "1");
        if self.staged.is_some() || (self.writer.is_none() && !stage_anyway) {
            return Ok(());
        }
        self.staged = Some(stage(&mut self.held)?);
        Ok(())
    }

    /// The directory CRIU reads the images from (`-D`).
    pub fn criu_images(&self) -> &SafeDir {
        self.staged.as_ref().map_or(&self.dir, |s| &s.images)
    }

    /// The directory CRIU writes its log, stats and pidfile in (`-W`).
    pub fn criu_work(&self) -> &SafeDir {
        self.staged.as_ref().map_or(&self.dir, |s| &s.work)
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

    /// Takes the stage away but CRIU's log: what CRIU read is no longer
    /// needed there.
    pub fn unstage(&mut self) {
        if let Some(stage) = self.staged.take() {
            stage.remove(true);
        }
    }
}

impl PrivateStage {
    /// Takes this stage away: its images, what CRIU wrote beside its log
    /// (stats, pidfile), and, unless `keep_log`, whatever the work
    /// directory holds. The stage's directory goes once empty.
    fn remove(self, keep_log: bool) {
        if let Ok(names) = self.images.names() {
            for name in names {
                let _ = rustix::fs::unlinkat(self.images.fd(), name.as_os_str(), AtFlags::empty());
            }
        }
        let _ = rustix::fs::unlinkat(self.work.fd(), STAGED_IMAGES, AtFlags::REMOVEDIR);
        let written: Vec<OsString> = if keep_log {
            vec!["stats-restore".into(), "restore.pid".into()]
        } else {
            self.work.names().unwrap_or_default()
        };
        for name in written {
            let _ = rustix::fs::unlinkat(self.work.fd(), name.as_os_str(), AtFlags::empty());
        }
        // Gone when empty; kept, with CRIU's log, when CRIU ran.
        let _ = rustix::fs::unlinkat(self.base.fd(), self.name.as_os_str(), AtFlags::REMOVEDIR);
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

/// A new private directory `name` in `parent` (0700, this process's),
/// held.
fn private_dir(parent: &SafeDir, name: &OsStr) -> io::Result<SafeDir> {
    rustix::fs::mkdirat(parent.fd(), name, Mode::from_raw_mode(0o700))?;
    let fd = rustix::fs::openat(
        parent.fd(),
        name,
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
        path: parent.path().join(name),
        steps: Vec::new(),
        created: true,
    };
    Ok(SafeDir::from_reached(reached, me))
}

/// Where an undump of another user's images stages them: a directory of
/// its own under cudackpt's run directory (`undumps/`), CRIU's work
/// directory, and in it the images' directory.
fn stage_dirs() -> io::Result<PrivateStage> {
    let base =
        SafeDir::create(&crate::files::run_dir().join("undumps")).map_err(io::Error::other)?;
    // One name per stage of this process: seconds, PID, and a count.
    static STAGES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = OsString::from(format!(
        "{}-{}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        std::process::id(),
        STAGES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let work = private_dir(&base, &name)?;
    let images = match private_dir(&work, OsStr::new(STAGED_IMAGES)) {
        Ok(images) => images,
        Err(why) => {
            let _ = rustix::fs::unlinkat(base.fd(), name.as_os_str(), AtFlags::REMOVEDIR);
            return Err(why);
        }
    };
    Ok(PrivateStage {
        base,
        name,
        work,
        images,
    })
}

/// Whether CRIU reads image `name` at a restore: its images are `*.img`;
/// the manifest, the dump's log and stats are cudackpt's to read, from
/// what it holds, and CRIU's log, stats and pidfile are never names of
/// the user's.
fn read_by_criu(name: &OsStr) -> bool {
    name.as_encoded_bytes().ends_with(b".img")
}

/// Whether only root can change the file held: a link to it stages it.
fn only_root_writes(fd: &OwnedFd) -> io::Result<bool> {
    let stat = rustix::fs::fstat(fd)?;
    Ok(stat.st_uid == 0 && stat.st_mode & 0o022 == 0)
}

/// What staging `held` would copy (bytes, each copy's apparent or real
/// size, whichever is larger).
fn bytes_to_copy(held: &BTreeMap<OsString, OwnedFd>) -> io::Result<u64> {
    let mut bytes = 0u64;
    for (_, fd) in held.iter().filter(|(name, _)| read_by_criu(name)) {
        if !only_root_writes(fd)? {
            let stat = rustix::fs::fstat(fd)?;
            let apparent = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
            let real = u64::try_from(stat.st_blocks)
                .unwrap_or(u64::MAX)
                .saturating_mul(512);
            bytes = bytes.saturating_add(apparent.max(real));
        }
    }
    Ok(bytes)
}

/// Names each held image CRIU reads in a private stage: a link to the held
/// file where only root can change it, else a private copy, which is then
/// the file held. Refused before anything is made where the copies would
/// not fit; a stage that fails is taken away whole.
fn stage(held: &mut BTreeMap<OsString, OwnedFd>) -> Result<PrivateStage, StageProblem> {
    let place = crate::files::run_dir().join("undumps");
    let io = |source| StageProblem::Io {
        place: place.clone(),
        source,
    };
    let needed = bytes_to_copy(held).map_err(io)?;
    let stage = stage_dirs().map_err(io)?;
    if needed > 0 {
        let free = stage.work.free_bytes().unwrap_or(0);
        if needed.saturating_add(STAGE_SPARE_BYTES) > free {
            stage.remove(false);
            return Err(StageProblem::NoRoom {
                place,
                needed,
                free,
            });
        }
    }
    match fill(&stage.images, held) {
        Ok(()) => Ok(stage),
        Err(why) => {
            stage.remove(false);
            Err(io(why))
        }
    }
}

/// Names each held image CRIU reads in `dir` (see [`stage`]).
fn fill(dir: &SafeDir, held: &mut BTreeMap<OsString, OwnedFd>) -> io::Result<()> {
    let me = std::process::id();
    for (name, fd) in held.iter_mut().filter(|(name, _)| read_by_criu(name)) {
        if only_root_writes(fd)? {
            let target = format!("/proc/{me}/fd/{}", fd.as_raw_fd());
            rustix::fs::symlinkat(target.as_str(), dir.fd(), name.as_os_str())?;
        } else {
            *fd = copied(fd, dir, name)?;
        }
    }
    Ok(())
}

/// A private copy of `from` named `name` in `dir` (0600, made exclusively),
/// opened for reading.
fn copied(from: &OwnedFd, dir: &SafeDir, name: &OsStr) -> io::Result<OwnedFd> {
    // No more than was counted against the room: the file's owner may
    // still grow it.
    let counted = u64::try_from(rustix::fs::fstat(from)?.st_size).unwrap_or(0);
    let to = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    // Read with pread elsewhere, so the held descriptor's offset is the
    // start.
    let mut reader = io::Read::take(File::from(from.try_clone()?), counted);
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

    /// The tests that make stages take turns: one counts what the other
    /// leaves in the run directory.
    static STAGING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The stages this process has in the run directory (other processes,
    /// another test run among them, make theirs beside).
    fn own_stages() -> usize {
        let own = format!("-{}-", std::process::id());
        std::fs::read_dir(crate::files::run_dir().join("undumps")).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().contains(&own))
                .count()
        })
    }

    /// A directory of nobody's in a fresh temporary directory, with
    /// `files` (name, bytes, nobody's) in it. (Root only: chown.)
    fn users_images(files: &[(&str, &[u8], bool)]) -> Option<(tempfile::TempDir, PathBuf)> {
        if !rustix::process::geteuid().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            return None;
        }
        let root = tempfile::tempdir().expect("tempdir");
        let home = root.path().join("home");
        std::fs::create_dir(&home).expect("mkdir");
        std::os::unix::fs::chown(&home, Some(65534), Some(65534)).expect("chown");
        let images = home.join("job1");
        std::fs::create_dir(&images).expect("mkdir");
        std::fs::set_permissions(&images, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
        for (name, bytes, theirs) in files {
            std::fs::write(images.join(name), bytes).expect("write");
            if *theirs {
                std::os::unix::fs::chown(images.join(name), Some(65534), None).expect("chown");
            }
        }
        Some((root, images))
    }

    /// Images under a directory another user owns: staged in root's place,
    /// root's files by a link to the file held, theirs copied; CRIU's work
    /// directory apart, and no name CRIU writes taken from theirs; what is
    /// read is what was held, whatever they swap in afterwards; the stage
    /// goes once unstaged.
    #[test]
    fn another_users_images_are_staged_and_read_as_held() {
        let _turn = STAGING.lock().unwrap_or_else(|e| e.into_inner());
        let Some((_root, images)) = users_images(&[
            ("core-1.img", b"root's core", false),
            ("planted.img", b"theirs", true),
            ("restore.log", b"root's file, linked in by them", false),
            ("stats-restore", b"root's too", false),
        ]) else {
            return;
        };
        let mut held = HeldImages::open(&images).expect("held");
        assert_eq!(held.writer, Some(65534));
        held.prepare_for_criu().expect("staged");
        let stage = held.criu_images().path().to_path_buf();
        let work = held.criu_work().path().to_path_buf();
        assert!(stage.starts_with(crate::files::run_dir().join("undumps")));
        assert_eq!(stage.parent(), Some(work.as_path()));
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
        for written in ["restore.log", "stats-restore", "restore.pid"] {
            assert!(!stage.join(written).exists(), "{written} staged");
            assert!(!work.join(written).exists(), "{written} in the work dir");
        }
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
        assert!(!work.exists(), "an empty stage goes");
    }

    /// A sparse file of theirs far larger than the room where it would be
    /// copied (8 KiB on disk, 8 TiB to copy): refused before anything is
    /// made, and nothing is left in the run directory.
    #[test]
    fn a_stage_that_would_not_fit_is_refused_before_any_copy() {
        let _turn = STAGING.lock().unwrap_or_else(|e| e.into_inner());
        let Some((_root, images)) = users_images(&[("pages-1.img", b"", true)]) else {
            return;
        };
        let sparse = std::fs::OpenOptions::new()
            .write(true)
            .open(images.join("pages-1.img"))
            .expect("open");
        sparse.set_len(8 << 40).expect("a sparse file of 8 TiB");
        let before = own_stages();
        let mut held = HeldImages::open(&images).expect("held");
        let refused = held.prepare_for_criu().expect_err("no room");
        assert!(
            matches!(refused, StageProblem::NoRoom { needed, .. } if needed == 8 << 40),
            "{refused}"
        );
        assert!(refused.to_string().contains("8388608 MiB"), "{refused}");
        assert_eq!(own_stages(), before, "the refused stage left nothing");
    }
}
