//! `install-compat`: cudackpt as `cuda-checkpoint` (a symlink), so CRIU's
//! CUDA plugin and scripts written for NVIDIA's tool run it unchanged.
//! Returns what it did; `output` renders it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::exit::ExitStatus;

/// The name CRIU's plugin and NVIDIA's users run.
pub const COMPAT_NAME: &str = "cuda-checkpoint";

/// What `install-compat` did, in a sentence, and whether it worked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    pub ok: bool,
    pub message: String,
    pub exit: ExitStatus,
}

/// Links `dir/cuda-checkpoint` to this executable.
pub fn run(dir: &Path, force: bool) -> InstallReport {
    let outcome = std::env::current_exe()
        .and_then(|exe| exe.canonicalize())
        .and_then(|exe| install(dir, &exe, force).map(|(link, done)| (link, exe, done)));
    match outcome {
        Ok((link, exe, done)) => {
            let verb = match done {
                Installed::Created => "installed",
                Installed::Replaced => "replaced",
                Installed::AlreadyThere => "already installed:",
            };
            InstallReport {
                ok: true,
                message: format!("{verb} {} -> {}", link.display(), exe.display()),
                exit: ExitStatus::Success,
            }
        }
        Err(error) => InstallReport {
            ok: false,
            message: format!(
                "could not install {}: {error}",
                dir.join(COMPAT_NAME).display()
            ),
            exit: if error.kind() == io::ErrorKind::PermissionDenied {
                ExitStatus::PermissionDenied
            } else {
                ExitStatus::Failed
            },
        },
    }
}

/// What `install-compat` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    Created,
    AlreadyThere,
    Replaced,
}

/// Creates `dir/cuda-checkpoint` as a symlink to `exe`. An existing file is
/// replaced only with `force` (it may be NVIDIA's own tool).
pub fn install(dir: &Path, exe: &Path, force: bool) -> io::Result<(PathBuf, Installed)> {
    let link = dir.join(COMPAT_NAME);
    let outcome = match fs::symlink_metadata(&link) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Installed::Created,
        Err(e) => return Err(e),
        Ok(_) if fs::read_link(&link).is_ok_and(|target| target == exe) => {
            return Ok((link, Installed::AlreadyThere))
        }
        Ok(_) if !force => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                "{} already exists (perhaps NVIDIA's cuda-checkpoint); pass --force to replace it",
                link.display()
            ),
            ))
        }
        Ok(_) => {
            fs::remove_file(&link)?;
            Installed::Replaced
        }
    };
    std::os::unix::fs::symlink(exe, &link)?;
    Ok((link, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_links_refuses_to_clobber_and_is_idempotent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let exe = dir.path().join("cudackpt");
        fs::write(&exe, b"").expect("exe");
        let (link, outcome) = install(dir.path(), &exe, false).expect("installs");
        assert_eq!(
            (fs::read_link(&link).expect("link"), outcome),
            (exe.clone(), Installed::Created)
        );
        assert_eq!(
            install(dir.path(), &exe, false).expect("again").1,
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
        assert_eq!(
            install(dir.path(), &exe, true).expect("forced").1,
            Installed::Replaced
        );
    }
}
