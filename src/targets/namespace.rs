//! PIDs across PID namespaces (containers): a PID a process sees, or
//! writes into a file name, belongs to its own namespace; cudackpt works in
//! the host's. `NSpid:` in /proc/PID/status lists a process's PID in each
//! namespace it is in, the host's first and its own last; /proc/PID/ns/pid
//! says which namespace that is. Read-only.

use std::fs;

/// A PID namespace, by the inode /proc/PID/ns/pid names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidNamespace(String);

/// The PID namespace `pid` is in, if it can be read (another user's
/// process needs root or CAP_SYS_PTRACE).
pub fn pid_namespace(pid: i32) -> Option<PidNamespace> {
    let link = fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    Some(PidNamespace(link.to_string_lossy().into_owned()))
}

/// The PIDs of a process from the host's namespace to its own, from the
/// `NSpid:` line of its status (pure); empty when there is none.
pub fn parse_nspid(status: &str) -> Vec<i32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .map(|pids| {
            pids.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The PID `pid` (a host PID) has in its own namespace.
pub fn own_pid(pid: i32) -> i32 {
    crate::targets::process::read_proc_text(&format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| parse_nspid(&status).last().copied())
        .unwrap_or(pid)
}

/// The host PIDs of every process in `namespace` for which `wanted` holds,
/// `wanted` being told the host PID and the PID in that namespace.
pub fn processes_in(namespace: &PidNamespace, wanted: impl Fn(i32, i32) -> bool) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid_namespace(pid).as_ref() == Some(namespace))
        .filter(|&pid| wanted(pid, own_pid(pid)))
        .collect()
}

/// The host PID of the process that is `ns_pid` in `namespace`.
pub fn host_pid(namespace: &PidNamespace, ns_pid: i32) -> Option<i32> {
    // In the host's own namespace the two agree: one look, no scan.
    if pid_namespace(ns_pid).as_ref() == Some(namespace) && own_pid(ns_pid) == ns_pid {
        return Some(ns_pid);
    }
    processes_in(namespace, |_, own| own == ns_pid)
        .first()
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lists_the_host_pid_first_and_the_own_last() {
        let status = "Name:\tpython3\nTgid:\t4242\nNSpid:\t4242\t1\nNSpgid:\t4242\t1\n";
        assert_eq!(parse_nspid(status), [4242, 1]);
        assert_eq!(parse_nspid("Name:\tx\n"), Vec::<i32>::new());
    }

    #[test]
    fn this_process_is_its_own_pid_in_its_namespace_here() {
        let me = std::process::id() as i32;
        let namespace = pid_namespace(me).expect("our own namespace");
        assert_eq!(host_pid(&namespace, own_pid(me)), Some(me));
    }
}
