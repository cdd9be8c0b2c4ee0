//! doctor's checks of cudackpt's own directories, as this user would use
//! them: the lock directory every changing command takes a per-process
//! lock in, and the record directory its checkpoint and intent records
//! go to. A user other than root without `XDG_RUNTIME_DIR` lands on
//! root's `/run/cudackpt`, where the first `suspend` of their own process
//! would fail: doctor says so first. Read-only: nothing is made here.

use std::path::Path;

use super::check::{Check, Status};
use crate::files::{run_dir_hint, SafeDir};
use crate::gpu::record;
use crate::ops::doors::places::{lock_dir, LOCK_DIR_VAR};

/// The lock directory and the record directory, each usable or not.
pub fn checks() -> Vec<Check> {
    vec![
        usable("lock directory", "locks", &lock_dir(), LOCK_DIR_VAR),
        usable(
            "record directory",
            "records",
            &record::dir(None),
            record::DIR_VAR,
        ),
    ]
}

/// Whether `path` is there and trusted, or could be made by this user.
fn usable(name: &'static str, what: &str, path: &Path, variable: &str) -> Check {
    let place_of_your_own = || {
        run_dir_hint(what, variable)
            .unwrap_or_else(|| format!("name a directory of your own, owned by you and writable by nobody else, with {variable}"))
    };
    match SafeDir::open_existing(path) {
        Ok(Some(_)) => Check::new(name, Status::Ok, path.display().to_string()),
        Err(why) => {
            let hint = run_dir_hint(what, variable).unwrap_or_else(|| why.hint());
            Check::new(name, Status::Fail, why.to_string()).hint(hint)
        }
        Ok(None) => match nearest_existing(path) {
            Some(ancestor) if writable(ancestor) => Check::new(
                name,
                Status::Ok,
                format!("{} (made at the first command that needs it)", path.display()),
            ),
            ancestor => Check::new(
                name,
                Status::Fail,
                format!(
                    "{} is not there, and uid {} cannot make it ({} is not writable to it): the first command that changes a process would fail",
                    path.display(),
                    rustix::process::geteuid().as_raw(),
                    ancestor.map_or_else(|| "no directory above it".to_string(), |a| a.display().to_string()),
                ),
            )
            .hint(place_of_your_own()),
        },
    }
}

/// The nearest directory above `path` (or `path` itself) that exists.
fn nearest_existing(path: &Path) -> Option<&Path> {
    path.ancestors().skip(1).find(|dir| dir.is_dir())
}

/// Whether this user may make entries in `dir`.
fn writable(dir: &Path) -> bool {
    use rustix::fs::{access, Access};
    access(dir, Access::WRITE_OK | Access::EXEC_OK).is_ok()
}
