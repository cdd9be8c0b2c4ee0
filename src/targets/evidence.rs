//! What /proc shows about a process that decides whether the driver can
//! restore it after a checkpoint (docs/driver-facts.md, F4):
//!
//! - CUDA IPC: a process that exported or imported device memory maps a
//!   driver file `/dev/shm/cuda.shm.<n>.<exporter pid, hex>.<n>`;
//! - a rank of a multi-process NCCL job: PyTorch's `pt_nccl_*` threads
//!   (`pt_nccl_watchdg`, `pt_nccl_heartbt`: a live process group), or a
//!   launcher's world size above 1 in its
//!   environment (`WORLD_SIZE`, `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`,
//!   `SLURM_NTASKS`), and whether its environment disables NCCL's P2P and
//!   SHM transports (the socket transport is the one that round-trips).
//!
//! Read-only, and capped: a process's environment is its own to fill.

use std::fs;

use memchr::memmem;

use crate::files;
use crate::targets::namespace;
use crate::targets::procfs;

/// The prefix of the threads PyTorch starts for a live NCCL process group
/// (`pt_nccl_watchdg`, `pt_nccl_heartbt`); a group torn down has none.
pub const NCCL_THREAD_PREFIX: &str = "pt_nccl_";

/// A thread name is 15 bytes and a newline; anything longer is not one.
const COMM_CAP: u64 = 64;

/// Launcher variables that give a job's world size.
pub const WORLD_SIZE_VARS: [&str; 4] = [
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "SLURM_NTASKS",
];

/// The prefix of the driver's CUDA IPC files.
const IPC_PREFIX: &[u8] = b"/dev/shm/cuda.shm.";

/// An environment is rarely more than a few KiB; a larger one is cut.
const ENVIRON_CAP: u64 = 1 << 20;

/// One CUDA IPC file a process maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcFile {
    pub path: String,
    /// The process that exported the memory, from the file name: a PID of
    /// the PID namespace of the process that maps it.
    pub exporter: Option<i32>,
    /// The file's device and inode, from its maps line: the same file
    /// whatever a mount namespace calls it.
    pub id: Option<(String, u64)>,
}

/// Who a process shares CUDA IPC memory with, by host PID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpcPeers {
    /// It exported the memory (a file names it as the exporter).
    pub exports: bool,
    /// Its exporter, or the processes that import from it.
    pub pids: Vec<i32>,
    /// Exporters named in its own PID namespace that no process there is
    /// now (by that namespace's PID).
    pub unresolved: Vec<i32>,
}

/// Why a process looks like a rank of a multi-process NCCL job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankSign {
    /// One of PyTorch's NCCL threads, by its thread id and name.
    NcclThread { tid: i32, name: String },
    /// A launcher's world size above 1.
    WorldSize { var: String, size: u64 },
}

/// Everything /proc shows that bears on restorability.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    pub ipc_files: Vec<IpcFile>,
    /// The host PIDs behind the IPC files' names.
    pub ipc_peers: IpcPeers,
    pub rank_signs: Vec<RankSign>,
    /// `NCCL_P2P_DISABLE` and `NCCL_SHM_DISABLE` both set to 1.
    pub socket_transport_only: bool,
    /// Every thread, by id and name (a drained process names one with the
    /// drain protocol's marker).
    pub threads: Vec<(i32, String)>,
    /// Its maps go on past [`procfs::MAPS_BYTES_CAP`] (or the line cap),
    /// or it has more than [`TASKS_CAP`] threads: what lies past the cap
    /// was not looked at.
    pub past_cap: bool,
}

impl Evidence {
    pub fn is_ipc_party(&self) -> bool {
        !self.ipc_files.is_empty()
    }
}

/// Gathers the evidence for `pid`; what cannot be read is left out.
pub fn gather(pid: i32) -> Evidence {
    // Gone or unreadable maps show nothing, and nothing is past a cap.
    let procfs::Lines {
        bytes: maps,
        complete: maps_complete,
    } = procfs::read_maps(pid).unwrap_or(procfs::Lines {
        bytes: Vec::new(),
        complete: true,
    });
    let environ = files::read_capped_bytes(
        std::path::Path::new(&format!("/proc/{pid}/environ")),
        ENVIRON_CAP,
    )
    .unwrap_or_default();
    let (threads, threads_past_cap) = threads_capped(pid);
    let mut rank_signs: Vec<RankSign> = threads
        .iter()
        .filter(|(_, name)| name.starts_with(NCCL_THREAD_PREFIX))
        .map(|(tid, name)| RankSign::NcclThread {
            tid: *tid,
            name: name.clone(),
        })
        .collect();
    // A rank's compile workers (torch.compile's pool and the workers it
    // forks) carry their launcher's environment but are no rank: they
    // hold no communicator, and the pool starts CUDA to read the GPUs'
    // properties. An NCCL thread would still count.
    if !super::dumpable::runs_compile_pool(pid) {
        rank_signs.extend(world_sizes(&environ));
    }
    let ipc_files = ipc_files(&maps);
    let ipc_peers = if ipc_files.is_empty() {
        IpcPeers::default()
    } else {
        ipc_peers(pid, &ipc_files)
    };
    Evidence {
        ipc_files,
        ipc_peers,
        rank_signs,
        socket_transport_only: env_is(&environ, "NCCL_P2P_DISABLE", "1")
            && env_is(&environ, "NCCL_SHM_DISABLE", "1"),
        threads,
        past_cap: !maps_complete || threads_past_cap,
    }
}

/// The CUDA IPC files in the text of /proc/PID/maps (pure).
pub fn ipc_files(maps: &[u8]) -> Vec<IpcFile> {
    let mut found: Vec<IpcFile> = Vec::new();
    for at in memmem::find_iter(maps, IPC_PREFIX) {
        let end = maps[at..]
            .iter()
            .position(|&b| b == b'\n' || b == b' ')
            .map_or(maps.len(), |n| at + n);
        let path = String::from_utf8_lossy(&maps[at..end]).into_owned();
        if found.iter().any(|f| f.path == path) {
            continue;
        }
        // cuda.shm.<n>.<exporter pid in hex>.<n>
        let exporter = path[IPC_PREFIX.len()..]
            .split('.')
            .nth(1)
            .and_then(|hex| i32::from_str_radix(hex, 16).ok());
        // The line: address perms offset dev inode path.
        let line_start = maps[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |n| n + 1);
        let line = String::from_utf8_lossy(&maps[line_start..at]).into_owned();
        let fields: Vec<&str> = line.split_whitespace().collect();
        let id = match fields[..] {
            [_, _, _, dev, inode, ..] => inode.parse().ok().map(|inode| (dev.to_string(), inode)),
            _ => None,
        };
        found.push(IpcFile { path, exporter, id });
    }
    found
}

/// Who `pid` shares its IPC files with, by host PID. A file's name holds
/// the exporter's PID in the namespace of the process that maps it: when
/// that is `pid`'s own, `pid` is the exporter, and its importers are the
/// processes of its PID namespace that map the same file; otherwise the
/// exporter is the process of its namespace with that PID.
pub fn ipc_peers(pid: i32, files: &[IpcFile]) -> IpcPeers {
    let Some(space) = namespace::pid_namespace(pid) else {
        // Unreadable: the names are all there is.
        return IpcPeers {
            pids: files
                .iter()
                .filter_map(|f| f.exporter)
                .filter(|&e| e != pid)
                .collect(),
            ..IpcPeers::default()
        };
    };
    let own = namespace::own_pid(pid);
    // In the host's namespace a name's PID is the host's: kept as named
    // even when that process has gone.
    let nested = own != pid;
    let mut peers = IpcPeers::default();
    for file in files {
        match file.exporter {
            Some(exporter) if exporter == own => {
                peers.exports = true;
                let importers =
                    namespace::processes_in(&space, |host, _| host != pid && maps_file(host, file));
                peers.pids.extend(importers);
            }
            Some(exporter) if !nested => peers.pids.push(exporter),
            Some(exporter) => match namespace::host_pid(&space, exporter) {
                Some(host) => peers.pids.push(host),
                None => peers.unresolved.push(exporter),
            },
            None => {}
        }
    }
    peers.pids.sort_unstable();
    peers.pids.dedup();
    peers
}

/// Whether `pid` maps `file` (the same device and inode, else the same path).
/// Any process of the namespace is read here, so its maps are read capped.
fn maps_file(pid: i32, file: &IpcFile) -> bool {
    let Ok(maps) = procfs::read_maps(pid) else {
        return false;
    };
    ipc_files(&maps.bytes)
        .iter()
        .any(|f| match (&f.id, &file.id) {
            (Some(a), Some(b)) => a == b,
            _ => f.path == file.path,
        })
}

/// Every thread of `pid` with its name (`/proc/PID/task/TID/comm`), in no
/// particular order; what cannot be read is left out. A thread's name is
/// its process's to set, so each is read capped and trusted for nothing
/// but what it says. At most [`TASKS_CAP`] threads.
pub fn thread_names(pid: i32) -> Vec<(i32, String)> {
    threads_capped(pid).0
}

/// The most threads of one process read: a process can start as many as
/// its user may, each one a /proc read.
pub const TASKS_CAP: usize = 65_536;

/// [`thread_names`], and whether the process had more than [`TASKS_CAP`].
fn threads_capped(pid: i32) -> (Vec<(i32, String)>, bool) {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return (Vec::new(), false);
    };
    let mut tasks = tasks.take(TASKS_CAP + 1).collect::<Vec<_>>();
    let past_cap = tasks.len() > TASKS_CAP;
    tasks.truncate(TASKS_CAP);
    let names = tasks
        .into_iter()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let tid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = files::read_capped_bytes(&entry.path().join("comm"), COMM_CAP).ok()?;
            let name = crate::targets::name::from_bytes(&comm);
            Some((tid, name))
        })
        .collect();
    (names, past_cap)
}

/// The variables of a NUL-separated environment (pure).
fn variables(environ: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    environ.split(|&b| b == 0).filter_map(|entry| {
        let eq = entry.iter().position(|&b| b == b'=')?;
        Some((&entry[..eq], &entry[eq + 1..]))
    })
}

fn env_is(environ: &[u8], name: &str, value: &str) -> bool {
    variables(environ).any(|(k, v)| k == name.as_bytes() && v == value.as_bytes())
}

/// Launcher world sizes above 1 in an environment (pure).
pub fn world_sizes(environ: &[u8]) -> Vec<RankSign> {
    variables(environ)
        .filter_map(|(name, value)| {
            let var = WORLD_SIZE_VARS.iter().find(|v| v.as_bytes() == name)?;
            let size: u64 = std::str::from_utf8(value).ok()?.trim().parse().ok()?;
            (size > 1).then(|| RankSign::WorldSize {
                var: (*var).to_string(),
                size,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipc_files_name_their_exporter() {
        let maps = b"7f00-7f10 rw-s 00000000 00:1a 12 /dev/shm/cuda.shm.0.1f4a.1\n\
7f10-7f20 rw-s 00000000 00:1a 12 /dev/shm/cuda.shm.0.1f4a.1\n\
7f20-7f30 r-xp 00000000 08:01 99 /usr/lib/libcuda.so.1\n";
        let files = ipc_files(maps);
        assert_eq!(
            files,
            [IpcFile {
                path: "/dev/shm/cuda.shm.0.1f4a.1".into(),
                exporter: Some(0x1f4a),
                id: Some(("00:1a".into(), 12)),
            }]
        );
        assert!(ipc_files(b"7f20-7f30 r-xp 0 08:01 99 /usr/lib/libnccl.so.2\n").is_empty());
    }

    #[test]
    fn world_sizes_above_one_are_rank_signs() {
        let environ = b"PATH=/bin\0WORLD_SIZE=2\0SLURM_NTASKS=1\0PMI_SIZE=x\0";
        assert_eq!(
            world_sizes(environ),
            [RankSign::WorldSize {
                var: "WORLD_SIZE".into(),
                size: 2
            }]
        );
        assert!(env_is(
            b"A=1\0NCCL_P2P_DISABLE=1\0",
            "NCCL_P2P_DISABLE",
            "1"
        ));
        assert!(!env_is(b"NCCL_P2P_DISABLE=0\0", "NCCL_P2P_DISABLE", "1"));
    }

    #[test]
    fn this_process_is_no_ipc_party_and_no_rank() {
        let me = gather(std::process::id() as i32);
        assert!(!me.is_ipc_party());
        assert!(!me
            .rank_signs
            .iter()
            .any(|s| matches!(s, RankSign::NcclThread { .. })));
        let names = thread_names(std::process::id() as i32);
        assert!(
            names
                .iter()
                .any(|(tid, _)| *tid == std::process::id() as i32),
            "the main thread is listed: {names:?}"
        );
    }
}
