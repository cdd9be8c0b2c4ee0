//! Host memory a checkpoint needs: the driver copies a process's device
//! memory into that process's own host memory, charged to its memory cgroup
//! (docs/driver-facts.md, F5: a process holding 6 GiB of device memory in a cgroup with
//! `memory.max` 3 GiB is OOM-killed during `suspend`). Here: what the host
//! has (`MemAvailable`), and the memory cgroup chain of a process with each
//! level's limits and use: cgroup v2 (`memory.max`, `memory.high`), or on
//! hosts whose memory controller is still on cgroup v1 (older
//! distributions and Kubernetes nodes) the v1 memory hierarchy
//! (`memory.limit_in_bytes`). Read-only.

use std::path::{Path, PathBuf};

use crate::files;
use crate::targets::cgroup::{self, CgroupError};
use crate::targets::discover;

/// Which cgroup hierarchy holds a process's memory controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hierarchy {
    #[default]
    V2,
    V1,
}

impl Hierarchy {
    /// The file of the hard limit, as people and messages name it.
    pub fn max_file(self) -> &'static str {
        match self {
            Hierarchy::V2 => "memory.max",
            Hierarchy::V1 => "memory.limit_in_bytes",
        }
    }

    /// The file that counts OOM kills.
    pub fn events_file(self) -> &'static str {
        match self {
            Hierarchy::V2 => "memory.events",
            Hierarchy::V1 => "memory.oom_control",
        }
    }

    fn current_file(self) -> &'static str {
        match self {
            Hierarchy::V2 => "memory.current",
            Hierarchy::V1 => "memory.usage_in_bytes",
        }
    }
}

/// One cgroup of a process's chain, with what its memory files say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupLevel {
    /// As /proc/PID/cgroup names it (`/` is the root).
    pub name: String,
    /// The hard limit (`memory.max`, v1 `memory.limit_in_bytes`); `None`
    /// when unlimited or unreadable.
    pub max: Option<u64>,
    /// `memory.high` (v2 only); `None` when unlimited or unreadable.
    pub high: Option<u64>,
    /// `memory.current` (v1 `memory.usage_in_bytes`).
    pub current: Option<u64>,
    pub hierarchy: Hierarchy,
}

/// Where a process's memory is accounted: a hierarchy's mount and the
/// cgroup's name in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub hierarchy: Hierarchy,
    pub root: PathBuf,
    pub name: String,
}

impl Placement {
    /// The cgroup's directory.
    pub fn dir(&self) -> PathBuf {
        self.root.join(self.name.trim_start_matches('/'))
    }

    /// The cgroup's chain, its own level first, up to the root.
    pub fn chain(&self) -> Vec<CgroupLevel> {
        let mut levels = Vec::new();
        let mut level = self.clone();
        let hierarchy = self.hierarchy;
        loop {
            let dir = level.dir();
            levels.push(CgroupLevel {
                max: limit(&dir.join(hierarchy.max_file())),
                high: match hierarchy {
                    Hierarchy::V2 => limit(&dir.join("memory.high")),
                    // v1's soft limit only reclaims; nothing throttles or kills.
                    Hierarchy::V1 => None,
                },
                current: limit(&dir.join(hierarchy.current_file())),
                hierarchy,
                name: level.name.clone(),
            });
            match Path::new(&level.name).parent() {
                Some(parent) if level.name != "/" => level.name = parent.display().to_string(),
                _ => return levels,
            }
        }
    }

    /// How many OOM kills the cgroup has counted.
    pub fn oom_kills(&self) -> Option<u64> {
        parse_oom_kills(&read_small(&self.dir().join(self.hierarchy.events_file()))?)
    }
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

/// Where `pid`'s memory is accounted: its cgroup v2 when the memory
/// controller is enabled there, else its cgroup in the v1 memory
/// hierarchy, if this host mounts one. With the tests' stand-in for the v2
/// mount (debug builds), v2 only.
pub fn placement_of(pid: i32) -> Option<Placement> {
    let own = read_small(Path::new(&format!("/proc/{pid}/cgroup")))?;
    let v2 = cgroup::v2_root()
        .zip(parse_cgroup_v2(&own))
        .map(|(root, name)| Placement {
            hierarchy: Hierarchy::V2,
            root,
            name,
        });
    let governs_memory = |p: &Placement| p.dir().join("memory.max").exists();
    if v2.as_ref().is_some_and(governs_memory) || cgroup::debug_tree().is_some() {
        return v2;
    }
    let v1 = v1_memory_hierarchy().zip(parse_cgroup_v1_memory(&own)).map(
        |((mount_root, mount_point), name)| Placement {
            hierarchy: Hierarchy::V1,
            name: under_mount(&name, &mount_root),
            root: mount_point,
        },
    );
    v1.or(v2)
}

/// Which hierarchy a cgroup directory belongs to, and its name there: under
/// the cgroup v2 mount, or under the v1 memory hierarchy's.
pub fn placement_of_dir(dir: &Path) -> Result<Placement, CgroupError> {
    let dir = dir
        .canonicalize()
        .map_err(|e| CgroupError::unreadable(dir, format!("cannot be resolved: {e}")))?;
    let v1 = v1_memory_hierarchy().map(|(_, mount_point)| (Hierarchy::V1, mount_point));
    let v2 = cgroup::v2_root().map(|root| (Hierarchy::V2, root));
    [v2, v1]
        .into_iter()
        .flatten()
        .find_map(|(hierarchy, root)| {
            let root = root.canonicalize().ok()?;
            let relative = dir.strip_prefix(&root).ok()?;
            Some(Placement {
                hierarchy,
                name: format!("/{}", relative.display()),
                root,
            })
        })
        .ok_or(CgroupError::NoMemoryHierarchy(dir))
}

/// This host's v1 memory hierarchy, if it mounts one: the root it shows
/// and where it is mounted.
pub fn v1_memory_hierarchy() -> Option<(String, PathBuf)> {
    v1_memory_mount(discover::mountinfo()?)
}

/// The `N:...memory...:/path` line of /proc/PID/cgroup (pure).
pub fn parse_cgroup_v1_memory(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    })
}

/// The v1 memory hierarchy's mount from /proc/self/mountinfo (pure): the
/// root of the hierarchy it shows (not `/` inside some containers) and
/// where it is mounted.
pub fn v1_memory_mount(mountinfo: &str) -> Option<(String, PathBuf)> {
    discover::mounts(mountinfo)
        .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "memory"))
        .map(|m| (m.root.to_string(), PathBuf::from(m.point)))
}

/// A cgroup's name relative to a mount whose root is `mount_root` (pure):
/// `/docker/abc` seen through a mount of `/docker/abc` is its `/`.
fn under_mount(name: &str, mount_root: &str) -> String {
    if mount_root == "/" {
        return name.to_string();
    }
    match name.strip_prefix(mount_root) {
        Some("") => "/".to_string(),
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        _ => name.to_string(),
    }
}

/// `oom_kill N` in `memory.events` (v2) or `memory.oom_control` (v1) (pure).
pub fn parse_oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
}

/// The `0::` line of /proc/PID/cgroup (pure).
pub fn parse_cgroup_v2(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_string)
}

/// The chain of cgroups of `pid`, its own first, up to the root, with their
/// limits; empty when no memory cgroup is found.
pub fn chain_of(pid: i32) -> Vec<CgroupLevel> {
    placement_of(pid).map_or_else(Vec::new, |p| p.chain())
}

/// v1 writes "no limit" as the largest page-aligned number (about 2^63).
const V1_UNLIMITED: u64 = 1 << 62;

/// A memory file's number; `max` (no limit), v1's near-2^63 (no limit) and
/// unreadable are `None`.
fn limit(path: &Path) -> Option<u64> {
    read_small(path)?
        .trim()
        .parse()
        .ok()
        .filter(|&bytes| bytes < V1_UNLIMITED)
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
    fn the_v1_memory_hierarchy_is_found_from_mountinfo_and_proc_cgroup() {
        let mountinfo = "\
35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
36 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
37 25 0:32 /docker/abc /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";
        let cgroup2 = discover::mounts(mountinfo).find(|m| m.fstype == "cgroup2");
        assert_eq!(cgroup2.map(|m| m.point), Some("/sys/fs/cgroup/unified"));
        let (mount_root, mount_point) = v1_memory_mount(mountinfo).expect("the memory mount");
        assert_eq!(mount_root, "/docker/abc");
        assert_eq!(mount_point, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(
            v1_memory_mount("36 25 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"),
            None,
            "another controller's hierarchy is not memory's"
        );
        let own = "12:pids:/user.slice\n9:memory:/docker/abc/job\n0::/\n";
        let name = parse_cgroup_v1_memory(own).expect("memory line");
        assert_eq!(name, "/docker/abc/job");
        assert_eq!(under_mount(&name, &mount_root), "/job");
        assert_eq!(under_mount("/docker/abc", "/docker/abc"), "/");
        assert_eq!(
            under_mount("/docker/abcdef", "/docker/abc"),
            "/docker/abcdef"
        );
        assert_eq!(under_mount("/x", "/"), "/x");
        assert_eq!(parse_cgroup_v1_memory("5:cpu,cpuacct:/a\n0::/b\n"), None);
    }

    #[test]
    fn a_v1_chain_reads_limit_in_bytes_and_no_limit_is_none() {
        let root = tempfile::tempdir().expect("tempdir");
        let job = root.path().join("job");
        fs::create_dir(&job).expect("dirs");
        fs::write(job.join("memory.limit_in_bytes"), "1073741824\n").expect("limit");
        fs::write(job.join("memory.usage_in_bytes"), "4096\n").expect("usage");
        fs::write(
            root.path().join("memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .expect("unlimited");
        let placement = Placement {
            hierarchy: Hierarchy::V1,
            root: root.path().to_path_buf(),
            name: "/job".into(),
        };
        let levels = placement.chain();
        assert_eq!(levels.len(), 2);
        assert_eq!(levels[0].max, Some(1 << 30));
        assert_eq!(levels[0].current, Some(4096));
        assert_eq!(levels[0].high, None);
        assert_eq!(levels[1].max, None, "v1's near-2^63 is no limit");
        fs::write(
            job.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .expect("oom_control");
        assert_eq!(placement.oom_kills(), Some(3));
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
        let placement = Placement {
            hierarchy: Hierarchy::V2,
            root: root.path().to_path_buf(),
            name: "/pods/job".into(),
        };
        let levels = placement.chain();
        let names: Vec<&str> = levels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["/pods/job", "/pods", "/"]);
        assert_eq!(levels[0].max, Some(3 << 30));
        assert_eq!(levels[0].current, Some(1 << 30));
        assert_eq!(levels[1].max, None, "max is no limit");
        assert_eq!(placement.oom_kills(), Some(1));
    }
}
