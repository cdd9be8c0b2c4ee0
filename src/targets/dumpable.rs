//! What in a process tree CRIU cannot dump, read from /proc before any
//! change (docs/guide/pytorch.md, "Checkpointing a PyTorch job"):
//!
//! - a mapping of a GPU device node (`/dev/nvidia0`, `/dev/nvidiactl`,
//!   `/dev/nvidia-uvm`...) in a process that holds no CUDA state: a child
//!   forked after its parent started CUDA (a PyTorch `DataLoader` worker)
//!   inherits some of those mappings, no checkpoint of its own releases
//!   them, and CRIU stops at "Can't handle non-regular mapping";
//! - an io_uring ring (`anon_inode:[io_uring]`), in any process, mapped or
//!   only held as a descriptor (a ring set up with `IORING_SETUP_NO_MMAP`,
//!   or unmapped): CRIU 4.2 stops at "Unknown shit 600
//!   (anon_inode:\[io_uring\])";
//! - a process whose maps or descriptors go on past the caps: it could not
//!   be checked whole, and says so.
//!
//! Read-only. A process that is gone by the time it is read has nothing.

use memchr::memmem;

use crate::targets::process::read_proc_text;
use crate::targets::procfs;

/// The device nodes through which a process reaches an NVIDIA GPU.
const DEVICE_PREFIX: &str = "/dev/nvidia";

/// How /proc names an io_uring ring's mapping.
const IO_URING: &[u8] = b"anon_inode:[io_uring]";

/// What CRIU cannot dump in one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Obstacle {
    /// It maps this GPU device node (the first one its maps list).
    Device(String),
    /// It maps an io_uring ring, or holds one's descriptor.
    IoUring,
    /// Its maps or its descriptors go on past the caps
    /// ([`procfs::MAPS_BYTES_CAP`], [`procfs::FD_CAP`]): not checked whole.
    PastCap,
}

/// A process of the tree and what CRIU cannot dump in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undumpable {
    pub pid: i32,
    pub name: Option<String>,
    pub parent: Option<(i32, Option<String>)>,
    pub obstacle: Obstacle,
    /// The PID of `torch.compile`'s compile-worker pool when this process
    /// is that pool or one of its workers (the pool's command line runs
    /// `torch/_inductor/compile_worker`): the pool reads the GPUs'
    /// properties (so starts CUDA) and forks its workers, and the fix is
    /// the pool's, not a DataLoader's. Read from a command line any
    /// process may write: it chooses the words and the grouping, nothing
    /// else.
    pub compile_pool: Option<i32>,
}

/// What a compile-worker pool's command line holds (its `__main__.py`).
const COMPILE_WORKER: &[u8] = b"/_inductor/compile_worker";
/// A command line is read this far at most.
const CMDLINE_CAP: u64 = 64 << 10;

/// Whether a /proc/PID/cmdline is torch's compile-worker pool (pure).
pub fn is_compile_pool(cmdline: &[u8]) -> bool {
    memmem::find(cmdline, COMPILE_WORKER).is_some()
}

/// Whether `pid` runs torch.compile's compile-worker pool's command line
/// (the pool itself, or one of the workers it forked).
pub fn runs_compile_pool(pid: i32) -> bool {
    crate::files::read_capped_bytes(
        std::path::Path::new(&format!("/proc/{pid}/cmdline")),
        CMDLINE_CAP,
    )
    .is_ok_and(|cmdline| is_compile_pool(&cmdline))
}

/// What in the text of /proc/PID/maps CRIU cannot dump (pure): the first
/// mapping of a file under `device_prefix`, when `device_counts` (the
/// process holds no CUDA state), and any io_uring ring.
pub fn scan(maps: &[u8], device_prefix: &str, device_counts: bool) -> Vec<Obstacle> {
    let mut found = Vec::new();
    if device_counts {
        let device = maps.split(|&b| b == b'\n').find_map(|line| {
            // address perms offset dev inode path: the path is the sixth.
            let path = line
                .splitn(6, |&b| b == b' ')
                .nth(5)
                .map(|p| p.trim_ascii_start())?;
            path.starts_with(device_prefix.as_bytes())
                .then(|| String::from_utf8_lossy(path).into_owned())
        });
        found.extend(device.map(Obstacle::Device));
    }
    if memmem::find(maps, IO_URING).is_some() {
        found.push(Obstacle::IoUring);
    }
    found
}

/// What CRIU cannot dump in each of `pids`. `holds_cuda` says which hold
/// CUDA state (a checkpoint releases their device mappings).
pub fn find(pids: &[i32], holds_cuda: &dyn Fn(i32) -> bool) -> Vec<Undumpable> {
    let prefix = device_prefix();
    let mut found = Vec::new();
    for &pid in pids {
        let Ok(maps) = procfs::read_maps(pid) else {
            continue;
        };
        let mut obstacles = scan(&maps.bytes, &prefix, !holds_cuda(pid));
        let descriptors = io_uring_descriptor(pid);
        if descriptors == Descriptors::IoUring && !obstacles.contains(&Obstacle::IoUring) {
            obstacles.push(Obstacle::IoUring);
        }
        if !maps.complete || descriptors == Descriptors::PastCap {
            obstacles.push(Obstacle::PastCap);
        }
        if obstacles.is_empty() {
            continue;
        }
        let (name, ppid) = name_and_parent(pid);
        let parent = ppid.map(|ppid| (ppid, name_and_parent(ppid).0));
        // A worker is forked from the pool, so runs its command line too:
        // the pool is the highest of the two that runs it.
        let compile_pool = match ppid.filter(|&ppid| runs_compile_pool(ppid)) {
            Some(pool) => Some(pool),
            None => runs_compile_pool(pid).then_some(pid),
        };
        found.extend(obstacles.into_iter().map(|obstacle| Undumpable {
            pid,
            name: name.clone(),
            parent: parent.clone(),
            obstacle,
            compile_pool,
        }));
    }
    found
}

/// What a process's descriptors showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Descriptors {
    /// No io_uring among them (or they could not be read: gone).
    Clear,
    IoUring,
    /// More than [`procfs::FD_CAP`] of them, none an io_uring.
    PastCap,
}

/// Whether `pid` holds an io_uring descriptor (`/proc/PID/fd/N` reads
/// `anon_inode:[io_uring]`), looking at [`procfs::FD_CAP`] descriptors at most.
fn io_uring_descriptor(pid: i32) -> Descriptors {
    match procfs::find_fd_link(pid, |link| link == IO_URING) {
        procfs::FdLink::Found(_) => Descriptors::IoUring,
        procfs::FdLink::None => Descriptors::Clear,
        procfs::FdLink::PastCap => Descriptors::PastCap,
    }
}

/// A process's name and parent, from /proc/PID/stat.
/// Whether `pid` is a compile-worker pool itself, not one of its workers
/// (which run its command line too, as its children).
pub fn is_pool_process(pid: i32) -> bool {
    runs_compile_pool(pid) && !pool_owner(pid).is_some_and(runs_compile_pool)
}

/// The process that started a compile-worker pool (its parent): the one
/// whose drain can shut the pool down.
pub fn pool_owner(pool: i32) -> Option<i32> {
    name_and_parent(pool).1
}

fn name_and_parent(pid: i32) -> (Option<String>, Option<i32>) {
    let Ok(stat) = read_proc_text(&format!("/proc/{pid}/stat")) else {
        return (None, None);
    };
    let name = stat
        .find('(')
        .zip(stat.rfind(')'))
        .filter(|(open, close)| open < close)
        .map(|(open, close)| stat[open + 1..close].to_string());
    (name, crate::targets::discover::parse_ppid(&stat))
}

/// The GPU device nodes' prefix. A debug build takes another from
/// `CUDACKPT_DEBUG_DEVICE_PREFIX`, so that tests without a GPU can stand a
/// file in for `/dev/nvidia0`; release builds read no variable.
fn device_prefix() -> String {
    crate::environment::debug(crate::environment::DEBUG_DEVICE_PREFIX).map_or_else(
        || DEVICE_PREFIX.to_string(),
        |prefix| prefix.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKER: &[u8] =
        b"7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
200600000-200800000 rw-s 00000000 00:05 780 /dev/nvidia0
7f40-7f50 rw-s 00000000 00:05 781 /dev/nvidiactl
";

    #[test]
    fn a_device_node_counts_only_without_cuda_state() {
        assert_eq!(
            scan(WORKER, DEVICE_PREFIX, true),
            [Obstacle::Device("/dev/nvidia0".to_string())]
        );
        assert_eq!(scan(WORKER, DEVICE_PREFIX, false), []);
    }

    #[test]
    fn only_a_mapped_path_counts_not_a_name_that_merely_mentions_it() {
        let maps = b"7f00-7f10 r--p 00000000 08:01 1 /home/u/dev/nvidia0-notes.txt
7f20-7f30 rw-p 00000000 00:00 0 [heap]
7f30-7f40 r--p 00000000 08:01 2 /tmp/x /dev/nvidia0
";
        assert_eq!(scan(maps, DEVICE_PREFIX, true), []);
        assert_eq!(scan(b"", DEVICE_PREFIX, true), []);
    }

    #[test]
    fn an_io_uring_ring_counts_in_any_process() {
        let maps =
            b"7f00-7f01 rw-s 00000000 00:10 1037166                    anon_inode:[io_uring]\n";
        assert_eq!(scan(maps, DEVICE_PREFIX, false), [Obstacle::IoUring]);
        let mut both = WORKER.to_vec();
        both.extend_from_slice(maps);
        assert_eq!(
            scan(&both, DEVICE_PREFIX, true),
            [
                Obstacle::Device("/dev/nvidia0".to_string()),
                Obstacle::IoUring
            ]
        );
    }

    #[test]
    fn the_compile_worker_pool_is_known_by_its_command_line() {
        let pool = b"/usr/bin/python3\0/usr/lib/python3/dist-packages/torch/_inductor/compile_worker/__main__.py\0--pickler=x\0--kind=fork\0";
        assert!(is_compile_pool(pool));
        assert!(!is_compile_pool(b"python3\0train.py\0--workers\0"));
        assert!(!is_compile_pool(b""));
    }

    #[test]
    fn this_process_is_named_with_its_parent() {
        let me = std::process::id() as i32;
        let (name, ppid) = name_and_parent(me);
        assert!(name.is_some_and(|n| !n.is_empty()));
        assert_eq!(
            ppid,
            Some(rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()))
        );
        assert_eq!(find(&[me], &|_| false), []);
    }
}
