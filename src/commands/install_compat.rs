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
use std::path::{Path, PathBuf};

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
    if options.uninstall {
        return match uninstall(dir) {
            Ok(message) => InstallReport::succeeded(message, Vec::new()),
            Err(error) => InstallReport::failed(
                format!("could not uninstall {}: {error}", link.display()),
                exit_for(&error),
            ),
        };
    }
    if let Some(build_dir) = build_directory(&exe).filter(|_| !options.allow_build_dir) {
        return InstallReport::failed(
            format!(
                "this cudackpt runs from a cargo build directory ({}): a link to it breaks at the next `cargo clean` or rebuild; install cudackpt first (`cargo install --locked --path .`, or the package) and run that one's install-compat, or pass --allow-build-dir",
                build_dir.display()
            ),
            ExitStatus::Usage,
        );
    }
    match install(dir, &exe, options.force) {
        Ok(done) => {
            let message = match &done {
                Installed::Created => format!("installed {} -> {}", link.display(), exe.display()),
                Installed::AlreadyThere => {
                    format!("already installed: {} -> {}", link.display(), exe.display())
                }
                Installed::Replaced { backup: None } => {
                    format!("replaced {} -> {}", link.display(), exe.display())
                }
                Installed::Replaced {
                    backup: Some(backup),
                } => format!(
                    "replaced {} -> {} (the file it replaced is kept as {}; --uninstall puts it back)",
                    link.display(),
                    exe.display(),
                    backup.display()
                ),
            };
            let path = std::env::var_os("PATH").unwrap_or_default();
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
    /// A file was replaced; it is kept at `backup` unless it was a link to
    /// some cudackpt already.
    Replaced {
        backup: Option<PathBuf>,
    },
}

/// The cargo build directory `exe` lies in (`.../target/{debug,release}`,
/// or a profile under a target triple), if it does (pure).
pub fn build_directory(exe: &Path) -> Option<PathBuf> {
    let mut dir = exe.parent()?;
    // At most two levels above the binary: target/release/cudackpt and
    // target/<triple>/release/cudackpt.
    for _ in 0..3 {
        if dir.file_name() == Some(OsStr::new("target")) {
            return Some(dir.to_path_buf());
        }
        dir = dir.parent()?;
    }
    None
}

/// Whether `path` is a symlink to some cudackpt (this one or another build).
fn is_cudackpt_link(path: &Path) -> bool {
    fs::read_link(path).is_ok_and(|target| target.file_name() == Some(OsStr::new("cudackpt")))
}

/// Creates `dir/cuda-checkpoint` as a symlink to `exe`. An existing file is
/// replaced only with `force`, after being kept as a backup (unless it is a
/// link to cudackpt), and the new link replaces it atomically.
pub fn install(dir: &Path, exe: &Path, force: bool) -> io::Result<Installed> {
    let link = dir.join(COMPAT_NAME);
    let existing = match fs::symlink_metadata(&link) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
        Ok(meta) => Some(meta),
    };
    let Some(existing) = existing else {
        std::os::unix::fs::symlink(exe, &link)?;
        return Ok(Installed::Created);
    };
    if fs::read_link(&link).is_ok_and(|target| target == exe) {
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
    let backup = if is_cudackpt_link(&link) {
        None
    } else {
        Some(keep(dir, &link, &existing)?)
    };
    let temporary = temporary_link(dir, exe)?;
    if let Err(error) = fs::rename(&temporary, &link) {
        let _ = fs::remove_file(&temporary);
        return Err(error);
    }
    Ok(Installed::Replaced { backup })
}

/// A new symlink to `exe` in `dir` under a temporary name. symlink(2)
/// never replaces anything, so a name someone planted only makes it try
/// another.
fn temporary_link(dir: &Path, exe: &Path) -> io::Result<PathBuf> {
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let temporary = dir.join(format!(
            ".{COMPAT_NAME}.cudackpt-{}-{nanos:x}-{attempt}",
            std::process::id()
        ));
        match std::os::unix::fs::symlink(exe, &temporary) {
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

/// Keeps `link` (as it is: a file or a link) under a backup name no file
/// holds yet, without moving it: a hard link for a file, a copy of a link.
fn keep(dir: &Path, link: &Path, existing: &fs::Metadata) -> io::Result<PathBuf> {
    for n in 0..BACKUPS {
        let backup = dir.join(backup_name(n));
        let made = if existing.file_type().is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(link)?, &backup)
        } else {
            fs::hard_link(link, &backup)
        };
        match made {
            Ok(()) => return Ok(backup),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "too many {COMPAT_NAME}{BACKUP_SUFFIX}.* backups in {}",
            dir.display()
        ),
    ))
}

/// Removes `dir/cuda-checkpoint` if it is cudackpt's link, and puts back
/// the newest backup; anything else there is left alone.
pub fn uninstall(dir: &Path) -> io::Result<String> {
    let link = dir.join(COMPAT_NAME);
    match fs::symlink_metadata(&link) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(format!("nothing to uninstall: no {}", link.display()))
        }
        Err(e) => return Err(e),
        Ok(_) if !is_cudackpt_link(&link) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not cudackpt's link (perhaps NVIDIA's tool); left alone",
                    link.display()
                ),
            ))
        }
        Ok(_) => {}
    }
    let newest = (0..BACKUPS)
        .rev()
        .map(|n| dir.join(backup_name(n)))
        .find(|backup| fs::symlink_metadata(backup).is_ok());
    match newest {
        // Atomic: the backup takes the link's place.
        Some(backup) => {
            fs::rename(&backup, &link)?;
            Ok(format!(
                "uninstalled cudackpt's {}; put back what it had replaced (from {})",
                link.display(),
                backup.display()
            ))
        }
        None => {
            fs::remove_file(&link)?;
            Ok(format!("uninstalled {}", link.display()))
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
        let exe = dir.path().join("cudackpt");
        fs::write(&exe, b"").expect("exe");
        let link = dir.path().join(COMPAT_NAME);
        assert_eq!(
            install(dir.path(), &exe, false).expect("installs"),
            Installed::Created
        );
        assert_eq!(fs::read_link(&link).expect("link"), exe);
        assert_eq!(
            install(dir.path(), &exe, false).expect("again"),
            Installed::AlreadyThere
        );
        fs::remove_file(&link).expect("rm");
        fs::write(&link, b"nvidia").expect("a real file");
        assert_eq!(
            install(dir.path(), &exe, false)
                .expect_err("refused")
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        let backup = dir.path().join("cuda-checkpoint.orig");
        assert_eq!(
            install(dir.path(), &exe, true).expect("forced"),
            Installed::Replaced {
                backup: Some(backup.clone())
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

        let said = uninstall(dir.path()).expect("uninstalls");
        assert!(said.contains("put back"), "{said}");
        assert_eq!(fs::read(&link).expect("NVIDIA's again"), b"nvidia");
        assert!(!backup.exists());
        assert_eq!(
            uninstall(dir.path()).expect_err("not ours").kind(),
            io::ErrorKind::InvalidInput
        );
        fs::remove_file(&link).expect("rm");
        assert!(uninstall(dir.path())
            .expect("nothing")
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
        assert_eq!(
            install(dir.path(), &exe, true).expect("forced"),
            Installed::Replaced {
                backup: Some(dir.path().join("cuda-checkpoint.orig.1"))
            }
        );
        assert_eq!(fs::read(&victim).expect("victim"), b"precious");
        assert_eq!(
            fs::read(dir.path().join("cuda-checkpoint.orig.1")).expect("kept"),
            b"nvidia"
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
