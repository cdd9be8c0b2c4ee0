//! One cudackpt per process, whoever runs it: root, the process's owner
//! and a copy with CAP_SYS_PTRACE each keep their lock files in a run
//! directory of their own (`pidlock`), so those files alone let root's
//! checkpoint and the owner's `unlock` interleave. This lock is a name in
//! the kernel's abstract socket namespace, one per process
//! (`cudackpt/process/PID@START`), shared by every user of the host's
//! network namespace: binding it is exclusive, and the kernel frees it when
//! its holder exits, however it exits, so it never goes stale.
//!
//! Anyone can bind any name, so a holder is believed only if it could act
//! on the process itself: root, the process's owner, or a process with
//! CAP_SYS_PTRACE (its credentials from `SO_PEERCRED`, its capabilities
//! from /proc). A name squatted by anyone else is ignored and said, and the
//! lock files still keep that user's own cudackpt out. A holder whose
//! credentials cannot be read (its queue full) is taken as a holder: the
//! command is refused rather than run beside it.

use std::os::fd::OwnedFd;

use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

/// CAP_SYS_PTRACE's bit in a capability set.
const CAP_SYS_PTRACE: u32 = 19;

/// A process to lock: its PID, start time and owner.
#[derive(Debug, Clone, Copy)]
pub struct Locked {
    pub pid: i32,
    pub starttime: Option<u64>,
    pub owner: Option<u32>,
}

/// The names held, until dropped (the kernel frees each with its socket).
pub struct NameLocks {
    _sockets: Vec<OwnedFd>,
    /// Names squatted by users who could not act on the process, in words.
    pub remarks: Vec<String>,
}

/// Another cudackpt holds one process's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    pub pid: i32,
    /// The holder's PID, when it could be read.
    pub holder: Option<i32>,
}

/// The abstract name of `process` (pure).
pub fn name_of(process: &Locked) -> String {
    format!(
        "cudackpt/process/{}@{}",
        process.pid,
        process.starttime.unwrap_or(0)
    )
}

/// Takes every process's name, or none (the ones taken so far are freed
/// with the error).
pub fn acquire(processes: &[Locked]) -> Result<NameLocks, Busy> {
    let mut held = NameLocks {
        _sockets: Vec::with_capacity(processes.len()),
        remarks: Vec::new(),
    };
    for process in processes {
        match bind(process) {
            Ok(Some(socket)) => held._sockets.push(socket),
            Ok(None) => {}
            Err(Taken::ByOne { pid, uid }) if may_act_on(pid, uid, process.owner) => {
                return Err(Busy {
                    pid: process.pid,
                    holder: Some(pid),
                })
            }
            Err(Taken::ByOne { pid, uid }) => held.remarks.push(format!(
                "PID {pid} of uid {uid} holds cudackpt's lock name for PID {} but may not act on that process: ignored (the lock files still keep its user out)",
                process.pid
            )),
            Err(Taken::Unknown) => {
                return Err(Busy {
                    pid: process.pid,
                    holder: None,
                })
            }
            Err(Taken::NotListening) => held.remarks.push(format!(
                "cudackpt's lock name for PID {} is bound by a process that is no cudackpt (it does not listen): ignored",
                process.pid
            )),
        }
    }
    Ok(held)
}

/// Who holds a name.
enum Taken {
    ByOne {
        pid: i32,
        uid: u32,
    },
    /// Bound, and refusing connections: no cudackpt (it listens).
    NotListening,
    /// Bound, and its credentials could not be read.
    Unknown,
}

/// Binds and listens on `process`'s name. `Ok(None)`: no socket could be
/// made at all (no abstract namespace here): nothing is held, and the lock
/// files alone keep cudackpts apart.
fn bind(process: &Locked) -> Result<Option<OwnedFd>, Taken> {
    let Ok(address) = SocketAddrUnix::new_abstract_name(name_of(process).as_bytes()) else {
        return Ok(None);
    };
    let Ok(socket) = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    ) else {
        return Ok(None);
    };
    match rustix::net::bind(&socket, &address) {
        Ok(()) => {
            // Listening lets a contender read who holds it.
            let _ = rustix::net::listen(&socket, 16);
            Ok(Some(socket))
        }
        Err(Errno::ADDRINUSE) => Err(holder_of(&address)),
        Err(_) => Ok(None),
    }
}

/// Who holds `address`: a connection's peer credentials.
fn holder_of(address: &SocketAddrUnix) -> Taken {
    let Ok(socket) = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    ) else {
        return Taken::Unknown;
    };
    match rustix::net::connect(&socket, address) {
        Ok(()) => {}
        Err(Errno::CONNREFUSED) => return Taken::NotListening,
        Err(_) => return Taken::Unknown,
    }
    match rustix::net::sockopt::socket_peercred(&socket) {
        Ok(cred) => Taken::ByOne {
            pid: cred.pid.as_raw_nonzero().get(),
            uid: cred.uid.as_raw(),
        },
        Err(_) => Taken::Unknown,
    }
}

/// Whether the holder (PID, uid) could act on a process of `owner`: root,
/// that owner, or a holder with CAP_SYS_PTRACE.
fn may_act_on(pid: i32, uid: u32, owner: Option<u32>) -> bool {
    uid == 0 || Some(uid) == owner || has_ptrace(pid)
}

/// Whether `pid` holds CAP_SYS_PTRACE in its effective set (/proc/PID/status).
fn has_ptrace(pid: i32) -> bool {
    crate::targets::process::read_proc_text(&format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| effective_capabilities(&status))
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// The `CapEff:` mask of a status text (pure).
fn effective_capabilities(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Locked {
        Locked {
            pid: std::process::id() as i32,
            starttime: Some(4242),
            owner: Some(rustix::process::getuid().as_raw()),
        }
    }

    #[test]
    fn a_name_is_held_once_and_freed_with_its_holder() {
        let process = Locked {
            starttime: Some(rand_start()),
            ..me()
        };
        let held = acquire(&[process]).expect("free");
        // This process may act on its own processes: a holder believed.
        let busy = acquire(&[process]).err().expect("held");
        assert_eq!(busy.pid, process.pid);
        assert_eq!(busy.holder, Some(std::process::id() as i32));
        drop(held);
        assert!(acquire(&[process]).is_ok(), "freed with its socket");
    }

    #[test]
    fn a_holder_that_could_not_act_on_the_process_is_ignored() {
        // As seen by a process of another owner, held by a uid that is
        // neither root, that owner, nor capable: only a non-root holder
        // without capabilities can be such, so judge the rule itself.
        assert!(may_act_on(1, 0, Some(1000)));
        assert!(may_act_on(1, 1000, Some(1000)));
        assert!(!may_act_on(i32::MAX, 1001, Some(1000)));
    }

    #[test]
    fn capabilities_are_read_from_status() {
        assert_eq!(
            effective_capabilities("Name:\tx\nCapEff:\t0000000000080000\n"),
            Some(1 << CAP_SYS_PTRACE)
        );
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
    }

    /// A start time no other test uses.
    fn rand_start() -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(1);
        hasher.finish()
    }
}
