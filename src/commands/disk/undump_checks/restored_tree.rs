//! What a CRIU restore brought back, known without believing a file: while
//! CRIU restores, cudackpt is a child subreaper, so the tree CRIU forks
//! (its children, left behind when `--restore-detached` CRIU exits) becomes
//! cudackpt's children. The restored root is the one of them CRIU's pidfile
//! names; after a failed restore, what is killed is those children and
//! their descendants, each held by a pidfd and started no earlier than that
//! CRIU, never a PID read from the images directory.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;

use crate::targets::process;

/// Makes this process the reaper of its orphaned descendants.
pub fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(Into::into)
}

/// This process's children (every thread's), started at or after
/// `since` (clock ticks since boot, as /proc/PID/stat says).
pub fn children_since(since: u64) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut found = BTreeSet::new();
    for tid in thread_ids(me) {
        found.extend(children_of_task(me, tid));
    }
    found
        .into_iter()
        .filter(|&pid| process::starttime(pid).is_some_and(|t| t >= since))
        .collect()
}

/// Whether `pid` is a child of this process that started at or after
/// `since`: the restored root CRIU's pidfile names must be.
pub fn is_restored_child(pid: i32, since: u64) -> bool {
    children_since(since).contains(&pid)
}

/// Kills each of `roots` (children of this process) and their
/// descendants: every process held by a pidfd, then checked to be the one
/// meant (started no earlier than `since`, its parent one already held),
/// then signalled through that pidfd. The PIDs killed.
pub fn kill_trees(roots: &[i32], since: u64) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut held: Vec<(i32, OwnedFd)> = Vec::new();
    let mut queue: Vec<(i32, i32)> = roots.iter().map(|&pid| (pid, me)).collect();
    while let Some((pid, parent)) = queue.pop() {
        let Some(fd) = process::pidfd_of(pid) else {
            continue;
        };
        // Read after the pidfd is open: a PID reused in between would
        // show another parent or an earlier start.
        let still =
            process::starttime(pid).is_some_and(|t| t >= since) && parent_of(pid) == Some(parent);
        if !still {
            continue;
        }
        for tid in thread_ids(pid) {
            queue.extend(children_of_task(pid, tid).into_iter().map(|c| (c, pid)));
        }
        held.push((pid, fd));
    }
    // Children before parents: a parent killed first lets its children be
    // reparented out of reach.
    let mut killed = Vec::new();
    for (pid, fd) in held.iter().rev() {
        if rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL).is_ok() {
            killed.push(*pid);
        }
    }
    killed.sort_unstable();
    killed
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = process::read_proc_text(&format!("/proc/{pid}/stat")).ok()?;
    crate::targets::discover::parse_ppid(&stat)
}

fn thread_ids(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The children of one thread (`/proc/PID/task/TID/children`).
pub fn children_of_task(pid: i32, tid: i32) -> Vec<i32> {
    process::read_proc_text(&format!("/proc/{pid}/task/{tid}/children"))
        .map(|text| parse_children(&text))
        .unwrap_or_default()
}

/// The PIDs of a `children` file (pure).
pub fn parse_children(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_read_as_numbers() {
        assert_eq!(parse_children("12 13 \n"), [12, 13]);
        assert_eq!(parse_children(""), Vec::<i32>::new());
    }

    #[test]
    fn a_child_started_before_criu_is_never_its_work() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        let started = process::starttime(pid).expect("its start");
        assert!(is_restored_child(pid, started));
        assert!(!is_restored_child(pid, started + 1));
        assert!(
            kill_trees(&[pid], started + 1).is_empty(),
            "older than CRIU"
        );
        assert_eq!(kill_trees(&[pid], started), [pid]);
        let _ = child.wait();
    }
}
