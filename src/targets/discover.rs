//! Finding processes, read-only: every process on the host, a process tree
//! (a cgroup's members are `cgroup`'s), the mounts, and which of them have the CUDA driver (or NCCL)
//! mapped. Nothing here talks to the driver or changes any process; the
//! caller confirms candidates with the driver's read-only GetState.
//! Processes that vanish mid-scan are skipped.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;

use memchr::memmem;

use crate::targets::procfs;

/// Every PID in /proc, ascending.
pub fn all_pids() -> Vec<i32> {
    let mut pids: Vec<i32> = fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// The parent PID (field 4) from the text of `/proc/PID/stat`.
pub fn parse_ppid(stat: &str) -> Option<i32> {
    crate::targets::process::stat_fields(stat)?
        .nth(1)?
        .parse()
        .ok()
}

/// Every process of the trees of `roots`, each once, in PID order. Read
/// from each task's `children` file, so the cost follows the trees, not
/// the host: a Kubernetes node runs thousands of processes, and a scan of
/// /proc reads every one's `stat`. Where the kernel has no such file
/// (built without CONFIG_PROC_CHILDREN), or a process has more threads
/// than [`TASKS_CAP`], or a list runs past [`CHILDREN_CAP`], one scan of
/// /proc however many roots, as before.
pub fn trees(roots: &[i32]) -> Vec<i32> {
    if roots.is_empty() {
        return Vec::new();
    }
    let listed = |pid| children_listed(pid, TASKS_CAP);
    let mut pids = walk(roots, &listed).unwrap_or_else(|| {
        let children = children();
        roots
            .iter()
            .flat_map(|&root| descendants(root, &children))
            .collect()
    });
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Walks the trees of `roots`, each root and each process below it once,
/// asking `children_of` for each one's children (pure given it); `None` as
/// soon as `children_of` cannot tell.
fn walk(roots: &[i32], children_of: &dyn Fn(i32) -> Option<Vec<i32>>) -> Option<Vec<i32>> {
    // Processes come and go as the files are read, and a PID can be reused
    // by a new child of its old descendant: visit each PID once.
    let mut seen = std::collections::HashSet::new();
    let mut found: Vec<i32> = roots.iter().copied().filter(|&r| seen.insert(r)).collect();
    let mut next = 0;
    while next < found.len() {
        let kids = children_of(found[next])?;
        found.extend(kids.into_iter().filter(|&kid| seen.insert(kid)));
        next += 1;
    }
    Some(found)
}

/// The most a task's `children` file is read: PIDs of up to seven digits
/// and a space, for some 130,000 children. Past it, the scan of /proc.
const CHILDREN_CAP: u64 = 1 << 20;

/// The most threads of one process whose `children` files are read: a
/// process of the tree may start as many as its limits allow, and a file
/// each would cost more than the scan of /proc, which reads one a process.
const TASKS_CAP: usize = 4096;

/// `pid`'s children, as its tasks' `children` files list them (a child is
/// listed under the thread that started it); none for a process that has
/// gone; `None` when the kernel has no such file, or the process has more
/// than `tasks_cap` threads, or a list runs past [`CHILDREN_CAP`].
fn children_listed(pid: i32, tasks_cap: usize) -> Option<Vec<i32>> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Some(Vec::new());
    };
    let mut kids = Vec::new();
    for (seen, task) in tasks.flatten().enumerate() {
        if seen == tasks_cap {
            return None;
        }
        let file = format!(
            "/proc/{pid}/task/{}/children",
            task.file_name().to_string_lossy()
        );
        // One line, however many children: only the byte cap binds.
        match procfs::read_lines(&file, CHILDREN_CAP, usize::MAX) {
            Ok(list) if !list.complete => return None,
            Ok(list) => kids.extend(
                list.bytes
                    .split(u8::is_ascii_whitespace)
                    .filter_map(|word| std::str::from_utf8(word).ok()?.parse::<i32>().ok()),
            ),
            // No file in a task that is still there: the kernel lists no
            // children. A task that ended took its file with it.
            Err(e) if e.kind() == io::ErrorKind::NotFound && task.path().exists() => return None,
            Err(_) => {}
        }
    }
    Some(kids)
}

/// Each process's children, from one scan of /proc.
fn children() -> HashMap<i32, Vec<i32>> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for pid in all_pids() {
        if let Some(ppid) = crate::targets::process::read_proc_text(&format!("/proc/{pid}/stat"))
            .ok()
            .as_deref()
            .and_then(parse_ppid)
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    children
}

/// Walks a parent → children map from `root` (pure, for tests).
pub fn descendants(root: i32, children: &HashMap<i32, Vec<i32>>) -> Vec<i32> {
    // A snapshot of /proc taken while processes come and go can hold a
    // cycle (a PID reused by a new child of its old descendant): visit each
    // PID once.
    let mut seen = std::collections::HashSet::from([root]);
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        if let Some(kids) = children.get(&parent) {
            found.extend(kids.iter().filter(|&&kid| seen.insert(kid)));
        }
        next += 1;
    }
    found[1..].sort_unstable();
    found.dedup();
    found
}

/// /proc/self/mountinfo can be long: a Kubernetes node has thousands of
/// mounts.
const MOUNTINFO_CAP: u64 = 16 << 20;

/// This process's /proc/self/mountinfo, read once: the mounts do not
/// change under a command, and every target's cgroup lookup needs them.
pub fn mountinfo() -> Option<&'static str> {
    static TEXT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        crate::files::read_capped(Path::new("/proc/self/mountinfo"), MOUNTINFO_CAP).ok()
    })
    .as_deref()
}

/// What the cgroup lookups need of one mountinfo line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mount<'a> {
    /// The root of the mounted filesystem that this mount shows (not `/`
    /// for a cgroup hierarchy seen from inside some containers).
    pub root: &'a str,
    /// Where it is mounted.
    pub point: &'a str,
    /// Its filesystem type (`cgroup2`).
    pub fstype: &'a str,
    /// The filesystem's own options (a v1 cgroup's controllers).
    pub options: &'a str,
}

/// The mounts a mountinfo text lists (pure).
pub fn mounts(mountinfo: &str) -> impl Iterator<Item = Mount<'_>> {
    mountinfo.lines().filter_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut before = before.split_whitespace();
        let (root, point) = (before.nth(3)?, before.next()?);
        let mut after = after.split_whitespace();
        let fstype = after.next()?;
        let options = after.nth(1).unwrap_or("");
        Some(Mount {
            root,
            point,
            fstype,
            options,
        })
    })
}

/// What a process has mapped that matters here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mapped {
    pub cuda: bool,
    pub nccl: bool,
}

/// Looks for the CUDA driver and NCCL in the text of `/proc/PID/maps`.
/// `driver_file` is the file name of the driver cudackpt loaded, which
/// counts too (e.g. a driver outside the usual name given by `--libcuda`).
pub fn scan_maps(maps: &[u8], driver_file: Option<&str>) -> Mapped {
    let cuda = memmem::find(maps, b"/libcuda.so").is_some()
        || driver_file
            .is_some_and(|name| memmem::find(maps, format!("/{name}").as_bytes()).is_some());
    Mapped {
        cuda,
        nccl: memmem::find(maps, b"/libnccl").is_some(),
    }
}

/// Reads `/proc/PID/maps` and scans it; `None` when the process is gone or
/// its maps cannot be read. Past the cap ([`procfs::MAPS_BYTES_CAP`]),
/// what the part read shows.
pub fn mapped(pid: i32, driver_file: Option<&str>) -> Option<Mapped> {
    match inspect(pid, driver_file) {
        Inspected::Seen { mapped, .. } => Some(mapped),
        Inspected::Gone | Inspected::Unreadable => None,
    }
}

/// What a scan of many processes' maps found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The processes with the CUDA driver mapped, with their maps, by PID.
    pub found: Vec<(i32, Mapped)>,
    /// The processes whose maps this caller may not read (other users'
    /// processes, without root or CAP_SYS_PTRACE), in PID order: they could
    /// not be inspected, and a CUDA process among them would go unseen.
    pub unreadable: Vec<i32>,
    /// The processes whose maps go on past the cap with no CUDA driver in
    /// the part read, in PID order: not inspected whole, and named.
    pub past_cap: Vec<i32>,
}

/// What one process's maps showed.
enum Inspected {
    Gone,
    Unreadable,
    /// `complete` is false when the maps went on past the cap.
    Seen {
        mapped: Mapped,
        complete: bool,
    },
}

fn inspect(pid: i32, driver_file: Option<&str>) -> Inspected {
    match procfs::read_maps(pid) {
        Ok(maps) => Inspected::Seen {
            mapped: scan_maps(&maps.bytes, driver_file),
            complete: maps.complete,
        },
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Inspected::Unreadable,
        Err(_) => Inspected::Gone,
    }
}

/// The PIDs among `pids` that have the CUDA driver mapped, with their maps,
/// in PID order, and those that could not be inspected. Reading thousands of
/// maps files is system time, so the scan is split across up to 8 threads,
/// each taking every Nth PID: the processes a user started together (with
/// neighbouring PIDs, and maps up to the cap) are spread over all of them.
pub fn cuda_candidates(pids: &[i32], driver_file: Option<&str>) -> Scan {
    let own = std::process::id() as i32;
    let scan = |chunk: &[i32]| -> Scan {
        let mut result = Scan::default();
        for &pid in chunk.iter().filter(|&&pid| pid != own) {
            match inspect(pid, driver_file) {
                Inspected::Seen { mapped, .. } if mapped.cuda => result.found.push((pid, mapped)),
                Inspected::Seen {
                    complete: false, ..
                } => result.past_cap.push(pid),
                Inspected::Seen { .. } | Inspected::Gone => {}
                Inspected::Unreadable => result.unreadable.push(pid),
            }
        }
        result
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    if pids.len() < 8 || threads == 1 {
        return scan(pids);
    }
    let chunks: Vec<Vec<i32>> = (0..threads)
        .map(|first| pids.iter().skip(first).step_by(threads).copied().collect())
        .collect();
    let scan = &scan;
    std::thread::scope(|scope| {
        // A pids limit (systemd's TasksMax, a container's pids.max) may
        // refuse a thread: that chunk is then scanned here, not a panic.
        let parts: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || scan(chunk))
                    .map_err(|_| chunk)
            })
            .collect();
        parts
            .into_iter()
            .map(|part| match part {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(chunk) => scan(chunk),
            })
            .fold(Scan::default(), |mut all, part| {
                all.found.extend(part.found);
                all.unreadable.extend(part.unreadable);
                all.past_cap.extend(part.past_cap);
                all
            })
    })
    .in_pid_order()
}

impl Scan {
    fn in_pid_order(mut self) -> Scan {
        self.found.sort_unstable_by_key(|(pid, _)| *pid);
        self.unreadable.sort_unstable();
        self.past_cap.sort_unstable();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_in_a_racy_snapshot_ends() {
        let children = HashMap::from([(1, vec![2]), (2, vec![3]), (3, vec![2, 1])]);
        assert_eq!(descendants(1, &children), [1, 2, 3]);
    }

    #[test]
    fn parent_pids_survive_odd_command_names() {
        assert_eq!(parse_ppid("42 (python3) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parse_ppid("42 (a) b (c)) R 9 1 1"), Some(9));
        assert_eq!(parse_ppid("garbage"), None);
    }

    /// A parent → children map of two trees, 1 and 99.
    fn family() -> HashMap<i32, Vec<i32>> {
        [
            (1, vec![10, 20]),
            (10, vec![11, 12]),
            (12, vec![13]),
            (20, vec![]),
            (99, vec![100]),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn a_tree_is_its_root_and_every_descendant() {
        let children = family();
        assert_eq!(descendants(10, &children), vec![10, 11, 12, 13]);
        assert_eq!(descendants(1, &children), vec![1, 10, 11, 12, 13, 20]);
        assert_eq!(descendants(13, &children), vec![13]);
    }

    #[test]
    fn maps_reveal_cuda_and_nccl() {
        let maps = b"7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n7f20-7f30 r-xp 0 08:01 2 /opt/venv/nvidia/nccl/lib/libnccl.so.2\n";
        assert_eq!(
            scan_maps(maps, None),
            Mapped {
                cuda: true,
                nccl: true
            }
        );
        let fake = b"7f00-7f10 r-xp 0 08:01 1 /work/target/debug/libfake_libcuda.so\n";
        assert_eq!(scan_maps(fake, None), Mapped::default());
        assert!(scan_maps(fake, Some("libfake_libcuda.so")).cuda);
        assert_eq!(scan_maps(b"", Some("libcuda.so.1")), Mapped::default());
    }

    #[test]
    fn a_walk_finds_what_the_scan_finds_and_gives_way_when_it_cannot_tell() {
        let children = family();
        let listed = |pid| Some(children.get(&pid).cloned().unwrap_or_default());
        let mut walked = walk(&[10, 1], &listed).expect("every list read");
        walked.sort_unstable();
        assert_eq!(walked, descendants(1, &children));
        assert_eq!(
            walk(&[77], &listed),
            Some(vec![77]),
            "a root that has gone is itself"
        );
        let cannot_tell =
            |pid| (pid != 12).then(|| children.get(&pid).cloned().unwrap_or_default());
        assert_eq!(walk(&[1], &cannot_tell), None);
        // A PID reused while the files are read can close a loop.
        let looped = |pid| {
            Some(if pid == 13 {
                vec![12, 10]
            } else {
                children.get(&pid).cloned().unwrap_or_default()
            })
        };
        let mut walked = walk(&[1], &looped).expect("every list read");
        walked.sort_unstable();
        assert_eq!(walked, descendants(1, &children));
    }

    #[test]
    fn a_live_tree_is_the_same_read_from_its_children_files_or_a_scan() {
        // A session of its own, so that killing its group ends every one.
        let mut shell = std::process::Command::new("setsid")
            .args(["sh", "-c", "sleep 30 & (sleep 30 & wait) & wait"])
            .spawn()
            .expect("setsid sh");
        let root = shell.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let scanned = loop {
            let mut scanned = descendants(root, &children());
            scanned.sort_unstable();
            if scanned.len() == 4 || std::time::Instant::now() > deadline {
                break scanned;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let listed = |pid| children_listed(pid, TASKS_CAP);
        let mut walked = walk(&[root], &listed).expect("this kernel lists children");
        walked.sort_unstable();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{root}")])
            .status();
        let _ = shell.wait();
        assert_eq!(
            scanned.len(),
            4,
            "sh, sleep, a subshell and its sleep: {scanned:?}"
        );
        assert_eq!(walked, scanned);
    }

    #[test]
    fn a_process_with_more_threads_than_the_cap_sends_the_walk_to_the_scan() {
        let (hold, wait) = std::sync::mpsc::channel::<()>();
        let second = std::thread::spawn(move || wait.recv());
        let me = std::process::id() as i32;
        assert!(children_listed(me, TASKS_CAP).is_some());
        assert_eq!(children_listed(me, 1), None, "two threads, a cap of one");
        drop(hold);
        let _ = second.join();
    }

    #[test]
    fn this_process_tree_is_found_and_is_not_cuda() {
        let me = std::process::id() as i32;
        let found = trees(&[me]);
        assert!(found.contains(&me), "{found:?}");
        assert!(
            found.windows(2).all(|w| w[0] < w[1]),
            "in PID order: {found:?}"
        );
        assert_eq!(trees(&[me, me]), trees(&[me]), "each process once");
        assert_eq!(trees(&[]), Vec::<i32>::new());
        assert!(all_pids().contains(&me));
        assert!(
            cuda_candidates(&[me], None).found.is_empty(),
            "never itself"
        );
    }
}
