//! The user cudackpt acts for (the one behind sudo, pkexec or doas), and
//! work done with a user's credentials, so that root writes and reads
//! their files as they would.

use std::io;
use std::path::Path;

use super::capped::{open_regular, read_capped, read_fd_capped, ReadError};
use super::privilege;

/// The user cudackpt acts for, with the group files are opened through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invoker {
    pub uid: u32,
    pub gid: u32,
}

/// The user cudackpt acts for: the real user, or for root the user who
/// reached root through sudo (`SUDO_UID`, `SUDO_GID`), pkexec
/// (`PKEXEC_UID`) or doas (`DOAS_USER`). `None`: root itself. These
/// variables only ever take power away (root then reads and writes with
/// that user's credentials), so one planted by a scheduler passing a
/// user's environment does no harm.
pub fn invoker() -> Option<Invoker> {
    let real = rustix::process::getuid().as_raw();
    if real != 0 {
        return Some(Invoker {
            uid: real,
            gid: rustix::process::getgid().as_raw(),
        });
    }
    let number = |name: &'static str| {
        crate::environment::text(name)
            .ok()
            .flatten()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|&id| id != 0)
    };
    if let Some(uid) = number(crate::environment::SUDO_UID) {
        return Some(Invoker {
            uid,
            gid: number(crate::environment::SUDO_GID).unwrap_or(OVERFLOW_GID),
        });
    }
    if let Some(uid) = number(crate::environment::PKEXEC_UID) {
        return Some(user(uid));
    }
    let name = crate::environment::text(crate::environment::DOAS_USER)
        .ok()
        .flatten()?;
    let (uid, gid) = passwd_entry(&read_passwd(), |entry, _| entry == name)?;
    (uid != 0).then_some(Invoker { uid, gid })
}

/// /etc/passwd, capped (empty where it cannot be read).
fn read_passwd() -> String {
    read_capped(Path::new("/etc/passwd"), PASSWD_CAP).unwrap_or_default()
}

/// The overflow group (nobody's): where the invoker's group is unknown, a
/// file is never opened through a group that user may not be in.
const OVERFLOW_GID: u32 = 65534;

/// The most of /etc/passwd read to find a user.
const PASSWD_CAP: u64 = 16 << 20;

/// The uid and gid of the first /etc/passwd entry that `matches` (its name
/// and uid) (pure).
fn passwd_entry(passwd: &str, matches: impl Fn(&str, u32) -> bool) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let (name, uid, gid) = (fields.first()?, fields.get(2)?, fields.get(3)?);
        let (uid, gid) = (uid.parse().ok()?, gid.parse().ok()?);
        matches(name, uid).then_some((uid, gid))
    })
}

/// Reads a small file that a user named on the command line, on their
/// behalf. As root for someone else (sudo, pkexec, doas), the file is
/// opened with that user's credentials (their uid and group, no
/// supplementary groups) on a thread of its own, so the kernel decides,
/// every directory above it included, and root never shows them a file
/// they could not open themselves. Capped, no link followed at the last
/// component, no FIFO.
pub fn read_for_invoker(path: &Path, cap: u64) -> Result<String, ReadError> {
    let acting_for = acting_for();
    let (fd, _) = as_invoker(|| open_regular(path))
        .map_err(ReadError::Io)?
        .map_err(|error| match (error, acting_for) {
            (ReadError::Io(e), Some(user)) if e.kind() == io::ErrorKind::PermissionDenied => {
                ReadError::NotTheirs { user: user.uid }
            }
            (other, _) => other,
        })?;
    read_fd_capped(fd, cap)
}

/// The user a root cudackpt acts for ([`invoker`]); `None` where
/// cudackpt is not root (it is that user already) or is root itself.
pub fn acting_for() -> Option<Invoker> {
    invoker().filter(|_| privilege::standing().root)
}

/// Runs `work` as the user root acts for ([`invoker`]): on a scoped thread
/// that takes on their credentials (Linux keeps them per thread) and ends,
/// so this thread's stay root's whatever happens there. Where cudackpt is
/// not root, or is root itself, `work` runs here as it is. `Err`: the
/// credentials could not be taken on.
pub fn as_invoker<T: Send>(work: impl FnOnce() -> T + Send) -> io::Result<T> {
    match acting_for() {
        Some(user) => as_user(user, work),
        None => Ok(work()),
    }
}

/// The user `uid` as [`as_user`] takes them on: their primary group from
/// /etc/passwd, else the overflow group.
pub fn user(uid: u32) -> Invoker {
    let gid = passwd_entry(&read_passwd(), |_, entry_uid| entry_uid == uid).map(|(_, gid)| gid);
    Invoker {
        uid,
        gid: gid.unwrap_or(OVERFLOW_GID),
    }
}

/// The groups user `uid` is in: their primary group (/etc/passwd) and
/// every /etc/group entry naming them. Empty for a user neither file knows.
pub fn groups_of(uid: u32) -> Vec<u32> {
    let passwd = read_passwd();
    let Some(name) = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2)?.parse::<u32>().ok()? == uid).then(|| fields[0].to_string())
    }) else {
        return Vec::new();
    };
    let primary = passwd_entry(&passwd, |_, entry_uid| entry_uid == uid).map(|(_, gid)| gid);
    let group = read_capped(Path::new("/etc/group"), PASSWD_CAP).unwrap_or_default();
    let mut groups: Vec<u32> = primary.into_iter().collect();
    groups.extend(member_of(&group, &name));
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// The gids of the /etc/group entries that list `name` as a member (pure).
fn member_of(group: &str, name: &str) -> Vec<u32> {
    group
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let members = fields.get(3)?;
            members
                .split(',')
                .any(|m| m.trim() == name)
                .then(|| fields.get(2)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// Runs `work` with `user`'s credentials, on a scoped thread that takes
/// them on (Linux keeps them per thread) and ends, so this thread's stay
/// what they were. Root alone can take on another user's.
pub fn as_user<T: Send>(user: Invoker, work: impl FnOnce() -> T + Send) -> io::Result<T> {
    as_user_in_groups(user, &[], work)
}

/// [`as_user`] with these supplementary groups (the user's own, where the
/// kernel should judge as it would for them at a login).
pub fn as_user_in_groups<T: Send>(
    user: Invoker,
    groups: &[u32],
    work: impl FnOnce() -> T + Send,
) -> io::Result<T> {
    use rustix::process::{Gid, Uid};
    let groups: Vec<Gid> = groups.iter().map(|&g| Gid::from_raw(g)).collect();
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("cudackpt-as-user".into())
            .spawn_scoped(scope, || -> io::Result<T> {
                // Groups first: after the uid changes, this thread may not.
                rustix::thread::set_thread_groups(&groups).map_err(io::Error::from)?;
                rustix::thread::set_thread_res_gid(None, Gid::from_raw(user.gid), None)
                    .map_err(io::Error::from)?;
                rustix::thread::set_thread_res_uid(None, Uid::from_raw(user.uid), None)
                    .map_err(io::Error::from)?;
                Ok(work())
            })?;
        worker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_in_the_groups_that_list_them() {
        let group = "root:x:0:\nsudo:x:27:alice,bob\ndocker:x:999:bob\nstaff:x:50: alice \n";
        assert_eq!(member_of(group, "alice"), [27, 50]);
        assert_eq!(member_of(group, "carol"), Vec::<u32>::new());
    }
}
