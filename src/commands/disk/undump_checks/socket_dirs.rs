//! The directories the job's bound Unix sockets live in, put back before
//! CRIU binds the sockets again: a job that ended since its snapshot took
//! them away (Python's multiprocessing removes its `/tmp/pymp-*` at exit,
//! where each DataLoader worker's listener is bound), and CRIU fails on
//! each ("Can't bind ... No such file or directory") after forking the
//! tree. Each missing directory is made as its process would have made
//! it: mode 0700 (what `mkdtemp` gives), the socket's owner's, with no
//! link on any step, under parents held open.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::commands::disk::criu_tool::image_files::UnixBound;
use crate::commands::disk::report::DiskFailure;
use crate::commands::disk::undump_checks::open_files::JobFiles;
use crate::files::dir_chain::{self, Links};

/// The mode a directory is made with: what Python's `mkdtemp` (and
/// `mktemp -d`) give, the only one the images could not tell otherwise.
const MODE: u32 = 0o700;

/// The directories to make again (pure): each bound socket's directory
/// that `present` says is gone, once, with the owner and path of the
/// first socket bound in it.
pub fn missing(bound: &[UnixBound], present: impl Fn(&Path) -> bool) -> Vec<(PathBuf, &UnixBound)> {
    let mut dirs = BTreeMap::new();
    for socket in bound {
        let Some(dir) = socket.path.parent().filter(|d| !d.as_os_str().is_empty()) else {
            continue;
        };
        if !present(dir) {
            dirs.entry(dir.to_path_buf()).or_insert(socket);
        }
    }
    dirs.into_iter().collect()
}

/// Makes the directories the job's Unix sockets are bound in where they
/// are gone, each said in a remark. One that cannot be made refuses the
/// undump before CRIU runs (`--force` goes on, and CRIU fails on it).
pub fn put_back(job: &JobFiles, force: bool, remarks: &mut Vec<String>) -> Result<(), DiskFailure> {
    // A dangling link counts as there: it is not this check's to replace.
    let present = |dir: &Path| std::fs::symlink_metadata(dir).is_ok();
    for (dir, socket) in missing(&job.unix_bound, present) {
        let shown = |p: &Path| crate::targets::name::printable(&p.to_string_lossy()).into_owned();
        match dir_chain::reach_creating_for(&dir, Links::Refused, MODE, socket.owner) {
            Ok(_) => remarks.push(format!(
                "made {} again (mode {MODE:o}, uid {}), gone since the dump: the job's Unix socket {} is bound in it",
                shown(&dir),
                socket.owner.0,
                shown(&socket.path)
            )),
            Err(why) => {
                let why = format!(
                    "the job's Unix socket {} is bound in {}, which is gone, and it could not be made again ({why})",
                    shown(&socket.path),
                    shown(&dir)
                );
                DiskFailure::unless_forced(
                    "socket_dir",
                    &why,
                    "make the directory (as the socket's owner, mode 0700) and undump again; --force runs CRIU anyway",
                    force,
                    remarks,
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(path: &str, uid: u32) -> UnixBound {
        UnixBound {
            path: PathBuf::from(path),
            owner: (uid, uid),
        }
    }

    #[test]
    fn each_gone_directory_is_made_once_as_its_first_socket_s_owner() {
        let sockets = [
            bound("/tmp/pymp-a/listener-1", 1000),
            bound("/tmp/pymp-a/listener-2", 1000),
            bound("/tmp/pymp-b/listener-3", 1001),
            bound("/run/here/sock", 0),
        ];
        let present = |dir: &Path| dir == Path::new("/run/here");
        let dirs = missing(&sockets, present);
        let said: Vec<(String, u32)> = dirs
            .iter()
            .map(|(d, s)| (d.display().to_string(), s.owner.0))
            .collect();
        assert_eq!(
            said,
            [
                ("/tmp/pymp-a".to_string(), 1000),
                ("/tmp/pymp-b".to_string(), 1001)
            ]
        );
        assert!(missing(&sockets, |_| true).is_empty());
        assert!(
            missing(&[bound("sock", 0)], |_| false).is_empty(),
            "no directory named"
        );
    }
}
