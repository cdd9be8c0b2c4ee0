//! Linux processes as targets: parsing PIDs, reading /proc to check that a
//! PID is a live thread-group leader the caller may act on, and the caller's
//! own privileges. Nothing here touches a process's CUDA state; the one
//! effect is a signal sent to a checked target through its pidfd (the
//! drain handshake's request).

use std::fs;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::targets::name::printable;

/// Why a text is no PID (each quotes the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPid {
    #[error("invalid PID {0:?}: a PID is a positive number")]
    Negative(String),
    #[error("invalid PID {0:?}: a PID is a positive number, like 4242")]
    NotANumber(String),
    #[error("invalid PID {0:?}: 0 is not a process")]
    Zero(String),
    #[error("invalid PID {0:?}: larger than any PID Linux can hand out")]
    TooLarge(String),
}

/// Parses a PID as given on the command line. Rejects what can never be a
/// process: text, 0, negative numbers and numbers beyond `pid_t`.
pub fn parse_pid(text: &str) -> Result<i32, InvalidPid> {
    let trimmed = text.trim();
    if let Some(rest) = trimmed.strip_prefix('-') {
        if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()) {
            return Err(InvalidPid::Negative(text.to_string()));
        }
    }
    if trimmed.is_empty() || !trimmed.chars().all(|c| c.is_ascii_digit()) {
        return Err(InvalidPid::NotANumber(text.to_string()));
    }
    match trimmed.parse::<i32>() {
        Ok(0) => Err(InvalidPid::Zero(text.to_string())),
        Ok(pid) => Ok(pid),
        Err(_) => Err(InvalidPid::TooLarge(text.to_string())),
    }
}

/// A live process that passed the target checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub pid: i32,
    /// The command name (`/proc/PID/comm`).
    pub name: String,
    /// Its main thread is stopped (SIGSTOP, a debugger, CRIU's freeze).
    pub stopped: bool,
    /// Its parent's PID when checked: read after its pidfd was opened, so
    /// the parent of the process held (a PID a tree's walk found may have
    /// been taken by another process since).
    pub parent: i32,
    /// Which process it was when checked, to tell it from a later process
    /// that reuses its PID.
    pub identity: CheckedIdentity,
}

/// A process's identity at its check: a pidfd held from then on (it
/// refers to that process, never to a later one with the same PID), its
/// start time and its owner.
#[derive(Debug, Clone, Default)]
pub struct CheckedIdentity {
    pidfd: Option<Arc<OwnedFd>>,
    starttime: Option<u64>,
    owner: Option<u32>,
}

/// Two identities are the same process when their start times and owners
/// agree (a descriptor has no value to compare).
impl PartialEq for CheckedIdentity {
    fn eq(&self, other: &CheckedIdentity) -> bool {
        self.starttime == other.starttime && self.owner == other.owner
    }
}

impl Eq for CheckedIdentity {}

impl CheckedIdentity {
    /// Its start time when checked (field 22 of /proc/PID/stat).
    pub fn starttime(&self) -> Option<u64> {
        self.starttime
    }

    /// Its owner (real uid) when checked.
    pub fn owner(&self) -> Option<u32> {
        self.owner
    }
}

/// How a target stopped being the process that was checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityLost {
    /// It exited.
    #[error("PID {pid} ({}) exited after it was checked", printable(name))]
    Exited {
        /// Its PID.
        pid: i32,
        /// Its command name when checked.
        name: String,
    },
    /// It exited, and another process now has its PID.
    #[error("PID {pid} is no longer the process that was checked ({}): it exited and its PID now belongs to another process{owner}", printable(name), owner = .owner.map_or(String::new(), |uid| format!(" of uid {uid}")))]
    Replaced {
        /// The PID.
        pid: i32,
        /// The command name of the process checked.
        name: String,
        /// The owner of the process that has the PID now.
        owner: Option<u32>,
    },
}

impl Target {
    /// Whether the process behind this PID is still the one checked: its
    /// pidfd does not say it exited, and /proc shows the same start time
    /// and owner. Done just before the first driver call, after the
    /// per-PID lock, so a PID reused meanwhile is never acted on.
    pub fn still_the_same(&self) -> Result<(), IdentityLost> {
        let exited = || IdentityLost::Exited {
            pid: self.pid,
            name: self.name.clone(),
        };
        if self.identity.pidfd.as_deref().is_some_and(pidfd_exited) {
            return Err(exited());
        }
        let Some(status) = read_status(self.pid).ok().flatten() else {
            return Err(exited());
        };
        let owner = Some(status.uids[0]);
        let replaced = (self.identity.starttime.is_some()
            && starttime(self.pid) != self.identity.starttime)
            || (self.identity.owner.is_some() && owner != self.identity.owner);
        if replaced {
            return Err(IdentityLost::Replaced {
                pid: self.pid,
                name: self.name.clone(),
                owner,
            });
        }
        Ok(())
    }
}

impl Target {
    /// Sends signal `number` to this process and to no other: through the
    /// pidfd held since its check (it can never reach a later process that
    /// reuses the PID), or, beyond the pidfd budget, by PID once
    /// [`Target::still_the_same`] has confirmed it.
    pub fn send_signal(&self, number: i32) -> io::Result<()> {
        use rustix_libc_wrappers::process::SignalExt;
        let signal = rustix::process::Signal::from_raw(number)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        if let Some(pidfd) = &self.identity.pidfd {
            return rustix::process::pidfd_send_signal(pidfd.as_ref(), signal).map_err(Into::into);
        }
        self.still_the_same()
            .map_err(|lost| io::Error::new(io::ErrorKind::NotFound, lost.to_string()))?;
        let pid = rustix::process::Pid::from_raw(self.pid)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        rustix::process::kill_process(pid, signal).map_err(Into::into)
    }
}

/// How many pidfds one cudackpt may hold: a quarter of its open-file limit,
/// so that a group of thousands still has descriptors for /proc, the driver
/// and its lock files. Targets beyond it are told apart by start time and
/// owner alone.
static PIDFD_BUDGET: OnceLock<AtomicUsize> = OnceLock::new();

fn take_pidfd_budget() -> bool {
    let budget = PIDFD_BUDGET.get_or_init(|| {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let soft = limit.current.unwrap_or(1 << 20);
        AtomicUsize::new(usize::try_from(soft / 4).unwrap_or(usize::MAX))
    });
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            left.checked_sub(1)
        })
        .is_ok()
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks
/// since boot; a reused PID has another.
pub fn starttime(pid: i32) -> Option<u64> {
    let stat = read_proc_text(&format!("/proc/{pid}/stat")).ok()?;
    stat_fields(&stat)?.nth(19)?.parse().ok()
}

/// A pidfd for `pid`, while the budget lasts: opened before anything about
/// the PID is read, so what is read afterwards is known to be this
/// process's (see [`check_target`]).
fn open_pidfd(pid: i32) -> Option<Arc<OwnedFd>> {
    take_pidfd_budget()
        .then(|| rustix::process::Pid::from_raw(pid))
        .flatten()
        .and_then(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok())
        .map(Arc::new)
}

/// A pidfd for `pid`, outside the budget: for a process held on its own
/// (a restored tree's, a Slurm job's), not one of a group's targets.
pub fn pidfd_of(pid: i32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Whether the process a pidfd refers to has exited (its pidfd is then
/// readable).
fn pidfd_exited(pidfd: &OwnedFd) -> bool {
    pidfd_exit_within(pidfd, Some(std::time::Duration::ZERO)).unwrap_or(false)
}

/// Waits up to `limit` (None: until it happens) for the process behind
/// `pidfd` to exit, its pidfd turning readable: whether it has. A signal
/// that interrupts the wait is `Errno::INTR`, for the caller to wait again.
pub fn pidfd_exit_within(
    pidfd: &OwnedFd,
    limit: Option<std::time::Duration>,
) -> rustix::io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let limit = limit.map(|limit| Timespec {
        tv_sec: limit.as_secs() as i64,
        tv_nsec: i64::from(limit.subsec_nanos()),
    });
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    let ready = poll(&mut fds, limit.as_ref())?;
    Ok(ready > 0 && fds[0].revents().contains(PollFlags::IN))
}

/// The identity of the process `status` describes, held by `pidfd`.
fn identity_of(pid: i32, status: &ProcStatus, pidfd: Option<Arc<OwnedFd>>) -> CheckedIdentity {
    CheckedIdentity {
        pidfd,
        starttime: starttime(pid),
        owner: Some(status.uids[0]),
    }
}

/// What /proc says about a PID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    pub name: String,
    pub tgid: i32,
    /// The parent's PID (0 where the status does not say).
    pub ppid: i32,
    /// Real, effective, saved and filesystem UIDs.
    pub uids: [u32; 4],
    /// The one-letter state: R, S, D, Z, T, ...
    pub state: char,
    /// The signals it catches (`SigCgt`, bit N-1 for signal N), when shown.
    pub caught: Option<u64>,
    /// The signals sent to it and not yet taken (`ShdPnd`, the process's,
    /// and `SigPnd`, its main thread's), bit N-1 for signal N.
    pub pending: u64,
}

/// Why a PID cannot be acted on. Each says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// No process has the PID.
    #[error("no process has PID {pid}")]
    NoSuchProcess {
        /// The PID.
        pid: i32,
    },
    /// It exited and waits for its parent.
    #[error(
        "PID {pid} ({}) has exited and is waiting to be reaped (zombie)",
        printable(name)
    )]
    Zombie {
        /// Its PID.
        pid: i32,
        /// Its command name.
        name: String,
    },
    /// The PID is a thread's, not a process's.
    #[error(
        "{tid} is a thread of process {tgid} ({}), not a process",
        printable(name)
    )]
    Thread {
        /// The thread's id, as given.
        tid: i32,
        /// Its process's PID.
        tgid: i32,
        /// Its process's command name.
        name: String,
    },
    /// Another user's process, and the caller is not privileged.
    #[error(
        "PID {pid} ({}) belongs to user {owner}, and this user ({caller}) may not act on it",
        printable(name)
    )]
    PermissionDenied {
        /// Its PID.
        pid: i32,
        /// Its command name.
        name: String,
        /// Its owner's uid.
        owner: u32,
        /// The caller's uid.
        caller: u32,
    },
    /// /proc could not say.
    #[error("could not read /proc/{pid}/status: {reason}")]
    Unreadable {
        /// The PID.
        pid: i32,
        /// The error.
        reason: String,
    },
}

impl TargetError {
    /// The PID (or thread id) it is about.
    pub fn pid(&self) -> i32 {
        match self {
            TargetError::NoSuchProcess { pid }
            | TargetError::Zombie { pid, .. }
            | TargetError::PermissionDenied { pid, .. }
            | TargetError::Unreadable { pid, .. } => *pid,
            TargetError::Thread { tid, .. } => *tid,
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            TargetError::NoSuchProcess { .. } | TargetError::Zombie { .. } => {
                "check the PID; `ps` or `nvidia-smi` list the processes on this host".to_string()
            }
            TargetError::Thread { tgid, .. } => format!(
                "act on the whole process with PID {tgid}: the driver treats a thread id as its process, so cudackpt refuses it to avoid surprises"
            ),
            TargetError::PermissionDenied { .. } => PERMISSION_HINT.to_string(),
            TargetError::Unreadable { .. } => "check that /proc is mounted and readable".to_string(),
        }
    }
}

/// The advice for any permission failure.
pub const PERMISSION_HINT: &str =
    "run as root or with CAP_SYS_PTRACE (e.g. sudo), as the process's owner, and check /proc/sys/kernel/yama/ptrace_scope";

/// Parses the fields cudackpt needs from the text of `/proc/PID/status`.
pub fn parse_status(text: &str) -> Option<ProcStatus> {
    let mut name = None;
    let mut tgid = None;
    let mut ppid = 0;
    let mut uids = None;
    let mut state = None;
    let mut caught = None;
    let mut pending = 0;
    for line in text.lines() {
        let Some((key, raw)) = line.split_once(':') else {
            continue;
        };
        let value = raw.trim();
        match key {
            // Spaces are part of a name; only the kernel's tab goes.
            "Name" => name = Some(unescape_status_name(raw.strip_prefix('\t').unwrap_or(raw))),
            "State" => state = value.chars().next(),
            "Tgid" => tgid = value.parse().ok(),
            "PPid" => ppid = value.parse().unwrap_or(0),
            "SigCgt" => caught = u64::from_str_radix(value, 16).ok(),
            "ShdPnd" | "SigPnd" => pending |= u64::from_str_radix(value, 16).unwrap_or(0),
            "Uid" => {
                let parsed: Vec<u32> = value
                    .split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect();
                uids = <[u32; 4]>::try_from(parsed).ok();
            }
            _ => {}
        }
    }
    Some(ProcStatus {
        name: name?,
        tgid: tgid?,
        ppid,
        uids: uids?,
        state: state?,
        caught,
        pending,
    })
}

/// A `Name:` value of /proc/PID/status as the process set it: the kernel
/// writes a newline in it as `\n` and a backslash as `\\` (and nothing
/// else escaped), so `\n` read back is a newline again.
fn unescape_status_name(value: &str) -> String {
    let mut name = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('n')) => {
                name.push('\n');
                chars.next();
            }
            ('\\', Some('\\')) => {
                name.push('\\');
                chars.next();
            }
            (c, _) => name.push(c),
        }
    }
    name
}

/// The most of a /proc text file cudackpt reads (`status` is about 1.5
/// KiB; a file this long is not one the kernel wrote).
const PROC_TEXT_CAP: u64 = 64 << 10;

/// Reads a small /proc text file (`stat`, `status`) in one `read` where it
/// fits in 4 KiB (procfs reports size 0, so the std helpers would grow the
/// buffer read by read). Its process's name is in it, and a name is any
/// bytes: the text is decoded lossily, never refused for them.
pub fn read_proc_text(path: &str) -> io::Result<String> {
    let mut bytes = Vec::with_capacity(4096);
    fs::File::open(path)?
        .take(PROC_TEXT_CAP)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads `/proc/PID/status`; `Ok(None)` when the PID does not exist.
pub fn read_status(pid: i32) -> Result<Option<ProcStatus>, TargetError> {
    match read_proc_text(&format!("/proc/{pid}/status")) {
        Ok(text) => parse_status(&text)
            .map(Some)
            .ok_or_else(|| TargetError::Unreadable {
                pid,
                reason: "unexpected format".to_string(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        // ESRCH: the process exited while we read.
        Err(e) if e.raw_os_error() == Some(3) => Ok(None),
        Err(e) => Err(TargetError::Unreadable {
            pid,
            reason: e.to_string(),
        }),
    }
}

/// Whether a PID names a live (non-zombie) process right now, as far as can
/// be told: only /proc saying it is gone (or a zombie) makes it dead. A
/// read that fails for another reason (EMFILE, ENOMEM) is no verdict about
/// the process.
pub fn is_alive(pid: i32) -> bool {
    match read_status(pid) {
        Ok(Some(status)) => status.state != 'Z',
        Ok(None) => false,
        Err(_) => true,
    }
}

/// How long a zombie's parent (or init, once the parent is gone) is given
/// to reap it before its PID is called held: systemd reaps within
/// milliseconds, but some inits poll (a Firecracker VM's `process_api`
/// reaped orphans 1.4–2.0 s after they died, measured); a parent that
/// never calls wait() never does.
pub const REAP_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Waits up to `limit` while `pid` is a zombie: whether the PID is free of
/// it (a live process at the PID is not waited for).
pub fn zombie_reaped_within(pid: i32, limit: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        match read_status(pid) {
            Ok(None) => return true,
            Ok(Some(status)) if status.state == 'Z' => {}
            _ => return false,
        }
        if std::time::Instant::now() > until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A debug build's pause just after a target's /proc checks, so a test
/// can make its PID name another process there:
/// `CUDACKPT_DEBUG_PAUSE_AFTER_CHECKS=FILE` (see [`debug_pause`]).
fn pause_after_checks() {
    debug_pause(crate::environment::DEBUG_PAUSE_AFTER_CHECKS);
}

/// A debug build's pause where a test makes a PID name another process:
/// where the variable `name` says FILE, creates FILE and waits (a minute
/// at most) until it is removed. Release builds compile it to nothing.
#[cfg(debug_assertions)]
pub fn debug_pause(name: &'static str) {
    let Some(file) = crate::environment::debug(name) else {
        return;
    };
    let file = std::path::PathBuf::from(file);
    if std::fs::write(&file, b"").is_err() {
        return;
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while file.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn debug_pause(_name: &'static str) {}

/// The checks every target passes before any driver call: the PID is live,
/// is a process rather than a thread, and the caller may act on it. With
/// `hold`, the target is also held by a pidfd (while the budget lasts), for
/// commands that will change it.
pub fn check_target(pid: i32, caller: &Privileges, hold: bool) -> Result<Target, TargetError> {
    // The pidfd first: opened after the checks, it could hold (and later
    // signal) a process that took the PID in between. Opened before, it
    // holds the process the checks then read, as long as that process has
    // not exited by the end of them (checked below). A thread id has no
    // pidfd of this kind; the status read says it is a thread.
    let pidfd = if hold { open_pidfd(pid) } else { None };
    let status = read_status(pid)?.ok_or(TargetError::NoSuchProcess { pid })?;
    if status.tgid != pid {
        let name = read_status(status.tgid)
            .ok()
            .flatten()
            .map_or(status.name, |leader| leader.name);
        return Err(TargetError::Thread {
            tid: pid,
            tgid: status.tgid,
            name,
        });
    }
    if status.state == 'Z' {
        return Err(TargetError::Zombie {
            pid,
            name: status.name,
        });
    }
    if !caller.may_act_on(&status) {
        return Err(TargetError::PermissionDenied {
            pid,
            name: status.name,
            owner: status.uids[0],
            caller: caller.uid,
        });
    }
    pause_after_checks();
    let identity = if hold {
        let identity = identity_of(pid, &status, pidfd);
        // What was read may be a later process's, if the one the pidfd
        // holds exited meanwhile: then it is gone.
        if identity.pidfd.as_deref().is_some_and(pidfd_exited) {
            return Err(TargetError::NoSuchProcess { pid });
        }
        identity
    } else {
        CheckedIdentity::default()
    };
    Ok(Target {
        pid,
        name: status.name,
        stopped: is_stopped_state(status.state),
        parent: status.ppid,
        identity,
    })
}

/// `T` (stopped by a signal) or `t` (stopped by a tracer).
pub fn is_stopped_state(state: char) -> bool {
    matches!(state, 'T' | 't')
}

/// The fields of a `/proc/.../stat` text after the command name, which may
/// hold spaces and parentheses: field 3 (the state) comes first.
pub fn stat_fields(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace())
}

/// Whether process `pid`'s main thread is stopped now (SIGSTOP, a
/// debugger, CRIU's freeze); false when it is gone.
pub fn is_stopped(pid: i32) -> bool {
    read_status(pid)
        .ok()
        .flatten()
        .is_some_and(|status| is_stopped_state(status.state))
}

/// Whether thread `tid` of process `pid` is stopped; `None` when it is gone.
pub fn thread_stopped(pid: i32, tid: i32) -> Option<bool> {
    let stat = read_proc_text(&format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let state = stat_fields(&stat)?.next()?.chars().next()?;
    Some(is_stopped_state(state))
}

/// Who cudackpt runs as, as far as acting on other processes goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Privileges {
    pub uid: u32,
    pub euid: u32,
    pub cap_sys_ptrace: bool,
    /// Yama's ptrace scope (0-3), when the kernel has Yama.
    pub ptrace_scope: Option<u8>,
}

impl Privileges {
    /// The caller's privileges. Root needs no capability check, so the
    /// process path reads /proc/self only for other users.
    pub fn current() -> Privileges {
        let euid = rustix::process::geteuid().as_raw();
        Privileges {
            uid: rustix::process::getuid().as_raw(),
            euid,
            cap_sys_ptrace: euid != 0 && crate::files::privilege::standing().ptrace,
            ptrace_scope: None,
        }
    }

    /// The caller's privileges with the ptrace scope too (for `doctor`).
    pub fn current_with_ptrace_scope() -> Privileges {
        Privileges {
            ptrace_scope: fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
                .ok()
                .and_then(|text| text.trim().parse().ok()),
            ..Privileges::current()
        }
    }

    /// Root or CAP_SYS_PTRACE: may act on any process.
    pub fn is_privileged(&self) -> bool {
        self.euid == 0 || self.cap_sys_ptrace
    }

    /// The kernel's rule for touching another process, as far as it can be
    /// told without trying: privileged callers may act on anything, others
    /// only on processes whose every UID is theirs.
    pub fn may_act_on(&self, target: &ProcStatus) -> bool {
        self.is_privileged() || target.uids.iter().all(|&uid| uid == self.uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Privileges {
        Privileges {
            uid: 0,
            euid: 0,
            cap_sys_ptrace: true,
            ptrace_scope: None,
        }
    }

    #[test]
    fn a_target_that_exits_after_its_check_is_caught_by_its_pidfd() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        let target = check_target(pid, &root(), true).expect("a live process");
        assert_eq!(target.still_the_same(), Ok(()));
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert!(matches!(
            target.still_the_same(),
            Err(IdentityLost::Exited { .. })
        ));
    }

    #[test]
    fn a_pid_now_behind_another_process_is_named_as_replaced() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        let mut target = check_target(pid, &root(), true).expect("a live process");
        // What a reused PID looks like: the same number, another start time
        // (the pidfd is of the process now there, so only /proc can tell).
        target.identity.pidfd = None;
        target.identity.starttime = target.identity.starttime.map(|t| t + 1);
        assert!(matches!(
            target.still_the_same(),
            Err(IdentityLost::Replaced { .. })
        ));
        child.kill().expect("kill");
        child.wait().expect("reap");
    }

    #[test]
    fn pids_are_positive_numbers() {
        assert_eq!(parse_pid("4242"), Ok(4242));
        assert_eq!(parse_pid(" 17 "), Ok(17));
        for (bad, why) in [
            ("0", "0 is not a process"),
            ("-5", "positive"),
            ("abc", "positive number"),
            ("", "positive number"),
            ("12x", "positive number"),
            ("99999999999", "larger than any PID"),
            ("+5", "positive number"),
        ] {
            let err = parse_pid(bad).unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains(&format!("{bad:?}")),
                "{bad}: {err}"
            );
        }
    }

    const STATUS: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4243\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n";

    #[test]
    fn status_fields_are_read() {
        let status = parse_status(STATUS).expect("parses");
        assert_eq!(
            status,
            ProcStatus {
                name: "python3".into(),
                tgid: 4242,
                ppid: 1,
                uids: [1000; 4],
                state: 'S',
                caught: None,
                pending: 0,
            }
        );
        let pending = parse_status(&format!(
            "{STATUS}SigPnd:\t0000000000000000\nShdPnd:\t0000008000000000\n"
        ))
        .expect("parses");
        assert_eq!(pending.pending, 1 << 39, "signal 40 pending");
        assert_eq!(parse_status("Name:\tx\n"), None);
    }

    #[test]
    fn a_name_is_read_back_as_the_process_set_it() {
        // prctl(PR_SET_NAME, "a\\nb\\\\c ") shows as `a\nb\\c ` in status;
        // a backslash the kernel did not write stays.
        let status = parse_status(&STATUS.replace("python3", "a\\nb\\\\c \\x")).expect("parses");
        assert_eq!(status.name, "a\nb\\c \\x");
    }

    fn caller(uid: u32, cap: bool) -> Privileges {
        Privileges {
            uid,
            euid: uid,
            cap_sys_ptrace: cap,
            ptrace_scope: Some(1),
        }
    }

    #[test]
    fn only_privileged_callers_act_on_other_users() {
        let mut target = parse_status(STATUS).expect("parses");
        assert!(caller(1000, false).may_act_on(&target));
        assert!(!caller(1001, false).may_act_on(&target));
        assert!(caller(1001, true).may_act_on(&target));
        assert!(caller(0, false).may_act_on(&target));
        target.uids[1] = 0; // a setuid process
        assert!(!caller(1000, false).may_act_on(&target));
    }

    #[test]
    fn this_process_is_a_valid_target_and_its_threads_are_not() {
        let me = std::process::id() as i32;
        let target = check_target(me, &Privileges::current(), false).expect("self is a target");
        assert_eq!(target.pid, me);
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            tx.send(rustix::thread::gettid().as_raw_nonzero().get())
                .expect("send tid");
            std::thread::park();
        });
        let tid = rx.recv().expect("tid");
        let err = check_target(tid, &Privileges::current(), false).unwrap_err();
        assert!(
            matches!(err, TargetError::Thread { tgid, .. } if tgid == me),
            "{err:?}"
        );
        handle.thread().unpark();
        handle.join().expect("thread joins");
    }
}
