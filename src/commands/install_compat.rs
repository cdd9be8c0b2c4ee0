//! `install-compat`: cudackpt as `cuda-checkpoint` (a symlink), so CRIU's
//! CUDA plugin and scripts written for NVIDIA's tool run it unchanged; and
//! `--uninstall`, which takes the link away and puts back what it replaced.
//! A file already there (NVIDIA's tool) is replaced only with `--force`,
//! kept as `cuda-checkpoint.orig`, and the swap is atomic (a link under a
//! temporary name, renamed over), so `cuda-checkpoint` never goes missing.
//! Returns what it did; `output` renders it.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::exit::ExitStatus;

/// The name CRIU's plugin and NVIDIA's users run.
pub const COMPAT_NAME: &str = "cuda-checkpoint";
/// What a replaced `cuda-checkpoint` is kept as (then `.orig.1`, ...).
const BACKUP_SUFFIX: &str = ".orig";

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Replace (and keep) a `cuda-checkpoint` that is not cudackpt's.
    pub force: bool,
    /// Link to a binary in a cargo build directory anyway.
    pub allow_build_dir: bool,
    /// Remove cudackpt's link and restore what it replaced.
    pub uninstall: bool,
}

/// What `install-compat` did, in a sentence, and whether it worked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    pub ok: bool,
    pub message: String,
    /// Things to know although it worked (PATH finds another one first).
    pub warnings: Vec<String>,
    pub exit: ExitStatus,
}

impl InstallReport {
    fn succeeded(message: String, warnings: Vec<String>) -> InstallReport {
        InstallReport {
            ok: true,
            message,
            warnings,
            exit: ExitStatus::Success,
        }
    }

    fn failed(message: String, exit: ExitStatus) -> InstallReport {
        InstallReport {
            ok: false,
            message,
            warnings: Vec::new(),
            exit,
        }
    }
}

fn exit_for(error: &io::Error) -> ExitStatus {
    if error.kind() == io::ErrorKind::PermissionDenied {
        ExitStatus::PermissionDenied
    } else {
        ExitStatus::Failed
    }
}

/// Installs (or, with `uninstall`, removes) `dir/cuda-checkpoint`.
pub fn run(dir: &Path, options: Options) -> InstallReport {
    let exe = match std::env::current_exe().and_then(|exe| exe.canonicalize()) {
        Ok(exe) => exe,
        Err(error) => {
            return InstallReport::failed(
                format!("cannot tell where this cudackpt is: {error}"),
                ExitStatus::Failed,
            )
        }
    };
    let link = dir.join(COMPAT_NAME);
    let held = match InstallDir::open(dir) {
        Ok(held) => held,
        Err(refusal) => return refusal,
    };
    if options.uninstall {
        return match uninstall(&held, &exe) {
            Ok((message, warnings)) => InstallReport::succeeded(message, warnings),
            Err(error) => InstallReport::failed(
                format!("could not uninstall {}: {error}", link.display()),
                exit_for(&error),
            ),
        };
    }
    if let Some(build_dir) = build_directory(&exe).filter(|_| !options.allow_build_dir) {
        return InstallReport::failed(
            format!(
                "this cudackpt runs from a cargo build directory ({}): a link to it breaks at the next `cargo clean` or rebuild; install cudackpt first (`sudo install -m 755 target/release/cudackpt /usr/local/bin/`, or the package) and run that one's install-compat, or pass --allow-build-dir",
                build_dir.display()
            ),
            ExitStatus::Usage,
        );
    }
    if let Err(why) = changeable_only_by_root(&exe) {
        return InstallReport::failed(
            format!(
                "will not link {} -> {}: {why}; CRIU runs cuda-checkpoint as root, so whoever can change that file could run code as root. Install cudackpt where only root can change it (`sudo install -m 755 target/release/cudackpt /usr/local/bin/`, or the package) and run that one's install-compat",
                link.display(),
                exe.display()
            ),
            ExitStatus::PermissionDenied,
        );
    }
    match install(&held, &exe, options.force) {
        Ok(done) => {
            let message = match &done {
                Installed::Created => format!("installed {} -> {}", link.display(), exe.display()),
                Installed::AlreadyThere => {
                    format!("already installed: {} -> {}", link.display(), exe.display())
                }
                Installed::Replaced { backup } => format!(
                    "replaced {} -> {} (the file it replaced is kept as {}; --uninstall puts it back)",
                    link.display(),
                    exe.display(),
                    backup.display()
                ),
            };
            let path = crate::environment::os(crate::environment::PATH).unwrap_or_default();
            InstallReport::succeeded(message, path_warning(dir, &path).into_iter().collect())
        }
        Err(error) => InstallReport::failed(
            format!("could not install {}: {error}", link.display()),
            exit_for(&error),
        ),
    }
}

/// What `install-compat` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    Created,
    AlreadyThere,
    /// A file (or another link) was replaced; it is kept at `backup`.
    Replaced {
        backup: PathBuf,
    },
}

/// The cargo build directory `exe` lies in, if it does: the nearest
/// directory above it that holds cargo's `CACHEDIR.TAG` (whatever it is
/// named: `CARGO_TARGET_DIR` may be anything), or one named `target` at
/// most two levels above the binary's own (`target/release/cudackpt`,
/// `target/<triple>/release/cudackpt`).
pub fn build_directory(exe: &Path) -> Option<PathBuf> {
    let tagged = exe.ancestors().skip(1).find(|dir| is_cache_directory(dir));
    tagged.map(Path::to_path_buf).or_else(|| {
        exe.ancestors()
            .skip(1)
            .take(3)
            .find(|dir| dir.file_name() == Some(OsStr::new("target")))
            .map(Path::to_path_buf)
    })
}

/// Whether `dir` holds a Cache Directory Tagging file (cargo writes one
/// into every target directory).
fn is_cache_directory(dir: &Path) -> bool {
    const SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";
    crate::files::read_capped(&dir.join("CACHEDIR.TAG"), 4096)
        .is_ok_and(|text| text.starts_with(SIGNATURE))
}

/// Who may own the binary, the directories above it and the directory the
/// link goes in: root, and the user cudackpt runs as when that is not
/// root (a link of their own, for their own use).
fn trusted_owner(owner: u32) -> bool {
    owner == 0 || owner == rustix::process::geteuid().as_raw()
}

/// Whether only root (or, run by another user, that user) can change
/// `exe`: the file itself and every directory above it (a directory others
/// may write lets them rename the file away and put their own in its place,
/// unless it is sticky).
pub fn changeable_only_by_root(exe: &Path) -> Result<(), String> {
    let stat = |path: &Path| {
        rustix::fs::lstat(path).map_err(|e| format!("cannot examine {}: {e}", path.display()))
    };
    let file = stat(exe)?;
    judge_owner_and_mode(exe, file.st_uid, file.st_mode, false)?;
    for dir in exe.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let held = stat(dir)?;
        judge_owner_and_mode(dir, held.st_uid, held.st_mode, true)?;
    }
    Ok(())
}

/// The verdict on one file or directory of the binary's path (pure).
fn judge_owner_and_mode(path: &Path, owner: u32, mode: u32, sticky_ok: bool) -> Result<(), String> {
    const STICKY: u32 = 0o1000;
    if !trusted_owner(owner) {
        return Err(format!("{} belongs to uid {owner}", path.display()));
    }
    if mode & 0o022 != 0 && !(sticky_ok && mode & STICKY != 0) {
        return Err(format!(
            "{} is writable by {} (mode {:04o})",
            path.display(),
            if mode & 0o002 != 0 {
                "everyone"
            } else {
                "its group"
            },
            mode & 0o7777
        ));
    }
    Ok(())
}

/// The directory the link goes in, held open (no link followed) and
/// checked: root's (or this user's), writable by nobody else. Every change
/// is made through its descriptor.
pub struct InstallDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl InstallDir {
    /// Opens and checks `dir`; the refusal is the report to give.
    fn open(dir: &Path) -> Result<InstallDir, InstallReport> {
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            let error = io::Error::from(e);
            InstallReport::failed(
                format!("cannot use {}: {error}", dir.display()),
                exit_for(&error),
            )
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| {
            InstallReport::failed(
                format!("cannot examine {}: {e}", dir.display()),
                ExitStatus::Failed,
            )
        })?;
        judge_owner_and_mode(dir, stat.st_uid, stat.st_mode, false).map_err(|why| {
            InstallReport::failed(
                format!(
                    "will not install into {}: {why}; CRIU runs the first cuda-checkpoint on root's PATH as root, so it belongs in a directory only root can change, such as /usr/local/bin",
                    dir.display()
                ),
                ExitStatus::PermissionDenied,
            )
        })?;
        Ok(InstallDir {
            fd,
            path: dir.to_path_buf(),
        })
    }

    /// The test's way in: `dir` checked as `run` checks it.
    #[cfg(test)]
    fn open_for_test(dir: &Path) -> InstallDir {
        InstallDir::open(dir).unwrap_or_else(|report| panic!("{}", report.message))
    }

    fn lstat(&self, name: &str) -> io::Result<Option<rustix::fs::Stat>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn read_link(&self, name: &str) -> Option<PathBuf> {
        rustix::fs::readlinkat(&self.fd, name, Vec::new())
            .ok()
            .map(|target| PathBuf::from(OsStr::from_bytes(target.as_bytes())))
    }

    fn symlink(&self, target: &Path, name: &str) -> io::Result<()> {
        rustix::fs::symlinkat(target, &self.fd, name).map_err(io::Error::from)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to).map_err(io::Error::from)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(io::Error::from)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

/// Creates `cuda-checkpoint` in `dir` as a symlink to `exe`. An existing
/// file is replaced only with `force`, after being kept as a backup (unless
/// it is a link to this cudackpt), and the new link replaces it atomically.
pub fn install(dir: &InstallDir, exe: &Path, force: bool) -> io::Result<Installed> {
    let link = dir.join(COMPAT_NAME);
    let Some(existing) = dir.lstat(COMPAT_NAME)? else {
        dir.symlink(exe, COMPAT_NAME)?;
        return Ok(Installed::Created);
    };
    if dir
        .read_link(COMPAT_NAME)
        .is_some_and(|target| target == exe)
    {
        return Ok(Installed::AlreadyThere);
    }
    if !force {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} already exists (perhaps NVIDIA's cuda-checkpoint); pass --force to replace it (it is kept as {COMPAT_NAME}{BACKUP_SUFFIX})",
                link.display()
            ),
        ));
    }
    let backup = keep(dir, &existing)?;
    let temporary = temporary_link(dir, exe)?;
    if let Err(error) = dir.rename(&temporary, COMPAT_NAME) {
        let _ = dir.remove(&temporary);
        return Err(error);
    }
    Ok(Installed::Replaced { backup })
}

/// A new symlink to `exe` in `dir` under a temporary name. symlink(2)
/// never replaces anything, so a name someone planted only makes it try
/// another.
fn temporary_link(dir: &InstallDir, exe: &Path) -> io::Result<String> {
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let temporary = format!(
            ".{COMPAT_NAME}.cudackpt-{}-{nanos:x}-{attempt}",
            std::process::id()
        );
        match dir.symlink(exe, &temporary) {
            Ok(()) => return Ok(temporary),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary name")))
}

/// How many backups `--force` keeps before it refuses.
const BACKUPS: u32 = 100;

/// The `n`th backup's name: `cuda-checkpoint.orig`, then `.orig.1`, ...
fn backup_name(n: u32) -> String {
    match n {
        0 => format!("{COMPAT_NAME}{BACKUP_SUFFIX}"),
        n => format!("{COMPAT_NAME}{BACKUP_SUFFIX}.{n}"),
    }
}

/// Keeps `cuda-checkpoint` (as it is: a file or a link) under a backup
/// name no file holds yet, without moving it: a hard link for a file, a
/// copy of a link.
fn keep(dir: &InstallDir, existing: &rustix::fs::Stat) -> io::Result<PathBuf> {
    let is_link = FileType::from_raw_mode(existing.st_mode) == FileType::Symlink;
    for n in 0..BACKUPS {
        let backup = backup_name(n);
        let made = if is_link {
            let target = dir
                .read_link(COMPAT_NAME)
                .ok_or_else(|| io::Error::other("the link went away"))?;
            dir.symlink(&target, &backup)
        } else {
            rustix::fs::linkat(
                &dir.fd,
                COMPAT_NAME,
                &dir.fd,
                backup.as_str(),
                AtFlags::empty(),
            )
            .map_err(io::Error::from)
        };
        match made {
            Ok(()) => return Ok(dir.join(&backup)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "too many {COMPAT_NAME}{BACKUP_SUFFIX}.* backups in {}",
            dir.path.display()
        ),
    ))
}

/// Removes `cuda-checkpoint` from `dir` if it is a link to this very
/// cudackpt (`exe`), and puts back the newest backup if root (or this
/// user) owns it; anything else is left alone and said. The message, and
/// warnings.
pub fn uninstall(dir: &InstallDir, exe: &Path) -> io::Result<(String, Vec<String>)> {
    let link = dir.join(COMPAT_NAME);
    if dir.lstat(COMPAT_NAME)?.is_none() {
        return Ok((
            format!("nothing to uninstall: no {}", link.display()),
            Vec::new(),
        ));
    }
    if dir.read_link(COMPAT_NAME).as_deref() != Some(exe) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a link to this cudackpt ({}); perhaps NVIDIA's tool or another copy: left alone (run the install-compat of the cudackpt it links to)",
                link.display(),
                exe.display()
            ),
        ));
    }
    let mut warnings = Vec::new();
    let mut newest = None;
    for n in (0..BACKUPS).rev() {
        let name = backup_name(n);
        match dir.lstat(&name)? {
            Some(stat) if trusted_owner(stat.st_uid) => {
                newest = Some(name);
                break;
            }
            Some(stat) => warnings.push(format!(
                "{} belongs to uid {}, not to root: cudackpt did not make it, and left it alone",
                dir.join(&name).display(),
                stat.st_uid
            )),
            None => {}
        }
    }
    match newest {
        // Atomic: the backup takes the link's place.
        Some(backup) => {
            dir.rename(&backup, COMPAT_NAME)?;
            Ok((
                format!(
                    "uninstalled cudackpt's {}; put back what it had replaced (from {})",
                    link.display(),
                    dir.join(&backup).display()
                ),
                warnings,
            ))
        }
        None => {
            dir.remove(COMPAT_NAME)?;
            Ok((format!("uninstalled {}", link.display()), warnings))
        }
    }
}

/// A warning when `PATH` does not reach `dir/cuda-checkpoint` first: CRIU
/// and scripts run the first `cuda-checkpoint` on PATH (pure but for
/// reading the directories).
pub fn path_warning(dir: &Path, path: &OsStr) -> Option<String> {
    let ours = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let first = std::env::split_paths(path).find(|entry| {
        entry.is_absolute()
            && fs::metadata(entry.join(COMPAT_NAME)).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
    });
    match first {
        Some(entry) if entry.canonicalize().unwrap_or_else(|_| entry.clone()) == ours => None,
        Some(entry) => Some(format!(
            "{} comes first on PATH: CRIU's CUDA plugin and scripts will run that one, not cudackpt; put {} before {} on PATH, or install into {} (with --force, which keeps the file)",
            entry.join(COMPAT_NAME).display(),
            dir.display(),
            entry.display(),
            entry.display()
        )),
        None => Some(format!(
            "{} is not on PATH: CRIU's CUDA plugin finds cuda-checkpoint on PATH",
            dir.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_links_refuses_to_clobber_keeps_what_it_replaces_and_uninstalls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = InstallDir::open_for_test(dir.path());
        let exe = dir.path().join("cudackpt");
        fs::write(&exe, b"").expect("exe");
        let link = dir.path().join(COMPAT_NAME);
        assert_eq!(
            install(&held, &exe, false).expect("installs"),
            Installed::Created
        );
        assert_eq!(fs::read_link(&link).expect("link"), exe);
        assert_eq!(
            install(&held, &exe, false).expect("again"),
            Installed::AlreadyThere
        );
        fs::remove_file(&link).expect("rm");
        fs::write(&link, b"nvidia").expect("a real file");
        assert_eq!(
            install(&held, &exe, false).expect_err("refused").kind(),
            io::ErrorKind::AlreadyExists
        );
        let backup = dir.path().join("cuda-checkpoint.orig");
        assert_eq!(
            install(&held, &exe, true).expect("forced"),
            Installed::Replaced {
                backup: backup.clone()
            }
        );
        assert_eq!(fs::read(&backup).expect("kept"), b"nvidia");
        assert_eq!(fs::read_link(&link).expect("link"), exe);
        // No temporary left behind.
        let names: Vec<String> = fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");

        let (said, _) = uninstall(&held, &exe).expect("uninstalls");
        assert!(said.contains("put back"), "{said}");
        assert_eq!(fs::read(&link).expect("NVIDIA's again"), b"nvidia");
        assert!(!backup.exists());
        assert_eq!(
            uninstall(&held, &exe).expect_err("not ours").kind(),
            io::ErrorKind::InvalidInput
        );
        // A link to another cudackpt is not this one's to remove either.
        fs::remove_file(&link).expect("rm");
        std::os::unix::fs::symlink("/elsewhere/cudackpt", &link).expect("link");
        assert_eq!(
            uninstall(&held, &exe).expect_err("another copy's").kind(),
            io::ErrorKind::InvalidInput
        );
        fs::remove_file(&link).expect("rm");
        assert!(uninstall(&held, &exe)
            .expect("nothing")
            .0
            .starts_with("nothing to uninstall"));
    }

    /// A link planted at the backup's name is never written through: the
    /// backup takes the next name, and the link's target is untouched.
    #[test]
    fn a_planted_backup_link_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").expect("victim");
        std::os::unix::fs::symlink(&victim, dir.path().join("cuda-checkpoint.orig"))
            .expect("planted link");
        let exe = dir.path().join("cudackpt");
        fs::write(&exe, b"").expect("exe");
        fs::write(dir.path().join(COMPAT_NAME), b"nvidia").expect("NVIDIA's tool");
        let held = InstallDir::open_for_test(dir.path());
        assert_eq!(
            install(&held, &exe, true).expect("forced"),
            Installed::Replaced {
                backup: dir.path().join("cuda-checkpoint.orig.1")
            }
        );
        assert_eq!(fs::read(&victim).expect("victim"), b"precious");
        assert_eq!(
            fs::read(dir.path().join("cuda-checkpoint.orig.1")).expect("kept"),
            b"nvidia"
        );
    }

    #[test]
    fn a_build_directory_is_recognised_by_its_cache_tag_too() {
        let root = tempfile::tempdir().expect("tempdir");
        let out = root.path().join("build-out/release");
        fs::create_dir_all(&out).expect("dirs");
        let exe = out.join("cudackpt");
        assert_eq!(build_directory(&exe), None);
        fs::write(
            root.path().join("build-out/CACHEDIR.TAG"),
            "Signature: 8a477f597d28d172789f06886806bc55\n# cargo\n",
        )
        .expect("tag");
        assert_eq!(build_directory(&exe), Some(root.path().join("build-out")));
    }

    #[test]
    fn only_root_may_be_able_to_change_what_is_linked() {
        let p = Path::new("/x");
        assert!(judge_owner_and_mode(p, 0, 0o100755, false).is_ok());
        assert!(
            judge_owner_and_mode(p, 0, 0o041777, true).is_ok(),
            "/tmp-like"
        );
        let other = judge_owner_and_mode(p, 4242, 0o100755, false).expect_err("another user's");
        assert!(other.contains("uid 4242"), "{other}");
        let open = judge_owner_and_mode(p, 0, 0o100775, false).expect_err("group-writable");
        assert!(open.contains("its group"), "{open}");
        assert!(
            judge_owner_and_mode(p, 0, 0o041777, false).is_err(),
            "sticky only for ancestors"
        );
    }

    #[test]
    fn a_build_directory_is_recognised() {
        assert_eq!(
            build_directory(Path::new("/src/cudackpt/target/release/cudackpt")),
            Some(PathBuf::from("/src/cudackpt/target"))
        );
        assert_eq!(
            build_directory(Path::new(
                "/src/x/target/x86_64-unknown-linux-gnu/release/cudackpt"
            )),
            Some(PathBuf::from("/src/x/target"))
        );
        assert_eq!(build_directory(Path::new("/usr/local/bin/cudackpt")), None);
        assert_eq!(
            build_directory(Path::new("/root/.cargo/bin/cudackpt")),
            None
        );
    }

    #[test]
    fn path_order_decides_which_cuda_checkpoint_runs() {
        let root = tempfile::tempdir().expect("tempdir");
        let (ours, theirs) = (root.path().join("ours"), root.path().join("theirs"));
        for dir in [&ours, &theirs] {
            fs::create_dir(dir).expect("dir");
            let tool = dir.join(COMPAT_NAME);
            fs::write(&tool, b"#!/bin/sh\n").expect("tool");
            fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("chmod");
        }
        let path = |dirs: &[&Path]| std::env::join_paths(dirs).expect("PATH");
        assert_eq!(path_warning(&ours, &path(&[&ours, &theirs])), None);
        let first = path_warning(&ours, &path(&[&theirs, &ours])).expect("a warning");
        assert!(first.contains("comes first on PATH"), "{first}");
        let missing = path_warning(&ours, &path(&[&theirs])).expect("a warning");
        assert!(
            missing.contains("comes first") || missing.contains("not on PATH"),
            "{missing}"
        );
        let none = path_warning(&ours, &path(&[])).expect("a warning");
        assert!(none.contains("is not on PATH"), "{none}");
    }
}
