//! The `oom_kill` effect: what the kernel does to a process whose
//! checkpoint copy goes over its cgroup's memory limit. The process's
//! cgroup (from `/proc/PID/cgroup`) under `$FAKE_CUDA_CGROUP_ROOT` (a temp
//! tree standing in for `/sys/fs/cgroup`) counts one more `oom_kill` in its
//! `memory.events`, then the process gets SIGKILL and the call returns once
//! it is dead (a zombie of its parent, or gone).

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Counts the kill in the cgroup tree, then kills `pid` and waits for it.
pub fn kill(pid: i32) {
    if let Err(why) = count_kill(pid) {
        crate::warn(&format!(
            "oom_kill of {pid}: memory.events not updated: {why}"
        ));
    }
    // SAFETY: kill(2) has no memory preconditions; a stale PID fails with ESRCH.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while crate::procfs::is_running(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn count_kill(pid: i32) -> Result<(), String> {
    let root = std::env::var_os("FAKE_CUDA_CGROUP_ROOT")
        .filter(|r| !r.is_empty())
        .map(PathBuf::from)
        .ok_or("FAKE_CUDA_CGROUP_ROOT is not set")?;
    let cgroup =
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map_err(|e| e.to_string())?;
    let name = cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("no cgroup v2 line")?;
    let events = root
        .join(name.trim_start_matches('/'))
        .join("memory.events");
    let text = std::fs::read_to_string(&events).unwrap_or_default();
    std::fs::write(&events, bump_oom_kill(&text)).map_err(|e| format!("{}: {e}", events.display()))
}

/// `memory.events` with `oom` and `oom_kill` one higher (added when absent).
pub fn bump_oom_kill(text: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut seen = [false, false];
    for line in text.lines() {
        let bumped = ["oom", "oom_kill"].iter().enumerate().find_map(|(i, key)| {
            let count: u64 = line
                .strip_prefix(key)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()?;
            seen[i] = true;
            Some(format!("{key} {}", count + 1))
        });
        lines.push(bumped.unwrap_or_else(|| line.to_string()));
    }
    for (i, key) in ["oom", "oom_kill"].iter().enumerate() {
        if !seen[i] {
            lines.push(format!("{key} 1"));
        }
    }
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_is_counted_in_memory_events() {
        assert_eq!(
            bump_oom_kill("low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"
        );
        assert_eq!(bump_oom_kill(""), "oom 1\noom_kill 1\n");
        assert_eq!(
            bump_oom_kill("oom 2\noom_kill 2\noom_group_kill 0\n"),
            "oom 3\noom_kill 3\noom_group_kill 0\n"
        );
    }
}
