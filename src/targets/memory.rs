//! Host memory a checkpoint needs: the driver copies a process's device
//! memory into that process's own host memory, charged to its memory cgroup
//! (SPEC 2: a process holding 6 GiB of device memory in a cgroup with
//! `memory.max` 3 GiB is OOM-killed during `suspend`). Here: what the host
//! has (`MemAvailable`), and the cgroup v2 chain of a process with each
//! level's limits and use. Read-only.

use std::path::{Path, PathBuf};

use crate::files;
use crate::targets::discover;

/// One cgroup of a process's chain, with what its memory files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLevel {
    /// As /proc/PID/cgroup names it (`/` is the root).
    pub name: String,
    /// `memory.max`; `None` when unlimited or unreadable.
    pub max: Option<u64>,
    /// `memory.high`; `None` when unlimited or unreadable.
    pub high: Option<u64>,
    /// `memory.current`.
    pub current: Option<u64>,
}

/// Cgroup and /proc files read here are a few lines; anything longer is
/// not what it claims to be.
const SMALL_FILE_CAP: u64 = 64 * 1024;

fn read_small(path: &Path) -> Option<String> {
    files::read_capped(path, SMALL_FILE_CAP).ok()
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    parse_mem_available(&read_small(Path::new("/proc/meminfo"))?)
}

/// `MemAvailable: N kB` (pure).
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let rest = line.strip_prefix("MemAvailable:")?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// The cgroup v2 path of a process (`0::/path` in /proc/PID/cgroup).
pub fn cgroup_of(pid: i32) -> Option<String> {
    parse_cgroup_v2(&read_small(Path::new(&format!("/proc/{pid}/cgroup")))?)
}

/// The `0::` line of /proc/PID/cgroup (pure).
pub fn parse_cgroup_v2(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_string)
}

/// The chain of cgroups of `pid`, its own first, up to the root, with their
/// limits; empty without cgroup v2.
pub fn chain_of(pid: i32) -> Vec<CgroupLevel> {
    match (discover::cgroup2_root(), cgroup_of(pid)) {
        (Some(root), Some(name)) => chain(&root, &name),
        _ => Vec::new(),
    }
}

/// The chain of the cgroup `name` under the mount `root`.
pub fn chain(root: &Path, name: &str) -> Vec<CgroupLevel> {
    let mut levels = Vec::new();
    let mut current = PathBuf::from(name);
    loop {
        let relative = current.strip_prefix("/").unwrap_or(&current);
        let dir = root.join(relative);
        levels.push(CgroupLevel {
            name: current.display().to_string(),
            max: limit(&dir.join("memory.max")),
            high: limit(&dir.join("memory.high")),
            current: limit(&dir.join("memory.current")),
        });
        match current.parent() {
            Some(parent) if current != Path::new("/") => current = parent.to_path_buf(),
            _ => return levels,
        }
    }
}

/// A memory file's number; `max` (no limit) and unreadable are `None`.
fn limit(path: &Path) -> Option<u64> {
    read_small(path)?.trim().parse().ok()
}

/// The `oom_kill` count of a cgroup's `memory.events`.
pub fn oom_kills(root: &Path, name: &str) -> Option<u64> {
    let relative = name.strip_prefix('/').unwrap_or(name);
    let text = read_small(&root.join(relative).join("memory.events"))?;
    text.lines()
        .find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn meminfo_and_cgroup_lines_are_read() {
        let meminfo = "MemTotal:       131072000 kB\nMemAvailable:    1048576 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(1 << 30));
        assert_eq!(
            parse_cgroup_v2("0::/kubepods.slice/pod1\n"),
            Some("/kubepods.slice/pod1".into())
        );
        assert_eq!(parse_cgroup_v2("1:memory:/x\n"), None);
    }

    #[test]
    fn a_chain_goes_up_to_the_root_with_each_levels_limits() {
        let root = tempfile::tempdir().expect("tempdir");
        let pod = root.path().join("pods/job");
        fs::create_dir_all(&pod).expect("dirs");
        fs::write(pod.join("memory.max"), "3221225472\n").expect("max");
        fs::write(pod.join("memory.current"), "1073741824\n").expect("current");
        fs::write(
            pod.join("memory.events"),
            "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
        )
        .expect("events");
        fs::write(root.path().join("pods/memory.max"), "max\n").expect("max");
        let levels = chain(root.path(), "/pods/job");
        let names: Vec<&str> = levels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["/pods/job", "/pods", "/"]);
        assert_eq!(levels[0].max, Some(3 << 30));
        assert_eq!(levels[0].current, Some(1 << 30));
        assert_eq!(levels[1].max, None, "max is no limit");
        assert_eq!(oom_kills(root.path(), "/pods/job"), Some(1));
    }
}
