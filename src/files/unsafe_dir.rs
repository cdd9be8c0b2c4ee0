//! Why a directory cudackpt keeps its files in (or a file in it) is not
//! used: the error of `safe_dir`, and of a capped read inside one.

use std::io;
use std::path::PathBuf;

/// Why a directory (or a file in it) is not used.
#[derive(Debug, thiserror::Error)]
pub enum UnsafeDir {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is a symbolic link; cudackpt does not follow links it did not make")]
    Symlink { path: PathBuf },
    #[error("{path} is not a directory")]
    NotDirectory { path: PathBuf },
    #[error("{path} belongs to uid {owner}, not to root{also}", also = also_user(*.expected))]
    Owner {
        path: PathBuf,
        owner: u32,
        expected: u32,
    },
    #[error("{path} is writable by {who} (mode {mode:04o}) and not sticky, so anyone could plant files in it")]
    Writable {
        path: PathBuf,
        mode: u32,
        who: &'static str,
    },
    #[error("{path} is not a regular file")]
    NotRegular { path: PathBuf },
}

fn also_user(expected: u32) -> String {
    if expected == 0 {
        String::new()
    } else {
        format!(" or to uid {expected} (this user)")
    }
}

impl UnsafeDir {
    /// What to do about it, in words.
    pub fn hint(&self) -> String {
        match self {
            // EMFILE, ENFILE: out of descriptors, not a problem of the path.
            UnsafeDir::Io { source, .. } if matches!(source.raw_os_error(), Some(23 | 24)) => {
                "too many open files: raise the limit (`ulimit -n`, LimitNOFILE=) or act on fewer processes at once".to_string()
            }
            UnsafeDir::Io { .. } => {
                "check the path and its permissions, or choose another directory".to_string()
            }
            UnsafeDir::Symlink { .. } => "remove the link if you planted it, or name a real directory (not a link) owned by root or by you".to_string(),
            UnsafeDir::NotDirectory { .. } => {
                "give a real directory (not a link), owned by root or by you".to_string()
            }
            UnsafeDir::Owner { path, .. } | UnsafeDir::Writable { path, .. } => format!(
                "use a directory only root (or you) can write to, e.g. `install -d -m 0700 DIR`, or fix this one: `chown root: {0} && chmod 0700 {0}`",
                path.display()
            ),
            UnsafeDir::NotRegular { path } => {
                format!("remove {} (cudackpt did not make it)", path.display())
            }
        }
    }
}
